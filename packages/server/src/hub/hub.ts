import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { AGENT_PATH, CLOSE, parseAgentMessage, PROTOCOL_VERSION, type AgentMessage, type ServiceMessage } from '@rampart/protocol';
import { WebSocketServer, type WebSocket } from 'ws';
import type { ServiceContext } from '../context.js';
import { sha256 } from '../crypto.js';
import { notify } from '../services/notifications.js';
import { buildSnapshots } from './snapshot.js';
import { storeEvents } from '../services/events.js';
import { challengeRecipients, recordCertificateStatus, requestOrderSlot } from '../services/certificates.js';
import { recordAgentConnected } from '../services/servers.js';
import type { AcmeChallenge, BusMessage } from '../bus.js';

export interface HubOptions {
  /** How often the hub pings each agent; a connection silent for 3 intervals is dropped (40 s at most by default). */
  heartbeatMs?: number;
  log?: { info(msg: string): void; warn(msg: string): void };
  /**
   * The change bus (serve.ts): challenges are published on it, so they reach the agents of every
   * process, this one included through onBusMessage. Absent, they are delivered here directly.
   */
  publish?: (m: BusMessage) => Promise<void>;
}

interface AgentConn {
  ws: WebSocket;
  serverId: string;
  accountId: string;
  tokenHash: string;
  ip: string;
  hello: boolean;
  lastSeen: number;
  lastSeenWritten: number;
  closing: boolean;
  /** Messages of one agent are handled one after another, in the order sent (a later cert/status wins). */
  handling: Promise<void>;
}

const HELLO_TIMEOUT_MS = 10_000;
const LAST_SEEN_WRITE_MS = 10_000;

function clientIp(req: IncomingMessage): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

/**
 * The agent hub: authenticates shield-server agents at the WebSocket upgrade (token in the
 * Authorization header, found by SHA-256), tracks their status, pushes full snapshots on connect
 * and after every change, and turns their reports into notifications.
 */
export class AgentHub {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: 1024 * 1024 });
  private readonly conns = new Map<string, AgentConn>();
  private readonly heartbeatMs: number;
  private timer: NodeJS.Timeout | undefined;
  private readonly dirty = new Set<string>();
  private flushing: Promise<void> | undefined;

  constructor(
    private readonly ctx: ServiceContext,
    private readonly options: HubOptions = {},
  ) {
    this.heartbeatMs = options.heartbeatMs ?? 10_000;
  }

  attach(server: Server): void {
    server.on('upgrade', (req, socket, head) => void this.onUpgrade(req, socket, head));
    this.timer = setInterval(() => this.sweep(), this.heartbeatMs);
    this.timer.unref();
  }

  /** On shutdown: the agents of this process are no longer connected (they will reconnect). */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    const ids = [...this.conns.keys()];
    for (const c of this.conns.values()) {
      c.closing = true;
      c.ws.terminate();
    }
    this.conns.clear();
    this.wss.close();
    if (ids.length) {
      await this.ctx.db
        .updateTable('servers')
        .set({ status: 'offline' })
        .where('id', 'in', ids)
        .where('status', '=', 'active')
        .execute()
        .catch((err) => this.options.log?.warn(`marking agents offline failed: ${String(err)}`));
    }
  }

  /** What the change bus delivers, whichever process published it. */
  onBusMessage(m: BusMessage): void {
    if (m.kind === 'servers-changed') this.serversChanged(m.ids);
    else this.relayChallenge(m.serverIds, m.challenge);
  }

  /** The bus may have missed messages: every agent connected here gets its full snapshot. */
  resync(): void {
    for (const c of this.conns.values()) {
      if (c.hello) void this.push(c).catch((err) => this.options.log?.warn(`snapshot push to ${c.serverId} failed: ${String(err)}`));
    }
  }

  /** After a commit: send each affected agent connected to this process its new snapshot (latest wins). */
  serversChanged(serverIds: readonly string[]): void {
    for (const id of serverIds) {
      const c = this.conns.get(id);
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
      const server = await this.ctx.db
        .selectFrom('servers')
        .select(['id', 'account_id', 'status'])
        .where('token_hash', '=', tokenHash)
        .executeTakeFirst();
      if (!server || server.status === 'decommissioned') return refuse('401 Unauthorized');
      this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, server.id, server.account_id, tokenHash, clientIp(req)));
    } catch (err) {
      this.options.log?.warn(`agent upgrade failed: ${String(err)}`);
      refuse('503 Service Unavailable');
    }
  }

  private onConnection(ws: WebSocket, serverId: string, accountId: string, tokenHash: string, ip: string): void {
    const previous = this.conns.get(serverId);
    if (previous) {
      previous.closing = true;
      previous.ws.close(CLOSE.replaced, 'replaced by a newer connection');
    }
    const c: AgentConn = { ws, serverId, accountId, tokenHash, ip, hello: false, lastSeen: Date.now(), lastSeenWritten: Date.now(), closing: false, handling: Promise.resolve() };
    this.conns.set(serverId, c);
    const helloTimer = setTimeout(() => !c.hello && ws.close(CLOSE.invalidMessage, 'expected agent/hello'), HELLO_TIMEOUT_MS);
    ws.on('pong', () => (c.lastSeen = Date.now()));
    ws.on('message', (data, isBinary) => {
      c.lastSeen = Date.now();
      if (isBinary) return ws.close(CLOSE.invalidMessage, 'binary messages are not part of the protocol');
      const parsed = parseAgentMessage(data.toString());
      if (!parsed.ok) return ws.close(CLOSE.invalidMessage, `invalid message: ${parsed.error}`.slice(0, 120));
      c.handling = c.handling.then(() => this.onMessage(c, parsed.message)).catch((err) => this.options.log?.warn(`agent message failed: ${String(err)}`));
    });
    ws.on('close', () => {
      clearTimeout(helloTimer);
      void this.onClose(c).catch((err) => this.options.log?.warn(`agent close handling failed: ${String(err)}`));
    });
    ws.on('error', () => ws.terminate());
  }

  private async onMessage(c: AgentConn, m: AgentMessage): Promise<void> {
    const db = this.ctx.db;
    switch (m.type) {
      case 'agent/hello': {
        if (m.payload.protocol !== PROTOCOL_VERSION) {
          c.ws.close(CLOSE.protocolMismatch, `protocol version ${m.payload.protocol} is not supported; this service speaks ${PROTOCOL_VERSION}`);
          return;
        }
        c.hello = true;
        // A new address reaches the snapshots of the servers sharing a domain with this one.
        const peers = await recordAgentConnected(this.ctx, c.serverId, c.ip);
        this.ctx.serversChanged(peers); // the peers may be connected to another process
        await this.push(c);
        return;
      }
      case 'agent/heartbeat': {
        if (Date.now() - c.lastSeenWritten < LAST_SEEN_WRITE_MS) return;
        c.lastSeenWritten = Date.now();
        await db.updateTable('servers').set({ last_seen_at: this.ctx.now() }).where('id', '=', c.serverId).execute();
        return;
      }
      case 'config/ack': {
        const { revision, ok, errors } = m.payload;
        if (ok) {
          await db
            .updateTable('servers')
            .set({ applied_revision: revision, last_seen_at: this.ctx.now() })
            .where('id', '=', c.serverId)
            .where('applied_revision', '<', revision)
            .execute();
          // A domain with SSL is active once it has a certificate (cert/status), not by being configured.
          await db
            .updateTable('domains')
            .set({ status: 'active' })
            .where('id', 'in', (eb) => eb.selectFrom('domain_servers').select('domain_id').where('server_id', '=', c.serverId))
            .where('ssl_enabled', '=', false)
            .where('status', '<>', 'active')
            .execute();
        } else {
          const detail = errors.map((e) => (e.line ? `line ${e.line}: ${e.message}` : e.message)).join('; ');
          await notify(this.ctx, { accountId: c.accountId, serverId: c.serverId, kind: 'server_error', message: `Configuration update to revision ${revision} failed: ${detail}`.slice(0, 4000) });
        }
        return;
      }
      case 'events/batch':
        await storeEvents(this.ctx, c.accountId, c.serverId, m.payload.events);
        return;
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
        await notify(this.ctx, { accountId: c.accountId, serverId: c.serverId, kind: m.payload.kind, message: m.payload.message });
        // docs/api.md: server_error covers a proxy crash too (a failed reload raises it through its ack).
        if (m.payload.kind === 'proxy_crash') {
          await notify(this.ctx, { accountId: c.accountId, serverId: c.serverId, kind: 'server_error', message: m.payload.message });
        }
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
      const peer = this.conns.get(id);
      if (!peer?.hello || peer.ws.readyState !== peer.ws.OPEN) continue;
      this.send(peer, { type: 'acme/challenge', payload: challenge });
    }
  }

  private async onClose(c: AgentConn): Promise<void> {
    if (this.conns.get(c.serverId) !== c) return; // replaced by a newer connection
    this.conns.delete(c.serverId);
    if (c.closing) return;
    const res = await this.ctx.db
      .updateTable('servers')
      .set({ status: 'offline' })
      .where('id', '=', c.serverId)
      .where('status', '=', 'active')
      .returning(['name'])
      .executeTakeFirst();
    if (res && c.hello) {
      await notify(this.ctx, { accountId: c.accountId, serverId: c.serverId, kind: 'server_down', message: `Shield server ${res.name} disconnected` });
    }
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
        const c = this.conns.get(id);
        if (!c) continue;
        const state = states.get(id);
        if (!state || state.status === 'decommissioned') {
          c.closing = true;
          c.ws.close(CLOSE.decommissioned, 'server decommissioned');
          continue;
        }
        if (state.tokenHash !== c.tokenHash) {
          c.closing = true;
          c.ws.close(CLOSE.tokenRevoked, 'connection token regenerated');
          await this.ctx.db.updateTable('servers').set({ status: 'offline' }).where('id', '=', id).where('status', '=', 'active').execute();
          continue;
        }
        const snapshot = snapshots.get(id);
        if (snapshot) this.send(c, { type: 'config/snapshot', payload: snapshot });
      }
    }
  }

  private sweep(): void {
    const deadline = Date.now() - this.heartbeatMs * 3;
    for (const c of this.conns.values()) {
      if (c.lastSeen < deadline) {
        c.ws.terminate();
        continue;
      }
      c.ws.ping();
    }
  }
}
