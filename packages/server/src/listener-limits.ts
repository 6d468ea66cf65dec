// The control plane's HTTP listener against slow and idle clients (docs/api.md "Timeouts and
// connection limit"): a request's headers must arrive within headersTimeoutMs of the connection's
// first byte (or of the previous request, on a kept-alive connection) and the whole request within
// requestTimeoutMs, or the answer is 408 and the connection closes; at most maxConnections are
// open at once (more are closed as they come). An agent's WebSocket leaves both timeouts behind
// once upgraded (the hub's heartbeat watches it); a GET /api/stream answer is not bound by them.

export interface ListenerLimits {
  /** Whole request (line, headers and body), ms. */
  requestTimeoutMs: number;
  /** Request line and headers, ms; at most requestTimeoutMs. */
  headersTimeoutMs: number;
  /** An idle kept-alive connection is closed after this, ms. */
  keepAliveTimeoutMs: number;
  /** Open connections at once, agents' WebSockets and live streams included. */
  maxConnections: number;
}

export const LISTENER_LIMITS: ListenerLimits = {
  requestTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 72_000,
  maxConnections: 10_000,
};

function positiveInt(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a whole number above 0 (got ${JSON.stringify(value)})`);
  return n;
}

/** RAMPART_REQUEST_TIMEOUT_MS, RAMPART_HEADERS_TIMEOUT_MS, RAMPART_MAX_CONNECTIONS; the defaults above otherwise. */
export function listenerLimitsFromEnv(env: NodeJS.ProcessEnv): ListenerLimits {
  const requestTimeoutMs = positiveInt(env, 'RAMPART_REQUEST_TIMEOUT_MS', LISTENER_LIMITS.requestTimeoutMs);
  return {
    requestTimeoutMs,
    headersTimeoutMs: Math.min(requestTimeoutMs, positiveInt(env, 'RAMPART_HEADERS_TIMEOUT_MS', LISTENER_LIMITS.headersTimeoutMs)),
    keepAliveTimeoutMs: LISTENER_LIMITS.keepAliveTimeoutMs,
    maxConnections: positiveInt(env, 'RAMPART_MAX_CONNECTIONS', LISTENER_LIMITS.maxConnections),
  };
}

/**
 * Fastify's and Node's options for these limits. Node checks the timeouts every
 * connectionsCheckingInterval (30 s by default, which would let a slow client run 30 s over);
 * here at most a second, or half the headers timeout when that is shorter.
 */
export function listenerOptions(limits: ListenerLimits) {
  const headersTimeout = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs);
  return {
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    http: { headersTimeout, connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(headersTimeout / 2))) },
  };
}
