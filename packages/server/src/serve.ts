import type { FastifyServerOptions } from 'fastify';
import { buildApp } from './app.js';
import { AgentHub } from './hub/hub.js';
import { scheduleJobs } from './jobs.js';
import { pruneEvents } from './services/events.js';
import { healthIntervalFromEnv, runHealthCycle } from './services/health.js';
import type { ServiceContext } from './context.js';
import { openDatabase } from './db/database.js';
import { DEFAULT_PLANS, type PlanTable } from './plans.js';
import type { App } from './routes/types.js';

export interface ServerOptions {
  port: number;
  host: string;
  dataDir?: string | undefined;
  databaseUrl?: string | undefined;
  adminToken?: string | undefined;
  plans?: PlanTable;
  logger?: FastifyServerOptions['logger'];
  agentHeartbeatMs?: number | undefined;
  /** Seconds between health cycles (certificate expiry warnings); default RAMPART_HEALTH_INTERVAL, else 300. */
  healthIntervalSeconds?: number | undefined;
}

export interface RunningServer {
  app: App;
  hub: AgentHub;
  ctx: ServiceContext;
  url: string;
  close(): Promise<void>;
}

/** The control plane: opens storage (PGlite or PostgreSQL), migrates, and listens. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const healthIntervalSeconds = options.healthIntervalSeconds ?? healthIntervalFromEnv(process.env.RAMPART_HEALTH_INTERVAL);
  if (!(healthIntervalSeconds > 0)) throw new Error('healthIntervalSeconds must be above 0');
  const database = await openDatabase({ url: options.databaseUrl, dataDir: options.dataDir });
  const ctx: ServiceContext = {
    db: database.db,
    plans: options.plans ?? DEFAULT_PLANS,
    now: () => new Date(),
    serversChanged: (ids) => hub.serversChanged(ids),
  };
  const hub: AgentHub = new AgentHub(ctx, {
    heartbeatMs: options.agentHeartbeatMs,
    log: { info: (msg) => app.log.info(msg), warn: (msg) => app.log.warn(msg) },
  });
  const app = await buildApp({ ctx, adminToken: options.adminToken, logger: options.logger });
  hub.attach(app.server);
  // Periodic jobs, each on one process at a time however many share the database.
  const stopJobs = scheduleJobs(
    database.db,
    database.kind,
    [
      { name: 'event-retention', everyMs: 3_600_000, run: () => pruneEvents(ctx) },
      // The health cycle: certificate expiry warnings.
      { name: 'health-cycle', everyMs: healthIntervalSeconds * 1000, run: () => runHealthCycle(ctx) },
    ],
    (msg, err) => app.log.warn({ err }, msg),
  );
  app.addHook('onClose', async () => stopJobs());
  app.addHook('preClose', async () => hub.close()); // live agent sockets would hold the listener open
  try {
    await app.listen({ port: options.port, host: options.host });
  } catch (err) {
    await database.close();
    throw err;
  }
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : options.port;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    app,
    hub,
    ctx,
    url: `http://${host}:${port}`,
    async close() {
      await app.close();
      await database.close();
    },
  };
}
