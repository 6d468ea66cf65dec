import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AGENT_LIMITS, AgentMessage, EVENT_FIELD_MAX, parseAgentMessage } from '../src/index.js';

// docs/api.md "The agent WebSocket", limits: an agent holding a valid token can send only
// bounded messages. Every string an agent sends has a length cap or a pattern, every array a
// length cap, every integer a range, so nothing it sends can grow without limit.

type Schema = {
  type?: string;
  anyOf?: Schema[];
  properties?: Record<string, Schema>;
  items?: Schema;
  maxLength?: number;
  pattern?: string;
  maxItems?: number;
  maximum?: number;
  minimum?: number;
  const?: unknown;
};

function unbounded(s: Schema, path: string, out: string[]): string[] {
  if (s.anyOf) s.anyOf.forEach((x, i) => unbounded(x, `${path}|${i}`, out));
  if (s.const !== undefined) return out; // a literal
  if (s.type === 'string' && s.maxLength === undefined && s.pattern === undefined) out.push(`${path}: string without maxLength`);
  if (s.type === 'array') {
    if (s.maxItems === undefined) out.push(`${path}: array without maxItems`);
    if (s.items) unbounded(s.items, `${path}[]`, out);
  }
  if ((s.type === 'integer' || s.type === 'number') && (s.maximum === undefined || s.minimum === undefined)) out.push(`${path}: ${s.type} without a range`);
  if (s.properties) for (const [k, v] of Object.entries(s.properties)) unbounded(v, `${path}.${k}`, out);
  return out;
}

test('every string, array and integer of every agent-to-service message is bounded', () => {
  const found: string[] = [];
  for (const m of (AgentMessage as unknown as Schema).anyOf!) unbounded(m, String((m.properties!.type as Schema).const), found);
  assert.deepEqual(found, []);
});

test('the limits are enforced by the parser', () => {
  const ack = (revision: number, errors: unknown[] = []) => JSON.stringify({ type: 'config/ack', payload: { revision, ok: errors.length === 0, errors } });
  assert.equal(parseAgentMessage(ack(Number.MAX_SAFE_INTEGER)).ok, true, 'the largest exact integer is a revision');
  assert.equal(parseAgentMessage(ack(2 ** 60)).ok, false, 'a revision past 2^53');
  assert.equal(parseAgentMessage(ack(-1)).ok, false, 'a negative revision');
  const error = (message: string) => ({ line: 1, message });
  assert.equal(parseAgentMessage(ack(3, [error('x'.repeat(AGENT_LIMITS.ackErrorMessage))])).ok, true);
  assert.equal(parseAgentMessage(ack(3, [error('x'.repeat(AGENT_LIMITS.ackErrorMessage + 1))])).ok, false, 'an ack error message over its cap');
  assert.equal(
    parseAgentMessage(
      ack(
        3,
        Array.from({ length: AGENT_LIMITS.ackErrors + 1 }, () => error('x')),
      ),
    ).ok,
    false,
    'too many ack errors',
  );
  const event = { ts: 1, ip: '203.0.113.1', domain: 'shop.example.com', reason: 'ip_blocked', ruleId: null };
  const batch = (n: number) => JSON.stringify({ type: 'events/batch', payload: { events: Array.from({ length: n }, () => event) } });
  assert.equal(parseAgentMessage(batch(AGENT_LIMITS.eventsPerBatch)).ok, true);
  assert.equal(parseAgentMessage(batch(AGENT_LIMITS.eventsPerBatch + 1)).ok, false, 'a batch over the cap');
  assert.equal(parseAgentMessage(JSON.stringify({ type: 'events/batch', payload: { events: [{ ...event, ts: 1e300 }] } })).ok, false, 'a time past year 9999');
});

test('the largest valid message of every type fits under the message size cap', () => {
  // Every character at its cap, and each one a control character JSON escapes as \u0001 (6 bytes):
  // a message over the cap is never a valid one, so an honest agent is never cut off for size.
  const c = (n: number) => '\u0001'.repeat(n);
  const id = 'x'.repeat(64);
  const event = {
    ts: 253_402_300_799,
    ip: c(45),
    domain: c(253),
    reason: 'traversal_detected',
    ruleId: c(36),
    method: c(EVENT_FIELD_MAX.method),
    path: c(EVENT_FIELD_MAX.path),
    query: c(EVENT_FIELD_MAX.query),
    location: c(EVENT_FIELD_MAX.location),
    matched: c(EVENT_FIELD_MAX.matched),
    blocked: false,
    requestId: id,
    count: AGENT_LIMITS.foldedPerItem,
    lastTs: 253_402_300_799,
    requestIds: Array.from({ length: AGENT_LIMITS.requestIdsPerEvent - 1 }, () => id),
  };
  const largest = [
    { type: 'events/batch', payload: { events: Array.from({ length: AGENT_LIMITS.eventsPerBatch }, () => event) } },
    {
      type: 'config/ack',
      payload: {
        revision: Number.MAX_SAFE_INTEGER,
        ok: false,
        errors: Array.from({ length: AGENT_LIMITS.ackErrors }, () => ({ line: Number.MAX_SAFE_INTEGER, message: c(AGENT_LIMITS.ackErrorMessage) })),
      },
    },
    { type: 'status/report', payload: { kind: 'proxy_reload_failed', message: c(AGENT_LIMITS.statusMessage) } },
  ];
  for (const m of largest) {
    const raw = JSON.stringify(m);
    assert.equal(parseAgentMessage(raw).ok, true, m.type);
    assert.ok(Buffer.byteLength(raw) < AGENT_LIMITS.messageBytes, `${m.type}: ${Buffer.byteLength(raw)} bytes`);
  }
});

test('the limits the two ends share are in one place', () => {
  assert.equal(AGENT_LIMITS.eventsPerServerPerDay, 5000);
  assert.equal(AGENT_LIMITS.eventsPerBatch, 500);
  assert.ok(AGENT_LIMITS.messageBytes <= 4 * 1024 * 1024);
});
