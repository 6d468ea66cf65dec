import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LISTENER_LIMITS, listenerLimitsFromEnv, listenerOptions } from '../src/listener-limits.js';

// docs/api.md "Timeouts and connection limit": the settings and what Node is given.

test('defaults, settings, and values refused naming the variable', () => {
  assert.deepEqual(listenerLimitsFromEnv({}), LISTENER_LIMITS);
  const set = listenerLimitsFromEnv({ RAMPART_REQUEST_TIMEOUT_MS: '5000', RAMPART_HEADERS_TIMEOUT_MS: '8000', RAMPART_MAX_CONNECTIONS: '12' });
  assert.deepEqual(set, { requestTimeoutMs: 5000, headersTimeoutMs: 5000, keepAliveTimeoutMs: LISTENER_LIMITS.keepAliveTimeoutMs, maxConnections: 12 }, 'headers at most the request timeout');
  for (const [name, value] of [
    ['RAMPART_REQUEST_TIMEOUT_MS', '0'],
    ['RAMPART_HEADERS_TIMEOUT_MS', '1.5'],
    ['RAMPART_MAX_CONNECTIONS', 'lots'],
  ] as const) {
    assert.throws(() => listenerLimitsFromEnv({ [name]: value }), new RegExp(`^Error: ${name} must be a whole number above 0`));
  }
});

test('Node checks the timeouts at least every second, or every half headers timeout when shorter', () => {
  assert.deepEqual(listenerOptions(LISTENER_LIMITS), { requestTimeout: 30_000, keepAliveTimeout: 72_000, http: { headersTimeout: 10_000, connectionsCheckingInterval: 1000 } });
  assert.equal(listenerOptions({ ...LISTENER_LIMITS, requestTimeoutMs: 3000, headersTimeoutMs: 1500 }).http.connectionsCheckingInterval, 750);
});
