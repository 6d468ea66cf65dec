import { AGENT_LIMITS, type WafEventItem, type WafReason } from './messages.js';

// The WAF event log's rules that the agent and the service both apply (docs/architecture.md "The
// event log"): which events are one folded event, and how a day's rows are shared out.

/** Repeats this close (seconds) to an event's first occurrence fold into it. */
export const FOLD_WINDOW_SECONDS = 60;

/** Attack detections: a flood of anything else cannot take the rows kept for them. */
export const DETECTION_REASONS: readonly WafReason[] = [
  'sqli_detected',
  'xss_detected',
  'cmdi_detected',
  'traversal_detected',
  'ssrf_detected',
  'xxe_detected',
  'injection_detected',
  'upload_blocked',
];

/** Rate limits and challenges, what a flood is mostly made of: at most EVENT_ROWS.flood a day. */
export const FLOOD_REASONS: readonly WafReason[] = ['rate_limited', 'bot_challenge'];

/** How one server's rows of a UTC day are shared out. */
export interface EventRowShares {
  perDay: number;
  /** Rows only detections may take: other events stop at perDay minus these. */
  reservedForDetections: number;
  /** Rows FLOOD_REASONS may take at most. */
  flood: number;
}

/** The shares of a cap: a fifth kept for detections, at most half for rate limits and challenges. */
export function eventRowsFor(perDay: number): EventRowShares {
  return { perDay, reservedForDetections: Math.floor(perDay / 5), flood: Math.ceil(perDay / 2) };
}

/** AGENT_LIMITS.eventsPerServerPerDay (5,000): 1,000 kept for detections, at most 2,500 of floods. */
export const EVENT_ROWS: EventRowShares = eventRowsFor(AGENT_LIMITS.eventsPerServerPerDay);

/** A day's rows so far: all of them, and those of detections and of FLOOD_REASONS. */
export interface EventRowsTaken {
  all: number;
  detections: number;
  flood: number;
}

/** Whether a new row of this reason still fits in the day (a repeat folded into a row takes none). */
export function eventRowFits(reason: WafReason, taken: EventRowsTaken, rows: EventRowShares = EVENT_ROWS): boolean {
  if (taken.all >= rows.perDay) return false;
  if (DETECTION_REASONS.includes(reason)) return true;
  if (taken.all - taken.detections >= rows.perDay - rows.reservedForDetections) return false;
  return !FLOOD_REASONS.includes(reason) || taken.flood < rows.flood;
}

/** Counts a new row of this reason in `taken`. */
export function takeEventRow(reason: WafReason, taken: EventRowsTaken): void {
  taken.all += 1;
  if (DETECTION_REASONS.includes(reason)) taken.detections += 1;
  if (FLOOD_REASONS.includes(reason)) taken.flood += 1;
}

/** What makes two events the same: only such events fold into one (and its first details). */
export type FoldFields = Pick<WafEventItem, 'ip' | 'domain' | 'reason' | 'ruleId' | 'method' | 'path' | 'location' | 'blocked'>;

/**
 * The identity two events must share to fold: source, reason, rule, domain (any case), method,
 * path, location and whether the request was blocked. The excerpt and the query are not part of
 * it (a repeat keeps the first one's).
 */
export function eventFoldKey(e: FoldFields): string {
  return JSON.stringify([e.ip, e.reason, e.ruleId, e.domain.toLowerCase(), e.method ?? null, e.path ?? null, e.location ?? null, e.blocked ?? true]);
}

/** What replaces a credential's value (the same word the control plane's logs use). */
export const REDACTED = '[redacted]';
/** Query parameter names that look like credentials (a token, an API key, a password, a signature, an OAuth code). */
const CREDENTIAL_PARAM = /token|key|secret|pass|sig|code|auth/i;

/** Whether a query parameter's name (raw or percent-encoded, `+` for a blank) looks like a credential's. */
export function isCredentialParam(name: string): boolean {
  if (CREDENTIAL_PARAM.test(name)) return true;
  try {
    return CREDENTIAL_PARAM.test(decodeURIComponent(name.replace(/\+/g, ' ')));
  } catch {
    return false; // a malformed escape: the raw name was looked at
  }
}

/**
 * A query string (without the `?`) with the values of credential-like parameters replaced by
 * `[redacted]`: `q=x&token=abc` -> `q=x&token=[redacted]`. Other pairs go through `other` (kept as
 * they are by default). Both the control plane's logs and the event log's query excerpt
 * (docs/architecture.md "The event log") apply it.
 */
export function redactQueryCredentials(query: string, other: (pair: string) => string = (pair) => pair): string {
  return query
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      return eq !== -1 && isCredentialParam(pair.slice(0, eq)) ? `${pair.slice(0, eq)}=${REDACTED}` : other(pair);
    })
    .join('&');
}
