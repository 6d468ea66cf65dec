import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pruneEvents, storeEvents } from '../src/services/events.js';
import { call, makeTestApp, newAccount } from './helpers.js';

const t = await makeTestApp();

test('stored events are capped at 5,000 per server per UTC day, and listed 50 newest first', async () => {
  t.clock.set(new Date('2026-11-22T12:00:00Z')); // mid-day, so the whole batch falls on one UTC day
  const { key, accountId } = await newAccount(t.app);
  const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
  const base = Math.floor(t.clock.now().getTime() / 1000) - 7200;
  const batch = (n: number, from: number) =>
    Array.from({ length: n }, (_, i) => ({ ts: base + from + i, ip: '203.0.113.9', domain: 'shop.example.com', reason: 'ip_blocked' as const, ruleId: null }));
  let stored = 0;
  for (let i = 0; i < 11; i++) stored += await storeEvents(t.ctx, accountId, srv.body.id, batch(500, i * 500));
  assert.equal(stored, 5000);
  const events = await call(t.app, 'GET', '/api/waf/events', { key });
  assert.equal(events.body.length, 50);
  assert.equal(Date.parse(events.body[0].timestamp) / 1000, base + 4999, 'the newest first');
  assert.ok(Date.parse(events.body[0].timestamp) > Date.parse(events.body[49].timestamp));
});

test('the retention job deletes events older than 7 days and keeps the rest', async () => {
  const { key, accountId } = await newAccount(t.app);
  const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
  const now = Math.floor(t.clock.now().getTime() / 1000);
  await storeEvents(t.ctx, accountId, srv.body.id, [
    { ts: now - 8 * 86400, ip: '203.0.113.1', domain: 'old.example.com', reason: 'rate_limited', ruleId: null },
    { ts: now - 6 * 86400, ip: '203.0.113.2', domain: 'recent.example.com', reason: 'xss_detected', ruleId: null },
  ]);
  assert.ok((await pruneEvents(t.ctx)) >= 1);
  const events = await call(t.app, 'GET', '/api/waf/events', { key });
  assert.deepEqual(events.body.map((e: any) => e.domain), ['recent.example.com']);
});
