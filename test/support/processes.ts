import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './root.js';
import { cachedInTmp } from './tmp-cache.js';

export { ROOT };
export const CLI = `${ROOT}packages/cli/dist/main.js`;

/**
 * A test's `skip` option for something the machine may lack (a binary, a build): the reason when
 * it is missing, but never in CI (CI=true, as .ci/run sets it), where a missing part must fail
 * the run instead of passing it silently.
 */
export function skipUnless(present: unknown, reason: string): string | false {
  return present || process.env.CI ? false : reason;
}

/** Debian's Chromium, for the browser tests (npm run setup installs it). */
export const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));

/** Where test processes claim the ports freePort hands out (one directory a port). */
const PORT_CLAIMS = join(tmpdir(), 'rampart-test-ports');
/** How long a claim holds: longer than any test file runs. */
const CLAIM_MS = 30 * 60_000;

/**
 * A port nothing listens on right now (the OS picks it), and that no other test process was given
 * in the last half hour. Test files run side by side in their own processes, and the OS can pick
 * the same free port for two of them before either listens: one test then talks to the other's
 * server (a `rampart serve` with another admin token, whose answers read as a broken API key).
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  mkdirSync(PORT_CLAIMS, { recursive: true });
  for (;;) {
    const srv = createServer();
    srv.listen(0, host);
    await once(srv, 'listening');
    const port = (srv.address() as { port: number }).port;
    srv.close();
    await once(srv, 'close');
    const claim = join(PORT_CLAIMS, String(port));
    try {
      mkdirSync(claim);
      return port;
    } catch {
      // claimed by another process: stale claims are taken over, fresh ones left alone
      if (Date.now() - statSync(claim).mtimeMs > CLAIM_MS) {
        utimesSync(claim, new Date(), new Date());
        return port;
      }
    }
  }
}

/**
 * Whether process `pid` holds the listening TCP socket of `port` (Linux: /proc/net/tcp and the
 * process's descriptors). Elsewhere, true: the check is not made.
 */
export function listensOn(pid: number, port: number): boolean {
  if (!existsSync('/proc/net/tcp')) return true;
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(table)) continue;
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      // local address "0100007F:1F90", state 0A is LISTEN, column 9 the socket's inode
      if (cols.length > 9 && cols[1]!.endsWith(`:${hex}`) && cols[3] === '0A') inodes.add(cols[9]!);
    }
  }
  if (inodes.size === 0) return false;
  let fds: string[] = [];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  return fds.some((fd) => {
    try {
      return inodes.has(/^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1] ?? '');
    } catch {
      return false;
    }
  });
}

/** Polls fn until it returns a truthy value or the deadline passes; never a fixed sleep. */
export async function waitFor<T>(fn: () => Promise<T | undefined | false> | T | undefined | false, what: string, timeoutMs = 30_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastErr: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${lastErr ? `: ${String(lastErr)}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export interface Proc {
  child: ChildProcess;
  output(): string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export function startProcess(cmd: string, args: string[], env: Record<string, string | undefined> = {}): Proc {
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (d) => (out += d));
  child.stderr?.on('data', (d) => (out += d));
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  return {
    child,
    output: () => out,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/**
 * An embedded database with every migration run (cachedInTmp: once per build of the migrations
 * and of PGlite), copied for each `rampart serve` a test starts without a data directory of its
 * own: a start then skips migrating an empty database, most of its start time.
 */
function migratedTemplate(): Promise<string> {
  const sources = [`${ROOT}packages/server/dist/db/migrations.js`, `${ROOT}packages/server/dist/db/database.js`, `${ROOT}node_modules/@electric-sql/pglite/package.json`];
  return cachedInTmp('rampart-test-pglite-', '', sources, async (dir) => {
    const { openDatabase } = (await import(`${ROOT}packages/server/dist/db/database.js`)) as typeof import('../../packages/server/src/db/database.js');
    await (await openDatabase({ dataDir: dir })).close();
  });
}

/** `rampart serve` as a real process; resolves once /healthz answers. */
export async function startServe(opts: { port: number; dataDir?: string; databaseUrl?: string; adminToken: string; env?: Record<string, string> }): Promise<Proc & { url: string }> {
  const args = ['serve', '--port', String(opts.port)];
  // Every server gets a data directory of its own: two PGlite instances must never share one.
  const ownDir = !opts.databaseUrl && !opts.dataDir ? mkdtempSync(join(tmpdir(), 'rampart-serve-')) : undefined;
  if (ownDir) cpSync(await migratedTemplate(), ownDir, { recursive: true });
  if (!opts.databaseUrl) args.push('--data-dir', opts.dataDir ?? ownDir!);
  if (opts.databaseUrl) args.push('--database-url', opts.databaseUrl);
  // No crawler lists from the Internet unless the test names its own (RAMPART_CRAWLER_RANGES).
  const proc = startProcess(process.execPath, [CLI, ...args], { RAMPART_ADMIN_TOKEN: opts.adminToken, RAMPART_LOG_LEVEL: 'warn', RAMPART_CRAWLER_RANGES: 'off', ...opts.env });
  const url = `http://127.0.0.1:${opts.port}`;
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`rampart serve exited: ${proc.output()}`);
      // the answer must come from this process, not from another test's server on the same port
      return (await fetch(`${url}/healthz`)).ok && listensOn(proc.child.pid!, opts.port);
    },
    'rampart serve to answer',
    180_000,
  );
  return {
    ...proc,
    url,
    async stop(signal) {
      const code = await proc.stop(signal);
      if (ownDir) rmSync(ownDir, { recursive: true, force: true });
      return code;
    },
  };
}
