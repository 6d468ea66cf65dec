import { Agent, DEFAULT_METRICS_PORT } from '@rampart/agent';
import { intFrom, parseFlags, portFrom, UsageError } from './args.js';
import { checkServerUrl } from './server-url.js';

export const AGENT_HELP = `Usage: rampart agent --server wss://HOST/agent [--insecure] [--data-dir DIR] [--http-port 80]
                     [--https-port 443] [--haproxy PATH] [--bind ADDR] [--nbthread N]
                     [--country-map FILE] [--acme-directory URL] [--acme-email E]
                     [--resolver HOST:PORT] [--renew-before-days 30] [--metrics-port 9464]

One shield server's agent. It starts and owns its HAProxy, keeps an outbound WebSocket to the
service (reconnecting with capped, jittered backoff), applies every configuration it is sent, and
gets and renews a certificate (ACME HTTP-01) for every domain with sslEnabled.

Options:
  --server URL       the service's agent endpoint, e.g. wss://rampart.example.com/agent; plain ws://
                     only to this machine (e.g. ws://127.0.0.1:8080/agent) unless --insecure
  --insecure         allow a plain ws:// service on another machine (the token crosses in clear)
  --token T          this server's connection token; better env RAMPART_AGENT_TOKEN, as
                     rampart init agent writes it: a command line is visible to every user (ps)
  --data-dir DIR     where HAProxy's files, sockets and the agent's state live (default ./agent-data)
  --http-port N      HAProxy's HTTP port (default 80)
  --https-port N     HAProxy's HTTPS port (default 443; used once certificates exist)
  --haproxy PATH     the haproxy binary (default haproxy on PATH)
  --bind ADDR        address HAProxy listens on (default all)
  --nbthread N       HAProxy worker threads (default: one per CPU)
  --country-map FILE a CIDR -> country map ("<cidr> <CC>" lines) instead of the bundled data set's
  --acme-directory URL  the ACME directory (default: Let's Encrypt production; "staging" selects
                     Let's Encrypt staging); its TLS is trusted as Node trusts (NODE_EXTRA_CA_CERTS)
  --acme-email E     contact address of the agent's ACME account (optional)
  --resolver HOST:PORT  DNS server for the check that a domain points to this server and for
                     verifying search crawlers' addresses (default: the system's resolver)
  --renew-before-days N  renew certificates N days before they expire (default 30)
  --metrics-port N   Prometheus metrics at http://127.0.0.1:N/metrics: the agent's own and HAProxy's
                     exporter's (default 9464, loopback only; 0 turns it off; a port in use is a warning)

A refused token (wrong, regenerated, or the server decommissioned) is logged and tried again
after 30 s, doubling to 10 minutes; after 10 refusals in a row the agent exits with status 1.
A port HAProxy cannot listen on (another process holds it) stops the agent at start with
status 1, naming the port and, when it can be seen, the process holding it.

Signals: SIGHUP checks every certificate at once (retries failed orders, renews what is due);
SIGINT and SIGTERM stop the agent and its HAProxy.
`;

export async function agentCommand(args: string[]): Promise<void> {
  const flags = parseFlags(
    args,
    ['server', 'token', 'data-dir', 'http-port', 'https-port', 'haproxy', 'bind', 'nbthread', 'country-map', 'acme-directory', 'acme-email', 'resolver', 'renew-before-days', 'metrics-port'],
    ['insecure'],
  );
  if (flags.help) {
    process.stdout.write(AGENT_HELP);
    return;
  }
  const token = flags.token ?? process.env.RAMPART_AGENT_TOKEN;
  if (!flags.server) throw new UsageError('--server is required');
  if (!token) throw new UsageError('RAMPART_AGENT_TOKEN (or --token) is required');
  checkServerUrl(flags.server, flags.insecure === true);
  if (flags.token) process.stderr.write('rampart: warning: --token is visible to every user of this machine (ps); set RAMPART_AGENT_TOKEN instead\n');
  const agent = new Agent({
    serverUrl: flags.server,
    token,
    dataDir: flags['data-dir'] ?? './agent-data',
    httpPort: portFrom(flags['http-port'], '--http-port', 80),
    httpsPort: portFrom(flags['https-port'], '--https-port', 443),
    haproxyBin: flags.haproxy ?? 'haproxy',
    ...(flags.bind ? { bindAddress: flags.bind } : {}),
    ...(flags['country-map'] ? { countryMap: flags['country-map'] } : {}),
    ...(flags.nbthread ? { nbthread: intFrom(flags.nbthread, '--nbthread', 1, 64) } : {}),
    ...(flags['acme-directory'] ? { acmeDirectory: acmeDirectoryFrom(flags['acme-directory']) } : {}),
    ...(flags['acme-email'] ? { acmeEmail: emailFrom(flags['acme-email']) } : {}),
    ...(flags.resolver ? { resolver: resolverFrom(flags.resolver) } : {}),
    ...(flags['renew-before-days'] ? { renewBeforeDays: intFrom(flags['renew-before-days'], '--renew-before-days', 1, 3650) } : {}),
    // Its token refused TOKEN_REFUSALS_MAX times in a row: the agent stops, and the process exits 1.
    onGiveUp: () => void agent.stop().finally(() => process.exit(1)),
    metricsPort: flags['metrics-port'] === undefined ? DEFAULT_METRICS_PORT : intFrom(flags['metrics-port'], '--metrics-port', 0, 65535),
    // Hidden, for tests: a shorter interval between traffic analytics batches (default 60 s).
    ...(process.env.RAMPART_AGENT_ANALYTICS_INTERVAL_MS
      ? { analyticsIntervalMs: intFrom(process.env.RAMPART_AGENT_ANALYTICS_INTERVAL_MS, 'RAMPART_AGENT_ANALYTICS_INTERVAL_MS', 100, 3_600_000) }
      : {}),
  });
  await agent.start();
  const stop = async () => {
    await agent.stop();
    process.exit(0);
  };
  process.on('SIGHUP', () => agent.certificates.recheck());
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
}

function acmeDirectoryFrom(v: string): string {
  if (v === 'production' || v === 'staging' || /^https?:\/\/\S+$/.test(v)) return v;
  throw new UsageError('--acme-directory must be an http(s) URL, "production" or "staging"');
}

function emailFrom(v: string): string {
  if (/^[^\s@]+@[^\s@]+$/.test(v) && v.length <= 254) return v;
  throw new UsageError('--acme-email must be an email address');
}

function resolverFrom(v: string): string {
  const m = /^(?:\[([0-9a-fA-F:]+)\]|([0-9.]+)):(\d{1,5})$/.exec(v);
  if (m && Number(m[3]) >= 1 && Number(m[3]) <= 65535) return v;
  throw new UsageError('--resolver must be IP:PORT (e.g. 127.0.0.1:53 or [::1]:53)');
}
