import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { once } from 'node:events';
import { join, resolve } from 'node:path';
import { Agent } from '@rampart/agent';
import { createDemoAccount, plansFromEnv, signupModeFrom, startServer, type RunningServer } from '@rampart/server';
import { isIP } from 'node:net';
import { parseFlags, portFrom, UsageError } from './args.js';
import { checkPorts } from './ports.js';

export const UP_HELP = `Usage: rampart up [--port 8080] [--http-port 8081] [--origin-port 8088] [--data-dir ./.rampart] [--haproxy PATH]
                  [--host 127.0.0.1]

Everything on one machine for a first look: the control plane on the embedded database, one
local shield server (the agent and its HAProxy on an unprivileged port), a demo origin, and a demo
account (Pro plan, $100) with a demo domain. Prints the dashboard address, the login, an API key
and a curl line that goes through the proxy. Running it again on the same --data-dir reuses the
same data and credentials. Everything listens on 127.0.0.1 (or --host); if one of its ports is
taken it stops before starting anything and names the flag to change.

Options:
  --port N           the control plane: API, dashboard, agent WebSocket (env RAMPART_PORT, default 8080)
  --http-port N      the local shield server's HAProxy (default 8081)
  --origin-port N    the demo origin (default 8088)
  --data-dir DIR     database, agent files, demo credentials (env RAMPART_DATA_DIR, default ./.rampart)
  --haproxy PATH     the haproxy binary (default haproxy on PATH)
  --host ADDR        listen on this address of the machine instead of 127.0.0.1 (the control
                     plane and the local proxy): an agent on another machine joins the demo with
                     rampart agent --server ws://ADDR:PORT/agent --insecure and a server token
                     from the dashboard (Servers, Add server). Plain HTTP: for a trusted network only

Environment:
  RAMPART_ADMIN_TOKEN   the operator token (default: one generated and kept in the data directory)
  RAMPART_PLAN_PRICES   monthly prices in cents, e.g. '{"pro":2900,"enterprise":29900}'
  RAMPART_LOG_LEVEL     the control plane's pino log level (default warn)
  RAMPART_SIGNUP        who may register: open (default here, a demo on loopback; closed with
                        another --host), invite or closed
`;

interface DemoState {
  email: string;
  password: string;
  apiKey: string;
  serverToken: string;
}

const DEMO_DOMAIN = 'demo.rampart.test';
/** Everything `up` runs listens on loopback only. */
const LOOPBACK = '127.0.0.1';

function loadOrCreateAdminToken(dataDir: string): string {
  const file = join(dataDir, 'admin-token');
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  const token = randomBytes(24).toString('hex');
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  return token;
}

/** The demo origin: a page that shows the headers the proxy forwarded. */
async function startDemoOrigin(port: number) {
  const server = createServer((req, res) => {
    res.setHeader('content-type', 'text/plain; charset=utf-8');
    res.end(`Hello from the demo origin behind Rampart.\nHost: ${req.headers.host}\nX-Real-IP: ${String(req.headers['x-real-ip'])}\nX-Forwarded-Proto: ${String(req.headers['x-forwarded-proto'])}\n`);
  });
  server.listen(port, LOOPBACK);
  await once(server, 'listening');
  return server;
}

/** The demo account, its shield server and its domain: created on the first run, reused after. */
async function loadOrCreateDemo(server: RunningServer, stateFile: string, originPort: number): Promise<DemoState> {
  if (existsSync(stateFile)) return JSON.parse(readFileSync(stateFile, 'utf8')) as DemoState;
  const password = randomBytes(9).toString('base64url');
  const email = 'demo@rampart.local';
  const { apiKey } = await createDemoAccount(server.ctx, { email, password });
  const call = async <T = unknown>(method: string, path: string, body: unknown): Promise<T> => {
    const res = await server.app.inject({ method: method as 'POST', url: path, headers: { 'x-api-key': apiKey }, payload: body as object });
    if (res.statusCode >= 300) throw new Error(`${path}: ${res.statusCode} ${res.body}`);
    return res.json<T>();
  };
  const shield = await call<{ id: string; connectionToken: string }>('POST', '/api/servers', { name: 'local-shield' });
  await call('POST', '/api/domains', { domain: DEMO_DOMAIN, origins: [{ ip: LOOPBACK, port: originPort }], serverIds: [shield.id], sslEnabled: false });
  const demo = { email, password, apiKey, serverToken: shield.connectionToken };
  writeFileSync(stateFile, JSON.stringify(demo, null, 2), { mode: 0o600 });
  return demo;
}

export async function upCommand(args: string[]): Promise<void> {
  const flags = parseFlags(args, ['port', 'http-port', 'origin-port', 'data-dir', 'haproxy', 'host']);
  if (flags.help) {
    process.stdout.write(UP_HELP);
    return;
  }
  const port = portFrom(flags.port ?? process.env.RAMPART_PORT, '--port', 8080);
  const httpPort = portFrom(flags['http-port'], '--http-port', 8081);
  const originPort = portFrom(flags['origin-port'], '--origin-port', 8088);
  // The control plane and the local proxy listen here; the demo origin stays on loopback.
  const host = flags.host ?? LOOPBACK;
  if (!isIP(host)) throw new UsageError('--host must be an IP address of this machine (e.g. 192.168.1.10, or 0.0.0.0 for all)');
  await checkPorts([{ flag: '--origin-port', port: originPort }], LOOPBACK);
  await checkPorts(
    [
      { flag: '--port', port },
      { flag: '--http-port', port: httpPort },
    ],
    host,
  );
  const dataDir = resolve(flags['data-dir'] ?? process.env.RAMPART_DATA_DIR ?? '.rampart');
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const adminToken = process.env.RAMPART_ADMIN_TOKEN || loadOrCreateAdminToken(dataDir);
  const server = await startServer({
    port,
    host,
    dataDir: join(dataDir, 'db'),
    adminToken,
    plans: plansFromEnv(process.env.RAMPART_PLAN_PRICES),
    logger: { level: process.env.RAMPART_LOG_LEVEL ?? 'warn' },
    // Open sign-up only on loopback: on another address anyone on the network could register.
    signup: signupModeFrom(process.env.RAMPART_SIGNUP, host === LOOPBACK ? 'open' : 'closed'),
  });
  // From here on a failure stops what already started, so the command exits instead of hanging.
  let origin: Awaited<ReturnType<typeof startDemoOrigin>> | undefined;
  let agent: Agent | undefined;
  let demo: DemoState;
  try {
    origin = await startDemoOrigin(originPort);
    demo = await loadOrCreateDemo(server, join(dataDir, 'demo.json'), originPort);
    agent = new Agent({
      serverUrl: `${server.url.replace(/^http/, 'ws')}/agent`,
      token: demo.serverToken,
      dataDir: join(dataDir, 'agent'),
      httpPort,
      httpsPort: httpPort + 1,
      bindAddress: host,
      haproxyBin: flags.haproxy ?? 'haproxy',
      log: (level, msg) => level !== 'info' && process.stderr.write(`agent ${level}: ${msg}\n`),
    });
    await agent.start();
  } catch (err) {
    await agent?.stop().catch(() => undefined);
    origin?.close();
    await server.close();
    throw err;
  }

  // 0.0.0.0 (or ::) is no address to connect to: another machine uses one of this machine's.
  const everywhere = host === '0.0.0.0' || host === '::';
  const advertised = everywhere ? 'THIS-MACHINE-ADDRESS' : host.includes(':') ? `[${host}]` : host;
  // The local proxy listens on --host: reached there (on loopback when it listens on every address).
  const proxyAt = everywhere ? LOOPBACK : advertised;
  process.stdout.write(
    [
      '',
      'Rampart is up.',
      '',
      `  Dashboard & API   ${server.url}`,
      `  API docs          ${server.url}/docs`,
      `  Login             ${demo.email} / ${demo.password}`,
      `  API key           ${demo.apiKey}`,
      `  Operator token    ${adminToken}`,
      `  Proxy (HTTP)      ${proxyAt}:${httpPort}   demo domain ${DEMO_DOMAIN} -> demo origin 127.0.0.1:${originPort}`,
      `  Data              ${dataDir}`,
      ...(host === LOOPBACK
        ? []
        : [`  Other agents      rampart agent --server ws://${advertised}:${port}/agent --insecure`, '                    with a token from Servers, Add server (plain HTTP: a trusted network only)']),
      '',
      'Try:',
      `  curl -s -H 'Host: ${DEMO_DOMAIN}' http://${proxyAt}:${httpPort}/`,
      `  curl -s -H 'x-api-key: ${demo.apiKey}' ${server.url}/api/servers`,
      '',
      'Press Ctrl+C to stop.',
      '',
    ].join('\n'),
  );
  const stop = async () => {
    await agent.stop();
    origin.close();
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
}
