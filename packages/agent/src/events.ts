import { timingSafeEqual } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import {
  AGENT_LIMITS,
  EVENT_FIELD_MAX,
  eventFoldKey,
  eventRowFits,
  eventRowsFor,
  FOLD_WINDOW_SECONDS,
  isHostname,
  isIP,
  isUuid,
  redactQueryCredentials,
  searchCrawler,
  takeEventRow,
  WAF_REASONS,
  type EventRowShares,
  type EventRowsTaken,
  type WafEventItem,
} from '@rampart/protocol';
import { BOT_ANSWER_PATH } from '@rampart/proxy';

/** docs/architecture.md "The event log": at most 5,000 events per server per (UTC) day are stored; blocking goes on regardless. */
export const DAILY_EVENT_CAP = AGENT_LIMITS.eventsPerServerPerDay;
const MAX_BUFFERED = AGENT_LIMITS.bufferedEvents;
const IDS_PER_EVENT = AGENT_LIMITS.requestIdsPerEvent;
const BATCH = AGENT_LIMITS.eventsPerBatch;
const REASONS = new Set<string>(WAF_REASONS);
const REQUEST_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
/** <action> -> blocked */
const ACTIONS = new Map([
  ['block', true],
  ['detect', false],
]);
// Keeps a leading U+FEFF (the default decoder drops it) and replaces invalid sequences with U+FFFD.
const UTF8 = new TextDecoder('utf-8', { ignoreBOM: true });

/**
 * A field the proxy percent-encoded (every byte outside 0x21-0x7E, and '%' itself, as %XX): the
 * escapes become bytes, the bytes are read as UTF-8 with U+FFFD for invalid sequences. A '%' not
 * followed by two hex digits is kept as it is.
 */
export function decodeField(field: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < field.length; i++) {
    const c = field.charCodeAt(i);
    if (c === 0x25 && /^[0-9A-Fa-f]{2}$/.test(field.slice(i + 1, i + 3))) {
      bytes.push(parseInt(field.slice(i + 1, i + 3), 16));
      i += 2;
    } else if (c < 0x80) {
      bytes.push(c);
    } else {
      const cp = field.codePointAt(i)!;
      bytes.push(...Buffer.from(String.fromCodePoint(cp), 'utf8'));
      if (cp > 0xffff) i++;
    }
  }
  return UTF8.decode(Uint8Array.from(bytes));
}

/** At most max UTF-16 code units (the service's measure), never cutting a surrogate pair in two. */
export function capLength(s: string, max: number): string {
  if (s.length <= max) return s;
  const code = s.charCodeAt(max - 1);
  return s.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

const optional = (field: string, max: number): string | null => (field === '-' ? null : capLength(decodeField(field), max));

/**
 * One syslog line from HAProxy's log-format:
 * "rampart-waf [<secret>] <ts> <ip> <domain> <reason> <rule> <action> <method> <location> <path> <matched> [<request id>]",
 * <secret> the agent's per-start secret (hex), required when `secret` is given: a line without it,
 * or with another, comes from some other local process and is dropped.
 * <action> block or detect, <rule>, <location> and <matched> "-" when absent, the last four
 * percent-encoded by the proxy. Newer proxies add, after the request id, the search crawler the
 * request's User-Agent claimed (an id of SEARCH_CRAWLERS) or "-" (see parseEvent), and after it
 * the query string's first 192 bytes, percent-encoded, or "-" when the request has none: the
 * event's `query`, with the values of credential-like parameters redacted
 * (redactQueryCredentials) before it leaves the shield server.
 * The older five-field form ("... <reason> <rule>") still parses,
 * as a blocked event without request details, and a line without the request id (proxies from before
 * it) as an event without one, and a line without the query as an event whose query is null, so
 * that a mixed fleet keeps working.
 */
export function parseEventLine(line: string, secret?: string): WafEventItem | undefined {
  return parseEvent(line, secret)?.event;
}

/**
 * parseEventLine, with the search crawler the line says the request's User-Agent claimed: a
 * known crawler id, or null (none, "-", an unknown id, or an older proxy's line). The claim is
 * not part of the event the service stores; the agent verifies the address (crawlers.ts).
 */
export function parseEvent(line: string, secret?: string): { event: WafEventItem; claim: string | null } | undefined {
  const parsed = parseLogLine(line, secret);
  return parsed && 'event' in parsed ? parsed : undefined;
}

/** A request HAProxy logged for its latency only (no WAF decision): its backend and %Ta in ms. */
export interface LatencySample {
  backend: string;
  ms: number;
}

/**
 * One line of the events port: an event (parseEvent), or a latency sample: a line without a
 * reason ("-"), which newer proxies log for one request in LATENCY_SAMPLE_EVERY and end with the
 * backend's name and the request's total active time (%Ta, milliseconds). Either needs the
 * secret when one is given.
 */
export function parseLogLine(line: string, secret?: string): { event: WafEventItem; claim: string | null } | { sample: LatencySample } | undefined {
  const m = /rampart-waf (?:([0-9a-f]{32,64}) )?(\d+) (\S+) (\S+) (\S+) (\S+)(?: (\S+) (\S+) (\S+) (\S+) (\S+)(?: (\S+)(?: (\S+)(?: (\S+)(?: (\S+) (-?\d+))?)?)?)?)?\s*$/.exec(line);
  if (!m) return undefined;
  const [, token, ts, ip, domain, reason, rule, action, method, location, path, matched, requestId, claimed, query, backend, active] = m as unknown as [
    string,
    string | undefined,
    string,
    string,
    string,
    string,
    string,
    ...(string | undefined)[],
  ];
  if (secret !== undefined && !sameSecret(token, secret)) return undefined;
  if (reason === '-') {
    const ms = Number(active);
    return backend !== undefined && Number.isSafeInteger(ms) && ms >= 0 ? { sample: { backend, ms } } : undefined;
  }
  if (!isIP(ip) || !isHostname(domain) || !REASONS.has(reason)) return undefined;
  const base = { ts: Number(ts), ip, domain, reason: reason as WafEventItem['reason'], ruleId: isUuid(rule) ? rule : null };
  if (action === undefined) return { event: { ...base, method: null, path: null, query: null, location: null, matched: null, blocked: true }, claim: null };
  const refused = ACTIONS.get(action);
  if (refused === undefined) return undefined;
  const claim = claimed !== undefined && searchCrawler(claimed) ? claimed : null;
  const requestPath = capLength(decodeField(path!), EVENT_FIELD_MAX.path);
  const event: WafEventItem = {
    ...base,
    method: capLength(decodeField(method!), EVENT_FIELD_MAX.method),
    path: requestPath,
    query: query === undefined || query === '-' ? null : capLength(redactQueryCredentials(decodeField(query)), EVENT_FIELD_MAX.query),
    location: optional(location!, EVENT_FIELD_MAX.location),
    matched: optional(matched!, EVENT_FIELD_MAX.matched),
    blocked: refused && !servedChallenge(reason, requestPath),
    // the proxy's request id (newer proxies): kept when of the protocol's form, else left out ("-": none was made)
    ...(requestId !== undefined && requestId !== '-' && REQUEST_ID_RE.test(requestId) ? { requestId } : {}),
  };
  return { event, claim };
}

/**
 * A bot_challenge line is either the challenge page served (200, any path but the answer's) or a
 * refused answer to it (403, on BOT_ANSWER_PATH): the Lua engine logs both with the action block,
 * and only the path tells them apart. A served page is not a block (the visitor may pass it).
 */
function servedChallenge(reason: string, path: string): boolean {
  return reason === 'bot_challenge' && path !== BOT_ANSWER_PATH;
}

function sameSecret(token: string | undefined, secret: string): boolean {
  if (token === undefined || token.length !== secret.length) return false;
  return timingSafeEqual(Buffer.from(token), Buffer.from(secret));
}

/**
 * What the collector keeps unread while held (EventCollector.hold), in characters of lines: what
 * the socket's receive buffer holds (EVENTS_RECEIVE_BUFFER), whatever size the datagrams are.
 */
const HELD_BYTES = 4 * 1024 * 1024;

/** The events socket's receive buffer asked for: 4 MB, about 13,000 lines of 300 bytes. */
export const EVENTS_RECEIVE_BUFFER = 4 * 1024 * 1024;

/** An event of the last FOLD_WINDOW_SECONDS that repeats fold into, with what is not shipped yet. */
interface OpenEvent {
  /** The first occurrence: its time, details and request id are the event's. */
  first: WafEventItem;
  /** Occurrences not shipped yet (0: all shipped), the last one's time and their kept request ids. */
  pending: number;
  lastTs: number;
  ids: string[];
  /** Request ids this event may still keep (IDS_PER_EVENT in all, the first ones). */
  idsLeft: number;
}

/**
 * Receives HAProxy's WAF event log lines on a loopback UDP port, folds repeats, applies the daily
 * cap, and hands batches to `ship` (which returns false while the service is unreachable; they are
 * kept then).
 *
 * Folding: a line with the same eventFoldKey (source, reason, rule, domain, method, path, location,
 * blocked) as an event whose first occurrence is at most FOLD_WINDOW_SECONDS away is a repeat: it
 * adds to that event's count (and its request id to the event's first IDS_PER_EVENT) instead of
 * being a new event, whose query and excerpt stay the first occurrence's. A new event is shipped
 * as one item; the repeats folded into it since its last shipment go in the next batch as one
 * item with the same fields and `ts`, `count`, `lastTs` and `requestIds`, which the service folds
 * into the stored event.
 *
 * The cap counts events, not lines (a repeat takes no room), shared out by eventRowFits: of the
 * day's 5,000, 1,000 are kept for detections, so no flood of blocks, rate limits or challenges
 * drops an attack detection.
 */
export class EventCollector {
  private socket: Socket | undefined;
  /** Events repeats may fold into, by eventFoldKey. */
  private open = new Map<string, OpenEvent>();
  /** Events with occurrences to ship, oldest first. */
  private queue: OpenEvent[] = [];
  private day = '';
  private taken: EventRowsTaken = { all: 0, detections: 0, flood: 0 };
  private timer: NodeJS.Timeout | undefined;
  /** Lines not logged because the day's room for their kind of event was full. */
  dropped = 0;
  private readonly rows: EventRowShares;
  /** The latest time a line carried: events whose window it has passed take no more repeats. */
  private latest = 0;
  /**
   * Whether the last shipment was taken. While the service is away, a full queue waits for the
   * timer's next try instead of being offered again with every line (which made each line of a
   * flood cost a batch's worth of work).
   */
  private reachable = true;
  /** Lines received while held (hold), read in order by the last release. */
  private held: string[] = [];
  private heldBytes = 0;
  private holds = 0;

  constructor(
    private readonly ship: (events: WafEventItem[]) => boolean,
    private readonly now: () => Date = () => new Date(),
    /** Events a day (shared out as eventRowsFor does). */
    cap = DAILY_EVENT_CAP,
    /** The secret the HAProxy configuration puts in every line (see parseEventLine). */
    private readonly secret?: () => string,
    /**
     * Called with (address, crawler id) for every valid, authenticated line whose request claimed
     * a search crawler, before the daily cap (the cap limits what is stored, not what is verified).
     */
    private readonly onClaim?: (ip: string, crawlerId: string) => void,
    /**
     * Called with every valid, authenticated event before the daily cap (traffic analytics count
     * blocks during a flood too; analytics.ts).
     */
    private readonly onEvent?: (event: WafEventItem) => void,
    /** Called with every authenticated latency sample (analytics.ts counts them by domain). */
    private readonly onLatency?: (sample: LatencySample) => void,
    /**
     * Names the rule of a country_blocked event, whose line carries none (HAProxy only knows the
     * address is in the domain's set of countries): the agent's lookup of the address's country.
     */
    private readonly countryRule?: (event: WafEventItem) => string | null,
  ) {
    this.rows = eventRowsFor(cap);
  }

  /** Binds 127.0.0.1:port (0 for any) and returns the port. */
  async listen(port: number): Promise<number> {
    // A large receive buffer, so a burst of lines outlasts a pause of the event loop (the kernel
    // caps it at net.core.rmem_max: docs/architecture.md "The event log").
    const socket = createSocket({ type: 'udp4', recvBufferSize: EVENTS_RECEIVE_BUFFER });
    this.socket = socket;
    socket.on('message', (msg) => {
      const line = msg.toString('utf8');
      if (this.holds > 0 && this.heldBytes + line.length <= HELD_BYTES) {
        this.held.push(line);
        this.heldBytes += line.length;
      } else this.accept(line);
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(port, '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
    });
    this.timer = setInterval(() => this.flush(), 1000);
    this.timer.unref();
    return socket.address().port;
  }

  /**
   * Keeps the lines that arrive unread until the matching release: while the agent loads what
   * names their rules (the running configuration's country rules, at its start). At most HELD_BYTES wait; past them a line is read at once, with what is known.
   */
  hold(): void {
    this.holds++;
  }

  /** Lines held unread. */
  get waiting(): number {
    return this.held.length;
  }

  release(): void {
    if (this.holds === 0 || --this.holds > 0) return;
    const lines = this.held;
    this.held = [];
    this.heldBytes = 0;
    for (const line of lines) this.accept(line);
  }

  accept(line: string): void {
    const parsed = parseLogLine(line, this.secret?.());
    if (!parsed) return;
    if ('sample' in parsed) return this.onLatency?.(parsed.sample);
    const e = parsed.event;
    if (e.reason === 'country_blocked' && e.ruleId === null && this.countryRule) e.ruleId = this.countryRule(e);
    if (parsed.claim !== null) this.onClaim?.(e.ip, parsed.claim);
    this.onEvent?.(e);
    this.latest = Math.max(this.latest, e.ts);
    const day = this.now().toISOString().slice(0, 10);
    if (day !== this.day) {
      this.day = day;
      this.taken = { all: 0, detections: 0, flood: 0 };
    }
    const key = eventFoldKey(e);
    const into = this.open.get(key);
    if (into && Math.abs(e.ts - into.first.ts) <= FOLD_WINDOW_SECONDS) this.fold(into, e);
    else if (!eventRowFits(e.reason, this.taken, this.rows)) {
      this.dropped++;
      return; // logging stops when the day is full; blocking does not depend on it
    } else {
      takeEventRow(e.reason, this.taken);
      const opened: OpenEvent = { first: e, pending: 0, lastTs: e.ts, ids: [], idsLeft: IDS_PER_EVENT };
      // deleted first, so that the map stays in the order events opened (forgetClosed relies on it)
      this.open.delete(key);
      this.open.set(key, opened);
      this.fold(opened, e);
    }
    if (this.queue.length > MAX_BUFFERED) clearPending(this.queue.shift()!); // the oldest is given up
    if (this.queue.length >= BATCH && this.reachable) this.flush();
  }

  /** Counts one occurrence into the event, queued to ship if it had nothing pending. */
  private fold(into: OpenEvent, e: WafEventItem): void {
    if (into.pending === 0) {
      this.queue.push(into);
      into.lastTs = e.ts;
    }
    into.pending += 1;
    into.lastTs = Math.max(into.lastTs, e.ts);
    if (e.requestId !== undefined && into.idsLeft > 0) {
      into.ids.push(e.requestId);
      into.idsLeft -= 1;
    }
  }

  flush(): void {
    while (this.queue.length > 0) {
      const events = this.queue.slice(0, BATCH);
      this.reachable = this.ship(events.map(shipped));
      if (!this.reachable) break;
      for (const o of this.queue.splice(0, events.length)) clearPending(o);
    }
    this.forgetClosed();
  }

  /**
   * Events whose window the latest line has passed take no more repeats (by the lines' clock, the
   * one folding compares): the map holds about a window's events, never more than a day's. The map
   * is in the order events opened, which is the lines' order, so the sweep stops at the first
   * event still open: a flush costs the events it forgets, not every open one. A line that arrives
   * out of order can hold back an older event until its own window closes; folding checks the
   * window itself, so such an event only waits longer to be forgotten.
   */
  private forgetClosed(): void {
    for (const [key, o] of this.open) {
      if (this.latest - o.first.ts <= FOLD_WINDOW_SECONDS) break;
      this.open.delete(key);
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.socket?.close();
  }
}

/** The item that ships an event's pending occurrences: the first one's fields, and what folded in. */
function shipped(o: OpenEvent): WafEventItem {
  const { requestId: _first, ...event } = o.first;
  const [requestId, ...requestIds] = o.ids;
  return {
    ...event,
    ...(requestId !== undefined ? { requestId } : {}),
    ...(o.pending > 1 ? { count: Math.min(o.pending, AGENT_LIMITS.foldedPerItem) } : {}),
    ...(o.lastTs !== event.ts ? { lastTs: o.lastTs } : {}),
    ...(requestIds.length > 0 ? { requestIds } : {}),
  };
}

/** The event's pending occurrences are shipped (or given up): the next repeat starts anew. */
function clearPending(o: OpenEvent): void {
  o.pending = 0;
  o.ids = [];
}
