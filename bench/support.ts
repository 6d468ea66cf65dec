import { rmSync } from 'node:fs';
import { backendName } from '@rampart/protocol';
import { DEFAULTS_SECTION, renderBackend } from '@rampart/proxy';
import type { Proc } from '../test/support/processes.js';

/**
 * The processes a benchmark starts: stopped one by one or all together, and on Ctrl+C killed (with
 * `onInterrupt` for anything else the bench holds) and the temporary directory removed. Each is
 * stopped by its own signal: SIGTERM by default (HAProxy's immediate stop); nginx's master takes
 * SIGQUIT (graceful) and, on Ctrl+C, SIGTERM (fast: it still stops its workers, which a SIGKILL to
 * the master would leave running).
 */
export function benchProcesses(tmp: string, onInterrupt: () => void = () => {}) {
  const procs = new Map<Proc, { stop: NodeJS.Signals; interrupt: NodeJS.Signals }>();

  async function stop(p: Proc): Promise<void> {
    const how = procs.get(p) ?? { stop: 'SIGTERM', interrupt: 'SIGKILL' };
    // Not gone within 5 s: its interrupt signal, and SIGKILL 5 s later.
    const t1 = setTimeout(() => p.child.kill(how.interrupt), 5000);
    const t2 = setTimeout(() => p.child.kill('SIGKILL'), 10_000);
    await p.stop(how.stop);
    clearTimeout(t1);
    clearTimeout(t2);
    procs.delete(p);
  }

  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      for (const [p, how] of procs) p.child.kill(how.interrupt);
      onInterrupt();
      rmSync(tmp, { recursive: true, force: true });
      process.exit(130);
    });
  }

  return {
    add: (p: Proc, stopSignal: NodeJS.Signals = 'SIGTERM', interruptSignal: NodeJS.Signals = 'SIGKILL') =>
      void procs.set(p, { stop: stopSignal, interrupt: interruptSignal }),
    stop,
    stopAll: () => Promise.all([...procs.keys()].map(stop)).then(() => undefined),
  };
}

/**
 * What a user would run instead of Rampart, the baseline of bench:waf and bench:tls: the
 * configuration export's plain HAProxy for one domain (host routing, unknown hosts 404; the
 * export's backend from renderBackend: health check on "/", X-Forwarded-Proto, X-Real-IP and Host
 * set; plus the X-Forwarded-For every reverse proxy in front of a website sets), with Rampart's
 * defaults. No WAF, Lua or maps. `bind` is the bind line's arguments; `global` is added to the
 * global section.
 */
export function plainHaproxyConfig(o: { host: string; originPort: number; bind: string; global?: readonly string[] }): string {
  return [
    'global',
    '    hard-stop-after 30s',
    ...(o.global ?? []),
    '',
    ...DEFAULTS_SECTION,
    '',
    'frontend plain_in',
    `    bind ${o.bind}`,
    `    use_backend ${backendName(o.host)} if { req.hdr(host),lower,field(1,:) -m str ${o.host} }`,
    '    default_backend default_404',
    '',
    'backend default_404',
    '    http-request return status 404 content-type text/plain string "Not Found"',
    '',
    renderBackend({ domain: o.host, origins: [{ ip: '127.0.0.1', port: o.originPort }] }),
    '    option forwardfor',
    '',
  ].join('\n');
}
