/** What a channel delivers of a notification (the fields the API shows, without its count). */
export interface DeliverableNotification {
  id: string;
  kind: string;
  message: string;
  serverId?: string | null;
  domainId?: string | null;
  createdAt: Date | string;
}

/** The outcome of one delivery attempt, as the delivery log records it. */
export interface DeliveryResult {
  ok: boolean;
  /** The receiver's answer when it gave one: the HTTP status (webhook) or SMTP reply code (e-mail). */
  status?: number;
  /** Why the attempt failed, short enough for the log. */
  error?: string;
  durationMs: number;
}

/** A delivery error is cut to this many characters: it comes from the receiver and goes into the log. */
const MAX_ERROR_LENGTH = 300;

export function shortError(text: string): string {
  const oneLine = text.replace(/\s+/g, ' ').trim();
  return oneLine.length > MAX_ERROR_LENGTH ? `${oneLine.slice(0, MAX_ERROR_LENGTH)}...` : oneLine;
}

/** Times one attempt: the result it gives, with how long it has taken since the call. */
export function stopwatch(): (r: Omit<DeliveryResult, 'durationMs'>) => DeliveryResult {
  const started = performance.now();
  return (r) => ({ ...r, durationMs: Math.round(performance.now() - started) });
}
