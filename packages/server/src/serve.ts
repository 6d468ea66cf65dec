import type { FastifyServerOptions } from 'fastify';
import { buildApp } from './app.js';
import { AgentHub } from './hub/hub.js';
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
  // Jobs: event retention hourly (idempotent, so several processes may run it).
  const prune = () => void pruneEvents(ctx).catch((err) => app.log.warn({ err }, 'event retention failed'));
  const jobs = setInterval(prune, 3_600_000);
  jobs.unref();
  prune();
  // The health cycle: certificate expiry warnings (idempotent as well).
  const health = () => void runHealthCycle(ctx).catch((err) => app.log.warn({ err }, 'health cycle failed'));
  const healthJob = setInterval(health, Math.min(healthIntervalSeconds * 1000, 2 ** 31 - 1));
  healthJob.unref();
  health();
  app.addHook('onClose', async () => {
    clearInterval(jobs);
    clearInterval(healthJob);
  });
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
