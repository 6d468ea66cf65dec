import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { AGENT_LIMITS, CLOSE, HOST_PROBLEM, parseServiceMessage, PROTOCOL_VERSION, type AgentMessage, type ServerSnapshot, type ServiceMessage } from '@rampart/protocol';
import { RAMPART_VERSION } from '@rampart/protocol/version';
import { HEALTH_SOCKET, VERIFIED_CRAWLERS_MAP, type RenderOptions } from '@rampart/proxy';
import type { Server } from 'node:http';
import WebSocket from 'ws';
import { Applier, type ApplyResult } from './apply.js';
import { reconnectBackoff, RESTART_SPREAD_MS, systemClock, type Backoff, type Clock } from './backoff.js';
import { AcmeIssuer, directoryUrl, type CertificateIssuer } from './certificates/issuer.js';
import { CertificateManager, type CertificateLink, type CertStatusReport } from './certificates/manager.js';
import { makeResolver, type ResolveFn } from './certificates/resolve.js';
import { ChallengeResponder } from './certificates/responder.js';
import { CertificateStore } from './certificates/store.js';
import { CrawlerVerifier, crawlerDns, RuntimeCrawlerMap, type CrawlerDns } from './crawlers.js';
import { AnalyticsCollector } from './analytics.js';
import { EventCollector } from './events.js';
import { countriesOf, ensureCountryMap, ensureCountrySubset } from './geo.js';
import { HaproxyProcess, type ConfigError } from './haproxy.js';
import { bindFailures, explainBindFailure } from './port-holder.js';
import { AgentMetrics, fetchHaproxyMetrics } from './metrics.js';
export { AgentMetrics, DEFAULT_METRICS_PORT, fetchHaproxyMetrics } from './metrics.js';

/** The version the agent's hello says: the product's (the root package.json). */
export const AGENT_VERSION = RAMPART_VERSION;

export interface AgentOptions {
  serverUrl: string;
  token: string;
  dataDir: string;
  httpPort: number;
  httpsPort: number;
  bindAddress?: string;
  haproxyBin: string;
  /** Loopback UDP port for HAProxy's WAF event log (default: the one used last time, else any free one). */
  eventsPort?: number;
  /** HAProxy worker threads (default: HAProxy's own, one per CPU). */
  nbthread?: number;
  /** A CIDR -> country map to use instead of the one generated from the bundled data set. */
  countryMap?: string;
  /** ACME directory URL, or `production`/`staging` for Let's Encrypt's (default production). */
  acmeDirectory?: string;
  acmeEmail?: string;
  /**
   * DNS server (HOST:PORT) for the check that a domain points here and for verifying search
   * crawlers' addresses (default: the system's resolver).
   */
  resolver?: string;
  /** Renew certificates this many days before they expire (30). */
  renewBeforeDays?: number;
  /** Proxy health check interval (10 s). */
  healthIntervalMs?: number;
  /** Serve Prometheus metrics at /metrics on this port (src/metrics.ts); 0 or absent: not served. */
  metricsPort?: number;
  /** The metrics listener's address (default 127.0.0.1). */
  metricsHost?: string;
  /** Between traffic analytics batches (60 s; tests shorten it). */
  analyticsIntervalMs?: number;
  /** Without a message or ping from the service for this long, the connection is dropped. */
  silenceMs?: number;
  backoff?: Backoff;
  clock?: Clock;
  /** Stand-ins for unit tests; the real ones otherwise. */
  issuer?: CertificateIssuer;
  resolve?: ResolveFn;
  crawlerDns?: () => CrawlerDns;
  log?: (level: 'info' | 'warn' | 'error', msg: string) => void;
}

type Report = Extract<AgentMessage, { type: 'status/report' }>['payload'];
type Reply = Extract<ServiceMessage, { type: 'acme/slot-reply' | 'acme/challenge-reply' }>['payload'];

/** Everything the agent's loops decide on, in one place. */
export interface AgentLoopState {
  connection: 'connecting' | 'connected' | 'waiting' | 'stopped';
  /** The latest snapshot the service sent: what this server should run. */
  desired: ServerSnapshot | undefined;
  /** A snapshot waiting for the apply in progress (latest wins). */
  queued: ServerSnapshot | undefined;
  applying: Promise<void> | undefined;
}

const REQUEST_TIMEOUT_MS = 10_000;

/** The agent could not start because of its host (a port taken, a permission): the message says which and what to do. */
export class HostProblemError extends Error {}

/**
 * The shield-server agent: owns one HAProxy, keeps an outbound WebSocket to the service with
 * capped, jittered backoff, applies one snapshot at a time (the latest wins), keeps each domain's
 * certificate (ACME HTTP-01), and restarts HAProxy on its last-known-good configuration if it
 * dies. It keeps serving while the service is away. The applied revision lives in the applier's
 * state, the certificates in the certificate manager's.
 */
export class Agent {
  readonly proxy: HaproxyProcess;
  readonly applier: Applier;
  readonly events: EventCollector;
  /** Traffic analytics: HAProxy's counters and the WAF's blocks, one analytics/batch per interval. */
  readonly analytics: AnalyticsCollector;
  /** Verifies the addresses of claimed search crawlers; crawlerMap keeps HAProxy's map in step. */
  readonly crawlers: CrawlerVerifier;
  readonly crawlerMap: RuntimeCrawlerMap;
  private eventsSecret: string;
  readonly certificates: CertificateManager;
  /** Prometheus metrics: applies, rollbacks, certificate expiry, events dropped by the cap; HAProxy's exporter after them. */
  readonly metrics: AgentMetrics;
  private metricsServer: Server | undefined;
  readonly responder: ChallengeResponder;
  readonly state: AgentLoopState = { connection: 'connecting', desired: undefined, queued: undefined, applying: undefined };
  private readonly renderOptions: RenderOptions;
  private readonly store: CertificateStore;
  private ws: WebSocket | undefined;
  private readonly reports: Report[] = [];
  private readonly requests = new Map<string, { resolve(r: Reply): void; reject(e: Error): void }>();
  private readonly controller = new AbortController();
  private healthTimer: NodeJS.Timeout | undefined;
  private restarting = false;
  /**
   * Whether HAProxy passed the last proxy health check (running and answering on its health
   * socket), sent with every heartbeat: the service's health cycle counts a server that is not
   * serving as unhealthy. Undefined before the first check.
   */
  private proxyServing: boolean | undefined;
  /** Why HAProxy cannot run on this host (a bind failure, explained), while that lasts: reported once, and the reason of a failed apply. */
  private hostProblem: string | undefined;
  private readonly backoff: Backoff;
  private readonly clock: Clock;
  private readonly log: NonNullable<AgentOptions['log']>;

  constructor(private readonly options: AgentOptions) {
    const dataDir = resolve(options.dataDir);
    const runDir = join(dataDir, 'run');
    const configRoot = join(dataDir, 'haproxy');
    this.clock = options.clock ?? systemClock;
    this.log = options.log ?? ((level, msg) => process.stderr.write(`${new Date().toISOString()} ${level} ${msg}\n`));
    this.proxy = new HaproxyProcess(options.haproxyBin, join(configRoot, 'current', 'haproxy.cfg'), runDir, this.clock);
    this.renderOptions = {
      httpBind: { address: options.bindAddress ?? '*', port: options.httpPort },
      httpsPort: options.httpsPort,
      runDir,
      ...(options.countryMap ? { countryMap: resolve(options.countryMap) } : {}),
      ...(options.nbthread ? { nbthread: options.nbthread } : {}),
    };
    this.crawlerMap = new RuntimeCrawlerMap({
      command: (cmd) => this.proxy.masterCommand(cmd),
      mapPath: async () => {
        const dir = await this.applier.runningDir();
        return dir === undefined ? undefined : join(dir, VERIFIED_CRAWLERS_MAP);
      },
      log: this.log,
    });
    this.crawlers = new CrawlerVerifier({ dns: options.crawlerDns ?? crawlerDns(options.resolver), sink: this.crawlerMap, clock: this.clock, log: this.log });
    this.applier = new Applier(options.haproxyBin, this.proxy, { configRoot, runDir, stateFile: join(dataDir, 'state.json') }, this.renderOptions, () => this.crawlers.entries());
    // Event lines must carry this secret, which only the agent and its HAProxy configuration
    // know: any other local process can send UDP to the listener, but not forge an event. Kept
    // with the ports in the state file (0600, data directory 0700), so the last-known-good
    // configuration HAProxy boots with still names it.
    this.eventsSecret = randomBytes(16).toString('hex');
    this.events = new EventCollector(
      (events) => this.send({ type: 'events/batch', payload: { events } }),
      undefined,
      undefined,
      () => this.eventsSecret,
      (ip, crawlerId) => this.crawlers.claim(ip, crawlerId),
      (event) => this.analytics.countEvent(event),
    );
    this.analytics = new AnalyticsCollector({
      command: (cmd) => this.proxy.masterCommand(cmd),
      domains: () => this.state.desired?.domains.map((d) => d.domain) ?? [],
      ruleIds: () => new Set(this.state.desired?.customRules?.map((r) => r.id)),
      send: (batch) => this.send({ type: 'analytics/batch', payload: batch }),
      now: () => new Date(this.clock.now()),
      ...(options.analyticsIntervalMs !== undefined ? { intervalMs: options.analyticsIntervalMs } : {}),
      log: this.log,
    });
    this.backoff = options.backoff ?? reconnectBackoff({ clock: this.clock });
    this.store = new CertificateStore(join(dataDir, 'certs'));
    this.responder = new ChallengeResponder(() => this.clock.now());
    this.certificates = new CertificateManager({
      store: this.store,
      issuer:
        options.issuer ??
        new AcmeIssuer({ directoryUrl: directoryUrl(options.acmeDirectory), email: options.acmeEmail, accountFile: join(dataDir, 'acme', 'account.json') }),
      responder: this.responder,
      resolve: options.resolve ?? makeResolver(options.resolver),
      link: this.certificateLink(),
      onServedChanged: () => !this.controller.signal.aborted && this.state.desired && this.submit(this.state.desired),
      clock: this.clock,
      ...(options.renewBeforeDays !== undefined ? { renewBeforeMs: options.renewBeforeDays * 86_400_000 } : {}),
      log: this.log,
    });
    this.metrics = new AgentMetrics({
      eventsDropped: () => this.events.dropped,
      certificates: () => this.certificates.statuses(),
      haproxy: () => fetchHaproxyMetrics(join(runDir, HEALTH_SOCKET)),
      now: () => this.clock.now(),
    });
  }

  async start(): Promise<void> {
    await mkdir(resolve(this.options.dataDir), { recursive: true, mode: 0o700 });
    await this.applier.loadState();
    await this.store.load();
    // Both ports are part of the configuration: keep the ones the last-known-good config names.
    const saved = this.applier.state;
    const eventsPort = await this.events.listen(this.options.eventsPort ?? saved.eventsPort ?? 0).catch(() => this.events.listen(0));
    const acmePort = await this.responder.listen(saved.acmePort ?? 0).catch(() => this.responder.listen(0));
    this.renderOptions.eventsPort = saved.eventsPort = eventsPort;
    if (saved.eventsSecret && /^[0-9a-f]{32}$/.test(saved.eventsSecret)) this.eventsSecret = saved.eventsSecret;
    this.renderOptions.eventsSecret = saved.eventsSecret = this.eventsSecret;
    this.renderOptions.acmePort = saved.acmePort = acmePort;
    await this.applier.ensureBootConfig('boot');
    const mark = this.proxy.outputMark();
    await this.startProxy();
    // A listener HAProxy cannot open (a port another process holds) is the operator's to fix: fail now, saying which.
    const problem = this.proxy.running ? undefined : await this.bindProblem(mark);
    if (problem) {
      this.events.close();
      await this.responder.close();
      throw new HostProblemError(problem);
    }
    this.proxy.on('exit', ({ code, signal }) => void this.onProxyDied(`HAProxy exited (${signal ?? `code ${code}`})`));
    this.healthTimer = setInterval(() => void this.checkProxy(), this.options.healthIntervalMs ?? 10_000);
    this.analytics.start();
    this.certificates.start(this.controller.signal);
    void this.crawlers.start(this.controller.signal);
    if (this.options.metricsPort) {
      // Metrics are not worth failing the agent for: a port in use is a warning.
      await this.metrics.listen(this.options.metricsPort, this.options.metricsHost).then(
        ({ server, port }) => {
          this.metricsServer = server;
          this.log('info', `metrics at http://${this.options.metricsHost ?? '127.0.0.1'}:${port}/metrics`);
        },
        (err) => this.log('warn', `metrics not served on port ${this.options.metricsPort}: ${String(err)}`),
      );
    }
    void this.connectLoop();
  }

  /** The metrics listener's port, once listening. */
  get metricsPort(): number | undefined {
    const a = this.metricsServer?.address();
    return typeof a === 'object' && a ? a.port : undefined;
  }

  async stop(): Promise<void> {
    this.controller.abort();
    this.state.connection = 'stopped';
    if (this.healthTimer) clearInterval(this.healthTimer);
    this.analytics.stop();
    this.metricsServer?.close();
    this.metricsServer?.closeAllConnections();
    this.ws?.terminate();
    this.events.close();
    // The certificate loop is not waited for: an order in flight cannot be cancelled (the ACME
    // client polls the authority for up to minutes), and stopping must be prompt. The loop ends
    // at its next step; an order that completes meanwhile is stored, and served on the next start.
    await this.state.applying;
    await this.responder.close();
    await this.proxy.stop();
  }

  private async startProxy(): Promise<void> {
    this.proxy.start();
    const hash = this.applier.state.hash;
    if (!hash) return;
    this.proxyServing = await this.proxy.waitForHash(hash, 15_000);
    if (!this.proxyServing) this.log('warn', 'HAProxy did not answer on its health socket after start');
    // A fresh worker has the map file of its configuration: bring it to what is verified now.
    else void this.crawlerMap.sync(() => this.crawlers.entries());
  }

  /** The bind failures HAProxy printed since the mark, explained (port, holder, what to do); undefined when none. */
  private async bindProblem(mark: number): Promise<string | undefined> {
    if (!this.proxy.running) await Promise.race([this.proxy.outputComplete(), this.clock.sleep(1000)]);
    const failures = bindFailures(this.proxy.alertsSince(mark).map((e) => e.message));
    if (failures.length === 0) return undefined;
    const flag = (port: number) => (port === this.options.httpsPort && port !== this.options.httpPort ? '--https-port' : '--http-port');
    const texts = await Promise.all(failures.map((f) => explainBindFailure(f, flag(f.port))));
    return `${HOST_PROBLEM}${[...new Set(texts)].join('; ')}`;
  }

  /** Apply errors with HAProxy's bind failures explained as the host problems they are. */
  private async explainErrors(errors: ConfigError[]): Promise<ConfigError[]> {
    return Promise.all(
      errors.map(async (e) => {
        const [f] = bindFailures([e.message]);
        if (!f) return e;
        const flag = f.port === this.options.httpsPort && f.port !== this.options.httpPort ? '--https-port' : '--http-port';
        return { line: null, message: `${HOST_PROBLEM}${await explainBindFailure(f, flag)}` };
      }),
    );
  }

  private async onProxyDied(reason: string): Promise<void> {
    if (this.controller.signal.aborted || this.restarting) return;
    this.restarting = true;
    this.proxyServing = false;
    try {
      this.log('warn', `${reason}; restarting on the last-known-good configuration`);
      await this.proxy.stop();
      const mark = this.proxy.outputMark();
      await this.startProxy();
      const problem = this.proxy.running ? undefined : await this.bindProblem(mark);
      if (problem) {
        // Said once while it lasts (the health check tries again every interval); one notification.
        if (problem !== this.hostProblem) {
          this.log('error', problem);
          this.report({ kind: 'server_error', message: `${problem}. HAProxy is not serving; the agent starts it again once the port is free` });
        }
        this.hostProblem = problem;
        return;
      }
      const was = this.hostProblem;
      this.hostProblem = undefined;
      if (!was) this.report({ kind: 'proxy_crash', message: `${reason}; the agent restarted it on the last-known-good configuration` });
      // Serving again: the revision a host problem kept from applying is applied now.
      if (this.proxy.running && this.state.desired && this.state.desired.revision !== this.applier.state.revision) this.submit(this.state.desired);
    } finally {
      this.restarting = false;
    }
  }

  /** Every health interval: HAProxy must be running and answering on its health socket. */
  private async checkProxy(): Promise<void> {
    if (this.controller.signal.aborted || this.restarting || this.state.applying) return;
    if (!this.proxy.running) return this.onProxyDied('HAProxy is not running');
    const answered = (await this.proxy.health(2000)) !== undefined;
    if (!answered && !this.state.applying) return this.onProxyDied('HAProxy stopped answering');
    if (answered) this.proxyServing = true;
  }

  /** The heartbeat: the running revision and, once checked, whether HAProxy is serving. */
  private heartbeat(): AgentMessage {
    return { type: 'agent/heartbeat', payload: { runningRevision: this.applier.state.revision, ...(this.proxyServing === undefined ? {} : { proxyServing: this.proxyServing }) } };
  }

  private report(r: Report): void {
    if (!this.send({ type: 'status/report', payload: r })) {
      this.reports.push(r); // kept until the service is back
      if (this.reports.length > AGENT_LIMITS.bufferedReports) this.reports.shift();
    }
  }

  private send(m: AgentMessage): boolean {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(m));
    return true;
  }

  /** One question to the service, answered by a reply with the same requestId. */
  private request(m: Extract<AgentMessage, { type: 'acme/slot-request' | 'acme/challenge-publish' }>): Promise<Reply> {
    return new Promise((resolveReq, rejectReq) => {
      const id = m.payload.requestId;
      const timer = setTimeout(() => done.reject(new Error('the service did not answer in time')), REQUEST_TIMEOUT_MS);
      const done = {
        resolve: (r: Reply) => (clearTimeout(timer), this.requests.delete(id), resolveReq(r)),
        reject: (e: Error) => (clearTimeout(timer), this.requests.delete(id), rejectReq(e)),
      };
      this.requests.set(id, done);
      if (!this.send(m)) done.reject(new Error('not connected to the service'));
    });
  }

  private certificateLink(): CertificateLink {
    return {
      requestSlot: async (domain) => {
        const r = await this.request({ type: 'acme/slot-request', payload: { requestId: randomUUID(), domain } });
        return 'granted' in r ? { granted: r.granted, message: r.message } : { granted: false, message: 'unexpected answer from the service' };
      },
      relayChallenge: async (domain, token, keyAuthorization, action) => {
        try {
          await this.request({ type: 'acme/challenge-publish', payload: { requestId: randomUUID(), domain, token, keyAuthorization, action } });
        } catch (err) {
          // This server still answers; only the domain's other servers may not.
          this.log('warn', `challenge for ${domain} not relayed to the domain's other servers: ${(err as Error).message}`);
        }
      },
      report: (s: CertStatusReport) => void this.send({ type: 'cert/status', payload: s }),
    };
  }

  /** Queues a snapshot; a newer one replaces any that has not started (latest wins). */
  submit(snapshot: ServerSnapshot): void {
    this.state.queued = snapshot;
    this.state.applying ??= this.drain();
  }

  private async drain(): Promise<void> {
    try {
      await this.drainQueued();
    } finally {
      this.state.applying = undefined;
      // a snapshot that arrived while the last apply was finishing is not left waiting
      if (this.state.queued) this.state.applying = this.drain();
    }
  }

  private async drainQueued(): Promise<void> {
    while (this.state.queued) {
      const snapshot = this.state.queued;
      this.state.queued = undefined;
      let result: ApplyResult;
      try {
        const countries = countriesOf(snapshot);
        if ((countries === 'all' || countries.length) && !this.options.countryMap) {
          const geo = join(resolve(this.options.dataDir), 'geo');
          this.renderOptions.countryMap = countries === 'all' ? await ensureCountryMap(geo) : await ensureCountrySubset(geo, countries);
        }
        this.renderOptions.certificates = this.certificates.served(snapshot);
        result = await this.applier.apply(snapshot);
        if (!result.ok) {
          // A failure whose cause is the host says so, whatever stage it showed at.
          const errors = !this.proxy.running && this.hostProblem ? [{ line: null, message: this.hostProblem }] : await this.explainErrors(result.errors);
          result = { ...result, errors };
        }
        // A new worker (or the restored one) has the map file rendered before it started: a
        // verification made since went to the previous worker, so the new one is brought in step.
        if (!(result.ok && result.skipped)) void this.crawlerMap.sync(() => this.crawlers.entries());
      } catch (err) {
        result = { ok: false, revision: snapshot.revision, stage: 'prepare', errors: [{ line: null, message: String(err) }] };
      }
      this.acknowledge(result);
    }
  }

  /** Acks the revision and reports a failure at the stage where it happened, truthfully. */
  private acknowledge(result: ApplyResult): void {
    this.metrics.applied(result);
    if (result.ok) {
      if (!result.skipped) this.log('info', `applied revision ${result.revision}`);
      this.send({ type: 'config/ack', payload: { revision: result.revision, ok: true, errors: [] } });
      return;
    }
    const detail = result.errors.map((e) => e.message).join('; ');
    this.log('error', `revision ${result.revision} failed at ${result.stage}: ${detail}`);
    // Within the channel's caps (the service closes the connection on a message past them).
    const errors = result.errors.slice(0, AGENT_LIMITS.ackErrors).map((e) => ({ line: e.line, message: e.message.slice(0, AGENT_LIMITS.ackErrorMessage) }));
    // The ack is the one notice of this failure (the service raises server_error from it, its
    // messages naming the stage and cause): no status/report besides, one cause, one notification.
    this.send({ type: 'config/ack', payload: { revision: result.revision, ok: false, errors } });
  }

  private onServiceMessage(m: ServiceMessage): void {
    switch (m.type) {
      case 'config/snapshot':
        this.state.desired = m.payload;
        this.certificates.update(m.payload);
        this.submit(m.payload);
        return;
      case 'acme/slot-reply':
      case 'acme/challenge-reply':
        this.requests.get(m.payload.requestId)?.resolve(m.payload);
        return;
      case 'acme/challenge': {
        // Another server of the domain is ordering: answer its validation too, for our own domains only.
        const { domain, token, keyAuthorization, action } = m.payload;
        if (!this.state.desired?.domains.some((d) => d.domain === domain && d.sslEnabled)) return;
        if (action === 'add') this.responder.add(domain, token, keyAuthorization, 'peer');
        else this.responder.remove(domain, token, 'peer');
        return;
      }
      case 'crawlers/ranges':
        // The owners' published crawler ranges: a claim from inside them is verified without DNS.
        this.crawlers.setAddressLists(m.payload.lists);
        return;
      case 'service/heartbeat':
        return;
    }
  }

  private async connectLoop(): Promise<void> {
    const signal = this.controller.signal;
    while (!signal.aborted) {
      this.state.connection = 'connecting';
      const { healthy, closeCode } = await this.connectOnce();
      if (signal.aborted) break;
      this.state.connection = 'waiting';
      if (healthy) this.backoff.reset();
      if (closeCode === CLOSE.restarting) {
        // Reconnect somewhere in the window, as the whole fleet does, not all in the same second.
        this.log('info', `the service is restarting: reconnecting at a random moment within ${RESTART_SPREAD_MS / 1000} s`);
        this.backoff.spread(RESTART_SPREAD_MS);
      }
      const wait = await this.backoff.wait(signal);
      this.log('info', `reconnected after waiting ${wait} ms`);
    }
  }

  /** One connection, until it closes: whether it reached a snapshot (a healthy connection), and its close code. */
  private connectOnce(): Promise<{ healthy: boolean; closeCode: number | undefined }> {
    return new Promise((resolveConn) => {
      let healthy = false;
      const ws = new WebSocket(this.options.serverUrl, { headers: { authorization: `Bearer ${this.options.token}` }, handshakeTimeout: 10_000 });
      this.ws = ws;
      const silence = this.options.silenceMs ?? 45_000;
      let lastHeard = Date.now();
      const beat = setInterval(() => {
        if (Date.now() - lastHeard > silence) return ws.terminate();
        this.send(this.heartbeat());
      }, Math.min(10_000, silence / 3));
      ws.on('open', () => {
        lastHeard = Date.now();
        this.state.connection = 'connected';
        // httpPort: where the service's health probe finds this HAProxy (HEALTH_PATH).
        this.send({ type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: AGENT_VERSION, runningRevision: this.applier.state.revision, httpPort: this.options.httpPort } });
        this.send(this.heartbeat()); // whether HAProxy serves, without waiting 10 s
        for (const r of this.reports.splice(0)) this.send({ type: 'status/report', payload: r });
        for (const s of this.certificates.statuses()) this.send({ type: 'cert/status', payload: s });
        this.events.flush();
        this.analytics.flush();
        this.certificates.wake(); // orders that waited for the service
        this.log('info', 'connected to the service');
      });
      ws.on('ping', () => (lastHeard = Date.now()));
      ws.on('message', (data) => {
        lastHeard = Date.now();
        const parsed = parseServiceMessage(data.toString());
        if (!parsed.ok) return this.log('warn', `ignored an invalid message: ${parsed.error}`);
        if (parsed.message.type === 'config/snapshot') healthy = true;
        this.onServiceMessage(parsed.message);
      });
      ws.on('unexpected-response', (_req, res) => {
        this.log('error', `the service refused the connection: HTTP ${res.statusCode}${res.statusCode === 401 ? ' (wrong, regenerated or decommissioned token)' : ''}`);
        ws.terminate();
      });
      ws.on('close', (code, reason) => {
        clearInterval(beat);
        for (const r of [...this.requests.values()]) r.reject(new Error('the connection to the service closed'));
        if (code === CLOSE.protocolMismatch) {
          // The control plane's reason names its version; this line names ours too, whatever was cut.
          this.log('error', `the service refused this agent (rampart ${AGENT_VERSION}, protocol ${PROTOCOL_VERSION}): ${reason.toString()}`);
        } else if (code === CLOSE.decommissioned || code === CLOSE.tokenRevoked) {
          this.log('error', `the service closed the connection: ${reason.toString()}`);
        }
        resolveConn({ healthy, closeCode: code });
      });
      ws.on('error', (err) => this.log('warn', `connection error: ${err.message}`));
    });
  }
}
