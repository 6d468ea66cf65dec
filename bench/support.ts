import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { backendName } from '@rampart/protocol';
import { DEFAULTS_SECTION, passCookieMac, renderBackend } from '@rampart/proxy';
import { startProcess, type Proc } from '../test/support/processes.js';

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
    add: (p: Proc, stopSignal: NodeJS.Signals = 'SIGTERM', interruptSignal: NodeJS.Signals = 'SIGKILL') => void procs.set(p, { stop: stopSignal, interrupt: interruptSignal }),
    stop,
    stopAll: () => Promise.all([...procs.keys()].map(stop)).then(() => undefined),
  };
}

/** The global section (with `global` added) and Rampart's own defaults, for every HAProxy a bench writes. */
function head(global: readonly string[] = []): string[] {
  return ['global', '    hard-stop-after 30s', ...global, '', ...DEFAULTS_SECTION, ''];
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
    ...head(o.global),
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

// nginx + ModSecurity v3 + the OWASP CRS, where Debian's packages put them: nginx, the module (and
// NDK, which it needs, as Debian's modules-enabled loads it), ModSecurity's recommended
// configuration (Debian ships modsecurity.conf-recommended as /etc/nginx/modsecurity.conf, with
// unicode.mapping beside it), and the CRS: its setup and exclusion files in /etc/modsecurity/crs,
// its rules in /usr/share.
export const NGINX = process.env.NGINX ?? (existsSync('/usr/sbin/nginx') ? '/usr/sbin/nginx' : 'nginx');
const NGINX_MODULES = '/usr/lib/nginx/modules';
const MODSECURITY_RECOMMENDED = '/etc/nginx/modsecurity.conf';
const CRS_ETC = '/etc/modsecurity/crs';
const CRS_RULES = '/usr/share/modsecurity-crs/rules';

export const modsecNginxInstalled = () =>
  [NGINX_MODULES + '/ngx_http_modsecurity_module.so', MODSECURITY_RECOMMENDED, `${CRS_ETC}/crs-setup.conf`, CRS_RULES].every((f) => existsSync(f)) && (NGINX.includes('/') ? existsSync(NGINX) : true);

/**
 * What a user would run as a WAF instead of Rampart, for bench:waf and bench:detection: nginx +
 * ModSecurity v3 + OWASP CRS (paranoia level 1) as the same reverse proxy: host routing (unknown
 * hosts 404), Host, X-Real-IP, X-Forwarded-For and X-Forwarded-Proto set, the origin in an upstream
 * with keep-alive connections (as HAProxy reuses its server connections; nginx open source has
 * passive health checks only: max_fails/fail_timeout, at their defaults). ModSecurity is on for
 * the domain, its rules file in `dir`: Debian's copy of the recommended configuration with
 * SecRuleEngine On (it ships DetectionOnly; SecRequestBodyAccess On is in it) and the audit log off
 * (pointed into `dir` anyway), then the CRS as Debian's owasp-crs.load lists it (libmodsecurity
 * 3.0.9 has no IncludeOptional, so its lines are spelled out). One worker per CPU, as HAProxy runs
 * one thread per CPU; the access log is off, as on the HAProxy sides; the error log (where
 * ModSecurity logs its denials) is in `dir`. The workers run as nobody when the bench runs as
 * root: `dir`'s parent is opened to them (0711) and ModSecurity's directories made writable, else
 * a body written to a temporary file fails (500). `http` adds lines to the http block.
 * Started as its own process (stopped with SIGQUIT, the master's graceful stop).
 */
export function startModsecNginx(o: { dir: string; port: number; originPort: number; host: string; keepalive: number; http?: readonly string[] }): Proc {
  const { dir } = o;
  mkdirSync(dir);
  chmodSync(dirname(dir), 0o711);
  for (const sub of ['modsec-tmp', 'modsec-data']) {
    mkdirSync(join(dir, sub));
    chmodSync(join(dir, sub), 0o1777);
  }
  writeFileSync(
    join(dir, 'modsecurity.conf'),
    [
      `Include ${MODSECURITY_RECOMMENDED}`,
      'SecRuleEngine On',
      'SecAuditEngine Off',
      `SecAuditLog ${dir}/modsec_audit.log`,
      `SecTmpDir ${dir}/modsec-tmp`,
      `SecDataDir ${dir}/modsec-data`,
      'SecStatusEngine Off',
      // crs-setup.conf leaves this rule commented out (level 1 is the CRS's default): said outright here
      'SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level=1"',
      `Include ${CRS_ETC}/crs-setup.conf`,
      `Include ${CRS_ETC}/REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf`,
      `Include ${CRS_RULES}/*.conf`,
      `Include ${CRS_ETC}/RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf`,
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(dir, 'nginx.conf'),
    [
      `load_module ${NGINX_MODULES}/ndk_http_module.so;`,
      `load_module ${NGINX_MODULES}/ngx_http_modsecurity_module.so;`,
      'daemon off;',
      'master_process on;',
      'worker_processes auto;',
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/error.log warn;`,
      'events { worker_connections 4096; }',
      'http {',
      '    access_log off;',
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `    ${t}_temp_path ${dir}/${t}_temp;`),
      ...(o.http ?? []).map((l) => `    ${l}`),
      `    upstream origin { server 127.0.0.1:${o.originPort}; keepalive ${o.keepalive}; }`,
      '    server {',
      `        listen 127.0.0.1:${o.port} default_server;`,
      '        return 404;',
      '    }',
      '    server {',
      `        listen 127.0.0.1:${o.port};`,
      `        server_name ${o.host};`,
      '        modsecurity on;',
      `        modsecurity_rules_file ${dir}/modsecurity.conf;`,
      '        location / {',
      '            proxy_pass http://origin;',
      '            proxy_http_version 1.1;',
      '            proxy_set_header Connection "";',
      `            proxy_set_header Host ${o.host};`,
      '            proxy_set_header X-Real-IP $remote_addr;',
      '            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;',
      '            proxy_set_header X-Forwarded-Proto $scheme;',
      '        }',
      '    }',
      '}',
      '',
    ].join('\n'),
  );
  // -e: the error log before the configuration is read (the compiled-in one is /var/log/nginx's)
  return startProcess(NGINX, ['-p', `${dir}/`, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')]);
}

/**
 * The origin of every proxy in the benches: a bare HAProxy answering every request itself, with
 * the same defaults as Rampart's own configuration, so the proxies differ only by what they add.
 * `sink`: a port where requests marked with an X-Bench-Sink header go instead (a server that reads
 * whole bodies).
 */
export function bareOriginConfig(port: number, o: { global?: readonly string[]; more?: readonly string[]; sink?: number } = {}): string {
  return [
    ...head(o.global),
    'frontend bare',
    `    bind 127.0.0.1:${port}`,
    ...(o.sink ? ['    use_backend sink if { req.hdr(x-bench-sink) -m found }'] : []),
    `    http-request return status 200 content-type text/plain string ok${o.sink ? ' unless { req.hdr(x-bench-sink) -m found }' : ''}`,
    '',
    ...(o.sink ? ['backend sink', `    server sink 127.0.0.1:${o.sink}`, ''] : []),
    ...(o.more ?? []),
  ].join('\n');
}

/** Median wall time of `runs` runs of fn, in ms. */
export async function medianMs(runs: number, fn: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  return times.sort((a, b) => a - b)[Math.floor(runs / 2)]!;
}

/** A bot protection pass cookie for a domain as the shield server issues it (rampart_waf.lua): "<key id>.<expiry>.<MAC>". */
export function passCookie(key: { id: string; secret: string }, domain: string, ip: string, ua: string): string {
  const expiry = Math.floor(Date.now() / 1000) + 86_400;
  return `rampart_bot=${key.id}.${expiry}.${passCookieMac(key.secret, domain, ip, ua, expiry)}`;
}

export interface WrkResult {
  rps: number;
  p50: number;
  p99: number;
  avg: number;
  requests: number;
  non2xx: number;
  socketErrors: number;
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000 };
const wrkMs = (s: string) => {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(s.trim());
  if (!m) throw new Error(`unreadable wrk latency ${s}`);
  return Number(m[1]) * UNIT_MS[m[2]!]!;
};

/**
 * wrk (Debian's, or $WRK), one thread, against http://127.0.0.1:port + path with the given headers;
 * or, with `requests`, replaying the raw requests of that file (REPLAY_SCRIPT, writeReplayFile) in
 * turn on every connection, headers and path then unused.
 */
export function runWrk(o: { port: number; path: string; seconds: number; connections: number; headers: Record<string, string>; requests?: string }): Promise<WrkResult> {
  const args = [
    '-t1',
    `-c${o.connections}`,
    `-d${o.seconds}s`,
    '--latency',
    ...(o.requests ? ['-s', replayScript(dirname(o.requests))] : Object.entries(o.headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`])),
    `http://127.0.0.1:${o.port}${o.path}`,
    ...(o.requests ? ['--', o.requests] : []),
  ];
  return new Promise((resolve, reject) => {
    execFile(process.env.WRK ?? 'wrk', args, { timeout: (o.seconds + 30) * 1000 }, (err, out) => {
      if (err) return reject(new Error(`wrk failed: ${err.message}\n${out}`));
      try {
        const field = (re: RegExp) => re.exec(out)?.[1];
        const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
        resolve({
          rps: Number(field(/Requests\/sec:\s+([\d.]+)/)),
          avg: wrkMs(field(/Latency\s+(\S+)/)!),
          p50: wrkMs(field(/\s50%\s+(\S+)/)!),
          p99: wrkMs(field(/\s99%\s+(\S+)/)!),
          requests: Number(field(/(\d+) requests in/)),
          non2xx: Number(field(/Non-2xx or 3xx responses:\s+(\d+)/) ?? 0),
          socketErrors: sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
        });
      } catch (e) {
        reject(new Error(`${String(e)}\n${out}`));
      }
    });
  });
}

/**
 * wrk's Lua script for replaying raw requests: the file holds each request as its length in bytes,
 * a line break, then the request itself (writeReplayFile); every connection sends them in turn.
 */
const REPLAY_SCRIPT = `local reqs, i = {}, 0
function init(args)
  local f = assert(io.open(args[1], "rb"))
  local data = f:read("*a")
  f:close()
  local pos = 1
  while pos <= #data do
    local nl = data:find("\\n", pos, true)
    local len = tonumber(data:sub(pos, nl - 1))
    reqs[#reqs + 1] = data:sub(nl + 1, nl + len)
    pos = nl + len + 1
  end
  i = math.random(#reqs)
end
function request()
  i = i % #reqs + 1
  return reqs[i]
end
`;
/** The script, written beside the requests file. */
function replayScript(dir: string): string {
  const file = join(dir, 'replay.lua');
  if (!existsSync(file)) writeFileSync(file, REPLAY_SCRIPT);
  return file;
}

/** Raw HTTP/1.1 requests into a file runWrk can replay (`requests`). */
export function writeReplayFile(file: string, requests: readonly Buffer[]): void {
  writeFileSync(file, Buffer.concat(requests.flatMap((r) => [Buffer.from(`${r.length}\n`), r])));
}
