import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { AnalyticsBatchPayload, AnalyticsDomain } from '@rampart/protocol';
import { addMinuteCounts, MINUTE_COUNT_MAX } from '../src/data/analytics.js';
import { runAnalyticsJob, storeAnalytics } from '../src/services/analytics.js';
import { storeEvents } from '../src/services/events.js';
import { backends, call, makeTestApp, newAccount, type TestApp } from './helpers.js';

const NOW = new Date('2026-11-23T12:30:20Z');
const minuteAgo = (m: number) => new Date(Math.floor(NOW.getTime() / 60_000) * 60_000 - m * 60_000).toISOString();

function entry(domain: string, requests: number, extra: Partial<AnalyticsDomain> = {}): AnalyticsDomain {
  return {
    domain,
    requests,
    status: { '1xx': 0, '2xx': requests, '3xx': 0, '4xx': 0, '5xx': 0, other: 0 },
    bytesIn: requests * 100,
    bytesOut: requests * 1000,
    blocked: {},
    ...extra,
  };
}
const batch = (minute: string, ...domains: AnalyticsDomain[]): AnalyticsBatchPayload => ({ minute, domains });

/** An account with one server serving these domains; returns ids by name. */
async function setup(t: TestApp, ...domains: string[]) {
  const { key, accountId } = await newAccount(t.app);
  const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
  assert.equal(srv.status, 201);
  const ids: Record<string, string> = {};
  for (const domain of domains) {
    const r = await call(t.app, 'POST', '/api/domains', { key, body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [srv.body.id], sslEnabled: false } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    ids[domain] = r.body.id;
  }
  return { key, accountId, serverId: srv.body.id as string, ids };
}

for (const backend of await backends()) {
  describe(`traffic analytics (${backend})`, async () => {
    const t = await makeTestApp(backend);
    t.clock.set(NOW);

    test("ingest: only the server's own domains, the minute within 48 h and not in the future; upserts add", async () => {
      const a = await setup(t, 'shop.example.com', 'blog.example.com');
      const other = await setup(t, 'other.example.com');
      const m = minuteAgo(3);
      let r = await storeAnalytics(
        t.ctx,
        a.accountId,
        a.serverId,
        batch(m, entry('shop.example.com', 10, { blocked: { sqli_detected: 2 } }), entry('other.example.com', 99), entry('SHOP.example.com', 5, { blocked: { sqli_detected: 1, rate_limited: 4 } })),
      );
      assert.deepEqual(r, { stored: 2, unassigned: 1, invalid: 0 }, "another account's domain is not this server's");
      r = await storeAnalytics(t.ctx, a.accountId, a.serverId, batch(m, entry('shop.example.com', 1, { status: { '1xx': 0, '2xx': 0, '3xx': 0, '4xx': 1, '5xx': 0, other: 0 } })));
      assert.equal(r.stored, 1);
      // Refused minutes: the future, older than 48 h, not a minute's start.
      for (const bad of [minuteAgo(-1), new Date(NOW.getTime() - 48 * 3_600_000 - 60_000).toISOString(), '2026-11-23T12:20:30.000Z']) {
        const x = await storeAnalytics(t.ctx, a.accountId, a.serverId, batch(bad, entry('shop.example.com', 1000)));
        assert.ok(x.refused, bad);
        assert.equal(x.stored, 0);
      }
      // A server of another account cannot write to this account's domain, even naming it.
      const y = await storeAnalytics(t.ctx, other.accountId, other.serverId, batch(m, entry('shop.example.com', 1000)));
      assert.equal(y.unassigned, 1);
      // Numbers past the bounds (a caller other than the parser) are dropped.
      const z = await storeAnalytics(t.ctx, a.accountId, a.serverId, batch(m, entry('shop.example.com', 1e13), entry('blog.example.com', 1, { blocked: { nope: 1 } as never })));
      assert.equal(z.invalid, 2);

      const res = await call(t.app, 'GET', `/api/analytics?domain=${a.ids['shop.example.com']}&from=${minuteAgo(10)}`, { key: a.key });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.step, 'minute');
      const point = res.body.series.find((p: { t: string }) => p.t === m);
      assert.deepEqual(point, {
        t: m,
        requests: 16,
        status: { '1xx': 0, '2xx': 15, '3xx': 0, '4xx': 1, '5xx': 0, other: 0 },
        bytes_in: 1600,
        bytes_out: 16000,
        blocked: { sqli_detected: 3, rate_limited: 4 },
      });
      assert.equal(res.body.series.filter((p: { requests: number }) => p.requests > 0).length, 1);
      // The other account sees none of it.
      const theirs = await call(t.app, 'GET', `/api/analytics?from=${minuteAgo(10)}`, { key: other.key });
      assert.equal(
        theirs.body.series.reduce((s: number, p: { requests: number }) => s + p.requests, 0),
        0,
      );
    });

    test("the API: defaults, step choice, limits, 400 naming the field, 404 for another account's domain", async () => {
      const a = await setup(t, 'api.example.com');
      const b = await setup(t, 'theirs.example.com');
      const get = (q: string, key = a.key) => call(t.app, 'GET', `/api/analytics${q}`, { key });
      let r = await get('');
      assert.equal(r.status, 200);
      assert.equal(r.body.step, 'hour', '24 h by default: hourly');
      assert.equal(r.body.to, NOW.toISOString());
      assert.equal(r.body.series.length, 25, 'from rounded down to the hour: 25 buckets');
      r = await get(`?from=${new Date(NOW.getTime() - 6 * 3_600_000).toISOString()}`);
      assert.equal(r.body.step, 'minute', 'up to 6 h: by the minute');
      assert.equal(r.body.series.length, 361);
      r = await get(`?from=${new Date(NOW.getTime() - 7 * 3_600_000).toISOString()}`);
      assert.equal(r.body.step, 'hour');
      r = await get(`?from=${new Date(NOW.getTime() - 30 * 86_400_000 + 3_600_000).toISOString()}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.series.length, 30 * 24);
      const unauth = await call(t.app, 'GET', '/api/analytics');
      assert.equal(unauth.status, 401);

      const bad: [string, string][] = [
        ['?from=yesterday', 'from:'],
        ['?to=2026-13-01T00:00:00Z', 'to:'],
        [`?from=${NOW.toISOString()}&to=${minuteAgo(5)}`, 'from:'],
        [`?from=${new Date(NOW.getTime() - 31 * 86_400_000).toISOString()}`, 'from:'],
        ['?step=second', 'step:'],
        [`?step=minute&from=${new Date(NOW.getTime() - 50 * 3_600_000).toISOString()}&to=${new Date(NOW.getTime() - 49 * 3_600_000).toISOString()}`, 'from:'],
        [`?step=minute&from=${new Date(NOW.getTime() - 25 * 3_600_000).toISOString()}`, 'step:'],
        [`?to=${new Date(NOW.getTime() + 86_400_000).toISOString()}`, 'to:'],
        [`?domain=${'x'.repeat(101)}`, 'domain'],
      ];
      for (const [q, field] of bad) {
        const x = await get(q);
        assert.equal(x.status, 400, q);
        assert.ok(x.body.error.startsWith(field) || x.body.error.includes(field), `${q}: ${x.body.error}`);
      }
      assert.equal((await get(`?domain=${b.ids['theirs.example.com']}`)).status, 404, "another account's domain");
      assert.equal((await get('?domain=00000000-0000-4000-8000-000000000000')).status, 404);
      assert.equal((await get('?domain=not-an-id')).status, 404);
      assert.equal((await get(`?domain=${a.ids['api.example.com']}&step=minute&from=${minuteAgo(1440)}&to=${minuteAgo(0)}`)).status, 200, '1440 minutes is the most');
      assert.equal((await get(`?step=minute&from=${minuteAgo(1441)}&to=${minuteAgo(0)}`)).status, 400);
    });

    test('the rollup and retention job: hours from minutes, late minutes rolled again, minutes kept 48 h and hours 30 days', async () => {
      const a = await setup(t, 'roll.example.com');
      const id = a.ids['roll.example.com']!;
      t.clock.set(new Date('2026-11-23T12:30:20Z'));
      // Three minutes of 10:xx, one of 11:xx.
      for (const [m, n] of [
        ['2026-11-23T10:05:00.000Z', 1],
        ['2026-11-23T10:06:00.000Z', 2],
        ['2026-11-23T10:59:00.000Z', 4],
        ['2026-11-23T11:00:00.000Z', 8],
      ] as const) {
        await storeAnalytics(t.ctx, a.accountId, a.serverId, batch(m, entry('roll.example.com', n, { blocked: { ip_blocked: n } })));
      }
      const r1 = await runAnalyticsJob(t.ctx);
      assert.ok(r1.hours >= 2);
      const hourly = async () => {
        // From far enough back that the hours come from analytics_hour, not the minutes.
        const r = await call(t.app, 'GET', `/api/analytics?domain=${id}&step=hour&from=2026-11-23T09:00:00Z&to=2026-11-23T12:00:00Z`, { key: a.key });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        return Object.fromEntries(r.body.series.map((p: { t: string; requests: number; blocked: object }) => [p.t.slice(11, 13), [p.requests, p.blocked]]));
      };
      assert.deepEqual(await hourly(), { '09': [0, {}], '10': [7, { ip_blocked: 7 }], '11': [8, { ip_blocked: 8 }] });

      // A late batch (an agent back after an outage) for 10:xx: the next run rolls that hour again.
      t.clock.advance(5 * 60_000);
      await storeAnalytics(t.ctx, a.accountId, a.serverId, batch('2026-11-23T10:30:00.000Z', entry('roll.example.com', 100)));
      t.clock.advance(5 * 60_000);
      await runAnalyticsJob(t.ctx);
      assert.deepEqual(await hourly(), { '09': [0, {}], '10': [107, { ip_blocked: 7 }], '11': [8, { ip_blocked: 8 }] });

      // Two days later: the minutes of those hours are gone, the hours stay.
      t.clock.set(new Date('2026-11-25T12:10:00Z'));
      const r2 = await runAnalyticsJob(t.ctx);
      assert.ok(r2.minutesDeleted >= 5, JSON.stringify(r2));
      const mins = await call(t.app, 'GET', `/api/analytics?domain=${id}&step=minute&from=2026-11-23T12:00:00Z&to=2026-11-23T12:30:00Z`, { key: a.key });
      assert.equal(mins.status, 200);
      const h2 = await call(t.app, 'GET', `/api/analytics?domain=${id}&step=hour&from=2026-11-23T10:00:00Z&to=2026-11-23T12:00:00Z`, { key: a.key });
      assert.deepEqual(
        h2.body.series.map((p: { requests: number }) => p.requests),
        [107, 8],
      );

      // 31 days later the hours are gone too.
      t.clock.set(new Date('2026-12-24T12:10:00Z'));
      const r3 = await runAnalyticsJob(t.ctx);
      assert.ok(r3.hoursDeleted >= 2, JSON.stringify(r3));
      t.clock.set(NOW);
      await runAnalyticsJob(t.ctx);
      const gone = await hourly();
      assert.deepEqual(gone['10'], [0, {}]);
    });

    test('hours and minutes agree: the latest hours come straight from the minutes', async () => {
      t.clock.set(NOW);
      const a = await setup(t, 'fresh.example.com');
      await storeAnalytics(t.ctx, a.accountId, a.serverId, batch(minuteAgo(1), entry('fresh.example.com', 3)));
      // No job run: the current hour comes from the minutes.
      const r = await call(t.app, 'GET', `/api/analytics?step=hour&from=${new Date(NOW.getTime() - 3 * 3_600_000).toISOString()}`, { key: a.key });
      assert.equal(r.body.series.at(-1).requests, 3);
    });

    test('top lists: blocked events of the range and domain, folded counts summed, countries through the block_country rule', async () => {
      t.clock.set(NOW);
      const a = await setup(t, 'top.example.com', 'else.example.com');
      const country = await call(t.app, 'POST', '/api/waf', { key: a.key, body: { rule_type: 'block_country', value: 'CN' } });
      assert.equal(country.status, 201, JSON.stringify(country.body));
      const ts = Math.floor(NOW.getTime() / 1000) - 600;
      const ev = (ip: string, reason: string, extra: object = {}) => ({
        ts,
        ip,
        domain: 'top.example.com',
        reason: reason as 'ip_blocked',
        ruleId: null,
        method: 'GET',
        path: '/admin',
        location: null,
        matched: null,
        blocked: true,
        ...extra,
      });
      await storeEvents(t.ctx, a.accountId, a.serverId, [
        ...Array.from({ length: 5 }, () => ev('203.0.113.5', 'rate_limited')), // folds into one row of count 5
        ev('203.0.113.6', 'sqli_detected', { path: '/search' }),
        ev('203.0.113.7', 'country_blocked', { ruleId: country.body.id, path: '/' }),
        ev('203.0.113.7', 'country_blocked', { ruleId: country.body.id, path: '/' }),
        ev('203.0.113.8', 'xss_detected', { blocked: false }), // detect mode: not a block
        { ...ev('203.0.113.9', 'ip_blocked'), domain: 'else.example.com' },
      ]);
      const r = await call(t.app, 'GET', `/api/analytics?domain=${a.ids['top.example.com']}&from=${minuteAgo(60)}`, { key: a.key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body.top.ips, [
        { ip: '203.0.113.5', count: 5 },
        { ip: '203.0.113.7', count: 2 },
        { ip: '203.0.113.6', count: 1 },
      ]);
      assert.deepEqual(r.body.top.paths, [
        { path: '/admin', count: 5 },
        { path: '/', count: 2 },
        { path: '/search', count: 1 },
      ]);
      assert.deepEqual(r.body.top.countries, [{ country: 'CN', count: 2 }]);
      assert.deepEqual(r.body.top.rules, [{ rule_id: country.body.id, count: 2 }]);
      // All domains: the other domain's block too; another range: nothing.
      const all = await call(t.app, 'GET', `/api/analytics?from=${minuteAgo(60)}`, { key: a.key });
      assert.equal(all.body.top.ips.length, 4);
      const before = await call(t.app, 'GET', `/api/analytics?from=${minuteAgo(120)}&to=${minuteAgo(61)}`, { key: a.key });
      assert.deepEqual(before.body.top, { ips: [], paths: [], countries: [], rules: [] });
    });

    test('the route is in the OpenAPI document', async () => {
      const doc = await call(t.app, 'GET', '/api/openapi.json');
      const op = doc.body.paths['/api/analytics'].get;
      assert.ok(op.responses['200'].content['application/json'].schema.properties.series);
    });

    test('attack: a flood of maximal batches cannot overflow a bigint and break the hourly roll-up of every account', async () => {
      const a = await setup(t, 'flood.example.com');
      const b = await setup(t, 'bystander.example.com');
      const [m1, m2] = [minuteAgo(5), minuteAgo(6)];
      // Each batch may carry 1e15 bytes; nothing limits how many batches of one minute an agent sends.
      const max = entry('flood.example.com', 1_000_000_000_000, { bytesIn: 1e15, bytesOut: 1e15, blocked: { rate_limited: 1_000_000_000_000 } });
      for (const m of [m1, m2]) assert.equal((await storeAnalytics(t.ctx, a.accountId, a.serverId, batch(m, max))).stored, 1);
      // What 5,000 more such batches per minute add, through the same upsert (10 steps of 500).
      const flood = (minute: string) => ({
        accountId: a.accountId,
        domainId: a.ids['flood.example.com']!,
        minute: new Date(minute),
        requests: 5e14,
        s1xx: 0,
        s2xx: 5e14,
        s3xx: 0,
        s4xx: 0,
        s5xx: 0,
        sOther: 0,
        bytesIn: 5e17,
        bytesOut: 5e17,
        blocked: { rate_limited: 5e14 },
      });
      for (let i = 0; i < 10; i++) await addMinuteCounts(t.ctx.db, [flood(m1), flood(m2)], NOW);
      await storeAnalytics(t.ctx, b.accountId, b.serverId, batch(m1, entry('bystander.example.com', 7)));
      await runAnalyticsJob(t.ctx); // threw "bigint out of range" for every account
      const hour = new Date(Math.floor(NOW.getTime() / 3_600_000) * 3_600_000 - 3_600_000).toISOString();
      const res = await call(t.app, 'GET', `/api/analytics?domain=${b.ids['bystander.example.com']}&from=${minuteAgo(10)}`, { key: b.key });
      assert.equal(res.status, 200);
      assert.equal(
        res.body.series.reduce((s: number, p: { requests: number }) => s + p.requests, 0),
        7,
      );
      const own = await call(t.app, 'GET', `/api/analytics?domain=${a.ids['flood.example.com']}&from=${hour}&step=hour`, { key: a.key });
      assert.equal(own.status, 200, JSON.stringify(own.body));
      assert.ok(
        own.body.series.every((p: { bytes_in: number }) => p.bytes_in <= 60 * MINUTE_COUNT_MAX),
        'each minute is clamped',
      );
    });

    test("hits of custom rules: only the account's rules the server has, summed per minute and hour; the last hour, day and week on /api/rules; a rule's hits go with it", async () => {
      const a = await setup(t, 'hits.example.com');
      const other = await setup(t, 'hits-other.example.com');
      const rule = async (key: string, body: Record<string, unknown>) => {
        const r = await call(t.app, 'POST', '/api/rules', { key, body: { expression: 'http.request.uri.path eq "/x"', action: 'log', ...body } });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        return r.body.id as string;
      };
      const wide = await rule(a.key, { name: 'wide' });
      const own = await rule(a.key, { name: 'own', action: 'block', domainId: a.ids['hits.example.com'] });
      // A domain of the account that this server does not serve.
      const srv2 = await call(t.app, 'POST', '/api/servers', { key: a.key, body: { name: 'edge-2' } });
      const elsewhere = await call(t.app, 'POST', '/api/domains', {
        key: a.key,
        body: { domain: 'elsewhere.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [srv2.body.id], sslEnabled: false },
      });
      const notHere = await rule(a.key, { name: 'not here', domainId: elsewhere.body.id });
      const theirs = await rule(other.key, { name: 'theirs' });
      const hits = (minute: string, rules: { ruleId: string; hits: number }[]) => storeAnalytics(t.ctx, a.accountId, a.serverId, { minute, domains: [], rules });

      await hits(minuteAgo(2), [
        { ruleId: wide, hits: 3 },
        { ruleId: own, hits: 1 },
        { ruleId: notHere, hits: 50 },
        { ruleId: theirs, hits: 50 },
        { ruleId: wide, hits: 2 },
      ]);
      await hits(minuteAgo(2), [{ ruleId: wide, hits: 1 }]);
      await hits(minuteAgo(90), [{ ruleId: wide, hits: 10 }]);
      await hits(new Date(Math.floor(NOW.getTime() / 3_600_000) * 3_600_000 - 30 * 3_600_000).toISOString(), [{ ruleId: own, hits: 7 }]);
      const bad = await hits(minuteAgo(1), [
        { ruleId: 'not-a-uuid', hits: 1 },
        { ruleId: wide, hits: -1 },
        { ruleId: wide, hits: 1e13 },
      ]);
      assert.equal(bad.invalid, 3);

      const list = await call(t.app, 'GET', '/api/rules', { key: a.key });
      assert.equal(list.status, 200, JSON.stringify(list.body));
      const of = (id: string) => list.body.find((r: { id: string }) => r.id === id).hits;
      assert.deepEqual(of(wide), { hour: 6, day: 16, week: 16 });
      assert.deepEqual(of(own), { hour: 1, day: 1, week: 8 }, 'older than a day: in the week only');
      assert.deepEqual(of(notHere), { hour: 0, day: 0, week: 0 }, 'a rule of a domain this server does not serve');
      assert.deepEqual((await call(t.app, 'GET', `/api/rules/${theirs}`, { key: other.key })).body.hits, { hour: 0, day: 0, week: 0 }, "another account's rule");
      assert.deepEqual((await call(t.app, 'GET', `/api/rules/${wide}`, { key: a.key })).body.hits, { hour: 6, day: 16, week: 16 });
      // A minute later than an hour after: out of the last hour.
      t.clock.set(new Date(NOW.getTime() + 58 * 60_000));
      assert.deepEqual((await call(t.app, 'GET', `/api/rules/${wide}`, { key: a.key })).body.hits, { hour: 0, day: 16, week: 16 });
      // The job keeps 25 hours of minutes and 8 days of hours.
      t.clock.set(new Date(NOW.getTime() + 9 * 24 * 3_600_000));
      await runAnalyticsJob(t.ctx);
      t.clock.set(NOW);
      assert.deepEqual((await call(t.app, 'GET', `/api/rules/${wide}`, { key: a.key })).body.hits, { hour: 0, day: 0, week: 0 }, 'cleaned up');
      await hits(minuteAgo(1), [{ ruleId: own, hits: 2 }]);
      assert.equal((await call(t.app, 'DELETE', `/api/rules/${own}`, { key: a.key })).status, 200, 'a rule with hits is deleted, its hits with it');
    });
  });
}
