import { plansFromEnv, startServer, trustProxyFrom } from '@rampart/server';
import { parseFlags, portFrom } from './args.js';
import { checkPorts } from './ports.js';

export const SERVE_HELP = `Usage: rampart serve [--port 8080] [--host 127.0.0.1] [--data-dir ./data] [--database-url URL]
                     [--trust-proxy ADDR[,CIDR...]] [--public-url URL]

Runs the control plane: the HTTP API, the dashboard, the API docs (/docs) and the agent WebSocket
(/agent) on one listener.

Options:
  --port N            port to listen on (env RAMPART_PORT, default 8080)
  --host ADDR         address to listen on (default 127.0.0.1)
  --data-dir DIR      embedded database directory (env RAMPART_DATA_DIR, default ./data)
  --database-url URL  PostgreSQL instead of the embedded database (env DATABASE_URL)
  --trust-proxy LIST  the reverse proxies in front (addresses and CIDR ranges, comma-separated;
                      env RAMPART_TRUST_PROXY, default none): only from them are X-Forwarded-For
                      (the client address sign-in limits count) and X-Forwarded-Proto believed
  --public-url URL    where users reach the control plane (env RAMPART_PUBLIC_URL); https makes
                      the session cookie Secure, and the link of a notification address's
                      confirmation e-mail opens the dashboard there

Environment:
  RAMPART_ADMIN_TOKEN   enables the operator API (/admin/...) with this bearer token
  RAMPART_SIGNUP        who may register with POST /api/auth/register: closed (default: only the
                        operator creates accounts), invite (an invitation from
                        'rampart admin create-invitation' is needed) or open (anyone)
  RAMPART_REQUEST_TIMEOUT_MS  a request (headers and body) must arrive within this (default 30000)
  RAMPART_HEADERS_TIMEOUT_MS  its request line and headers within this (default 10000); else 408
  RAMPART_MAX_CONNECTIONS  open connections at once, agents and live streams included (default 10000)
  RAMPART_PLAN_PRICES   monthly prices in cents, e.g. '{"pro":2900,"enterprise":29900}'
  RAMPART_LOG_LEVEL     pino log level (default info)
  RAMPART_HEALTH_INTERVAL  seconds between health cycles (server health probes, DNS failover,
                        certificate expiry warnings; default 300)
  RAMPART_SECRET_KEY    encrypts stored secrets such as DNS provider credentials and webhook
                        secrets (16+ characters)
  RAMPART_SMTP_URL      the SMTP server notification e-mails go through, e.g.
                        smtp://user:pass@mail.example.com:587 (none: no e-mail)
  RAMPART_SMTP_FROM     the sender of notification e-mails (default rampart@localhost)
  RAMPART_ALLOW_PRIVATE_WEBHOOKS=1  notification webhooks may reach private and loopback addresses
  RAMPART_DELIVERY_INTERVAL_MS  how often due notification deliveries are sent (default 5000)
  RAMPART_DELIVERY_CONCURRENCY  notification delivery attempts at once, each to another endpoint
                        (default 10)
  RAMPART_ALLOW_PRIVATE_DNS_API=1  a DNS provider's API URL may name a private address
  RAMPART_BILLING_INTERVAL  seconds between runs of the monthly charge (default 60)
  RAMPART_PAYMENT_WEBHOOK_SECRET  enables POST /api/billing/webhook (payment processors, signed)
  RAMPART_CHAIN_RPC_URL, RAMPART_CHAIN_XPUB, RAMPART_CHAIN_TOKEN_ADDRESS  on-chain deposits
                        (and RAMPART_CHAIN_*: see docs/billing.md)
  RAMPART_METRICS_TOKEN  a bearer token for GET /metrics besides the operator token
  RAMPART_BOT_KEY_MAX_AGE  seconds after which an account's bot protection key rotates
                        (default 604800, 7 days)
  RAMPART_CRAWLER_RANGES  where the search crawlers' address lists are fetched from (default:
                        Google's, Bing's and Apple's own; off; or crawler=URL entries)
  RAMPART_CRAWLER_RANGES_INTERVAL  seconds between those fetches (default 21600)
  RAMPART_DOWNLOADS_DIR  the Debian packages served under /downloads/ (default: none)

Every variable, with its range: docs/cli.md.
`;

export async function serveCommand(args: string[]): Promise<void> {
  const flags = parseFlags(args, ['port', 'host', 'data-dir', 'database-url', 'trust-proxy', 'public-url']);
  if (flags.help) {
    process.stdout.write(SERVE_HELP);
    return;
  }
  const env = process.env;
  const databaseUrl = flags['database-url'] ?? env.DATABASE_URL;
  const port = portFrom(flags.port ?? env.RAMPART_PORT, '--port', 8080);
  const host = flags.host ?? '127.0.0.1';
  // A taken port names the flag to change (as rampart up does), before the database is opened.
  await checkPorts([{ flag: flags.port ? '--port' : env.RAMPART_PORT ? 'RAMPART_PORT (or --port)' : '--port', port }], host);
  const server = await startServer({
    port,
    host,
    dataDir: databaseUrl ? undefined : (flags['data-dir'] ?? env.RAMPART_DATA_DIR ?? './data'),
    databaseUrl,
    adminToken: env.RAMPART_ADMIN_TOKEN || undefined,
    plans: plansFromEnv(env.RAMPART_PLAN_PRICES),
    logger: { level: env.RAMPART_LOG_LEVEL ?? 'info' },
    trustProxy: flags['trust-proxy'] === undefined ? undefined : trustProxyFrom(flags['trust-proxy'], '--trust-proxy'),
    publicUrl: flags['public-url'],
  });
  server.app.log.info(`rampart control plane listening on ${server.url} (${databaseUrl ? 'PostgreSQL' : 'embedded PGlite'})`);
  const stop = async () => {
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
}
