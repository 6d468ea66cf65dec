import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { CLOSE, parseServiceMessage, PROTOCOL_VERSION, type AgentMessage, type ServerSnapshot } from '@rampart/protocol';
import WebSocket from 'ws';
import { Applier, type ApplyResult } from './apply.js';
import { Backoff, delay } from './backoff.js';
import { EventCollector } from './events.js';
import { ensureCountrySubset } from './geo.js';
import { HaproxyProcess } from './haproxy.js';

export const AGENT_VERSION = '0.1.0';

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
  /** Proxy health check interval (docs/architecture.md: 10 s). */
  healthIntervalMs?: number;
  /** Without a message or ping from the service for this long, the connection is dropped. */
  silenceMs?: number;
  backoff?: Backoff;
  log?: (level: 'info' | 'warn' | 'error', msg: string) => void;
}

type Report = Extract<AgentMessage, { type: 'status/report' }>['payload'];

/**
 * The shield-server agent: owns one HAProxy, keeps an outbound WebSocket to the service with
 * capped, jittered backoff, applies one snapshot at a time (the latest wins), and restarts HAProxy
 * on its last-known-good configuration if it dies. It keeps serving while the service is away.
 */
export class Agent {
  readonly proxy: HaproxyProcess;
  readonly applier: Applier;
  readonly events: EventCollector;
  private readonly renderOptions: { httpBind: { address: string; port: number }; runDir: string; eventsPort?: number; nbthread?: number; countryMap?: string };
  private ws: WebSocket | undefined;
  private pending: ServerSnapshot | undefined;
  private applying: Promise<void> | undefined;
  private readonly reports: Report[] = [];
  private readonly controller = new AbortController();
  private healthTimer: NodeJS.Timeout | undefined;
  private restarting = false;
  private readonly backoff: Backoff;
  private readonly log: NonNullable<AgentOptions['log']>;

  constructor(private readonly options: AgentOptions) {
    const dataDir = resolve(options.dataDir);
    const runDir = join(dataDir, 'run');
    const configRoot = join(dataDir, 'haproxy');
    this.proxy = new HaproxyProcess(options.haproxyBin, join(configRoot, 'current', 'haproxy.cfg'), runDir);
    this.renderOptions = {
      httpBind: { address: options.bindAddress ?? '*', port: options.httpPort },
      runDir,
      ...(options.countryMap ? { countryMap: resolve(options.countryMap) } : {}),
      ...(options.nbthread ? { nbthread: options.nbthread } : {}),
    };
    this.applier = new Applier(options.haproxyBin, this.proxy, { configRoot, runDir, stateFile: join(dataDir, 'state.json') }, this.renderOptions);
    this.events = new EventCollector((events) => this.send({ type: 'events/batch', payload: { events } }));
    this.backoff = options.backoff ?? new Backoff(1000, 60_000);
    this.log = options.log ?? ((level, msg) => process.stderr.write(`${new Date().toISOString()} ${level} ${msg}\n`));
  }

  async start(): Promise<void> {
    await mkdir(resolve(this.options.dataDir), { recursive: true, mode: 0o700 });
    await this.applier.loadState();
    // The events port is part of the configuration: keep the one the last-known-good config names.
    const port = await this.events.listen(this.options.eventsPort ?? this.applier.state.eventsPort ?? 0).catch(() => this.events.listen(0));
    this.renderOptions.eventsPort = port;
    this.applier.state.eventsPort = port;
    await this.applier.ensureBootConfig('boot');
    await this.startProxy();
    this.proxy.on('exit', ({ code, signal }) => void this.onProxyDied(`HAProxy exited (${signal ?? `code ${code}`})`));
    this.healthTimer = setInterval(() => void this.checkProxy(), this.options.healthIntervalMs ?? 10_000);
    void this.connectLoop();
  }

  async stop(): Promise<void> {
    this.controller.abort();
    if (this.healthTimer) clearInterval(this.healthTimer);
    this.ws?.terminate();
    this.events.close();
    await this.applying;
    await this.proxy.stop();
  }

  private async startProxy(): Promise<void> {
    this.proxy.start();
    const hash = this.applier.state.hash;
    if (hash && !(await this.proxy.waitForHash(hash, 15_000))) this.log('warn', 'HAProxy did not answer on its health socket after start');
  }

  private async onProxyDied(reason: string): Promise<void> {
    if (this.controller.signal.aborted || this.restarting) return;
    this.restarting = true;
    try {
      this.log('warn', `${reason}; restarting on the last-known-good configuration`);
      await this.proxy.stop();
      await this.startProxy();
      this.report({ kind: 'proxy_crash', message: `${reason}; the agent restarted it on the last-known-good configuration` });
    } finally {
      this.restarting = false;
    }
  }

  /** Every health interval: HAProxy must be running and answering on its health socket. */
  private async checkProxy(): Promise<void> {
    if (this.controller.signal.aborted || this.restarting || this.applying) return;
    if (!this.proxy.running) return this.onProxyDied('HAProxy is not running');
    if ((await this.proxy.health(2000)) === undefined && !this.applying) await this.onProxyDied('HAProxy stopped answering');
  }

  private report(r: Report): void {
    if (!this.send({ type: 'status/report', payload: r })) {
      this.reports.push(r); // kept until the service is back
      if (this.reports.length > 100) this.reports.shift();
    }
  }

  private send(m: AgentMessage): boolean {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(m));
    return true;
  }

  /** Queues a snapshot; a newer one replaces any that has not started (latest wins). */
  submit(snapshot: ServerSnapshot): void {
    this.pending = snapshot;
    this.applying ??= this.drain();
  }

  private async drain(): Promise<void> {
    try {
      await this.drainPending();
    } finally {
      this.applying = undefined;
      // a snapshot that arrived while the last apply was finishing is not left waiting
      if (this.pending) this.applying = this.drain();
    }
  }

  private async drainPending(): Promise<void> {
    while (this.pending) {
      const snapshot = this.pending;
      this.pending = undefined;
      let result: ApplyResult;
      try {
        const countries = snapshot.rules.filter((r) => r.type === 'block_country').map((r) => r.value);
        if (countries.length && !this.options.countryMap) {
          this.renderOptions.countryMap = await ensureCountrySubset(join(resolve(this.options.dataDir), 'geo'), countries);
        }
        result = await this.applier.apply(snapshot);
      } catch (err) {
        result = { ok: false, revision: snapshot.revision, stage: 'reload', errors: [{ line: null, message: String(err) }] };
      }
      if (result.ok) {
        if (!result.skipped) this.log('info', `applied revision ${result.revision}`);
        this.send({ type: 'config/ack', payload: { revision: result.revision, ok: true, errors: [] } });
      } else {
        this.log('error', `revision ${result.revision} failed at ${result.stage}: ${result.errors.map((e) => e.message).join('; ')}`);
        this.send({ type: 'config/ack', payload: { revision: result.revision, ok: false, errors: result.errors.slice(0, 50) } });
        if (result.stage === 'reload') {
          this.report({
            kind: 'proxy_reload_failed',
            message: `Reload to revision ${result.revision} failed and the previous configuration was restored: ${result.errors.map((e) => e.message).join('; ')}`.slice(0, 4000),
          });
        }
      }
    }
  }

  private async connectLoop(): Promise<void> {
    const signal = this.controller.signal;
    while (!signal.aborted) {
      const opened = await this.connectOnce();
      if (signal.aborted) break;
      if (opened) this.backoff.reset();
      const wait = this.backoff.next();
      this.log('info', `reconnecting in ${wait} ms`);
      await delay(wait, signal);
    }
  }

  /** One connection, until it closes; true when it reached a snapshot (a healthy connection). */
  private connectOnce(): Promise<boolean> {
    return new Promise((resolveConn) => {
      let healthy = false;
      const ws = new WebSocket(this.options.serverUrl, { headers: { authorization: `Bearer ${this.options.token}` }, handshakeTimeout: 10_000 });
      this.ws = ws;
      const silence = this.options.silenceMs ?? 45_000;
      let lastHeard = Date.now();
      const beat = setInterval(() => {
        if (Date.now() - lastHeard > silence) return ws.terminate();
        this.send({ type: 'agent/heartbeat', payload: { runningRevision: this.applier.state.revision } });
      }, Math.min(10_000, silence / 3));
      ws.on('open', () => {
        lastHeard = Date.now();
        this.send({ type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: AGENT_VERSION, runningRevision: this.applier.state.revision } });
        for (const r of this.reports.splice(0)) this.send({ type: 'status/report', payload: r });
        this.events.flush();
        this.log('info', 'connected to the service');
      });
      ws.on('ping', () => (lastHeard = Date.now()));
      ws.on('message', (data) => {
        lastHeard = Date.now();
        const parsed = parseServiceMessage(data.toString());
        if (!parsed.ok) return this.log('warn', `ignored an invalid message: ${parsed.error}`);
        if (parsed.message.type === 'config/snapshot') {
          healthy = true;
          this.submit(parsed.message.payload);
        }
      });
      ws.on('unexpected-response', (_req, res) => {
        this.log('error', `the service refused the connection: HTTP ${res.statusCode}${res.statusCode === 401 ? ' (wrong, regenerated or decommissioned token)' : ''}`);
        ws.terminate();
      });
      ws.on('close', (code, reason) => {
        clearInterval(beat);
        if (code === CLOSE.protocolMismatch || code === CLOSE.decommissioned || code === CLOSE.tokenRevoked) {
          this.log('error', `the service closed the connection: ${reason.toString()}`);
        }
        resolveConn(healthy);
      });
      ws.on('error', (err) => this.log('warn', `connection error: ${err.message}`));
    });
  }
}
