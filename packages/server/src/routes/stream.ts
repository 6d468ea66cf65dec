import { PassThrough } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import { authenticate } from '../auth.js';
import type { LiveMessage } from '../bus.js';
import type { ServiceContext } from '../context.js';
import { eventsOfBatch } from '../services/events.js';
import { notificationOfAccount } from '../services/notifications.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

/**
 * GET /api/stream: server-sent events of the caller's account. Every process holds its own
 * streams; what is new reaches every process as a LiveMessage on the change bus (src/bus.ts),
 * published in the transaction that stores the rows, and each process loads the rows, of the
 * message's account only, for the streams it holds of that account.
 */

export interface LiveStreamOptions {
  /** A comment line this often on every stream, so proxies and clients see it alive; default 15 s. */
  heartbeatMs?: number | undefined;
  /** Open streams per account, over all its credentials; one more is a 429. Default 20. */
  maxPerAccount?: number | undefined;
  /** Bytes a stream may have waiting to be sent; a client that falls further behind is dropped. Default 1 MiB. */
  maxQueuedBytes?: number | undefined;
}

export const STREAM_DEFAULTS = { heartbeatMs: 15_000, maxPerAccount: 20, maxQueuedBytes: 1024 * 1024 } as const;

/** Ids of rows already sent, per account (one batch may be announced twice): at most this many remembered. */
const RECENT_IDS = 2_000;

interface Client {
  accountId: string;
  out: PassThrough;
  req: FastifyRequest;
  closed: boolean;
}

interface AccountStreams {
  clients: Set<Client>;
  recent: Set<string>;
}

/** The live streams of one process: who listens for which account, and what they are sent. */
export class LiveStreams {
  private readonly accounts = new Map<string, AccountStreams>();
  private readonly heartbeatMs: number;
  readonly maxPerAccount: number;
  private readonly maxQueuedBytes: number;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Clients dropped for falling behind (tests, logs). */
  dropped = 0;

  constructor(
    private readonly ctx: ServiceContext,
    options: LiveStreamOptions = {},
    private readonly log?: { warn(msg: string): void },
  ) {
    this.heartbeatMs = options.heartbeatMs ?? STREAM_DEFAULTS.heartbeatMs;
    this.maxPerAccount = options.maxPerAccount ?? STREAM_DEFAULTS.maxPerAccount;
    this.maxQueuedBytes = options.maxQueuedBytes ?? STREAM_DEFAULTS.maxQueuedBytes;
  }

  /** Open streams, of one account or of all. */
  count(accountId?: string): number {
    if (accountId !== undefined) return this.accounts.get(accountId)?.clients.size ?? 0;
    let n = 0;
    for (const a of this.accounts.values()) n += a.clients.size;
    return n;
  }

  /** A new stream for the request's account; undefined when the account has maxPerAccount open (or the process is closing). */
  open(req: FastifyRequest): PassThrough | undefined {
    const accountId = req.principal.accountId;
    if (this.closed || this.count(accountId) >= this.maxPerAccount) return undefined;
    let a = this.accounts.get(accountId);
    if (!a) this.accounts.set(accountId, (a = { clients: new Set(), recent: new Set() }));
    const client: Client = { accountId, out: new PassThrough(), req, closed: false };
    a.clients.add(client);
    const gone = () => this.remove(client);
    req.raw.once('close', gone);
    client.out.once('close', gone);
    // The browser's reconnect delay, and a first line so the client knows the stream is open.
    this.write(client, 'retry: 5000\n: connected\n\n');
    this.timer ??= this.startHeartbeat();
    return client.out;
  }

  /** What the change bus delivered: the rows are loaded (the account's only) for the streams of that account here. */
  deliver(m: LiveMessage): void {
    if (this.closed || !this.accounts.has(m.accountId)) return;
    void this.load(m).catch((err) => this.log?.warn(`live stream: loading ${m.kind} failed: ${String(err)}`));
  }

  /** The bus may have lost messages: clients are told to reload what they show. */
  resync(): void {
    for (const a of this.accounts.values()) for (const c of a.clients) this.write(c, 'event: resync\ndata: {}\n\n');
  }

  /** Ends every stream (the app is closing), so the listener can close at once. */
  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const a of [...this.accounts.values()]) for (const c of [...a.clients]) this.end(c);
    this.accounts.clear();
  }

  private async load(m: LiveMessage): Promise<void> {
    const frames: { id: string; frame: string }[] = [];
    if (m.kind === 'live-events') {
      const at = new Date(m.receivedAt);
      for (const e of await eventsOfBatch(this.ctx, m.accountId, m.serverId, at)) {
        frames.push({ id: `e:${e.id}`, frame: `event: waf_event\ndata: ${JSON.stringify(e)}\n\n` });
      }
    } else {
      const n = await notificationOfAccount(this.ctx.db, m.accountId, m.id);
      if (n) frames.push({ id: `n:${n.id}`, frame: `event: notification\ndata: ${JSON.stringify(n)}\n\n` });
    }
    const a = this.accounts.get(m.accountId);
    if (!a) return;
    for (const { id, frame } of frames) {
      if (a.recent.has(id)) continue;
      a.recent.add(id);
      if (a.recent.size > RECENT_IDS) a.recent.delete(a.recent.values().next().value!);
      for (const c of [...a.clients]) this.write(c, frame);
    }
  }

  private startHeartbeat(): NodeJS.Timeout {
    const timer = setInterval(() => {
      for (const a of [...this.accounts.values()]) {
        for (const c of [...a.clients]) {
          this.write(c, ': heartbeat\n\n');
          // A revoked key, an ended session: the stream ends with its credential.
          authenticate(this.ctx, c.req).then(
            (p) => p.accountId !== c.accountId && this.end(c),
            () => this.end(c),
          );
        }
      }
    }, this.heartbeatMs);
    timer.unref();
    return timer;
  }

  /** Writes a frame, or drops the client when it has more than maxQueuedBytes waiting. */
  private write(c: Client, frame: string): void {
    if (c.closed) return;
    if (c.out.writableLength + c.out.readableLength + Buffer.byteLength(frame) > this.maxQueuedBytes) {
      this.dropped++;
      this.log?.warn(`live stream of account ${c.accountId}: the client falls behind; closed`);
      c.out.destroy();
      c.req.raw.socket?.destroy();
      this.remove(c);
      return;
    }
    c.out.write(frame);
  }

  private end(c: Client): void {
    if (c.closed) return;
    c.out.end();
    this.remove(c);
  }

  private remove(c: Client): void {
    c.closed = true;
    const a = this.accounts.get(c.accountId);
    if (!a?.clients.delete(c)) return;
    if (a.clients.size === 0) this.accounts.delete(c.accountId);
    if (this.accounts.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}

const DESCRIPTION =
  'A `text/event-stream` of what is new in the account, as it happens, on any control-plane process: ' +
  '`event: waf_event` with `data:` one WAF event, exactly as an item of GET /api/waf/events; ' +
  '`event: notification` with `data:` one notification, exactly as an item of GET /api/notifications; ' +
  '`event: resync` (`data: {}`) when this process may have missed changes (reload the lists); ' +
  'and a comment line (`: heartbeat`) every 15 s. Events are new rows only (a repeat folded into an earlier event raises its `count` without a message). ' +
  'At most 20 open streams per account (429 beyond); a client that does not read is dropped; the stream ends when its API key is deleted or its session ends. ' +
  'Nothing is replayed: load the lists first, then follow the stream.';

export function streamRoutes(app: App, { streams }: RouteDeps & { streams: LiveStreams }): void {
  app.addHook('preClose', (done) => {
    streams.close();
    done();
  });
  app.get('/api/stream', {
    // Reading only: works while the account is frozen.
    schema: {
      tags: ['Stream'],
      security: SECURITY,
      summary: 'Live WAF events and notifications of the account (server-sent events)',
      description: DESCRIPTION,
      response: {
        200: { description: 'The event stream (text/event-stream), open until the client or the server closes it', content: { 'text/event-stream': { schema: { type: 'string' } } } },
        429: { $ref: 'Error#' },
        ...ERROR_RESPONSES,
      },
    },
    handler: async (req, reply) => {
      const out = streams.open(req);
      if (!out) {
        return reply
          .code(429)
          .header('retry-after', '30')
          .send({ error: `at most ${streams.maxPerAccount} live streams per account are open at once; close one first` });
      }
      reply.header('content-type', 'text/event-stream; charset=utf-8').header('cache-control', 'no-cache, no-store').header('x-accel-buffering', 'no');
      return reply.send(out);
    },
  });
}
