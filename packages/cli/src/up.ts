import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { once } from 'node:events';
import { join, resolve } from 'node:path';
import { Agent } from '@rampart/agent';
import { createDemoAccount, plansFromEnv, startServer } from '@rampart/server';
import { parseFlags, portFrom } from './args.js';

export const UP_HELP = `Usage: rampart up [--port 8080] [--http-port 8081] [--origin-port 8088] [--data-dir ./.rampart] [--haproxy PATH]

Everything on one machine for a first look: the control plane on the embedded database, one
local shield server (the agent and its HAProxy on an unprivileged port), a demo origin, and a demo
account (Pro plan, $100) with a demo domain. Prints the dashboard address, the login, an API key
and a curl line that goes through the proxy. Running it again on the same --data-dir reuses the
same data and credentials.
`;

interface DemoState {
  email: string;
  password: string;
  apiKey: string;
  serverToken: string;
}

const DEMO_DOMAIN = 'demo.rampart.test';

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
    res.end(`Hello from the demo origin behind Rampart.\nHost: ${req.headers.host}\nX-Real-IP: ${req.headers['x-real-ip']}\nX-Forwarded-Proto: ${req.headers['x-forwarded-proto']}\n`);
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  return server;
}

export async function upCommand(args: string[]): Promise<void> {
  const flags = parseFlags(args, ['port', 'http-port', 'origin-port', 'data-dir', 'haproxy']);
  if (flags.help) {
    process.stdout.write(UP_HELP);
    return;
  }
  const dataDir = resolve(flags['data-dir'] ?? process.env.RAMPART_DATA_DIR ?? '.rampart');
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const httpPort = portFrom(flags['http-port'], '--http-port', 8081);
  const originPort = portFrom(flags['origin-port'], '--origin-port', 8088);
  const adminToken = process.env.RAMPART_ADMIN_TOKEN || loadOrCreateAdminToken(dataDir);
  const server = await startServer({
    port: portFrom(flags.port ?? process.env.RAMPART_PORT, '--port', 8080),
    host: '127.0.0.1',
    dataDir: join(dataDir, 'db'),
    adminToken,
    plans: plansFromEnv(process.env.RAMPART_PLAN_PRICES),
    logger: { level: process.env.RAMPART_LOG_LEVEL ?? 'warn' },
  });
  const origin = await startDemoOrigin(originPort);

  const stateFile = join(dataDir, 'demo.json');
  let demo: DemoState;
  if (existsSync(stateFile)) {
    demo = JSON.parse(readFileSync(stateFile, 'utf8')) as DemoState;
  } else {
    const password = randomBytes(9).toString('base64url');
    const email = 'demo@rampart.local';
    const { apiKey } = await createDemoAccount(server.ctx, { email, password });
    const call = async (method: string, path: string, body: unknown) => {
      const res = await server.app.inject({ method: method as 'POST', url: path, headers: { 'x-api-key': apiKey }, payload: body as object });
      if (res.statusCode >= 300) throw new Error(`${path}: ${res.statusCode} ${res.body}`);
      return res.json();
    };
    const shield = await call('POST', '/api/servers', { name: 'local-shield' });
    await call('POST', '/api/domains', { domain: DEMO_DOMAIN, origins: [{ ip: '127.0.0.1', port: originPort }], serverIds: [shield.id], sslEnabled: false });
    demo = { email, password, apiKey, serverToken: shield.connectionToken };
    writeFileSync(stateFile, JSON.stringify(demo, null, 2), { mode: 0o600 });
  }

  const agent = new Agent({
    serverUrl: `${server.url.replace(/^http/, 'ws')}/agent`,
    token: demo.serverToken,
    dataDir: join(dataDir, 'agent'),
    httpPort,
    httpsPort: httpPort + 1,
    bindAddress: '127.0.0.1',
    haproxyBin: flags.haproxy ?? 'haproxy',
    log: (level, msg) => level !== 'info' && process.stderr.write(`agent ${level}: ${msg}\n`),
  });
  await agent.start();

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
      `  Proxy (HTTP)      127.0.0.1:${httpPort}   demo domain ${DEMO_DOMAIN} -> demo origin 127.0.0.1:${originPort}`,
      `  Data              ${dataDir}`,
      '',
      'Try:',
      `  curl -s -H 'Host: ${DEMO_DOMAIN}' http://127.0.0.1:${httpPort}/`,
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
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
