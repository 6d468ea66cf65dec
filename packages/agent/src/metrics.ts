import { createServer, request, type Server } from 'node:http';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';

/**
 * The agent's Prometheus metrics (docs/metrics.md), served at /metrics on a loopback port
 * (`rampart agent --metrics-port`, default 9464 on 127.0.0.1; 0: off), followed by HAProxy's own
 * exporter's metrics (haproxy_*), which the agent fetches from its HAProxy's health socket.
 * Labels are bounded: outcomes, and the domains assigned to this server.
 */

export const DEFAULT_METRICS_PORT = 9464;

export interface AgentMetricSources {
  /** WAF events not logged because of the daily cap (EventCollector.dropped). */
  eventsDropped(): number;
  /** Each domain's certificate and its expiry (seconds since the epoch), from the certificate manager. */
  certificates(): readonly { domain: string; expiresAt: number | null }[];
  /** HAProxy's exporter's text, or undefined when HAProxy does not answer. */
  haproxy?(): Promise<string | undefined>;
  /** Milliseconds since the epoch. */
  now(): number;
}

export class AgentMetrics {
  readonly registry = new Registry();
  readonly applies: Counter<'outcome'>;
  readonly rollbacks: Counter<'outcome'>;

  constructor(
    private readonly sources: AgentMetricSources,
    options: { defaultMetrics?: boolean } = {},
  ) {
    const registers = [this.registry];
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: 'rampart_agent_' });
    this.applies = new Counter({
      name: 'rampart_agent_applies_total',
      help: 'Configuration applies by outcome: ok (applied, or identical and skipped), failed (refused by haproxy -c, or a failed reload)',
      labelNames: ['outcome'],
      registers,
    });
    this.rollbacks = new Counter({
      name: 'rampart_agent_rollbacks_total',
      help: 'Reloads that failed and were rolled back, by outcome: restored (the previous configuration serves), failed (restoring failed too)',
      labelNames: ['outcome'],
      registers,
    });
    new Counter({
      name: 'rampart_agent_waf_events_dropped_total',
      help: 'WAF events not logged because the daily cap of this server was reached (blocking does not depend on it), since the agent started',
      registers,
      collect() {
        // The collector's own count, as it stands at the scrape.
        this.reset();
        this.inc(sources.eventsDropped());
      },
    });
    new Gauge({
      name: 'rampart_agent_certificate_expiry_seconds',
      help: "Seconds until each domain's served certificate expires (negative once expired)",
      labelNames: ['domain'],
      registers,
      collect() {
        this.reset();
        const now = sources.now() / 1000;
        for (const c of sources.certificates()) if (c.expiresAt !== null) this.set({ domain: c.domain }, Math.round(c.expiresAt - now));
      },
    });
  }

  /** One finished apply: ok, or failed at its stage (apply.ts's ApplyStage). */
  applied(result: { ok: true } | { ok: false; stage: string }): void {
    this.applies.inc({ outcome: result.ok ? 'ok' : 'failed' });
    if (!result.ok && result.stage === 'reload') this.rollbacks.inc({ outcome: 'restored' });
    if (!result.ok && result.stage === 'rollback') this.rollbacks.inc({ outcome: 'failed' });
  }

  /** The exposition text: the agent's metrics, then HAProxy's. */
  async text(): Promise<string> {
    const own = await this.registry.metrics();
    const haproxy = await this.sources.haproxy?.().catch(() => undefined);
    return haproxy ? `${own.endsWith('\n') ? own : `${own}\n`}${haproxy}` : own;
  }

  /** Serves GET /metrics on host:port (loopback by default); resolves with the bound port. */
  async listen(port: number, host = '127.0.0.1'): Promise<{ server: Server; port: number }> {
    const server = createServer((req, res) => {
      if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('Not Found\n');
        return;
      }
      this.text().then(
        (body) => res.writeHead(200, { 'content-type': this.registry.contentType, 'cache-control': 'no-store' }).end(body),
        () => res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics failed\n'),
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    const addr = server.address();
    return { server, port: typeof addr === 'object' && addr ? addr.port : port };
  }
}

/** HAProxy's Prometheus exporter at /metrics on a unix socket (the health socket's frontend), or undefined. */
export function fetchHaproxyMetrics(socketPath: string, timeoutMs = 2000): Promise<string | undefined> {
  return new Promise((resolve) => {
    const req = request({ socketPath, path: '/metrics', timeout: timeoutMs, headers: { connection: 'close' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve(res.statusCode === 200 && body.includes('haproxy_') ? body : undefined));
      res.on('error', () => resolve(undefined));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(undefined));
    req.end();
  });
}
