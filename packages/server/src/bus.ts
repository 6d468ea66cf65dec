import { parseJsonObject, parseServiceMessage } from '@rampart/protocol';
import pg from 'pg';
import type { Database } from './db/database.js';
import { isUuid } from './values.js';
import { copyCredentialMessage, encodeCredentialMessage, isCredentialMessage, parseCredentialMessage, type CredentialMessage } from './credential-messages.js';

/**
 * The change bus between the control-plane processes sharing one database. Every process, the
 * publisher included, acts on the messages it receives, so there is one path for a change whether
 * the agent it concerns is connected here or to another process.
 */

export interface AcmeChallenge {
  domain: string;
  token: string;
  keyAuthorization: string;
  action: 'add' | 'remove';
}

export type BusMessage =
  | { kind: 'servers-changed'; ids: string[] }
  | { kind: 'acme-challenge'; serverIds: string[]; challenge: AcmeChallenge }
  /** A newer agent connection of the server was recorded: the process holding this one closes it (4004). */
  | { kind: 'connection-replaced'; serverId: string; connectionId: string };

/**
 * New rows for the live streams of one account (GET /api/stream, routes/stream.ts): the WAF events
 * one batch of a server stored (found again by the server and the time they were received), or
 * one new notification. Only references: every process loads the rows itself, for the streams it
 * holds of that account. Published in the transaction that stores the rows, so on PostgreSQL a
 * NOTIFY is delivered only once they are committed (and never for a rollback).
 */
export type LiveMessage = { kind: 'live-events'; accountId: string; serverId: string; receivedAt: string } | { kind: 'live-notification'; accountId: string; id: string };

/**
 * Tells the live streams (GET /api/stream) of every process about new rows, in the transaction
 * `db` that stores them (serve.ts: a NOTIFY on PostgreSQL, delivered on commit; the in-process
 * bus on the embedded database, whose readers wait for the transaction). Absent: no live streams.
 */
export type LivePublisher = (db: Database, m: LiveMessage) => Promise<void>;

export function isLiveMessage(m: { kind: string }): m is LiveMessage {
  return m.kind === 'live-events' || m.kind === 'live-notification';
}

/** A live message from outside the process: exactly one of the shapes above, or null. */
export function parseLiveMessage(text: string): LiveMessage | null {
  const o = parseJsonObject(text);
  if (!o) return null;
  const keys = Object.keys(o).sort().join(',');
  if (o.kind === 'live-events') {
    if (keys !== 'accountId,kind,receivedAt,serverId' || !isUuid(o.accountId) || !isUuid(o.serverId)) return null;
    if (typeof o.receivedAt !== 'string' || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(o.receivedAt) || !Number.isFinite(Date.parse(o.receivedAt))) return null;
    return { kind: 'live-events', accountId: o.accountId, serverId: o.serverId, receivedAt: o.receivedAt };
  }
  if (o.kind === 'live-notification') {
    if (keys !== 'accountId,id,kind' || !isUuid(o.accountId) || !isUuid(o.id)) return null;
    return { kind: 'live-notification', accountId: o.accountId, id: o.id };
  }
  return null;
}

export const encodeLiveMessage = (m: LiveMessage): string =>
  JSON.stringify(m.kind === 'live-events' ? { kind: m.kind, accountId: m.accountId, serverId: m.serverId, receivedAt: m.receivedAt } : { kind: m.kind, accountId: m.accountId, id: m.id });

export interface BusHandlers {
  message(m: BusMessage): void;
  /** New rows for the live streams (LiveMessage). */
  live?(m: LiveMessage): void;
  /** Credential changes (src/credential-messages.ts): drop what is cached of them. */
  credentials?(m: CredentialMessage): void;
  /** After the bus lost messages (its listening connection dropped): act as if everything changed. */
  resync(): void;
}

export interface ChangeBus {
  publish(m: BusMessage | CredentialMessage | LiveMessage): Promise<void>;
  subscribe(handlers: BusHandlers): void;
  close(): Promise<void>;
}

/** PostgreSQL's NOTIFY payload must be shorter than 8000 bytes. */
export const MAX_PAYLOAD_BYTES = 7900;

/**
 * Checks a message that came from outside the process (a NOTIFY payload is data from the
 * database). Returns null for anything not exactly of a known shape.
 */
export function parseBusMessage(text: string): BusMessage | null {
  const o = parseJsonObject(text);
  if (!o) return null;
  const ids = (x: unknown): x is string[] => Array.isArray(x) && x.length > 0 && x.every(isUuid);
  const keys = Object.keys(o).sort().join(',');
  if (o.kind === 'servers-changed') {
    if (keys !== 'ids,kind' || !ids(o.ids)) return null;
    return { kind: 'servers-changed', ids: o.ids };
  }
  if (o.kind === 'acme-challenge') {
    if (keys !== 'challenge,kind,serverIds' || !ids(o.serverIds)) return null;
    // The same validator the hub sends acme/challenge through: exactly its fields, its limits.
    const parsed = parseServiceMessage(JSON.stringify({ type: 'acme/challenge', payload: o.challenge }));
    if (!parsed.ok || parsed.message.type !== 'acme/challenge') return null;
    return { kind: 'acme-challenge', serverIds: o.serverIds, challenge: parsed.message.payload };
  }
  if (o.kind === 'connection-replaced') {
    if (keys !== 'connectionId,kind,serverId' || !isUuid(o.serverId) || !isUuid(o.connectionId)) return null;
    return { kind: 'connection-replaced', serverId: o.serverId, connectionId: o.connectionId };
  }
  return null;
}

/** One message as NOTIFY payloads, each under MAX_PAYLOAD_BYTES: a long id list is split. */
export function encodeBusMessage(m: BusMessage): string[] {
  if (m.kind === 'connection-replaced') return [JSON.stringify({ kind: m.kind, serverId: m.serverId, connectionId: m.connectionId })];
  const list = m.kind === 'servers-changed' ? m.ids : m.serverIds;
  const withIds = (part: string[]): string => JSON.stringify(m.kind === 'servers-changed' ? { kind: m.kind, ids: part } : { kind: m.kind, serverIds: part, challenge: m.challenge });
  const base = Buffer.byteLength(withIds([]));
  const out: string[] = [];
  let part: string[] = [];
  let size = base;
  for (const id of list) {
    const add = Buffer.byteLength(JSON.stringify(id)) + 1;
    if (part.length > 0 && size + add > MAX_PAYLOAD_BYTES) {
      out.push(withIds(part));
      part = [];
      size = base;
    }
    part.push(id);
    size += add;
  }
  if (part.length > 0) out.push(withIds(part));
  for (const p of out) if (Buffer.byteLength(p) > MAX_PAYLOAD_BYTES) throw new Error(`bus message of ${Buffer.byteLength(p)} bytes is too long`);
  return out;
}

/** One process (the embedded database): delivered at once, in the caller's turn. */
export class InProcessBus implements ChangeBus {
  private handlers: BusHandlers | undefined;

  publish(m: BusMessage | CredentialMessage | LiveMessage): Promise<void> {
    // Delivered now, in the caller's turn; a handler's exception rejects the promise.
    return new Promise((resolve) => {
      this.deliver(m);
      resolve();
    });
  }

  private deliver(m: BusMessage | CredentialMessage | LiveMessage): void {
    if (isCredentialMessage(m)) {
      this.handlers?.credentials?.(copyCredentialMessage(m));
      return;
    }
    if (isLiveMessage(m)) {
      this.handlers?.live?.({ ...m });
      return;
    }
    if (m.kind === 'connection-replaced') {
      this.handlers?.message({ ...m });
      return;
    }
    const ids = m.kind === 'servers-changed' ? m.ids : m.serverIds;
    if (ids.length === 0) return;
    // A copy, as a NOTIFY would deliver: the handler never shares the caller's arrays.
    const copy: BusMessage = m.kind === 'servers-changed' ? { kind: m.kind, ids: [...m.ids] } : { kind: m.kind, serverIds: [...m.serverIds], challenge: { ...m.challenge } };
    this.handlers?.message(copy);
  }

  subscribe(handlers: BusHandlers): void {
    this.handlers = handlers;
  }

  close(): Promise<void> {
    this.handlers = undefined;
    return Promise.resolve();
  }
}

export interface PostgresBusOptions {
  url: string;
  /** The NOTIFY channel (a suite's own schema gets its own channel). */
  channel: string;
  /** Runs `select pg_notify($1, $2)` through the pool (not the listening connection). */
  notify(channel: string, payload: string): Promise<unknown>;
  log?: { info(msg: string): void; warn(msg: string): void };
  /** Reconnect waits: firstMs × 2ⁿ, at most maxMs. */
  reconnect?: { firstMs?: number; maxMs?: number };
}

export const BUS_APPLICATION_NAME = 'rampart-bus';

/**
 * PostgreSQL LISTEN/NOTIFY: a dedicated connection listens on one channel; messages are published
 * through the pool. A lost listening connection is reopened with capped exponential backoff, and
 * then resync runs, since notifications sent in between were not received.
 */
export class PostgresBus implements ChangeBus {
  private handlers: BusHandlers | undefined;
  private client: pg.Client | undefined;
  private closed = false;
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private pid: number | undefined;
  private readonly firstMs: number;
  private readonly maxMs: number;

  constructor(private readonly options: PostgresBusOptions) {
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(options.channel)) throw new Error(`invalid channel name ${options.channel}`);
    this.firstMs = options.reconnect?.firstMs ?? 100;
    this.maxMs = options.reconnect?.maxMs ?? 10_000;
  }

  /** Opens the listening connection; startup fails if it cannot. */
  async start(): Promise<void> {
    await this.connect();
  }

  /** The backend pid of the listening connection (diagnostics and tests), undefined while away. */
  get listenerPid(): number | undefined {
    return this.pid;
  }

  subscribe(handlers: BusHandlers): void {
    this.handlers = handlers;
  }

  async publish(m: BusMessage | CredentialMessage | LiveMessage): Promise<void> {
    if (isCredentialMessage(m)) {
      await this.options.notify(this.options.channel, encodeCredentialMessage(m));
      return;
    }
    if (isLiveMessage(m)) {
      await this.options.notify(this.options.channel, encodeLiveMessage(m));
      return;
    }
    if (m.kind !== 'connection-replaced' && (m.kind === 'servers-changed' ? m.ids : m.serverIds).length === 0) return;
    for (const payload of encodeBusMessage(m)) {
      await this.options.notify(this.options.channel, payload);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    const client = this.client;
    this.client = undefined;
    this.pid = undefined;
    if (client) {
      // A connection that is already gone may never answer: do not let it hold the shutdown.
      await Promise.race([client.end().catch(() => undefined), new Promise((r) => setTimeout(r, 1000).unref())]);
    }
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.options.url, application_name: BUS_APPLICATION_NAME, keepAlive: true });
    let lost = false;
    const onLost = (err?: Error) => {
      if (lost) return;
      lost = true;
      if (this.client === client) {
        this.client = undefined;
        this.pid = undefined;
      }
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.options.log?.warn(`change bus: listening connection lost${err ? `: ${String(err)}` : ''}; reconnecting`);
      this.scheduleReconnect();
    };
    client.on('notification', (n) => {
      if (n.channel !== this.options.channel) return;
      const credential = parseCredentialMessage(n.payload ?? '');
      if (credential) {
        try {
          this.handlers?.credentials?.(credential);
        } catch (err) {
          this.options.log?.warn(`change bus: handling a message failed: ${String(err)}`);
        }
        return;
      }
      const live = parseLiveMessage(n.payload ?? '');
      if (live) {
        try {
          this.handlers?.live?.(live);
        } catch (err) {
          this.options.log?.warn(`change bus: handling a message failed: ${String(err)}`);
        }
        return;
      }
      const m = parseBusMessage(n.payload ?? '');
      if (!m) {
        this.options.log?.warn(`change bus: ignored a malformed notification (${String(n.payload).slice(0, 80)})`);
        return;
      }
      try {
        this.handlers?.message(m);
      } catch (err) {
        this.options.log?.warn(`change bus: handling a message failed: ${String(err)}`);
      }
    });
    let ready = false;
    client.on('error', (err) => {
      if (ready) onLost(err); // before that, the failing connect or query reports it
    });
    client.on('end', () => {
      if (ready) onLost();
    });
    try {
      await client.connect();
      const pidRes = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
      await client.query(`LISTEN "${this.options.channel}"`); // last, so pg_stat_activity shows it
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      ready = true;
      this.client = client;
      this.pid = pidRes.rows[0]?.pid;
    } catch (err) {
      client.end().catch(() => undefined);
      throw err;
    }
  }

  private scheduleReconnect(): void {
    if (this.closed || this.timer) return;
    const wait = Math.min(this.maxMs, this.firstMs * 2 ** this.attempt);
    this.attempt++;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.closed) return;
      this.connect().then(
        () => {
          if (this.closed) return;
          this.attempt = 0;
          this.options.log?.info('change bus: listening again; pushing full snapshots');
          try {
            this.handlers?.resync();
          } catch (err) {
            this.options.log?.warn(`change bus: resync failed: ${String(err)}`);
          }
        },
        (err) => {
          this.options.log?.warn(`change bus: reconnect failed: ${String(err)}`);
          this.scheduleReconnect();
        },
      );
    }, wait);
    this.timer.unref();
  }
}

/** The channel of a database, or of one schema in it (test suites share a database). */
export function busChannel(schema?: string): string {
  return schema ? `rampart_changes_${schema}` : 'rampart_changes';
}
