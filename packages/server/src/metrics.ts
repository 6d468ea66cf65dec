import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { secretsEqual } from './crypto.js';
import type { App } from './routes/types.js';

/**
 * The control plane's Prometheus metrics (docs/metrics.md), on a registry of its own per app, so
 * several apps in one process (tests) never share or collide. Labels are bounded: route patterns
 * as registered (never the raw URL), method, status class, job names, channels and outcomes.
 */

/** The label of a request that matched no route (a 404 for an unknown URL): one value, however many URLs. */
export const UNMATCHED_ROUTE = 'unmatched';
/** Long-lived responses left out of the latency histogram (their "latency" is the stream's lifetime). */
const UNTIMED_ROUTES = new Set(['/api/stream']);

export class ControlPlaneMetrics {
  readonly registry = new Registry();
  readonly httpDuration: Histogram<'method' | 'route' | 'status_class'>;
  readonly pushToAck: Histogram<'outcome'>;
  readonly jobRuns: Counter<'job'>;
  readonly jobFailures: Counter<'job'>;
  readonly notificationDeliveries: Counter<'channel' | 'outcome'>;
  /** What the gauges read when scraped (serve.ts sets them: the hub, the live streams). */
  sources: { agentsConnected?: () => number; liveStreams?: () => number } = {};

  constructor(options: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: 'rampart_' });
    this.httpDuration = new Histogram({
      name: 'rampart_http_request_duration_seconds',
      help: 'HTTP requests by method, route pattern and status class, from the request to the end of the answer (GET /api/stream is left out)',
      labelNames: ['method', 'route', 'status_class'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.pushToAck = new Histogram({
      name: 'rampart_config_push_ack_seconds',
      help: "Time from a configuration snapshot being sent to an agent to the agent's config/ack of that revision or a newer one, by outcome (ok, failed)",
      labelNames: ['outcome'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120],
      registers,
    });
    this.jobRuns = new Counter({ name: 'rampart_job_runs_total', help: 'Periodic job runs on this process (runs another process held the job for are not counted)', labelNames: ['job'], registers });
    this.jobFailures = new Counter({ name: 'rampart_job_failures_total', help: 'Periodic job runs that failed (threw), on this process', labelNames: ['job'], registers });
    this.notificationDeliveries = new Counter({
      name: 'rampart_notification_deliveries_total',
      help: 'Notification delivery attempts by channel (webhook, email) and outcome: delivered, failed (retried later), given_up',
      labelNames: ['channel', 'outcome'],
      registers,
    });
    const sources = () => this.sources;
    new Gauge({
      name: 'rampart_agents_connected',
      help: 'Shield-server agents connected to this process (past their hello)',
      registers,
      collect() {
        this.set(sources().agentsConnected?.() ?? 0);
      },
    });
    new Gauge({
      name: 'rampart_live_streams',
      help: 'Open GET /api/stream connections on this process',
      registers,
      collect() {
        this.set(sources().liveStreams?.() ?? 0);
      },
    });
  }

  /** Times every answer of the app by its route pattern (Fastify's routeOptions.url). Call on the root instance, before the routes. */
  instrument(app: App): void {
    app.addHook('onResponse', async (req, reply) => {
      const route = req.routeOptions.url;
      if (route !== undefined && UNTIMED_ROUTES.has(route)) return;
      const status = reply.statusCode;
      this.httpDuration.observe(
        { method: req.method, route: route ?? UNMATCHED_ROUTE, status_class: status >= 100 && status < 600 ? `${Math.floor(status / 100)}xx` : 'other' },
        reply.elapsedTime / 1000,
      );
    });
  }

  /** Hooks for scheduleJobs (src/jobs.ts). */
  readonly jobs = {
    ran: (job: string) => this.jobRuns.inc({ job }),
    failed: (job: string) => {
      this.jobRuns.inc({ job });
      this.jobFailures.inc({ job });
    },
  };

  /** A notification delivery attempt's outcome (services/notification-delivery.ts). */
  delivery(channel: string, outcome: 'delivered' | 'failed' | 'given_up'): void {
    this.notificationDeliveries.inc({ channel: channel === 'email' ? 'email' : 'webhook', outcome });
  }

  /** A config/ack for a pushed snapshot (hub/hub.ts), `seconds` after the push. */
  pushAcked(seconds: number, ok: boolean): void {
    this.pushToAck.observe({ outcome: ok ? 'ok' : 'failed' }, seconds);
  }
}

/** A bearer token against the accepted ones, in constant time (secretsEqual: SHA-256 of both sides); every token is compared. */
export function bearerMatches(header: string | undefined, tokens: readonly string[]): boolean {
  const presented = typeof header === 'string' && header.startsWith('Bearer ') ? header.slice(7) : '';
  let ok = false;
  for (const t of tokens) ok = secretsEqual(presented, t) || ok;
  return ok && presented.length > 0;
}
