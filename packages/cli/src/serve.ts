import { plansFromEnv, startServer } from '@rampart/server';
import { parseFlags, portFrom } from './args.js';

export const SERVE_HELP = `Usage: rampart serve [--port 8080] [--host 127.0.0.1] [--data-dir ./data] [--database-url URL]

Runs the control plane: the HTTP API, the dashboard, the API docs (/docs) and the agent WebSocket
(/agent) on one listener.

Options:
  --port N            port to listen on (env RAMPART_PORT, default 8080)
  --host ADDR         address to listen on (default 127.0.0.1)
  --data-dir DIR      embedded database directory (env RAMPART_DATA_DIR, default ./data)
  --database-url URL  PostgreSQL instead of the embedded database (env DATABASE_URL)

Environment:
  RAMPART_ADMIN_TOKEN   enables the operator API (/admin/...) with this bearer token
  RAMPART_PLAN_PRICES   monthly prices in cents, e.g. '{"pro":2900,"enterprise":29900}'
  RAMPART_LOG_LEVEL     pino log level (default info)
  RAMPART_HEALTH_INTERVAL  seconds between health cycles (certificate expiry warnings; default 300)
`;

export async function serveCommand(args: string[]): Promise<void> {
  const flags = parseFlags(args, ['port', 'host', 'data-dir', 'database-url']);
  if (flags.help) {
    process.stdout.write(SERVE_HELP);
    return;
  }
  const env = process.env;
  const databaseUrl = flags['database-url'] ?? env.DATABASE_URL;
  const server = await startServer({
    port: portFrom(flags.port ?? env.RAMPART_PORT, '--port', 8080),
    host: flags.host ?? '127.0.0.1',
    dataDir: databaseUrl ? undefined : (flags['data-dir'] ?? env.RAMPART_DATA_DIR ?? './data'),
    databaseUrl,
    adminToken: env.RAMPART_ADMIN_TOKEN || undefined,
    plans: plansFromEnv(env.RAMPART_PLAN_PRICES),
    logger: { level: env.RAMPART_LOG_LEVEL ?? 'info' },
  });
  server.app.log.info(`rampart control plane listening on ${server.url} (${databaseUrl ? 'PostgreSQL' : 'embedded PGlite'})`);
  const stop = async () => {
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
