import { randomUUID } from 'node:crypto';
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { AGENT_LIMITS, AGENT_PATH, CLOSE, closeReasonText, helloVersions, parseAgentMessage, protocolRefusal, PROTOCOL_VERSION, type AgentMessage, type ServiceMessage } from '@rampart/protocol';
import { RAMPART_VERSION } from '@rampart/protocol/version';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { ServiceContext } from '../context.js';
import { sha256 } from '../crypto.js';
import { recordStatusReport, SERVER_NOTIFICATION_LIMIT } from '../services/notifications.js';
import { buildSnapshots } from '../services/snapshot.js';
import { CrawlerRangesRelay } from './crawler-ranges.js';
import { storeEvents } from '../services/events.js';
import { storeAnalytics } from '../services/analytics.js';
import { challengeRecipients, recordCertificateStatus, requestOrderSlot } from '../services/certificates.js';
import {
  expireAgentConnections,
  recordAgentConnected,
  recordAgentDisconnected,
  recordAgentRefused,
  recordProxyServing,
  releaseAgentConnections,
  serverOfToken,
  touchAgentConnections,
  type AgentConnection,
} from '../services/servers.js';
import { recordConfigAck } from '../services/revisions.js';
import { recordCanaryFailure, recordRolloutReport } from '../services/rollouts.js';
import type { AcmeChallenge, BusMessage } from '../bus.js';

export interface HubOptions {
  /**
   * How often the hub pings each agent and writes its connections' heartbeats to the database; a
   * connection silent for 3 intervals is dropped. Keep it well under AGENT_CONNECTION_TIMEOUT_MS.
   */
  heartbeatMs?: number;
  log?: { info(msg: string): void; warn(msg: string): void };
  /**
   * The change bus (serve.ts): challenges and replaced connections are published on it, so they
   * reach the agents of every process, this one included through onBusMessage. Absent, they are
   * delivered here directly.
   */
  publish?: (m: BusMessage) => Promise<void>;
  /** This process in agent_connections; random by default (a restarted process is a new one). */
  processId?: string;
  /** Told the time from a snapshot push to the agent's config/ack of it or a newer revision (src/metrics.ts). */
  metrics?: { pushAcked(seconds: number, ok: boolean): void } | undefined;
}

/** Why the service closed a connection itself; such a close raises no server_down. */
type CloseReason = 'decommissioned' | 'token' | 'replaced' | 'shutdown';

interface AgentConn {
  ws: WebSocket;
  serverId: string;
  accountId: string;
  tokenHash: string;
  ip: string;
  /** Unique per WebSocket connection: what agent_connections records. */
  connectionId: string;
  hello: boolean;
  lastSeen: number;
  closeReason: CloseReason | undefined;
  /** Messages of one agent are handled one after another, in the order sent (a later cert/status wins); the close comes last. */
  handling: Promise<void>;
  /** Notifications this agent caused that were over the limit, since the last log line about them. */
  dropped: { count: number; loggedAt: number };
  /** Messages read and not yet handled; past PENDING_MAX the socket is not read until they are. */
  pending: number;
  /** What the agent's hello said of its HTTP port, and its heartbeats last of its HAProxy (passed on to the service when it changes). */
  httpPort: number | undefined;
  proxyServing: boolean | undefined;
  /** The version the agent's hello said. */
  agentVersion?: string | undefined;
  /** The oldest snapshot sent and not yet acknowledged: its revision and when (performance.now()), for push-to-ack latency. */
  pushed?: { revision: number; at: number } | undefined;
}

const HELLO_TIMEOUT_MS = 10_000;
/** Backpressure: an agent sending faster than its messages are handled is not read meanwhile. */
const PENDING_MAX = 32;
/** On shutdown, how long agents get to answer the close before their sockets are cut. */
const SHUTDOWN_CLOSE_MS = 2_000;

function clientIp(req: IncomingMessage): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

/**
 * The agent hub, a transport: authenticates shield-server agents at the WebSocket upgrade (token
 * in the Authorization header, found by SHA-256), parses their messages through the protocol's
 * validators, hands each one to the service function that decides what it means, and pushes full
 * snapshots on hello and after every change. Which connection is a server's live one, and so its
 * status, is in the database (services/servers.ts), whichever process holds it.
 */
export class AgentHub {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: AGENT_LIMITS.messageBytes });
  /** Every open connection, by connection id (before hello too). */
  private readonly conns = new Map<string, AgentConn>();
  /** The connection of each server that said hello here, by server id. */
  private readonly live = new Map<string, AgentConn>();
  private readonly heartbeatMs: number;
  readonly processId: string;
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  private readonly dirty = new Set<string>();
  private flushing: Promise<void> | undefined;
  /** The search crawlers' published lists, as last read from the database. */
  private readonly crawlerRanges: CrawlerRangesRelay;

  constructor(
    private readonly ctx: ServiceContext,
    private readonly options: HubOptions = {},
  ) {
    this.heartbeatMs = options.heartbeatMs ?? 10_000;
    this.processId = options.processId ?? randomUUID();
    this.crawlerRanges = new CrawlerRangesRelay(ctx);
  }

  attach(server: Server): void {
    server.on('upgrade', (req, socket, head) => void this.onUpgrade(req, socket, head));
    this.timer = setInterval(() => this.sweep(), this.heartbeatMs);
    this.timer.unref();
  }

  /**
   * On shutdown: the agents of this process are no longer connected, without server_down. They
   * are told the service restarts (1012), so they reconnect spread over a window instead of all
   * at once; a socket that does not finish its close handshake in time is cut.
   */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    const all = [...this.conns.values()];
    const closed = all.map((c) => new Promise<void>((resolve) => (c.ws.readyState === c.ws.CLOSED ? resolve() : c.ws.once('close', () => resolve()))));
    for (const c of all) {
      c.closeReason = 'shutdown';
      c.ws.close(CLOSE.restarting, 'service restarting');
    }
    const cut = setTimeout(() => all.forEach((c) => c.ws.terminate()), SHUTDOWN_CLOSE_MS);
    await Promise.all(closed);
    clearTimeout(cut);
    this.wss.close();
    // A hello being recorded finishes first, so its row is released below.
    await Promise.all([...all.map((c) => c.handling), this.sweeping]);
    this.conns.clear();
    this.live.clear();
    await releaseAgentConnections(this.ctx, this.processId).catch((err) => this.options.log?.warn(`releasing agent connections failed: ${String(err)}`));
  }

  /** What the change bus delivers, whichever process published it. */
  onBusMessage(m: BusMessage): void {
    if (m.kind === 'servers-changed') this.serversChanged(m.ids);
    else if (m.kind === 'acme-challenge') this.relayChallenge(m.serverIds, m.challenge);
    else this.closeReplaced(m.connectionId);
  }

  /** The bus may have missed messages: every agent connected here gets its full snapshot. */
  resync(): void {
    for (const c of this.live.values()) {
      if (c.hello) void this.push(c).catch((err) => this.options.log?.warn(`snapshot push to ${c.serverId} failed: ${String(err)}`));
    }
  }

  /** After a commit: send each affected agent connected to this process its new snapshot (latest wins). */
  serversChanged(serverIds: readonly string[]): void {
    for (const id of serverIds) {
      const c = this.live.get(id);
      if (c?.hello) void this.push(c).catch((err) => this.options.log?.warn(`snapshot push to ${id} failed: ${String(err)}`));
    }
  }

  private async onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const refuse = (status: string) => {
      socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    };
    try {
      const path = (req.url ?? '').split('?')[0];
      if (path !== AGENT_PATH) return refuse('404 Not Found');
      const header = req.headers.authorization ?? '';
      const token = header.startsWith('Bearer ') ? header.slice(7) : '';
      if (!token || token.length > 200) return refuse('401 Unauthorized');
      const tokenHash = sha256(token);
      const server = await serverOfToken(this.ctx, tokenHash);
      if (!server) return refuse('401 Unauthorized');
      this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, server.id, server.accountId, tokenHash, clientIp(req)));
    } catch (err) {
      this.options.log?.warn(`agent upgrade failed: ${String(err)}`);
      refuse('503 Service Unavailable');
    }
  }

  private onConnection(ws: WebSocket, serverId: string, accountId: string, tokenHash: string, ip: string): void {
    const c: AgentConn = {
      ws,
      serverId,
      accountId,
      tokenHash,
      ip,
      connectionId: randomUUID(),
      hello: false,
      lastSeen: Date.now(),
      closeReason: undefined,
      handling: Promise.resolve(),
      dropped: { count: 0, loggedAt: 0 },
      pending: 0,
      httpPort: undefined,
      proxyServing: undefined,
    };
    this.conns.set(c.connectionId, c);
    const helloTimer = setTimeout(() => !c.hello && ws.close(CLOSE.invalidMessage, 'expected agent/hello'), HELLO_TIMEOUT_MS);
    ws.on('pong', () => (c.lastSeen = Date.now()));
    ws.on('message', (data, isBinary) => {
      if (ws.readyState !== ws.OPEN) return; // closing: nothing more is handled
      c.lastSeen = Date.now();
      if (isBinary) return ws.close(CLOSE.invalidMessage, 'binary messages are not part of the protocol');
      const text = messageText(data);
      // A hello's protocol is read before the message is validated: an agent of another protocol
      // may word the rest otherwise, and is still refused with both versions named.
      const claimed = c.hello ? undefined : helloVersions(text);
      if (claimed && claimed.protocol !== PROTOCOL_VERSION) return this.enqueue(c, () => this.refuseProtocol(c, claimed));
      const parsed = parseAgentMessage(text);
      if (!parsed.ok) return ws.close(CLOSE.invalidMessage, `invalid message: ${parsed.error}`.slice(0, 120));
      if (++c.pending >= PENDING_MAX) ws.pause();
      this.enqueue(c, async () => {
        try {
          await this.onMessage(c, parsed.message);
        } finally {
          if (--c.pending < PENDING_MAX / 2 && ws.isPaused) ws.resume();
        }
      });
    });
    ws.on('close', () => {
      clearTimeout(helloTimer);
      this.enqueue(c, () => this.onClose(c));
    });
    ws.on('error', (err: Error & { code?: string }) => {
      // A protocol error (a message over AGENT_LIMITS.messageBytes is WS_ERR_UNSUPPORTED_MESSAGE_LENGTH)
      // is already being closed by ws with its code (1009 for the size); anything else ends the socket.
      if (typeof err.code === 'string' && err.code.startsWith('WS_ERR_')) {
        this.options.log?.warn(`server ${c.serverId}: ${err.message}; connection closed`);
        return;
      }
      ws.terminate();
    });
  }

  private enqueue(c: AgentConn, step: () => Promise<void>): void {
    c.handling = c.handling.then(step).catch((err) => this.options.log?.warn(`agent message from server ${c.serverId} failed: ${String(err)}`));
  }

  /**
   * An agent whose protocol this control plane cannot speak: both sides are told both versions (the
   * agent in the close reason, the operator in the log and the server's agentRefused).
   */
  private async refuseProtocol(c: AgentConn, claimed: { protocol: number; agentVersion: string | null }): Promise<void> {
    if (c.closeReason || c.ws.readyState !== c.ws.OPEN) return;
    const reason = protocolRefusal(claimed, { protocol: PROTOCOL_VERSION, version: RAMPART_VERSION });
    this.options.log?.warn(`server ${c.serverId}: agent refused: ${reason}`);
    await recordAgentRefused(this.ctx, c.serverId, claimed.agentVersion, reason);
    c.ws.close(CLOSE.protocolMismatch, closeReasonText(reason));
  }

  private closeWith(c: AgentConn, reason: CloseReason, code: number, text: string): void {
    c.closeReason ??= reason;
    c.ws.close(code, text);
  }

  /** A newer connection of the same server was recorded (here or on another process): this one goes. */
  private closeReplaced(connectionId: string): void {
    const c = this.conns.get(connectionId);
    if (c) this.closeWith(c, 'replaced', CLOSE.replaced, 'replaced by a newer connection');
  }

  private countDropped(c: AgentConn, dropped: number): void {
    if (dropped === 0) return;
    c.dropped.count += dropped;
    const now = Date.now();
    if (now - c.dropped.loggedAt < SERVER_NOTIFICATION_LIMIT.windowMs) return;
    this.options.log?.warn(`server ${c.serverId}: ${c.dropped.count} notifications over the limit (${SERVER_NOTIFICATION_LIMIT.perWindow} a minute per kind) dropped`);
    c.dropped = { count: 0, loggedAt: now };
  }

  private async onMessage(c: AgentConn, m: AgentMessage): Promise<void> {
    if (c.closeReason) return;
    const server = { accountId: c.accountId, serverId: c.serverId };
    switch (m.type) {
      case 'agent/hello': {
        if (c.hello) return;
        c.httpPort = m.payload.httpPort;
        c.agentVersion = m.payload.agentVersion;
        const r = await recordAgentConnected(this.ctx, this.connectionOf(c));
        if (!r.recorded) return this.closeWith(c, 'decommissioned', CLOSE.decommissioned, 'server decommissioned');
        c.hello = true;
        const previous = this.live.get(c.serverId);
        this.live.set(c.serverId, c);
        // The newer connection wins: the older one, here or on another process, is closed (4004).
        if (previous && previous !== c) this.closeReplaced(previous.connectionId);
        if (r.replaced && r.replaced.connectionId !== previous?.connectionId) {
          await this.publishOnBus({ kind: 'connection-replaced', serverId: c.serverId, connectionId: r.replaced.connectionId }).catch((err) =>
            this.options.log?.warn(`publishing the replaced connection of server ${c.serverId} failed: ${String(err)}`),
          );
        }
        // A new address reaches the snapshots of the servers sharing a domain with this one.
        this.ctx.serversChanged(r.peers); // the peers may be connected to another process
        await this.push(c);
        await this.sendCrawlerRanges(c);
        return;
      }
      case 'agent/heartbeat': {
        // Liveness is lastSeen (the connection's heartbeat is written by the sweep); whether
        // HAProxy serves goes to the service when it changes, after the hello (which resets it).
        const serving = m.payload.proxyServing;
        if (!c.hello || serving === undefined || serving === c.proxyServing) return;
        await recordProxyServing(this.ctx, c.serverId, serving);
        c.proxyServing = serving;
        if (!serving) await recordCanaryFailure(this.ctx, c.serverId, 'proxy health', 'HAProxy stopped serving on the canary during the bake');
        return;
      }
      case 'config/ack': {
        if (c.pushed && m.payload.revision >= c.pushed.revision) {
          this.options.metrics?.pushAcked((performance.now() - c.pushed.at) / 1000, m.payload.ok);
          c.pushed = undefined;
        }
        const { outcome, desiredRevision } = await recordConfigAck(this.ctx, server, m.payload);
        if (outcome === 'refused') {
          this.options.log?.warn(`server ${c.serverId} acknowledged revision ${m.payload.revision}, above its desired revision ${desiredRevision}: refused, nothing stored`);
        }
        this.countDropped(c, outcome === 'dropped' ? 1 : 0);
        if (!m.payload.ok) {
          const detail = m.payload.errors
            .map((e) => e.message)
            .join('; ')
            .slice(0, 300);
          await recordCanaryFailure(this.ctx, c.serverId, 'reload health', `the configuration update to revision ${m.payload.revision} failed on the canary: ${detail}`);
        }
        return;
      }
      case 'events/batch': {
        const r = await storeEvents(this.ctx, c.accountId, c.serverId, m.payload.events);
        if (r.unassigned || r.invalid || r.overCap) {
          this.options.log?.warn(
            `server ${c.serverId} sent ${m.payload.events.length} events: stored ${r.stored}, folded ${r.folded} into earlier ones; dropped ${r.unassigned} for domains not assigned to it, ${r.invalid} invalid, ${r.overCap} over the daily cap`,
          );
        }
        return;
      }
      case 'analytics/batch': {
        // A baking canary's report judges the bake (services/rollouts.ts); bounded and
        // authenticated as every agent message is (validated above, on this server's connection).
        await recordRolloutReport(this.ctx, c.serverId, m.payload);
        const r = await storeAnalytics(this.ctx, c.accountId, c.serverId, m.payload);
        if (r.refused || r.unassigned || r.invalid) {
          this.options.log?.warn(
            `server ${c.serverId} sent analytics for ${m.payload.domains.length} domains: ${r.refused ? `refused, ${r.refused}` : `stored ${r.stored}; dropped ${r.unassigned} for domains not assigned to it, ${r.invalid} invalid`}`,
          );
        }
        return;
      }
      case 'acme/slot-request': {
        const { requestId, domain } = m.payload;
        const answer = await requestOrderSlot(this.ctx, c, domain).catch((err: unknown) => {
          this.options.log?.warn(`order slot for ${domain} failed: ${String(err)}`);
          return { granted: false, message: 'The service could not count certificate orders just now; try again later' };
        });
        this.send(c, { type: 'acme/slot-reply', payload: { requestId, ...answer } });
        return;
      }
      case 'acme/challenge-publish': {
        const { requestId, ...challenge } = m.payload;
        const recipients = await challengeRecipients(this.ctx, c, challenge.domain);
        let relayedTo = 0;
        if (!recipients) {
          this.options.log?.warn(`server ${c.serverId} published a challenge for ${challenge.domain}, not one of its domains; not relayed`);
        } else if (recipients.serverIds.length > 0) {
          // The domain's other servers only, never the publisher (challengeRecipients), under the
          // stored name. Their agents may be connected to any process: the count is of the live
          // ones (status active), not of connections here.
          const m: BusMessage = { kind: 'acme-challenge', serverIds: recipients.serverIds, challenge: { ...challenge, domain: recipients.domain } };
          try {
            await this.publishOnBus(m);
            relayedTo = recipients.live;
          } catch (err) {
            this.options.log?.warn(`challenge relay for ${recipients.domain} failed: ${String(err)}`);
          }
        }
        this.send(c, { type: 'acme/challenge-reply', payload: { requestId, relayedTo } });
        return;
      }
      case 'cert/status':
        if (!(await recordCertificateStatus(this.ctx, c, m.payload))) {
          this.options.log?.warn(`server ${c.serverId} reported a certificate for ${m.payload.domain}, not one of its domains; ignored`);
        }
        return;
      case 'status/report':
        this.countDropped(c, await recordStatusReport(this.ctx, server, m.payload));
        return;
    }
  }

  private publishOnBus(m: BusMessage): Promise<void> {
    if (this.options.publish) return this.options.publish(m);
    this.onBusMessage(m);
    return Promise.resolve();
  }

  private relayChallenge(serverIds: readonly string[], challenge: AcmeChallenge): void {
    for (const id of serverIds) {
      const peer = this.live.get(id);
      if (!peer?.hello || peer.ws.readyState !== peer.ws.OPEN) continue;
      this.send(peer, { type: 'acme/challenge', payload: challenge });
    }
  }

  /** Runs after every message of the connection was handled (its hello recorded, if any). */
  private async onClose(c: AgentConn): Promise<void> {
    if (this.live.get(c.serverId) === c) this.live.delete(c.serverId);
    try {
      if (!c.hello || c.closeReason === 'shutdown') return;
      // Only the server's live connection clears its row; server_down only for a drop.
      await recordAgentDisconnected(this.ctx, c, c.closeReason === undefined);
    } finally {
      this.conns.delete(c.connectionId);
    }
  }

  /** What the service records of a connection. */
  private connectionOf(c: AgentConn): AgentConnection {
    return { serverId: c.serverId, connectionId: c.connectionId, processId: this.processId, ip: c.ip, httpPort: c.httpPort, proxyServing: c.proxyServing, agentVersion: c.agentVersion };
  }

  /** Open connections here, including those whose close is still being recorded. */
  get connectionCount(): number {
    return this.conns.size;
  }

  /** Agents connected here past their hello (the rampart_agents_connected gauge). */
  get agentCount(): number {
    return this.live.size;
  }

  private send(c: AgentConn, m: ServiceMessage): void {
    if (c.ws.readyState === c.ws.OPEN) c.ws.send(JSON.stringify(m));
  }

  /**
   * Pushes are batched: the servers that changed while a batch was being built wait for the next
   * one, which reads the latest state for all of them at once (latest wins, few queries).
   */
  private push(c: AgentConn): Promise<void> {
    this.dirty.add(c.serverId);
    this.flushing ??= this.flush().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  private async flush(): Promise<void> {
    while (this.dirty.size > 0) {
      const ids = [...this.dirty];
      this.dirty.clear();
      const { states, snapshots } = await buildSnapshots(this.ctx.db, ids);
      for (const id of ids) {
        const c = this.live.get(id);
        if (!c || c.closeReason) continue;
        const state = states.get(id);
        if (!state || state.status === 'decommissioned') {
          this.closeWith(c, 'decommissioned', CLOSE.decommissioned, 'server decommissioned');
          continue;
        }
        if (state.tokenHash !== c.tokenHash) {
          // Its close clears the connection (onClose), without server_down.
          this.closeWith(c, 'token', CLOSE.tokenRevoked, 'connection token regenerated');
          continue;
        }
        const snapshot = snapshots.get(id);
        if (snapshot) {
          this.send(c, { type: 'config/snapshot', payload: snapshot });
          c.pushed ??= { revision: snapshot.revision, at: performance.now() };
        }
      }
    }
  }

  /**
   * Every heartbeat interval: silent connections are dropped and the others pinged; this
   * process's live connections get their heartbeat written (a connection another one replaced
   * meanwhile is closed), and connections whose heartbeat is too old, whatever process held
   * them, are cleared with their server_down.
   */
  private sweep(): void {
    const deadline = Date.now() - this.heartbeatMs * 3;
    for (const c of this.conns.values()) {
      if (c.ws.readyState !== c.ws.OPEN) continue;
      if (c.lastSeen < deadline) {
        c.ws.terminate();
        continue;
      }
      c.ws.ping();
    }
    if (this.sweeping) return;
    this.sweeping = this.heartbeat()
      .catch((err) => this.options.log?.warn(`agent connection heartbeat failed: ${String(err)}`))
      .finally(() => (this.sweeping = undefined));
  }

  private async heartbeat(): Promise<void> {
    const mine = [...this.live.values()].filter((c) => !c.closeReason && c.ws.readyState === c.ws.OPEN);
    // A connection whose row expired is recorded again with what it reported.
    const replaced = await touchAgentConnections(
      this.ctx,
      mine.map((c) => this.connectionOf(c)),
    );
    for (const id of replaced) this.closeReplaced(id);
    const expired = await expireAgentConnections(this.ctx);
    if (expired.length) this.options.log?.info(`agent connections without a heartbeat expired: servers ${expired.join(', ')}`);
    if (await this.crawlerRanges.refresh()) {
      for (const c of this.live.values()) if (c.hello && !c.closeReason) this.send(c, { type: 'crawlers/ranges', payload: { lists: this.crawlerRanges.lists } });
    }
  }

  /**
   * After a hello's snapshot: the crawlers' published lists, when there are any (an agent from
   * before them ignores the message). A change reaches every agent here on the next sweep.
   */
  private async sendCrawlerRanges(c: AgentConn): Promise<void> {
    try {
      await this.crawlerRanges.refresh();
    } catch (err) {
      this.options.log?.warn(`reading the crawlers' published lists failed: ${String(err)}`);
    }
    if (this.crawlerRanges.lists.length > 0) this.send(c, { type: 'crawlers/ranges', payload: { lists: this.crawlerRanges.lists } });
  }
}

/** A message's text. ws hands over a Buffer (binaryType 'nodebuffer', its default); the other forms are joined the same way. */
function messageText(data: RawData): string {
  return Buffer.isBuffer(data) ? data.toString() : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]).toString();
}
