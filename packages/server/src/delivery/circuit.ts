/**
 * The circuit breaker of one delivery endpoint (an account's webhook, or its e-mail address),
 * docs/notifications.md "Failing endpoints". Pure: the state before an attempt's outcome in, the
 * state after it out.
 *
 * - After CIRCUIT_THRESHOLD failed attempts in a row the circuit opens: nothing is sent to the
 *   endpoint for a pause that doubles from 1 minute up to 1 hour at each further failure; when it
 *   ends, one delivery is tried (half-open), and its outcome closes or reopens the circuit.
 * - An endpoint whose attempts have all failed for ENDPOINT_DISABLE_AFTER_MS (3 days: Svix waits
 *   5, Stripe a few) is disabled: its pending deliveries are given up, nothing more is queued for
 *   it, and the account is told (a delivery_disabled notification) until its owner saves the
 *   channel again.
 * - Any success closes the circuit and starts the count again.
 */
export const CIRCUIT_THRESHOLD = 5;
export const CIRCUIT_PAUSE_BASE_MS = 60_000;
export const CIRCUIT_PAUSE_CAP_MS = 60 * 60_000;
export const ENDPOINT_DISABLE_AFTER_MS = 3 * 24 * 60 * 60_000;

export interface EndpointState {
  consecutiveFailures: number;
  /** The first failure of the current run of failures. */
  failingSince: Date | null;
  /** The circuit is open until then. */
  pausedUntil: Date | null;
  disabledAt: Date | null;
  lastError: string | null;
}

export const HEALTHY_ENDPOINT: EndpointState = { consecutiveFailures: 0, failingSince: null, pausedUntil: null, disabledAt: null, lastError: null };

/** How long the circuit stays open after the n-th failure in a row (n ≥ CIRCUIT_THRESHOLD). */
export function circuitPauseMs(failures: number): number {
  return Math.min(CIRCUIT_PAUSE_CAP_MS, CIRCUIT_PAUSE_BASE_MS * 2 ** Math.max(0, failures - CIRCUIT_THRESHOLD));
}

/** The endpoint after a failed attempt at `now`: still closed, open for a while, or disabled. */
export function afterFailure(state: EndpointState, now: Date, error: string): EndpointState {
  const failures = state.consecutiveFailures + 1;
  const failingSince = state.failingSince ?? now;
  const next: EndpointState = { consecutiveFailures: failures, failingSince, pausedUntil: null, disabledAt: null, lastError: error };
  if (failures < CIRCUIT_THRESHOLD) return next;
  if (now.getTime() - failingSince.getTime() >= ENDPOINT_DISABLE_AFTER_MS) return { ...next, disabledAt: now };
  return { ...next, pausedUntil: new Date(now.getTime() + circuitPauseMs(failures)) };
}

export type EndpointCondition = 'ok' | 'failing' | 'paused' | 'disabled';

/** What the settings show of an endpoint at `now`. */
export function endpointCondition(state: EndpointState, now: Date): EndpointCondition {
  if (state.disabledAt) return 'disabled';
  if (state.pausedUntil && state.pausedUntil.getTime() > now.getTime()) return 'paused';
  return state.consecutiveFailures > 0 ? 'failing' : 'ok';
}
