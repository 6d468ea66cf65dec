import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Writable } from 'node:stream';
import { join } from 'node:path';
import { parseFlags, portFrom, UsageError } from './args.js';
import { checkServerUrl } from './server-url.js';

// `rampart init server|agent`: the configuration of an installed package (docs/operations.md).
// Each writes one environment file in /etc/rampart, mode 0600 (root reads it for systemd, which
// hands it to the unit), then enables and (re)starts the unit when systemd runs, or prints how to
// run it. Secrets go from the generator or standard input into the file, never on a command line.

export const INIT_HELP = `Usage: rampart init server [--database-url URL] [--public-url URL] [--port 8080]
       rampart init agent --server wss://HOST/agent [--insecure]

Configures an installed Rampart (the Debian package) and starts its service.

init server   writes /etc/rampart/server.env with a generated operator token and secret key,
              enables and starts rampart-server.service, and prints where the dashboard is and
              how to create the first account. An existing server.env is kept as it is.
  --database-url URL  PostgreSQL (env DATABASE_URL; default: the embedded database in
                      /var/lib/rampart/server)
  --public-url URL    the address users and agents reach the control plane at, behind TLS
                      (e.g. https://rampart.example.com); written as RAMPART_PUBLIC_URL
  --port N            the control plane's port on 127.0.0.1 (default 8080)

init agent    reads this server's connection token from standard input (or asks for it), writes
              /etc/rampart/agent.env, enables and (re)starts rampart-agent.service.
  --server URL        the control plane's agent endpoint, wss://HOST/agent
  --insecure          allow a plain ws:// control plane on another machine

Environment: RAMPART_CONFIG_DIR replaces /etc/rampart (tests, a staging root).
`;

const CONFIG_DIR = '/etc/rampart';
/** Connection tokens are "<prefix>_<hex>"; anything else pasted is a mistake worth naming. */
const TOKEN = /^[A-Za-z0-9_.~+/=-]{16,200}$/;

function configDir(): string {
  return process.env.RAMPART_CONFIG_DIR || CONFIG_DIR;
}

/** KEY=value lines systemd's EnvironmentFile= reads; values are checked to need no quoting. */
function envFile(header: string, vars: Record<string, string | undefined>): string {
  const lines = Object.entries(vars)
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => {
      if (/[\s"'\\$`]/.test(v)) throw new UsageError(`${k} must not contain spaces, quotes, backslashes or $`);
      return `${k}=${v}`;
    });
  return `# ${header}\n${lines.join('\n')}\n`;
}

/** Written whole or not at all, 0600 from the first byte. */
function writeSecretFile(path: string, text: string): void {
  const dir = configDir();
  try {
    mkdirSync(dir, { recursive: true, mode: 0o750 });
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, text, { mode: 0o600, flag: 'wx' });
    renameSync(tmp, path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM') throw new Error(`cannot write ${path}: run rampart init as root (sudo)`);
    throw err;
  }
}

/** Whether systemd manages this machine (sd_booted(3)): not in most containers. */
function systemdRuns(): boolean {
  return existsSync('/run/systemd/system');
}

/** Enables and (re)starts the unit, or says how to run it where systemd does not. */
function startUnit(unit: string, runBy: string): string[] {
  if (systemdRuns()) {
    execFileSync('systemctl', ['enable', '--quiet', unit], { stdio: 'inherit' });
    execFileSync('systemctl', ['restart', unit], { stdio: 'inherit' });
    return [`Started ${unit}: systemctl status ${unit}, journalctl -u ${unit}`];
  }
  return ['systemd is not running here, so nothing was started. Run it as the unit would:', `  ${runBy}`];
}

function initServer(args: string[]): void {
  const flags = parseFlags(args, ['database-url', 'public-url', 'port']);
  if (flags.help) return void process.stdout.write(INIT_HELP);
  const port = portFrom(flags.port, '--port', 8080);
  const databaseUrl = flags['database-url'] ?? process.env.DATABASE_URL;
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) throw new UsageError('--database-url must be a postgres:// URL');
  if (flags['public-url'] !== undefined && !/^https?:\/\/[^\s/]+/.test(flags['public-url'])) throw new UsageError('--public-url must be an http(s) URL');
  const path = join(configDir(), 'server.env');
  const out: string[] = [];
  if (existsSync(path)) {
    out.push(`${path} exists: kept as it is (its operator token and secret key stay).`);
  } else {
    const text = envFile(`rampart-server.service's configuration, written by rampart init server (docs/operations.md). Keep it secret.`, {
      RAMPART_PORT: String(port),
      RAMPART_ADMIN_TOKEN: randomBytes(32).toString('hex'),
      RAMPART_SECRET_KEY: randomBytes(32).toString('base64url'),
      DATABASE_URL: databaseUrl,
      RAMPART_PUBLIC_URL: flags['public-url'],
    });
    writeSecretFile(path, text);
    out.push(`Wrote ${path} (mode 0600): a new operator token and secret key${databaseUrl ? ', the PostgreSQL URL' : ''}.`);
  }
  const actualPort = /^RAMPART_PORT=(\d+)$/m.exec(readFileSync(path, 'utf8'))?.[1] ?? String(port);
  const local = `http://127.0.0.1:${actualPort}`;
  const publicUrl = (flags['public-url'] ?? '').replace(/\/$/, '');
  out.push(
    ...startUnit(
      'rampart-server.service',
      `sudo sh -c 'set -a; . ${path}; RAMPART_DOWNLOADS_DIR=/var/lib/rampart/downloads; exec runuser -u rampart -- rampart serve --data-dir /var/lib/rampart/server'`,
    ),
  );
  out.push(
    '',
    `Dashboard and API: ${publicUrl || local}${publicUrl ? ` (listening on ${local}; put TLS in front, docs/operations.md)` : ' (127.0.0.1 only; put TLS in front, docs/operations.md)'}`,
    'Create the first account (the operator token is read from the file, never typed):',
    `  sudo sh -c 'set -a; . ${path}; rampart admin create-account --url ${local} --email you@example.com --plan enterprise'`,
    `Shield servers connect to ${publicUrl ? publicUrl.replace(/^http/, 'ws') : 'wss://<this host>'}/agent; the dashboard's Servers page gives each its commands.`,
  );
  process.stdout.write(`${out.join('\n')}\n`);
}

/** The token from standard input: a pipe's first line, or typed at a prompt without echo. */
async function readToken(): Promise<string> {
  const tty = process.stdin.isTTY;
  let muted = false;
  const output = new Writable({ write: (chunk: Buffer, _enc, done) => (muted ? done() : process.stderr.write(chunk, done)) });
  const rl = createInterface({ input: process.stdin, output, terminal: !!tty });
  if (tty) {
    output.write('Connection token (from the dashboard; not shown): ');
    muted = true;
  }
  try {
    for await (const line of rl) return line.trim();
    return '';
  } finally {
    rl.close();
    if (tty) process.stderr.write('\n');
  }
}

async function initAgent(args: string[]): Promise<void> {
  const flags = parseFlags(args, ['server'], ['insecure']);
  if (flags.help) return void process.stdout.write(INIT_HELP);
  if (!flags.server) throw new UsageError('--server is required');
  const server = checkServerUrl(flags.server, flags.insecure === true);
  const token = await readToken();
  if (!token) throw new UsageError('no connection token on standard input');
  if (!TOKEN.test(token)) throw new UsageError('the connection token on standard input is not one (copy it from the dashboard)');
  const path = join(configDir(), 'agent.env');
  const header = [
    `rampart-agent.service's configuration, written by rampart init agent (docs/operations.md). Keep it secret.`,
    'RAMPART_AGENT_OPTIONS: more agent options separated by spaces (rampart agent --help), e.g. --acme-email you@example.com',
  ].join('\n# ');
  writeSecretFile(path, envFile(header, { RAMPART_SERVER_URL: server, RAMPART_AGENT_TOKEN: token, RAMPART_AGENT_OPTIONS: flags.insecure ? '--insecure' : '' }));
  const out = [`Wrote ${path} (mode 0600): the control plane's URL and this server's token.`];
  out.push(
    ...startUnit(
      'rampart-agent.service',
      `sudo sh -c 'set -a; . ${path}; exec runuser -u rampart -- rampart agent --server "$RAMPART_SERVER_URL" --data-dir /var/lib/rampart/agent $RAMPART_AGENT_OPTIONS'`,
    ),
  );
  out.push('', 'The dashboard shows the server online once its agent has connected.');
  process.stdout.write(`${out.join('\n')}\n`);
}

export async function initCommand(args: string[]): Promise<number> {
  const [what, ...rest] = args;
  switch (what) {
    case 'server':
      initServer(rest);
      return 0;
    case 'agent':
      await initAgent(rest);
      return 0;
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(INIT_HELP);
      return what === undefined ? 2 : 0;
    default:
      throw new UsageError(`unknown init target: ${what} (server or agent)`);
  }
}
