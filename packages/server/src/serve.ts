import type { FastifyServerOptions } from 'fastify';
import { buildApp } from './app.js';
import { AgentHub } from './hub/hub.js';
import { BUS_APPLICATION_NAME, busChannel, encodeLiveMessage, InProcessBus, PostgresBus, type ChangeBus } from './bus.js';
import { ControlPlaneMetrics } from './metrics.js';
import { LiveStreams, type LiveStreamOptions } from './routes/stream.js';
import { scheduleJobs } from './jobs.js';
import { pruneEvents } from './services/events.js';
import { pruneAudit } from './services/audit.js';
import { ANALYTICS_JOB_INTERVAL_MS, runAnalyticsJob } from './services/analytics.js';
import { botKeyMaxAgeFromEnv, runBotKeyJob } from './services/bot-keys.js';
import { crawlerRangesConfigFromEnv, runCrawlerRangesJob, type CrawlerRangesConfig } from './services/crawler-ranges.js';
import { healthIntervalFromEnv, runHealthCycle } from './services/health.js';
import { bakeWatch, ROLLOUT_WATCH_MS } from './services/rollouts.js';
import { billingIntervalFromEnv } from './services/billing.js';
import { runChargeJob } from './services/billing-charge.js';
import { runDepositExpiry } from './services/billing-deposits.js';
import { pollChainDeposits } from './services/billing-chain.js';
import { chainConfigFromEnv, type ChainConfig } from './chain/config.js';
import { deliveryConfigFromEnv, deliveryRunner, type DeliveryConfig } from './services/notification-delivery.js';
import type { ServiceContext } from './context.js';
import { credentialCache } from './credential-cache.js';
import { countListeners, pgNotify } from './data/bus.js';
import { openDatabase } from './db/database.js';
import { secretKeyFrom } from './secret-box.js';
import { signupModeFrom, type SignupMode } from './services/signup.js';
import { publicUrlFrom, trustProxyFrom } from './trust-proxy.js';
import { listenerLimitsFromEnv, type ListenerLimits } from './listener-limits.js';
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
  /** PostgreSQL only: a schema to create and use (tests, so two instances can share one). */
  schema?: string | undefined;
  /** Encrypts stored secrets (src/secret-box.ts); default RAMPART_SECRET_KEY. */
  secretKey?: string | undefined;
  /** Seconds between runs of the monthly charge job; default RAMPART_BILLING_INTERVAL, else 60. */
  billingIntervalSeconds?: number | undefined;
  /** On-chain deposits (docs/billing.md); default from RAMPART_CHAIN_* (chainConfigFromEnv); null: off. */
  chain?: ChainConfig | null | undefined;
  /** Verifies POST /api/billing/webhook; default RAMPART_PAYMENT_WEBHOOK_SECRET; absent: the webhook answers 503. */
  paymentWebhookSecret?: string | undefined;
  /** Notification delivery (webhooks, SMTP, the job's interval); default from the environment (deliveryConfigFromEnv). */
  delivery?: DeliveryConfig | undefined;
  /** GET /metrics also answers this bearer token; default RAMPART_METRICS_TOKEN (docs/metrics.md). */
  metricsToken?: string | undefined;
  /** The Debian packages served under /downloads/; default RAMPART_DOWNLOADS_DIR, else none. */
  downloadsDir?: string | undefined;
  /** GET /api/stream's limits and heartbeat (routes/stream.ts). */
  stream?: LiveStreamOptions | undefined;
  /** The search crawlers' published address lists to fetch (docs/bots.md); default from RAMPART_CRAWLER_RANGES; null: none. */
  crawlerRanges?: CrawlerRangesConfig | null | undefined;
  /** Reverse proxies trusted with X-Forwarded-*; default RAMPART_TRUST_PROXY (trust-proxy.ts), else none. */
  trustProxy?: string[] | undefined;
  /** Where users reach the control plane; default RAMPART_PUBLIC_URL. https makes session cookies Secure. */
  publicUrl?: string | undefined;
  /** Who may register (services/signup.ts); default RAMPART_SIGNUP, else closed. */
  signup?: SignupMode | undefined;
  /** The listener's timeouts and connection limit; default from RAMPART_REQUEST_TIMEOUT_MS and the others (listener-limits.ts). */
  listener?: ListenerLimits | undefined;
}

export interface RunningServer {
  app: App;
  hub: AgentHub;
  ctx: ServiceContext;
  /** This process's GET /api/stream connections. */
  streams: LiveStreams;
  metrics: ControlPlaneMetrics;
  /** The change bus between the processes sharing the database. */
  bus: ChangeBus;
  url: string;
  close(): Promise<void>;
}

/** The control plane: opens storage (PGlite or PostgreSQL), migrates, and listens. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const botKeyMaxAge = botKeyMaxAgeFromEnv(process.env.RAMPART_BOT_KEY_MAX_AGE);
  const healthIntervalSeconds = options.healthIntervalSeconds ?? healthIntervalFromEnv(process.env.RAMPART_HEALTH_INTERVAL);
  if (!(healthIntervalSeconds > 0)) throw new Error('healthIntervalSeconds must be above 0');
  const deliveryConfig = options.delivery ?? deliveryConfigFromEnv(process.env);
  const billingIntervalSeconds = options.billingIntervalSeconds ?? billingIntervalFromEnv(process.env.RAMPART_BILLING_INTERVAL);
  if (!(billingIntervalSeconds > 0)) throw new Error('billingIntervalSeconds must be above 0');
  const chain = options.chain === undefined ? await chainConfigFromEnv(process.env) : (options.chain ?? undefined);
  const crawlerRanges = options.crawlerRanges === undefined ? crawlerRangesConfigFromEnv(process.env) : options.crawlerRanges;
  const paymentWebhookSecret = options.paymentWebhookSecret ?? (process.env.RAMPART_PAYMENT_WEBHOOK_SECRET || undefined);
  const trustProxy = options.trustProxy ?? trustProxyFrom(process.env.RAMPART_TRUST_PROXY, 'RAMPART_TRUST_PROXY');
  const publicUrl = publicUrlFrom(options.publicUrl ?? process.env.RAMPART_PUBLIC_URL, 'RAMPART_PUBLIC_URL');
  const signup = options.signup ?? signupModeFrom(process.env.RAMPART_SIGNUP, 'closed');
  const listener = options.listener ?? listenerLimitsFromEnv(process.env);
  let snapshot: string | undefined;
  const database = await openDatabase({ url: options.databaseUrl, dataDir: options.dataDir, schema: options.schema, onSnapshot: (p) => (snapshot = p) });
  // The app's logger, once the app exists (the bus may log before).
  const appLogger: { current?: { info(msg: string): void; warn(msg: string): void } } = {};
  const appLog = { info: (msg: string) => appLogger.current?.info(msg), warn: (msg: string) => appLogger.current?.warn(msg) };
  let bus: ChangeBus;
  if (database.kind === 'postgres' && options.databaseUrl) {
    const pgBus = new PostgresBus({
      url: options.databaseUrl,
      channel: busChannel(database.schema),
      notify: (channel, payload) => pgNotify(database.db, channel, payload), // through the pool
      log: appLog,
    });
    try {
      await pgBus.start();
    } catch (err) {
      await database.close();
      throw err;
    }
    bus = pgBus;
  } else {
    bus = new InProcessBus();
  }
  const ctx: ServiceContext = {
    db: database.db,
    secretKey: secretKeyFrom(options.secretKey ?? process.env.RAMPART_SECRET_KEY),
    plans: options.plans ?? DEFAULT_PLANS,
    now: () => new Date(),
    allowPrivateDnsApi: process.env.RAMPART_ALLOW_PRIVATE_DNS_API === '1',
    billing: { chain, webhookSecret: paymentWebhookSecret },
    // New WAF events and notifications, for every process's live streams: in the storing
    // transaction (PostgreSQL delivers the NOTIFY on commit; PGlite's readers wait for the commit).
    live: (db, m) => (bus instanceof PostgresBus ? pgNotify(db, busChannel(database.schema), encodeLiveMessage(m)) : bus.publish(m)),
    // Every process, this one included, pushes what the bus delivers to it.
    serversChanged: (ids) => {
      if (ids.length === 0) return;
      bus.publish({ kind: 'servers-changed', ids: [...ids] }).catch((err) => appLog.warn(`publishing a change failed: ${String(err)}`));
    },
    // Revoked keys, ended sessions and frozen accounts leave every process's credential cache.
    credentialBus: {
      publish: (m) => bus.publish(m),
      live: () => !(bus instanceof PostgresBus) || bus.listenerPid !== undefined,
      // The bus's listening connections, found as the bus test finds them: by application name and LISTEN.
      listeners: async () => {
        if (!(bus instanceof PostgresBus)) return 1;
        return (await countListeners(database.db, BUS_APPLICATION_NAME, busChannel(database.schema))) ?? 1;
      },
      warn: (msg) => appLog.warn(msg),
    },
  };
  const metrics = new ControlPlaneMetrics();
  const streams = new LiveStreams(ctx, options.stream, appLog);
  const hub: AgentHub = new AgentHub(ctx, {
    heartbeatMs: options.agentHeartbeatMs,
    log: appLog,
    publish: (m) => bus.publish(m),
    metrics,
  });
  metrics.sources.agentsConnected = () => hub.agentCount;
  const credentials = credentialCache(ctx);
  bus.subscribe({
    message: (m) => hub.onBusMessage(m),
    live: (m) => streams.deliver(m),
    // Drop, then acknowledge, so a publisher knows when every process has dropped it.
    credentials: (m) => credentials.receive(m, (ack) => void bus.publish(ack).catch((err) => appLog.warn(`acknowledging ${m.kind} failed: ${String(err)}`))),
    // Messages may have been lost: cached credentials are read again from the database.
    resync: () => {
      credentials.clear();
      hub.resync();
      streams.resync();
    },
  });
  let app: App;
  try {
    app = await buildApp({
      ctx,
      adminToken: options.adminToken,
      logger: options.logger,
      metrics,
      metricsToken: options.metricsToken ?? (process.env.RAMPART_METRICS_TOKEN || undefined),
      streams,
      trustProxy,
      publicUrl,
      signup,
      listener,
      downloadsDir: options.downloadsDir ?? (process.env.RAMPART_DOWNLOADS_DIR || undefined),
    });
  } catch (err) {
    await bus.close();
    await database.close();
    throw err;
  }
  appLogger.current = { info: (msg) => app.log.info(msg), warn: (msg) => app.log.warn(msg) };
  if (snapshot) appLogger.current.info(`the embedded database was copied to ${snapshot} before it was migrated (the previous release opens the copy; remove it once this one runs well)`);
  // Notification delivery: runs of the job below, and one soon after deliveries are queued.
  const deliveries = deliveryRunner(
    ctx,
    deliveryConfig,
    (msg, err) => app.log.warn({ err }, msg),
    (channel, outcome) => metrics.delivery(channel, outcome),
  );
  ctx.delivery = {
    allowPrivateWebhooks: deliveryConfig.allowPrivateWebhooks,
    emailEnabled: deliveryConfig.smtpUrl !== undefined,
    queued: () => deliveries.kick(),
    sendEmail: deliveries.sendEmail,
  };
  hub.attach(app.server);
  const bakes = bakeWatch(ctx);
  // Periodic jobs, each on one process at a time however many share the database.
  const stopJobs = scheduleJobs(
    database.db,
    database.kind,
    [
      { name: 'event-retention', everyMs: 3_600_000, run: async () => (await pruneEvents(ctx)) + (await pruneAudit(ctx)) },
      // Traffic analytics: minutes rolled up into hours, minutes kept 48 h and hours 30 days (docs/analytics.md).
      { name: 'analytics-rollup', everyMs: ANALYTICS_JOB_INTERVAL_MS, run: () => runAnalyticsJob(ctx) },
      // Bot protection keys: rotated when older than RAMPART_BOT_KEY_MAX_AGE, the previous one retired a cookie lifetime later.
      { name: 'bot-keys', everyMs: 300_000, run: () => runBotKeyJob(ctx, botKeyMaxAge) },
      // The health cycle: certificate expiry warnings, server health (probes), DNS failover.
      { name: 'health-cycle', everyMs: healthIntervalSeconds * 1000, run: () => runHealthCycle(ctx, ctx.now(), { log: appLog }) },
      // Staged rollout: a bake that ended is released, or halts if a canary went silent (docs/api.md "Rollout").
      { name: 'rollout-watch', everyMs: ROLLOUT_WATCH_MS, run: () => bakes.run() },
      // The monthly charge of every account due (docs/billing.md, "The monthly charge").
      { name: 'billing-charge', everyMs: billingIntervalSeconds * 1000, run: () => runChargeJob(ctx) },
      // Deposits not paid within 24 hours expire (docs/billing.md, "Deposits").
      { name: 'deposit-expiry', everyMs: billingIntervalSeconds * 1000, run: () => runDepositExpiry(ctx) },
      // On-chain deposits: payments to deposit addresses, confirmed once deep enough.
      ...(chain ? [{ name: 'chain-watcher', everyMs: chain.pollMs, run: () => pollChainDeposits(ctx, chain) }] : []),
      { name: 'notification-delivery', everyMs: deliveryConfig.intervalMs, run: () => deliveries.run() },
      // The search crawlers' published address lists, for the agents (docs/bots.md "Verified crawlers").
      ...(crawlerRanges ? [{ name: 'crawler-ranges', everyMs: crawlerRanges.intervalMs, run: () => runCrawlerRangesJob(ctx, crawlerRanges, appLog) }] : []),
    ],
    (msg, err) => app.log.warn({ err }, msg),
    metrics.jobs,
  );
  app.addHook('onClose', (_app, done) => {
    stopJobs();
    bakes.stop();
    done();
  });
  app.addHook('onClose', async () => deliveries.stop());
  app.addHook('onClose', async () => bus.close());
  app.addHook('preClose', async () => hub.close()); // live agent sockets would hold the listener open
  try {
    await app.listen({ port: options.port, host: options.host });
  } catch (err) {
    await bus.close();
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
    streams,
    metrics,
    bus,
    url: `http://${host}:${port}`,
    async close() {
      await app.close();
      await database.close();
    },
  };
}
