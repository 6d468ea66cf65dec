import { timingSafeEqual } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { AGENT_LIMITS, EVENT_FIELD_MAX, isHostname, isIP, isUuid, searchCrawler, WAF_REASONS, type WafEventItem } from '@rampart/protocol';

/** docs/architecture.md "The event log": at most 5,000 events per server per (UTC) day are stored; blocking goes on regardless. */
export const DAILY_EVENT_CAP = AGENT_LIMITS.eventsPerServerPerDay;
const MAX_BUFFERED = AGENT_LIMITS.bufferedEvents;
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
 * request's User-Agent claimed (an id of SEARCH_CRAWLERS) or "-" (see parseEvent).
 * The older five-field form ("... <reason> <rule>") still parses,
 * as a blocked event without request details, and a line without the request id (proxies from before
 * it) as an event without one, so that a mixed fleet keeps working.
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
  const m = /rampart-waf (?:([0-9a-f]{32,64}) )?(\d+) (\S+) (\S+) (\S+) (\S+)(?: (\S+) (\S+) (\S+) (\S+) (\S+)(?: (\S+)(?: (\S+))?)?)?\s*$/.exec(line);
  if (!m) return undefined;
  const [, token, ts, ip, domain, reason, rule, action, method, location, path, matched, requestId, claimed] = m as unknown as [string, string | undefined, string, string, string, string, string, ...(string | undefined)[]];
  if (secret !== undefined && !sameSecret(token, secret)) return undefined;
  if (!isIP(ip) || !isHostname(domain) || !REASONS.has(reason)) return undefined;
  const base = { ts: Number(ts), ip, domain, reason: reason as WafEventItem['reason'], ruleId: isUuid(rule) ? rule : null };
  if (action === undefined) return { event: { ...base, method: null, path: null, location: null, matched: null, blocked: true }, claim: null };
  const blocked = ACTIONS.get(action);
  if (blocked === undefined) return undefined;
  const claim = claimed !== undefined && searchCrawler(claimed) ? claimed : null;
  const event: WafEventItem = {
    ...base,
    method: capLength(decodeField(method!), EVENT_FIELD_MAX.method),
    path: capLength(decodeField(path!), EVENT_FIELD_MAX.path),
    location: optional(location!, EVENT_FIELD_MAX.location),
    matched: optional(matched!, EVENT_FIELD_MAX.matched),
    blocked,
    // the proxy's request id (newer proxies): kept when of the protocol's form, else left out
    ...(requestId !== undefined && REQUEST_ID_RE.test(requestId) ? { requestId } : {}),
  };
  return { event, claim };
}

function sameSecret(token: string | undefined, secret: string): boolean {
  if (token === undefined || token.length !== secret.length) return false;
  return timingSafeEqual(Buffer.from(token), Buffer.from(secret));
}

/**
 * Receives HAProxy's WAF event log lines on a loopback UDP port, applies the daily cap, and hands
 * batches to `ship` (which returns false while the service is unreachable; they are kept then).
 */
export class EventCollector {
  private socket: Socket | undefined;
  private buffer: WafEventItem[] = [];
  private day = '';
  private countToday = 0;
  private timer: NodeJS.Timeout | undefined;
  dropped = 0;

  constructor(
    private readonly ship: (events: WafEventItem[]) => boolean,
    private readonly now: () => Date = () => new Date(),
    private readonly cap = DAILY_EVENT_CAP,
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
  ) {}

  /** Binds 127.0.0.1:port (0 for any) and returns the port. */
  async listen(port: number): Promise<number> {
    const socket = createSocket('udp4');
    this.socket = socket;
    socket.on('message', (msg) => this.accept(msg.toString('utf8')));
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

  accept(line: string): void {
    const parsed = parseEvent(line, this.secret?.());
    if (!parsed) return;
    const e = parsed.event;
    if (parsed.claim !== null) this.onClaim?.(e.ip, parsed.claim);
    this.onEvent?.(e);
    const day = this.now().toISOString().slice(0, 10);
    if (day !== this.day) {
      this.day = day;
      this.countToday = 0;
    }
    if (this.countToday >= this.cap) {
      this.dropped++;
      return; // logging stops at the cap; blocking does not depend on it
    }
    this.countToday++;
    this.buffer.push(e);
    if (this.buffer.length > MAX_BUFFERED) this.buffer.shift();
    if (this.buffer.length >= BATCH) this.flush();
  }

  flush(): void {
    while (this.buffer.length > 0) {
      const batch = this.buffer.slice(0, BATCH);
      if (!this.ship(batch)) return;
      this.buffer.splice(0, batch.length);
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.socket?.close();
  }
}
