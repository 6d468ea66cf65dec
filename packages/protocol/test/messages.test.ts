import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { EVENT_FIELD_MAX, parseAgentMessage, parseServiceMessage, PROTOCOL_VERSION, WAF_MODES, WAF_REASONS, type AgentMessage, type ServerSnapshot, type ServiceMessage } from '../src/index.js';

// docs/architecture.md "The agent connection": WebSocket messages are named area/verb, each with a schema; no `any` crosses the
// wire. Both ends parse through these functions, so anything they let through reaches the hub or
// the agent as typed data.

const SNAPSHOT: ServerSnapshot = {
  serverId: '8a6e0804-2bd0-4672-b79d-d97358460c01',
  revision: 3,
  domains: [
    {
      id: 'd1',
      domain: 'www.example.com',
      origins: [
        { ip: '10.0.0.1', port: 80 },
        { ip: '2001:db8::1', port: 8443 },
      ],
      sslEnabled: true,
      wafEnabled: false,
      wafLevel: 'high',
      wafMode: 'detect',
      serverAddresses: ['198.51.100.4', '2001:db8::4'],
    },
  ],
  rules: [
    { id: 'r1', type: 'block_ip', value: '192.0.2.0/24', domainId: 'd1', priority: 1 },
    { id: 'r2', type: 'rate_limit', value: '{"requests_per_minute":60}', domainId: null, priority: 10 },
    { id: 'r3', type: 'waf_exception', value: '{"path":"/comments","location":"body:content","detector":"xss"}', domainId: 'd1', priority: 100 },
  ],
};

/** Fields older agents do not send: the service must parse messages without them. */
const OPTIONAL_FIELDS = new Set(['httpPort', 'proxyServing', 'method', 'path', 'location', 'matched', 'blocked']);

const VALID_AGENT: AgentMessage[] = [
  { type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: '0.1.0', runningRevision: null } },
  { type: 'agent/hello', payload: { protocol: 99, agentVersion: '9.9.9', runningRevision: 12 } },
  { type: 'agent/heartbeat', payload: { runningRevision: null } },
  { type: 'agent/heartbeat', payload: { runningRevision: 4 } },
  { type: 'config/ack', payload: { revision: 3, ok: true, errors: [] } },
  {
    type: 'config/ack',
    payload: {
      revision: 3,
      ok: false,
      errors: [
        { line: 12, message: "unknown keyword 'foo'" },
        { line: null, message: 'reload failed' },
      ],
    },
  },
  { type: 'status/report', payload: { kind: 'proxy_crash', message: 'HAProxy exited (SIGKILL)' } },
  { type: 'status/report', payload: { kind: 'proxy_reload_failed', message: 'Reload to revision 4 failed' } },
  { type: 'status/report', payload: { kind: 'server_error', message: '' } },
  { type: 'acme/slot-request', payload: { requestId: 'r-1', domain: 'www.example.com' } },
  {
    type: 'acme/challenge-publish',
    payload: { requestId: 'r_2', domain: 'www.example.com', token: 'tok-EN_1', keyAuthorization: `tok-EN_1.${'A'.repeat(43)}`, action: 'add' },
  },
  { type: 'cert/status', payload: { domain: 'www.example.com', status: 'active', expiresAt: 1767225600, message: null } },
  { type: 'cert/status', payload: { domain: 'www.example.com', status: 'error', expiresAt: null, message: 'www.example.com resolves to 203.0.113.9' } },
  // Health (issue 10): optional, so agents from before them still parse.
  { type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: '0.1.0', runningRevision: 3, httpPort: 8080 } },
  { type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: '0.1.0', runningRevision: null, httpPort: 1 } },
  { type: 'agent/heartbeat', payload: { runningRevision: 4, proxyServing: true } },
  { type: 'agent/heartbeat', payload: { runningRevision: null, proxyServing: false } },
];

const VALID_SERVICE: ServiceMessage[] = [
  { type: 'config/snapshot', payload: SNAPSHOT },
  { type: 'config/snapshot', payload: { serverId: 's', revision: 0, domains: [], rules: [] } },
  { type: 'service/heartbeat', payload: {} },
  { type: 'acme/slot-reply', payload: { requestId: 'r-1', granted: true, message: null } },
  { type: 'acme/slot-reply', payload: { requestId: 'r-1', granted: false, message: 'the next order can be placed after ...' } },
  { type: 'acme/challenge', payload: { domain: 'www.example.com', token: 'tok', keyAuthorization: `tok.${'b'.repeat(43)}`, action: 'remove' } },
  { type: 'acme/challenge-reply', payload: { requestId: 'r-1', relayedTo: 2 } },
];

function accepted<T>(r: { ok: true; message: T } | { ok: false; error: string }, label: string): T {
  assert.equal(r.ok, true, `${label} should be accepted${r.ok ? '' : `: ${r.error}`}`);
  return (r as { ok: true; message: T }).message;
}
function refused(r: { ok: boolean; error?: string }, label: string): string {
  assert.equal(r.ok, false, `${label} should be refused`);
  assert.equal(typeof r.error, 'string', `${label}: error is a string`);
  assert.ok(r.error!.length > 0, `${label}: error is not empty`);
  return r.error!;
}
const clone = <T>(v: T): any => JSON.parse(JSON.stringify(v));

describe('parseAgentMessage', () => {
  test('accepts a valid message of every type and returns it unchanged', () => {
    const types = new Set<string>();
    for (const m of VALID_AGENT) {
      const raw = JSON.stringify(m);
      assert.deepEqual(accepted(parseAgentMessage(raw), raw), m);
      types.add(m.type);
    }
    assert.deepEqual([...types].sort(), ['acme/challenge-publish', 'acme/slot-request', 'agent/heartbeat', 'agent/hello', 'cert/status', 'config/ack', 'status/report']);
  });

  test('refuses text that is not JSON', () => {
    for (const raw of ['', 'hello', '{', '{"type":"agent/hello",', "{'type':'agent/hello'}", 'undefined', '\u0000']) {
      assert.equal(refused(parseAgentMessage(raw), JSON.stringify(raw)), 'not JSON');
    }
  });

  test('refuses JSON that is not a message object', () => {
    for (const raw of ['null', '1', '"agent/hello"', '[]', 'true', '{}', '{"type":"agent/hello"}', '{"payload":{}}']) refused(parseAgentMessage(raw), raw);
  });

  test('refuses an unknown type, and the service-to-agent types', () => {
    for (const type of ['agent/goodbye', 'AGENT/HELLO', 'agent/hello ', 'config/snapshot', 'service/heartbeat', '']) {
      refused(parseAgentMessage(JSON.stringify({ type, payload: { runningRevision: null } })), type);
    }
  });

  test('refuses extra fields at the top level and in every payload', () => {
    for (const m of VALID_AGENT) {
      refused(parseAgentMessage(JSON.stringify({ ...m, extra: 1 })), `${m.type} with a top-level extra`);
      refused(parseAgentMessage(JSON.stringify({ ...m, payload: { ...m.payload, extra: 1 } })), `${m.type} with a payload extra`);
    }
    const ack = clone(VALID_AGENT[5]);
    ack.payload.errors[0].column = 3;
    refused(parseAgentMessage(JSON.stringify(ack)), 'config/ack error with an extra field');
  });

  test('refuses missing fields', () => {
    for (const m of VALID_AGENT) {
      for (const key of Object.keys(m.payload)) {
        const bad = clone(m);
        delete bad.payload[key];
        if (OPTIONAL_FIELDS.has(key)) assert.equal(parseAgentMessage(JSON.stringify(bad)).ok, true, `${m.type} without the optional ${key}`);
        else refused(parseAgentMessage(JSON.stringify(bad)), `${m.type} without ${key}`);
      }
    }
  });

  test('refuses wrong types', () => {
    const bad: unknown[] = [
      { type: 'agent/hello', payload: { protocol: '1', agentVersion: '0.1.0', runningRevision: null } },
      { type: 'agent/hello', payload: { protocol: 1.5, agentVersion: '0.1.0', runningRevision: null } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: 1, runningRevision: null } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: 'x'.repeat(65), runningRevision: null } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: '0.1.0', runningRevision: '3' } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: '0.1.0', runningRevision: 2.5 } },
      { type: 'agent/hello', payload: null },
      { type: 'agent/hello', payload: [] },
      { type: 1, payload: {} },
      { type: 'agent/heartbeat', payload: { runningRevision: false } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: '0.1.0', runningRevision: null, httpPort: 0 } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: '0.1.0', runningRevision: null, httpPort: 65536 } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: '0.1.0', runningRevision: null, httpPort: '80' } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: '0.1.0', runningRevision: null, httpPort: 80.5 } },
      { type: 'agent/hello', payload: { protocol: 1, agentVersion: '0.1.0', runningRevision: null, httpPort: null } },
      { type: 'agent/heartbeat', payload: { runningRevision: 1, proxyServing: 'yes' } },
      { type: 'agent/heartbeat', payload: { runningRevision: 1, proxyServing: null } },
      { type: 'agent/heartbeat', payload: { runningRevision: 1, proxyServing: 1 } },
      { type: 'config/ack', payload: { revision: '3', ok: true, errors: [] } },
      { type: 'config/ack', payload: { revision: 3.1, ok: true, errors: [] } },
      { type: 'config/ack', payload: { revision: 3, ok: 'true', errors: [] } },
      { type: 'config/ack', payload: { revision: 3, ok: 1, errors: [] } },
      { type: 'config/ack', payload: { revision: 3, ok: false, errors: 'broken' } },
      { type: 'config/ack', payload: { revision: 3, ok: false, errors: [{ line: '12', message: 'x' }] } },
      { type: 'config/ack', payload: { revision: 3, ok: false, errors: [{ line: 12 }] } },
      { type: 'config/ack', payload: { revision: 3, ok: false, errors: ['x'] } },
      { type: 'config/ack', payload: { revision: 3, ok: false, errors: Array.from({ length: 51 }, () => ({ line: null, message: 'x' })) } },
      { type: 'status/report', payload: { kind: 'server_down', message: 'x' } },
      { type: 'status/report', payload: { kind: 'proxy_crash', message: 42 } },
      { type: 'status/report', payload: { kind: 'proxy_crash', message: 'x'.repeat(4001) } },
      { type: 'acme/slot-request', payload: { requestId: 'has space', domain: 'www.example.com' } },
      { type: 'acme/slot-request', payload: { requestId: 'r', domain: '' } },
      { type: 'acme/challenge-publish', payload: { requestId: 'r', domain: 'a.example.com', token: 't/../x', keyAuthorization: `t.${'A'.repeat(43)}`, action: 'add' } },
      { type: 'acme/challenge-publish', payload: { requestId: 'r', domain: 'a.example.com', token: 't', keyAuthorization: 't.short', action: 'add' } },
      { type: 'acme/challenge-publish', payload: { requestId: 'r', domain: 'a.example.com', token: 't', keyAuthorization: `t.${'A'.repeat(43)}`, action: 'replace' } },
      { type: 'cert/status', payload: { domain: 'a.example.com', status: 'off', expiresAt: null, message: null } },
      { type: 'cert/status', payload: { domain: 'a.example.com', status: 'active', expiresAt: -1, message: null } },
      { type: 'cert/status', payload: { domain: 'a.example.com', status: 'active', expiresAt: '2026-01-01', message: null } },
    ];
    for (const m of bad) refused(parseAgentMessage(JSON.stringify(m)), JSON.stringify(m).slice(0, 120));
  });

  test('the error names where the message is wrong', () => {
    const error = refused(parseAgentMessage(JSON.stringify({ type: 'config/ack', payload: { revision: 'x', ok: true, errors: [] } })), 'ack');
    assert.match(error, /^\/.*: /, error);
  });
});

describe('parseServiceMessage', () => {
  test('accepts a valid message of every type and returns it unchanged', () => {
    const types = new Set<string>();
    for (const m of VALID_SERVICE) {
      const raw = JSON.stringify(m);
      assert.deepEqual(accepted(parseServiceMessage(raw), raw.slice(0, 80)), m);
      types.add(m.type);
    }
    assert.deepEqual([...types].sort(), ['acme/challenge', 'acme/challenge-reply', 'acme/slot-reply', 'config/snapshot', 'service/heartbeat']);
  });

  test('refuses text that is not JSON', () => {
    for (const raw of ['', 'snapshot', '{"type":"config/snapshot"', '[1,]']) assert.equal(refused(parseServiceMessage(raw), JSON.stringify(raw)), 'not JSON');
  });

  test('refuses an unknown type, and the agent-to-service types', () => {
    for (const type of ['config/diff', 'service/hello', 'agent/heartbeat', 'config/ack']) {
      refused(parseServiceMessage(JSON.stringify({ type, payload: {} })), type);
    }
    refused(parseServiceMessage(JSON.stringify({ type: 'agent/heartbeat', payload: { runningRevision: null } })), 'agent heartbeat');
  });

  test('refuses extra fields anywhere in a snapshot', () => {
    const paths: ((s: any) => void)[] = [
      (s) => (s.extra = true),
      (s) => (s.payload.extra = true),
      (s) => (s.payload.domains[0].extra = true),
      (s) => (s.payload.domains[0].origins[0].extra = true),
      (s) => (s.payload.rules[0].extra = true),
    ];
    for (const mutate of paths) {
      const m = clone(VALID_SERVICE[0]);
      mutate(m);
      refused(parseServiceMessage(JSON.stringify(m)), mutate.toString());
    }
    refused(parseServiceMessage(JSON.stringify({ type: 'service/heartbeat', payload: { at: 1 } })), 'heartbeat with a payload field');
  });

  test('refuses a snapshot whose revision is not a non-negative integer', () => {
    for (const revision of [1.5, '3', -1, null, true, 1e400]) {
      const m = clone(VALID_SERVICE[0]);
      m.payload.revision = revision;
      refused(parseServiceMessage(JSON.stringify(m)), `revision ${String(revision)}`);
    }
    // Written by hand: JSON.stringify cannot produce these.
    refused(parseServiceMessage(JSON.stringify(VALID_SERVICE[1]).replace('"revision":0', '"revision":0.5')), 'revision 0.5');
    refused(parseServiceMessage(JSON.stringify(VALID_SERVICE[1]).replace('"revision":0', '"revision":1e400')), 'revision 1e400');
  });

  test('refuses wrong types inside a snapshot', () => {
    const mutations: [string, (s: any) => void][] = [
      ['serverId a number', (s) => (s.payload.serverId = 1)],
      ['domains not an array', (s) => (s.payload.domains = {})],
      ['rules missing', (s) => delete s.payload.rules],
      ['domain name a number', (s) => (s.payload.domains[0].domain = 5)],
      ['origin port 0', (s) => (s.payload.domains[0].origins[0].port = 0)],
      ['origin port 65536', (s) => (s.payload.domains[0].origins[0].port = 65536)],
      ['origin port a string', (s) => (s.payload.domains[0].origins[0].port = '80')],
      ['origin ip missing', (s) => delete s.payload.domains[0].origins[0].ip],
      ['sslEnabled a string', (s) => (s.payload.domains[0].sslEnabled = 'yes')],
      ['serverAddresses missing', (s) => delete s.payload.domains[0].serverAddresses],
      ['serverAddresses not strings', (s) => (s.payload.domains[0].serverAddresses = [4])],
      ['unknown waf level', (s) => (s.payload.domains[0].wafLevel = 'paranoid')],
      ['unknown waf mode', (s) => (s.payload.domains[0].wafMode = 'log')],
      ['waf mode missing', (s) => delete s.payload.domains[0].wafMode],
      ['unknown rule type', (s) => (s.payload.rules[0].type = 'block_everything')],
      ['rule priority fractional', (s) => (s.payload.rules[0].priority = 1.5)],
      ['rule domainId a number', (s) => (s.payload.rules[0].domainId = 7)],
      ['payload null', (s) => (s.payload = null)],
    ];
    for (const [label, mutate] of mutations) {
      const m = clone(VALID_SERVICE[0]);
      mutate(m);
      refused(parseServiceMessage(JSON.stringify(m)), label);
    }
  });
});

describe('events/batch', () => {
  const batch = (events: unknown[]) => JSON.stringify({ type: 'events/batch', payload: { events } });
  const base = { ts: 1795329600, ip: '203.0.113.9', domain: 'shop.example.com', reason: 'sqli_detected', ruleId: null };
  const full = { ...base, method: 'POST', path: '/comments', query: 'page=2', location: 'body:content', matched: "' OR 1=1", blocked: false };

  test('snapshot domains carry wafMode block or detect', () => {
    assert.deepEqual([...WAF_MODES], ['block', 'detect']);
    for (const wafMode of WAF_MODES) {
      const m = clone(VALID_SERVICE[0]);
      m.payload.domains[0].wafMode = wafMode;
      assert.equal(accepted(parseServiceMessage(JSON.stringify(m)), wafMode).type, 'config/snapshot');
    }
  });

  test('every reason code, including the new detectors, is accepted', () => {
    for (const r of ['sqli_detected', 'xss_detected', 'cmdi_detected', 'traversal_detected', 'ssrf_detected', 'xxe_detected', 'injection_detected', 'upload_blocked']) {
      assert.ok((WAF_REASONS as readonly string[]).includes(r), r);
    }
    for (const reason of WAF_REASONS) accepted(parseAgentMessage(batch([{ ...full, reason }])), reason);
    refused(parseAgentMessage(batch([{ ...full, reason: 'rce_detected' }])), 'an unknown reason');
  });

  test('accepts events with request details, and without them (agents from before them)', () => {
    const m = accepted(parseAgentMessage(batch([full, base, { ...base, method: null, path: null, location: null, matched: null, blocked: true }])), 'batch');
    assert.equal(m.type, 'events/batch');
    if (m.type === 'events/batch') assert.deepEqual(m.payload.events[0], full);
  });

  test('details are capped: method 16, path 256, query 192, location 80, matched 64 (UTF-16 code units)', () => {
    assert.deepEqual(EVENT_FIELD_MAX, { method: 16, path: 256, query: 192, location: 80, matched: 64 });
    for (const [field, max] of Object.entries(EVENT_FIELD_MAX)) {
      accepted(parseAgentMessage(batch([{ ...full, [field]: 'x'.repeat(max) }])), `${field} at ${max}`);
      refused(parseAgentMessage(batch([{ ...full, [field]: 'x'.repeat(max + 1) }])), `${field} over ${max}`);
      // An astral character is two code units: max/2 of them fit, one more does not.
      accepted(parseAgentMessage(batch([{ ...full, [field]: '😀'.repeat(max / 2) }])), `${field} astral at ${max}`);
      refused(parseAgentMessage(batch([{ ...full, [field]: '😀'.repeat(max / 2) + 'x' }])), `${field} astral over ${max}`);
    }
  });

  test('refuses wrong types and extra fields in an event', () => {
    for (const bad of [
      { ...full, blocked: 'false' },
      { ...full, blocked: null },
      { ...full, blocked: 0 },
      { ...full, method: 5 },
      { ...full, path: ['/'] },
      { ...full, location: {} },
      { ...full, matched: false },
      { ...full, action: 'detect' },
    ]) {
      refused(parseAgentMessage(batch([bad])), JSON.stringify(bad));
    }
  });
});
