import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createDemoAccount, plansFromEnv, startServer } from '@rampart/server';
import { parseFlags, portFrom } from './args.js';

export const UP_HELP = `Usage: rampart up [--port 8080] [--data-dir ./.rampart]

Everything on one machine for a first look: the control plane on the embedded database and a demo
account (Pro plan, $100 balance). Prints the dashboard address, the login, an API key and the
operator token. Running it again on the same --data-dir reuses the same data and credentials.
`;

interface DemoCredentials {
  email: string;
  password: string;
  apiKey: string;
  adminToken: string;
}

function loadOrCreateAdminToken(dataDir: string): string {
  const file = join(dataDir, 'admin-token');
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  const token = randomBytes(24).toString('hex');
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  return token;
}

export async function upCommand(args: string[]): Promise<void> {
  const flags = parseFlags(args, ['port', 'data-dir']);
  if (flags.help) {
    process.stdout.write(UP_HELP);
    return;
  }
  const dataDir = resolve(flags['data-dir'] ?? process.env.RAMPART_DATA_DIR ?? '.rampart');
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const adminToken = process.env.RAMPART_ADMIN_TOKEN || loadOrCreateAdminToken(dataDir);
  const server = await startServer({
    port: portFrom(flags.port ?? process.env.RAMPART_PORT, '--port', 8080),
    host: '127.0.0.1',
    dataDir: join(dataDir, 'db'),
    adminToken,
    plans: plansFromEnv(process.env.RAMPART_PLAN_PRICES),
    logger: { level: process.env.RAMPART_LOG_LEVEL ?? 'warn' },
  });
  const credsFile = join(dataDir, 'demo.json');
  let creds: DemoCredentials;
  if (existsSync(credsFile)) {
    creds = { ...(JSON.parse(readFileSync(credsFile, 'utf8')) as DemoCredentials), adminToken };
  } else {
    const password = randomBytes(9).toString('base64url');
    const email = 'demo@rampart.local';
    const { apiKey } = await createDemoAccount(server.ctx, { email, password });
    creds = { email, password, apiKey, adminToken };
    writeFileSync(credsFile, JSON.stringify({ email, password, apiKey }, null, 2), { mode: 0o600 });
  }
  process.stdout.write(
    [
      '',
      'Rampart is up.',
      '',
      `  Dashboard & API   ${server.url}`,
      `  API docs          ${server.url}/docs`,
      `  Login             ${creds.email} / ${creds.password}`,
      `  API key           ${creds.apiKey}`,
      `  Operator token    ${creds.adminToken}`,
      `  Data              ${dataDir}`,
      '',
      'Try:',
      `  curl -s -H 'x-api-key: ${creds.apiKey}' ${server.url}/api/account`,
      '',
      'Press Ctrl+C to stop.',
      '',
    ].join('\n'),
  );
  const stop = async () => {
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
