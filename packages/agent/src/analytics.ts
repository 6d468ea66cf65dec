import { HITS_TABLE, parseRuleHits, rulesOfHitKey } from '@rampart/proxy';
import {
  AGENT_LIMITS,
  ANALYTICS_LIMITS,
  backendName,
  LATENCY_BUCKETS_MS,
  latencyBucket,
  STATUS_CLASSES,
  type AnalyticsBatchPayload,
  type AnalyticsDomain,
  type StatusClass,
  type WafEventItem,
  type WafReason,
} from '@rampart/protocol';

/** One backend's cumulative counters, as HAProxy's `show stat` reports them. */
export interface BackendCounters {
  requests: number;
  status: Record<StatusClass, number>;
  bytesIn: number;
  bytesOut: number;
}

const STATUS_COLUMNS: Record<StatusClass, string> = { '1xx': 'hrsp_1xx', '2xx': 'hrsp_2xx', '3xx': 'hrsp_3xx', '4xx': 'hrsp_4xx', '5xx': 'hrsp_5xx', other: 'hrsp_other' };

const count = (v: string | undefined): number => {
  const n = Number(v);
  return v !== undefined && v !== '' && Number.isSafeInteger(n) && n >= 0 ? n : 0;
};

/**
 * The BACKEND rows of `show stat` (CSV, first line "# pxname,svname,..."), by backend name:
 * requests (req_tot, else stot), responses by status class, bytes in and out.
 */
export function parseStatCsv(csv: string): Map<string, BackendCounters> {
  const out = new Map<string, BackendCounters>();
  const lines = csv.split('\n');
  const headerLine = lines.find((l) => l.startsWith('# '));
  if (!headerLine) return out;
  const header = headerLine.slice(2).split(',');
  const col = new Map(header.map((h, i) => [h.trim(), i]));
  const at = (row: string[], name: string) => (col.has(name) ? row[col.get(name)!] : undefined);
  for (const line of lines) {
    if (line.startsWith('#') || !line.includes(',')) continue;
    const row = line.split(',');
    if (at(row, 'svname') !== 'BACKEND') continue;
    const name = at(row, 'pxname');
    if (!name) continue;
    const reqTot = at(row, 'req_tot');
    out.set(name, {
      requests: reqTot !== undefined && reqTot !== '' ? count(reqTot) : count(at(row, 'stot')),
      status: Object.fromEntries(STATUS_CLASSES.map((c) => [c, count(at(row, STATUS_COLUMNS[c]))])) as Record<StatusClass, number>,
      bytesIn: count(at(row, 'bin')),
      bytesOut: count(at(row, 'bout')),
    });
  }
  return out;
}

/** The worker's process id from `show info` ("Pid: 1234"), or undefined. */
export function parseInfoPid(info: string): number | undefined {
  const m = /^Pid:\s*(\d+)\s*$/m.exec(info);
  return m ? Number(m[1]) : undefined;
}

/**
 * What happened since `prev`: a counter that went down belongs to a new process (HAProxy was
 * reloaded or restarted, and counters start at 0 in every new worker), so its new value is
 * all of the delta. No previous reading counts as all zeros.
 */
export function counterDelta(prev: BackendCounters | undefined, cur: BackendCounters): BackendCounters {
  const d = (p: number | undefined, c: number) => (p === undefined || c < p ? c : c - p);
  return {
    requests: d(prev?.requests, cur.requests),
    status: Object.fromEntries(STATUS_CLASSES.map((c) => [c, d(prev?.status[c], cur.status[c])])) as Record<StatusClass, number>,
    bytesIn: d(prev?.bytesIn, cur.bytesIn),
    bytesOut: d(prev?.bytesOut, cur.bytesOut),
  };
}

/** The start of the UTC minute `t` falls in, as the protocol writes it. */
export function minuteOf(t: Date): string {
  return new Date(Math.floor(t.getTime() / 60_000) * 60_000).toISOString();
}

const cap = (n: number, max: number) => Math.min(Math.max(0, Math.floor(n)), max);

export interface AnalyticsOptions {
  /** Asks the serving worker (master CLI `@1 show info` / `@1 show stat`). */
  command(cmd: string): Promise<string>;
  /** The domains this server serves now (the latest snapshot's). */
  domains(): readonly string[];
  /** The custom rules of the latest snapshot, by id (none: the hits table is not read). */
  ruleIds?(): ReadonlySet<string>;
  /** Sends a batch; false while the service is unreachable (the batch is kept then). */
  send(batch: AnalyticsBatchPayload): boolean;
  now?: () => Date;
  /** Between readings (default 60 s). */
  intervalMs?: number;
  /** Batches kept while the service is away (default AGENT_LIMITS.bufferedAnalytics); the oldest go first. */
  maxBuffered?: number;
  log?: (level: 'info' | 'warn' | 'error', msg: string) => void;
  /** Every `show stat` read, to whoever else needs it (origin health: origins.ts). */
  onStat?: (csv: string) => void;
}

/**
 * Traffic analytics of one shield server: every interval it reads HAProxy's counters per domain
 * backend, turns them into deltas (a reload or restart resets them: see counterDelta; a new
 * worker pid resets the baseline too) and ships them with the WAF's blocks by reason counted
 * since the last batch, as one analytics/batch. Batches the service cannot take are kept (the
 * last maxBuffered) and sent, oldest first, once it is back.
 */
export class AnalyticsCollector {
  private readonly now: () => Date;
  private intervalMs: number;
  private readonly defaultIntervalMs: number;
  private readonly maxBuffered: number;
  private prev = new Map<string, BackendCounters>();
  /** The hits table's counts at the last reading (custom-rules.ts HITS_TABLE), by key. */
  private prevHits = new Map<string, number>();
  private pid: number | undefined;
  private blocks = new Map<string, Map<WafReason, number>>();
  /** Staged rollout: this server's revision bakes, so every reading is sent, traffic or not. */
  private baking = false;
  /** Latency samples since the last reading, by backend name (countLatency). */
  private latency = new Map<string, number[]>();
  private intervalStart: Date;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  readonly buffer: AnalyticsBatchPayload[] = [];
  /** Batches dropped because the buffer was full. */
  droppedBatches = 0;

  constructor(private readonly options: AnalyticsOptions) {
    this.now = options.now ?? (() => new Date());
    this.intervalMs = options.intervalMs ?? ANALYTICS_LIMITS.intervalMs;
    this.defaultIntervalMs = this.intervalMs;
    this.maxBuffered = options.maxBuffered ?? AGENT_LIMITS.bufferedAnalytics;
    this.intervalStart = this.now();
  }

  /** Every parsed WAF event, before the daily cap on stored events: blocked ones are counted. */
  countEvent(e: WafEventItem): void {
    if (e.blocked === false) return;
    const domain = e.domain.toLowerCase();
    let reasons = this.blocks.get(domain);
    if (!reasons) {
      if (this.blocks.size >= AGENT_LIMITS.analyticsDomains) return;
      this.blocks.set(domain, (reasons = new Map<WafReason, number>()));
    }
    reasons.set(e.reason, (reasons.get(e.reason) ?? 0) + 1);
  }

  /**
   * A latency sample HAProxy logged (events.ts), counted in its backend's histogram
   * (LATENCY_BUCKETS_MS); the next batch gives it to the backend's domain.
   */
  countLatency(sample: { backend: string; ms: number }): void {
    let counts = this.latency.get(sample.backend);
    if (!counts) {
      if (this.latency.size >= AGENT_LIMITS.analyticsDomains) return;
      this.latency.set(sample.backend, (counts = new Array<number>(LATENCY_BUCKETS_MS.length + 1).fill(0)));
    }
    counts[latencyBucket(sample.ms)]! += 1;
  }

  /** Readings every interval, aligned to its multiples of wall time (each minute's start for 60 s). */
  start(fresh = true): void {
    if (fresh) this.intervalStart = this.now();
    const schedule = () => {
      const t = this.now().getTime();
      const wait = this.intervalMs - (t % this.intervalMs) + Math.min(500, this.intervalMs / 10);
      this.timer = setTimeout(() => {
        void this.tick().finally(() => this.timer && schedule());
      }, wait);
      this.timer.unref();
    };
    schedule();
  }

  /**
   * Staged rollout: a canary whose revision bakes reports every `seconds` (the snapshot's
   * reportSeconds); undefined goes back to the configured interval. A running schedule restarts.
   */
  setReportInterval(seconds: number | undefined): void {
    this.baking = seconds !== undefined;
    const ms = seconds === undefined ? this.defaultIntervalMs : Math.min(seconds * 1000, this.defaultIntervalMs);
    if (ms === this.intervalMs) return;
    this.intervalMs = ms;
    if (this.timer) {
      this.stop();
      this.start(false);
    }
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** One reading: the batch of the interval just ended, sent or kept. */
  tick(): Promise<void> {
    this.running ??= this.read().finally(() => (this.running = undefined));
    return this.running;
  }

  private async read(): Promise<void> {
    let stats: Map<string, BackendCounters> | undefined;
    let hits: Map<string, number> | undefined;
    const ruleIds = this.options.ruleIds?.() ?? new Set<string>();
    try {
      const pid = parseInfoPid(await this.options.command('@1 show info'));
      const csv = await this.options.command('@1 show stat');
      if (pid !== undefined && pid !== this.pid) {
        // A new worker (reload or restart): its counters began at 0.
        this.prev = new Map();
        this.prevHits = new Map();
        this.pid = pid;
      }
      stats = parseStatCsv(csv);
      this.options.onStat?.(csv);
    } catch (err) {
      this.options.log?.('warn', `analytics: reading HAProxy's counters failed: ${(err as Error).message}`);
    }
    // Apart: a worker still running a configuration from before the first rule has no such table.
    if (stats && ruleIds.size > 0) {
      try {
        hits = parseRuleHits(await this.options.command(`@1 show table ${HITS_TABLE}`));
      } catch (err) {
        this.options.log?.('warn', `analytics: reading the hits of custom rules failed: ${(err as Error).message}`);
      }
    }
    const start = this.intervalStart;
    this.intervalStart = this.now();
    const domains = new Map<string, AnalyticsDomain>();
    const entry = (domain: string): AnalyticsDomain | undefined => {
      let d = domains.get(domain);
      if (!d && domains.size < AGENT_LIMITS.analyticsDomains) {
        d = { domain, requests: 0, status: { '1xx': 0, '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0, other: 0 }, bytesIn: 0, bytesOut: 0, blocked: {} };
        domains.set(domain, d);
      }
      return d;
    };
    const latency = this.latency;
    this.latency = new Map();
    if (latency.size > 0) {
      for (const domain of this.options.domains()) {
        const counts = latency.get(backendName(domain));
        const d = counts && entry(domain.toLowerCase());
        if (d) d.latency = counts.map((n) => cap(n, AGENT_LIMITS.analyticsRequests));
      }
    }
    if (stats) {
      const next = new Map<string, BackendCounters>();
      for (const domain of this.options.domains()) {
        const name = backendName(domain);
        const cur = stats.get(name);
        if (!cur) continue;
        next.set(name, cur);
        const delta = counterDelta(this.prev.get(name), cur);
        if (delta.requests === 0 && delta.bytesIn === 0 && delta.bytesOut === 0 && STATUS_CLASSES.every((c) => delta.status[c] === 0)) continue;
        const d = entry(domain.toLowerCase());
        if (!d) continue;
        d.requests = cap(delta.requests, AGENT_LIMITS.analyticsRequests);
        for (const c of STATUS_CLASSES) d.status[c] = cap(delta.status[c], AGENT_LIMITS.analyticsRequests);
        d.bytesIn = cap(delta.bytesIn, AGENT_LIMITS.analyticsBytes);
        d.bytesOut = cap(delta.bytesOut, AGENT_LIMITS.analyticsBytes);
      }
      this.prev = next;
    }
    const blocks = this.blocks;
    this.blocks = new Map();
    for (const [domain, reasons] of blocks) {
      const d = entry(domain);
      if (!d) continue;
      for (const [reason, n] of reasons) d.blocked[reason] = cap(n, AGENT_LIMITS.analyticsRequests);
    }
    const rules = hits ? this.ruleHits(hits, ruleIds) : [];
    // A baking canary reports every interval, traffic or not: the service judges its bake by them.
    if (domains.size > 0 || rules.length > 0 || this.baking) this.enqueue({ minute: minuteOf(start), domains: [...domains.values()], ...(rules.length ? { rules } : {}) });
    this.flush();
  }

  /**
   * The hits of each rule since the last reading: a key's count that went down belongs to a new
   * table (counterDelta's rule), and each key credits its log rule and its deciding rule. Only the
   * snapshot's rules are reported.
   */
  private ruleHits(hits: Map<string, number>, ruleIds: ReadonlySet<string>): NonNullable<AnalyticsBatchPayload['rules']> {
    const byRule = new Map<string, number>();
    for (const [key, n] of hits) {
      const prev = this.prevHits.get(key);
      const delta = prev === undefined || n < prev ? n : n - prev;
      if (delta === 0) continue;
      for (const id of rulesOfHitKey(key)) if (ruleIds.has(id)) byRule.set(id, (byRule.get(id) ?? 0) + delta);
    }
    this.prevHits = hits;
    return [...byRule].slice(0, AGENT_LIMITS.analyticsRules).map(([ruleId, n]) => ({ ruleId, hits: cap(n, AGENT_LIMITS.analyticsRequests) }));
  }

  private enqueue(batch: AnalyticsBatchPayload): void {
    this.buffer.push(batch);
    while (this.buffer.length > this.maxBuffered) {
      this.buffer.shift();
      this.droppedBatches++;
    }
  }

  /** Sends what is kept, oldest first, while the service takes it. */
  flush(): void {
    while (this.buffer.length > 0) {
      if (!this.options.send(this.buffer[0]!)) return;
      this.buffer.shift();
    }
  }
}
