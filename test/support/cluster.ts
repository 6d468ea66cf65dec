import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { once } from 'node:events';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, freePort, startProcess, startServe, waitFor, type Proc } from './processes.js';

export const ADMIN = 'e2e-admin-token';

/**
 * A tiny origin that answers every request with its name (and echoes the headers it got). `hits`
 * counts the requests HAProxy forwarded for a client (they carry X-Forwarded-For), not its health
 * checks, which may arrive at any moment.
 */
export async function startOrigin(name: string): Promise<{ port: number; server: Server; hits: number; close(): Promise<void> }> {
  const port = await freePort();
  const state = { hits: 0 };
  const server = createServer((req, res) => {
    if (req.headers['x-forwarded-for'] !== undefined) state.hits++;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ origin: name, url: req.url, headers: req.headers }));
  });
  server.keepAliveTimeout = 1000;
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  return {
    port,
    server,
    get hits() {
      return state.hits;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export interface ApiClient {
  url: string;
  key: string;
  call<T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
}

export async function apiClient(url: string): Promise<ApiClient> {
  const res = await fetch(`${url}/admin/accounts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ email: `e2e-${Date.now()}-${Math.random().toString(16).slice(2)}@example.com`, plan: 'pro', balance: 100 }),
  });
  const key = ((await res.json()) as { apiKey: string }).apiKey;
  return {
    url,
    key,
    async call(method, path, body) {
      const r = await fetch(url + path, {
        method,
        headers: { 'x-api-key': key, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      return { status: r.status, body: text ? JSON.parse(text) : undefined };
    },
  };
}

export interface AgentProc extends Proc {
  dataDir: string;
  httpPort: number;
}

export interface AgentStartOptions {
  serverUrl: string;
  token: string;
  httpPort?: number;
  httpsPort?: number;
  bind?: string;
  dataDir?: string;
  haproxy?: string;
  nbthread?: number;
  countryMap?: string;
  /** Between traffic analytics batches (RAMPART_AGENT_ANALYTICS_INTERVAL_MS; default the agent's 60 s). */
  analyticsIntervalMs?: number;
  /** More flags (e.g. --acme-directory, --resolver) and environment (e.g. NODE_EXTRA_CA_CERTS). */
  args?: string[];
  env?: Record<string, string>;
}

/**
 * Data directories startAgent made, removed when the test process exits (not when the agent
 * stops: a test may start another agent on the same directory, as a restart).
 */
const agentDirs: string[] = [];
process.once('exit', () => {
  for (const dir of agentDirs) rmSync(dir, { recursive: true, force: true });
});

export async function startAgent(opts: AgentStartOptions): Promise<AgentProc> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'rampart-agent-'));
  if (!opts.dataDir) agentDirs.push(dataDir);
  const httpPort = opts.httpPort ?? (await freePort());
  const proc = startProcess(
    process.execPath,
    [
      CLI,
      'agent',
      '--server',
      `${opts.serverUrl.replace(/^http/, 'ws')}/agent`,
      '--data-dir',
      dataDir,
      '--http-port',
      String(httpPort),
      '--bind',
      opts.bind ?? '127.0.0.1',
      ...(opts.httpsPort ? ['--https-port', String(opts.httpsPort)] : []),
      ...(opts.haproxy ? ['--haproxy', opts.haproxy] : []),
      ...(opts.nbthread ? ['--nbthread', String(opts.nbthread)] : []),
      ...(opts.countryMap ? ['--country-map', opts.countryMap] : []),
      ...(opts.args ?? []),
    ],
    // The token as the installed unit passes it: in the environment, never on the command line.
    { RAMPART_AGENT_TOKEN: opts.token, ...(opts.analyticsIntervalMs !== undefined ? { RAMPART_AGENT_ANALYTICS_INTERVAL_MS: String(opts.analyticsIntervalMs) } : {}), ...(opts.env ?? {}) },
  );
  return { ...proc, dataDir, httpPort };
}

/** GET through the shield server's HAProxy with a Host header (fetch cannot set Host, node:http can). */
export function viaProxy(port: number, host: string, path = '/', headers: Record<string, string> = {}, from?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers: { ...headers, host }, agent: false, ...(from ? { localAddress: from } : {}) }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', reject);
    });
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    req.end();
  });
}

export async function waitForOrigin(port: number, host: string, origin: string, timeoutMs = 15_000): Promise<void> {
  await waitFor(
    async () => {
      const r = await viaProxy(port, host);
      return r.status === 200 && JSON.parse(r.text).origin === origin;
    },
    `${host} to be served by ${origin}`,
    timeoutMs,
  );
}

export { ADMIN as ADMIN_TOKEN, freePort, startServe, waitFor, rmSync };

/**
 * Steady traffic through the proxy until stopped: `workers` loops of sequential requests, each
 * counted as ok (the expected status) or failed. Bounded by maxMs so it always stops by itself.
 */
export function steadyLoad(port: number, host: string, opts: { workers?: number; maxMs?: number; expect?: (r: { status: number; text: string }) => boolean } = {}) {
  const stats = { ok: 0, failed: 0, errors: [] as string[] };
  let running = true;
  const deadline = Date.now() + (opts.maxMs ?? 180_000);
  const expect = opts.expect ?? ((r) => r.status === 200);
  const loops = Array.from({ length: opts.workers ?? 4 }, async () => {
    while (running && Date.now() < deadline) {
      try {
        const r = await viaProxy(port, host);
        if (expect(r)) stats.ok++;
        else {
          stats.failed++;
          if (stats.errors.length < 5) stats.errors.push(`${r.status} ${r.text.slice(0, 100)}`);
        }
      } catch (err) {
        stats.failed++;
        if (stats.errors.length < 5) stats.errors.push(String(err));
      }
    }
  });
  return {
    stats,
    async stop() {
      running = false;
      await Promise.all(loops);
      return stats;
    },
  };
}

/** Waits until every shield server of the account runs the newest configuration. */
export async function settle(api: ApiClient, timeoutMs = 60_000): Promise<void> {
  await waitFor(
    async () => {
      const servers = (await api.call('GET', '/api/servers')).body as { status: string; desiredRevision: number; appliedRevision: number }[];
      return servers.filter((s) => s.status !== 'decommissioned').every((s) => s.appliedRevision === s.desiredRevision);
    },
    'the configuration to be applied',
    timeoutMs,
    25,
  );
}

/**
 * One raw HTTP/1.1 request on its own connection (repeated headers, raw paths and bodies exactly
 * as given; Content-Length is the caller's business). Resolves with the status and body text.
 */
export function rawRequest(port: number, raw: string | Buffer, from?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, ...(from ? { localAddress: from } : {}) });
    const chunks: Buffer[] = [];
    socket.setTimeout(10_000, () => socket.destroy(new Error('request timed out')));
    socket.on('data', (d) => chunks.push(d));
    socket.on('error', reject);
    socket.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      const body = text.slice(text.indexOf('\r\n\r\n') + 4);
      resolve({ status: m ? Number(m[1]) : 0, text: body });
    });
    socket.write(raw);
  });
}
