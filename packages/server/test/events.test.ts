import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CLOSE, EVENT_FIELD_MAX } from '@rampart/protocol';
import { pruneEvents, storeEvents } from '../src/services/events.js';
import { waitFor } from '../../../test/support/processes.js';
import { apiFixtures, FakeAgent, hubServer, WAIT_MS } from './fake-agent.js';
import { ADMIN_TOKEN, backends, call, makeTestApp, newAccount, type TestApp } from './helpers.js';

const t = await makeTestApp();
const outer = t;
const RULE = '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab';

/** A server with these domains assigned: the service stores events only for a server's own domains. */
async function serverWith(t: TestApp, key: string, ...domains: string[]) {
  const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
  assert.equal(srv.status, 201);
  for (const domain of domains) {
    const r = await call(t.app, 'POST', '/api/domains', { key, body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [srv.body.id], sslEnabled: false } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
  return srv;
}
const stored = async (p: Promise<{ stored: number }>) => (await p).stored;
/** A distinct source address for each n (identical events within 60 s fold into one). */
const ipOf = (n: number) => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;

test('stored events are capped at 5,000 per server per UTC day (detections may take them all), and listed 50 newest first', async () => {
  t.clock.set(new Date('2026-11-22T12:00:00Z')); // mid-day, so the whole batch falls on one UTC day
  const { key, accountId } = await newAccount(t.app);
  const srv = await serverWith(t, key, 'shop.example.com');
  const base = Math.floor(t.clock.now().getTime() / 1000) - 7200;
  const batch = (n: number, from: number) =>
    Array.from({ length: n }, (_, i) => ({ ts: base + from + i, ip: ipOf(from + i), domain: 'shop.example.com', reason: 'sqli_detected' as const, ruleId: null }));
  let total = 0;
  for (let i = 0; i < 11; i++) total += await stored(storeEvents(t.ctx, accountId, srv.body.id, batch(500, i * 500)));
  assert.equal(total, 5000);
  const events = await call(t.app, 'GET', '/api/waf/events', { key });
  assert.equal(events.body.length, 50);
  assert.equal(Date.parse(events.body[0].timestamp) / 1000, base + 4999, 'the newest first');
  assert.ok(Date.parse(events.body[0].timestamp) > Date.parse(events.body[49].timestamp));
});

test('the retention job deletes events older than 7 days and keeps the rest', async () => {
  const { key, accountId } = await newAccount(t.app);
  const srv = await serverWith(t, key, 'old.example.com', 'recent.example.com');
  const now = Math.floor(t.clock.now().getTime() / 1000);
  await storeEvents(t.ctx, accountId, srv.body.id, [
    { ts: now - 8 * 86400, ip: '203.0.113.1', domain: 'old.example.com', reason: 'rate_limited', ruleId: null },
    { ts: now - 6 * 86400, ip: '203.0.113.2', domain: 'recent.example.com', reason: 'xss_detected', ruleId: null },
  ]);
  assert.ok((await pruneEvents(t.ctx)) >= 1);
  const events = await call(t.app, 'GET', '/api/waf/events', { key });
  assert.deepEqual(
    events.body.map((e: any) => e.domain),
    ['recent.example.com'],
  );
});

describe('request details and detect mode', async () => {
  const details = { method: 'POST', path: '/comments', location: 'body:content', matched: '<script>alert(1)', blocked: false };

  test('method, path, location, matched and blocked are stored and listed next to the other fields', async () => {
    const { key, accountId } = await newAccount(t.app);
    const srv = await serverWith(t, key, 'shop.example.com');
    const now = Math.floor(t.clock.now().getTime() / 1000);
    const { stored } = await storeEvents(t.ctx, accountId, srv.body.id, [
      { ts: now - 3, ip: '203.0.113.1', domain: 'shop.example.com', reason: 'ip_blocked', ruleId: RULE, method: 'GET', path: '/', location: null, matched: null, blocked: true },
      { ts: now - 2, ip: '203.0.113.2', domain: 'shop.example.com', reason: 'xss_detected', ruleId: null, ...details },
      {
        ts: now - 1,
        ip: '2001:db8::3',
        domain: 'shop.example.com',
        reason: 'traversal_detected',
        ruleId: null,
        method: 'GET',
        path: '/static/..%2f',
        query: 'v=2&token=[redacted]',
        location: 'path',
        matched: '../../etc/passwd',
        blocked: true,
      },
    ]);
    assert.equal(stored, 3);
    const r = await call(t.app, 'GET', '/api/waf/events', { key });
    assert.equal(r.status, 200);
    assert.ok(r.body.every((e: { id: unknown }) => typeof e.id === 'string'));
    assert.deepEqual(
      r.body.map(({ id, ...e }: { id: string }) => e),
      [
        {
          timestamp: new Date((now - 1) * 1000).toISOString(),
          source_ip: '2001:db8::3',
          domain: 'shop.example.com',
          reason: 'traversal_detected',
          rule_id: null,
          ruleName: null,
          server_id: srv.body.id,
          method: 'GET',
          path: '/static/..%2f',
          query: 'v=2&token=[redacted]',
          location: 'path',
          matched: '../../etc/passwd',
          blocked: true,
          count: 1,
          last_seen_at: null,
          request_id: null,
        },
        {
          timestamp: new Date((now - 2) * 1000).toISOString(),
          source_ip: '203.0.113.2',
          domain: 'shop.example.com',
          reason: 'xss_detected',
          rule_id: null,
          ruleName: null,
          server_id: srv.body.id,
          method: 'POST',
          path: '/comments',
          query: null,
          location: 'body:content',
          matched: '<script>alert(1)',
          blocked: false,
          count: 1,
          last_seen_at: null,
          request_id: null,
        },
        {
          timestamp: new Date((now - 3) * 1000).toISOString(),
          source_ip: '203.0.113.1',
          domain: 'shop.example.com',
          reason: 'ip_blocked',
          rule_id: RULE,
          ruleName: null,
          server_id: srv.body.id,
          method: 'GET',
          path: '/',
          query: null,
          location: null,
          matched: null,
          blocked: true,
          count: 1,
          last_seen_at: null,
          request_id: null,
        },
      ],
    );
  });

  test("an event of a custom rule carries the rule's name, for its own account only", async () => {
    const { key, accountId } = await newAccount(t.app);
    const srv = await serverWith(t, key, 'named.example.com');
    const rule = await call(t.app, 'POST', '/api/rules', { key, body: { name: 'admin from the office', expression: 'starts_with(http.request.uri.path, "/admin")', action: 'block' } });
    assert.equal(rule.status, 201, JSON.stringify(rule.body));
    const other = await newAccount(t.app);
    const otherSrv = await serverWith(t, other.key, 'other-named.example.com');
    const now = Math.floor(t.clock.now().getTime() / 1000);
    const event = {
      ts: now,
      ip: '203.0.113.9',
      reason: 'custom_rule_blocked' as const,
      ruleId: rule.body.id,
      method: 'GET',
      path: '/admin',
      location: 'http.request.uri.path',
      matched: null,
      blocked: true,
    };
    await storeEvents(t.ctx, accountId, srv.body.id, [{ ...event, domain: 'named.example.com' }]);
    await storeEvents(t.ctx, other.accountId, otherSrv.body.id, [{ ...event, domain: 'other-named.example.com' }]);
    const mine = await call(t.app, 'GET', '/api/waf/events', { key });
    assert.deepEqual([mine.body[0].rule_id, mine.body[0].ruleName, mine.body[0].location], [rule.body.id, 'admin from the office', 'http.request.uri.path']);
    const theirs = await call(t.app, 'GET', '/api/waf/events', { key: other.key });
    assert.deepEqual([theirs.body[0].rule_id, theirs.body[0].ruleName], [rule.body.id, null], "another account's rule is not named");
    // Filters and pages still work with the name joined in.
    assert.equal((await call(t.app, 'GET', `/api/waf/events?reason=custom_rule_blocked&limit=1`, { key })).body.length, 1);
  });

  test('events without details (agents from before them) are stored as blocked, with null details', async () => {
    const { key, accountId } = await newAccount(t.app);
    const srv = await serverWith(t, key, 'old.example.com');
    const now = Math.floor(t.clock.now().getTime() / 1000);
    assert.equal(await stored(storeEvents(t.ctx, accountId, srv.body.id, [{ ts: now, ip: '203.0.113.4', domain: 'old.example.com', reason: 'sqli_detected', ruleId: null }])), 1);
    const [e] = (await call(t.app, 'GET', '/api/waf/events', { key })).body;
    assert.deepEqual([e.method, e.path, e.query, e.location, e.matched, e.blocked], [null, null, null, null, null, true]);
  });

  for (const backend of await backends()) {
    test(`details over their caps drop the event; NUL and lone surrogates are stored as U+FFFD (${backend})`, async () => {
      const t = backend === 'pglite' ? outer : await makeTestApp(backend);
      const { key, accountId } = await newAccount(t.app);
      const srv = await serverWith(t, key, 'caps.example.com');
      const now = Math.floor(t.clock.now().getTime() / 1000);
      const base = { ts: now, ip: '203.0.113.5', domain: 'caps.example.com', reason: 'sqli_detected' as const, ruleId: null, ...details };
      const over = Object.entries(EVENT_FIELD_MAX).map(([field, max], i) => ({ ...base, ip: ipOf(i), [field]: 'x'.repeat(max + 1) }));
      const atCap = Object.entries(EVENT_FIELD_MAX).map(([field, max], i) => ({ ...base, ip: ipOf(100 + i), [field]: 'y'.repeat(max) }));
      assert.equal(await stored(storeEvents(t.ctx, accountId, srv.body.id, [...over, ...atCap])), atCap.length);
      assert.equal(await stored(storeEvents(t.ctx, accountId, srv.body.id, [{ ...base, method: 'GE\u0000T', matched: 'a\u0000b\ud800c\udc00d😀' }])), 1);
      const events = (await call(t.app, 'GET', '/api/waf/events', { key })).body as { method: string; matched: string }[];
      assert.equal(events.length, atCap.length + 1);
      assert.ok(
        events.some((e) => e.method === 'GE\ufffdT' && e.matched === 'a\ufffdb\ufffdc\ufffdd😀'),
        JSON.stringify(events.map((e) => [e.method, e.matched])),
      );
    });
  }

  test('detect events count toward the 5,000 per server per day, and go after 7 days like the rest', async () => {
    t.clock.set(new Date('2026-12-01T12:00:00Z'));
    const { key, accountId } = await newAccount(t.app);
    const srv = await serverWith(t, key, 'cap.example.com');
    const now = Math.floor(t.clock.now().getTime() / 1000);
    let n = 0;
    const ev = (i: number, blocked: boolean) => ({ ts: now - 3600 + (i % 3000), ip: ipOf(n++), domain: 'cap.example.com', reason: 'xss_detected' as const, ruleId: null, ...details, blocked });
    let total = 0;
    for (let b = 0; b < 8; b++)
      total += await stored(
        storeEvents(
          t.ctx,
          accountId,
          srv.body.id,
          Array.from({ length: 500 }, (_, i) => ev(b * 500 + i, false)),
        ),
      );
    for (let b = 0; b < 4; b++)
      total += await stored(
        storeEvents(
          t.ctx,
          accountId,
          srv.body.id,
          Array.from({ length: 500 }, (_, i) => ev(i, true)),
        ),
      );
    assert.equal(total, 5000, '4,000 detect events, then only 1,000 blocks fit');
    const counts = await t.ctx.db
      .selectFrom('waf_events')
      .select(['blocked', (eb) => eb.fn.countAll<number>().as('n')])
      .where('server_id', '=', srv.body.id)
      .groupBy('blocked')
      .execute();
    assert.deepEqual(Object.fromEntries(counts.map((c) => [String(c.blocked), Number(c.n)])), { false: 4000, true: 1000 });

    t.clock.advance(8 * 86_400_000);
    await pruneEvents(t.ctx);
    assert.deepEqual((await call(t.app, 'GET', '/api/waf/events', { key })).body, [], 'detect events are pruned too');
  });
});

describe('events through the agent hub', async () => {
  const { srv, agentUrl, agents } = await hubServer();
  const { key } = await newAccount(srv.app, 'pro');
  const { newServer, newDomain } = apiFixtures(srv.app);
  const connect = async (token: string) => {
    const a = await FakeAgent.connect(agentUrl, token);
    agents.push(a);
    return a;
  };
  const listed = async () => (await call(srv.app, 'GET', '/api/waf/events', { key })).body as Record<string, unknown>[];

  test('an events/batch with details, and one in the older shape, are both stored and listed', async () => {
    const s = await newServer(key, 'events-edge');
    await newDomain(key, 'shop.example.com', [s.id], false);
    const agent = await connect(s.connectionToken);
    const ts = Math.floor(Date.now() / 1000) - 60;
    agent.send({
      type: 'events/batch',
      payload: {
        events: [
          {
            ts,
            ip: '198.51.100.7',
            domain: 'shop.example.com',
            reason: 'cmdi_detected',
            ruleId: null,
            method: 'POST',
            path: '/run',
            location: 'query:cmd',
            matched: ';cat /etc/passwd',
            blocked: false,
          },
          { ts: ts + 1, ip: '198.51.100.8', domain: 'shop.example.com', reason: 'rate_limited', ruleId: null },
        ],
      },
    });
    await agent.barrier();
    const events = await listed();
    assert.deepEqual(
      events.map((e) => [e.reason, e.method, e.path, e.location, e.matched, e.blocked, e.server_id]),
      [
        ['rate_limited', null, null, null, null, true, s.id],
        ['cmdi_detected', 'POST', '/run', 'query:cmd', ';cat /etc/passwd', false, s.id],
      ],
    );
  });

  test('a batch with a detail over its cap is refused as an invalid message (4003) and nothing of it is stored', async () => {
    const s = await newServer(key, 'events-liar');
    const agent = await connect(s.connectionToken);
    let closeCode: number | undefined;
    agent.ws.once('close', (code) => (closeCode = code));
    const before = (await listed()).length;
    agent.send({
      type: 'events/batch',
      payload: {
        events: [
          {
            ts: 1,
            ip: '198.51.100.9',
            domain: 'shop.example.com',
            reason: 'xss_detected',
            ruleId: null,
            method: 'GET',
            path: '/',
            location: 'query:q',
            matched: 'm'.repeat(EVENT_FIELD_MAX.matched),
            blocked: true,
          },
          {
            ts: 1,
            ip: '198.51.100.9',
            domain: 'shop.example.com',
            reason: 'xss_detected',
            ruleId: null,
            method: 'GET',
            path: '/',
            location: 'query:q',
            matched: 'm'.repeat(EVENT_FIELD_MAX.matched + 1),
            blocked: true,
          },
        ],
      },
    });
    assert.equal(await waitFor(() => closeCode, 'the close', WAIT_MS, 10), CLOSE.invalidMessage);
    assert.equal((await listed()).length, before);
  });
});
