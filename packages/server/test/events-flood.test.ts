import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { EVENT_ROWS, type WafEventItem } from '@rampart/protocol';
import { migrationProvider } from '../src/db/migrations.js';
import { storeEvents } from '../src/services/events.js';
import { backends, call, makeTestApp, newAccount, type TestApp } from './helpers.js';

// The flood-proof event log: identical events within 60 s fold into one row with a count, and
// rate-limit and challenge rows take at most half of a server's 5,000 rows a day.

const RULE = '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab';
const OTHER_RULE = '3f1c2e1a-9b0d-4c55-8f3e-0123456789ac';
/** A distinct source address for each n. */
const ipOf = (n: number) => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;

for (const backend of await backends()) {
  describe(`event folding, the flood cap, filters and paging (${backend})`, async () => {
    const t: TestApp = await makeTestApp(backend);
    after(() => t.close());
    t.clock.set(new Date('2026-11-23T12:00:00Z')); // mid-day: everything falls on one UTC day
    const now = Math.floor(t.clock.now().getTime() / 1000);

    async function serverWith(key: string, ...domains: string[]) {
      const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
      assert.equal(srv.status, 201);
      for (const domain of domains) {
        const r = await call(t.app, 'POST', '/api/domains', { key, body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [srv.body.id], sslEnabled: false } });
        assert.equal(r.status, 201, JSON.stringify(r.body));
      }
      return srv.body.id as string;
    }
    async function setUp(...domains: string[]) {
      const { key, accountId } = await newAccount(t.app);
      const serverId = await serverWith(key, ...(domains.length ? domains : ['shop.example.com']));
      return { key, accountId, serverId, store: (events: WafEventItem[]) => storeEvents(t.ctx, accountId, serverId, events) };
    }
    const ev = (fields: Partial<WafEventItem> = {}): WafEventItem => ({ ts: now - 600, ip: '203.0.113.9', domain: 'shop.example.com', reason: 'sqli_detected', ruleId: null, ...fields });
    const list = async (key: string, query = '') => {
      const r = await call(t.app, 'GET', `/api/waf/events${query}`, { key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body as Record<string, any>[];
    };

    test('identical events within 60 s fold into one with a count; after 60 s a new one starts', async () => {
      const { key, store } = await setUp();
      assert.deepEqual(await store([ev({ requestId: 'req-1' })]), { stored: 1, folded: 0, invalid: 0, unassigned: 0, overCap: 0 });
      assert.deepEqual(await store([ev({ ts: now - 570, requestId: 'req-2' }), ev({ ts: now - 540 })]), { stored: 0, folded: 2, invalid: 0, unassigned: 0, overCap: 0 });
      assert.equal((await store([ev({ ts: now - 539 })])).stored, 1, '61 s after the first: a new row');
      const events = await list(key);
      assert.deepEqual(
        events.map((e) => [e.timestamp, e.count, e.last_seen_at, e.request_id]),
        [
          [new Date((now - 539) * 1000).toISOString(), 1, null, null],
          [new Date((now - 600) * 1000).toISOString(), 3, new Date((now - 540) * 1000).toISOString(), 'req-1'],
        ],
      );
    });

    test('a different rule, reason, source or domain is not folded', async () => {
      const { key, store } = await setUp('shop.example.com', 'blog.example.com');
      const r = await store([
        ev({ ruleId: RULE }),
        ev({ ruleId: OTHER_RULE }),
        ev({ ruleId: null }),
        ev({ reason: 'xss_detected' }),
        ev({ ip: '2001:db8::1' }),
        ev({ domain: 'blog.example.com' }),
        ev({ ruleId: RULE, ts: now - 599 }), // folds into the first
      ]);
      assert.deepEqual([r.stored, r.folded], [6, 1]);
      const events = await list(key);
      assert.equal(events.length, 6);
      assert.deepEqual(events.map((e) => e.count).sort(), [1, 1, 1, 1, 1, 2]);
    });

    test('events of one batch fold into each other', async () => {
      const { key, store } = await setUp();
      const r = await store(Array.from({ length: 100 }, (_, i) => ev({ ts: now - 100 + Math.floor(i / 2) })));
      assert.deepEqual([r.stored, r.folded], [1, 99]);
      const [e] = await list(key);
      assert.deepEqual([e!.count, e!.last_seen_at], [100, new Date((now - 51) * 1000).toISOString()]);
    });

    test('the flood: 5,200 rate-limit events, then one SQL injection, which is stored and listed newest', async () => {
      const { key, store, serverId } = await setUp();
      let stored = 0;
      let overCap = 0;
      for (let b = 0; b < 11; b++) {
        const n = Math.min(500, 5200 - b * 500);
        const r = await store(Array.from({ length: n }, (_, i) => ev({ ts: now - 3000 + b * 10, ip: ipOf(b * 500 + i), reason: i % 2 ? 'rate_limited' : 'bot_challenge' })));
        stored += r.stored;
        overCap += r.overCap;
      }
      assert.equal(EVENT_ROWS.flood, 2500);
      assert.deepEqual([stored, overCap], [2500, 2700], 'rate-limit and challenge rows take at most half');
      const sqli = await store([ev({ ts: now - 1, ip: '198.51.100.66', reason: 'sqli_detected', path: '/login', matched: "' OR 1=1--" })]);
      assert.equal(sqli.stored, 1);
      const [newest] = await list(key);
      assert.deepEqual([newest!.reason, newest!.source_ip, newest!.matched], ['sqli_detected', '198.51.100.66', "' OR 1=1--"]);

      // Detections use the rest: 2,499 more fit, then the day is full for everything.
      let more = 0;
      for (let b = 0; b < 5; b++) more += (await store(Array.from({ length: 500 }, (_, i) => ev({ ts: now - 2, ip: ipOf(100_000 + b * 500 + i), reason: 'xss_detected' })))).stored;
      assert.equal(more, 2499);
      const full = await store([ev({ ts: now, ip: '198.51.100.67', reason: 'cmdi_detected' })]);
      assert.deepEqual([full.stored, full.overCap], [0, 1]);
      const folded = await store([ev({ ts: now, ip: '198.51.100.66', reason: 'sqli_detected', path: '/login' })]);
      assert.deepEqual([folded.stored, folded.folded, folded.overCap], [0, 1, 0], 'folding takes no room, even on a full day');
      const rows = await t.ctx.db
        .selectFrom('waf_events')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('server_id', '=', serverId)
        .executeTakeFirstOrThrow();
      assert.equal(Number(rows.n), 5000);
    });

    test('a GET /articles?q=<script> and a POST /comment with an XSS body from one source stay two events, each found by its request id', async () => {
      const { key, store } = await setUp();
      const xss = { reason: 'xss_detected' as const, ip: '203.0.113.50' };
      const r = await store([
        ev({ ...xss, ts: now - 30, method: 'GET', path: '/articles', query: 'q=%3Cscript%3E', location: 'query:q', matched: '<script>', requestId: 'getArticles1' }),
        ev({ ...xss, ts: now - 29, method: 'POST', path: '/comment', query: null, location: 'body:text', matched: '<img onerror=', requestId: 'postComment2' }),
      ]);
      assert.deepEqual([r.stored, r.folded], [2, 0]);
      for (const [id, method, path, query, location] of [
        ['getArticles1', 'GET', '/articles', 'q=%3Cscript%3E', 'query:q'],
        ['postComment2', 'POST', '/comment', null, 'body:text'],
      ]) {
        const found = await list(key, `?requestId=${id}`);
        assert.deepEqual(
          found.map((e) => [e.method, e.path, e.query, e.location, e.request_id, e.count]),
          [[method, path, query, location, id, 1]],
          id,
        );
      }
    });

    test('only the very same event folds: method, path, location and blocked keep events apart too', async () => {
      const { key, store } = await setUp();
      const base = { reason: 'sqli_detected' as const, method: 'GET', path: '/a', location: 'query:id', matched: 'x', blocked: true };
      const r = await store([
        ev(base),
        ev({ ...base, method: 'POST' }),
        ev({ ...base, path: '/b' }),
        ev({ ...base, location: 'query:other' }),
        ev({ ...base, blocked: false }),
        ev({ ...base, ts: now - 590, matched: 'another excerpt' }), // folds into the first: the excerpt is no part of the identity
      ]);
      assert.deepEqual([r.stored, r.folded], [5, 1]);
      assert.deepEqual((await list(key)).map((e) => e.count).sort(), [1, 1, 1, 1, 2]);
    });

    test('the query is no part of the identity: repeats with other queries fold into the first, which keeps its own query', async () => {
      const { key, store } = await setUp();
      const base = { reason: 'sqli_detected' as const, ip: '203.0.113.60', method: 'GET', path: '/search', location: 'query:id', matched: "' OR 1=1", blocked: true };
      assert.equal((await store([ev({ ...base, query: 'id=1%27%20OR%201=1&page=1', requestId: 'scan1' })])).stored, 1);
      // the same request with another page, in a later batch, and an agent's increment item without a query
      const r = await store([ev({ ...base, ts: now - 590, query: 'id=1%27%20OR%201=1&page=2', requestId: 'scan2' }), ev({ ...base, ts: now - 580, count: 3 })]);
      assert.deepEqual([r.stored, r.folded], [0, 2]);
      const events = await list(key);
      assert.deepEqual(
        events.map((e) => [e.path, e.query, e.count, e.request_id]),
        [['/search', 'id=1%27%20OR%201=1&page=1', 5, 'scan1']],
      );
      assert.deepEqual(
        (await list(key, '?requestId=scan2')).map((e) => e.query),
        ['id=1%27%20OR%201=1&page=1'],
        'found by a folded request id, with the first query',
      );
    });

    test("an agent's folded items add to the first one's row; the first 32 request ids find it, later ones do not", async () => {
      const { key, store } = await setUp();
      const ids = Array.from({ length: 40 }, (_, i) => `fold${i}`);
      const base = { reason: 'ip_blocked' as const, ruleId: RULE, method: 'GET', path: '/', location: null, matched: null, blocked: true };
      assert.equal((await store([ev({ ...base, requestId: ids[0]! })])).stored, 1);
      const r = await store([
        ev({ ...base, requestId: ids[1]!, requestIds: ids.slice(2, 32), count: 5_000, lastTs: now - 570 }),
        ev({ ...base, requestId: ids[32]!, requestIds: ids.slice(33, 40), count: 4_999, lastTs: now - 545 }),
      ]);
      assert.deepEqual([r.stored, r.folded], [0, 2]);
      const [e] = await list(key);
      assert.deepEqual([e!.count, e!.last_seen_at, e!.request_id], [10_000, new Date((now - 545) * 1000).toISOString(), 'fold0']);
      for (const id of ids.slice(0, 32))
        assert.deepEqual(
          (await list(key, `?requestId=${id}`)).map((x) => x.id),
          [e!.id],
          id,
        );
      assert.deepEqual(await list(key, `?requestId=${ids[32]}`), [], 'past the 32 kept');
      const other = await setUp();
      assert.deepEqual(await list(other.key, `?requestId=${ids[0]}`), [], "another account's request id finds nothing");
      // A count never passes what the column holds, whatever agents claim.
      for (let i = 0; i < 3; i++) await store([ev({ ...base, count: 1_000_000_000 })]);
      assert.equal((await list(key))[0]!.count, 2_147_483_647);
    });

    test('blocks, rate limits and challenges take at most 4,000 rows a day: a flood of distinct blocks leaves room for detections', async () => {
      const { key, store } = await setUp();
      let stored = 0;
      for (let b = 0; b < 9; b++) stored += (await store(Array.from({ length: 500 }, (_, i) => ev({ ts: now - 3000 + b, ip: ipOf(b * 500 + i), reason: 'ip_blocked', ruleId: RULE })))).stored;
      assert.equal(stored, EVENT_ROWS.perDay - EVENT_ROWS.reservedForDetections);
      const sqli = await store([ev({ ts: now - 1, ip: '198.51.100.77', reason: 'sqli_detected', path: '/login', requestId: 'theAttack' })]);
      assert.equal(sqli.stored, 1);
      assert.deepEqual(
        (await list(key, '?requestId=theAttack')).map((e) => e.source_ip),
        ['198.51.100.77'],
      );
    });

    test('filters and paging: follow Link to the end, newest first, no duplicates', async () => {
      const { key, store } = await setUp('shop.example.com', 'blog.example.com');
      const batch = Array.from({ length: 120 }, (_, i) =>
        ev({ ts: now - 8000 + i * 61, ip: ipOf(i % 3), domain: i % 2 ? 'blog.example.com' : 'shop.example.com', reason: i % 4 === 0 ? 'xss_detected' : 'sqli_detected', requestId: `r${i}` }),
      );
      // 61 s apart: none fold
      assert.equal((await store(batch)).stored, 120);

      const first = await call(t.app, 'GET', '/api/waf/events', { key });
      assert.equal(first.body.length, 50, 'the 50 newest by default');
      assert.match(String(first.headers.link), /^<\/api\/waf\/events\?limit=|^<\/api\/waf\/events\?before=/);

      const walk = async (query: string) => {
        const seen: Record<string, any>[] = [];
        let url: string | undefined = `/api/waf/events${query}`;
        while (url) {
          const r = await call(t.app, 'GET', url, { key });
          assert.equal(r.status, 200, JSON.stringify(r.body));
          seen.push(...r.body);
          url = /^<([^>]+)>; rel="next"$/.exec(String(r.headers.link ?? ''))?.[1];
        }
        return seen;
      };
      const all = await walk('?limit=7');
      assert.equal(all.length, 120);
      assert.equal(new Set(all.map((e) => e.id)).size, 120, 'no duplicates');
      assert.deepEqual(
        all.map((e) => e.request_id),
        batch.map((e) => e.requestId).reverse(),
        'newest first',
      );

      const filtered = await walk('?limit=4&domain=BLOG.example.com&reason=sqli_detected&ip=10.0.0.1');
      const expected = batch.filter((e) => e.domain === 'blog.example.com' && e.reason === 'sqli_detected' && e.ip === '10.0.0.1');
      assert.ok(expected.length > 4, 'more than one page');
      assert.deepEqual(
        filtered.map((e) => e.request_id),
        expected.map((e) => e.requestId).reverse(),
        'the Link keeps the filters',
      );

      const since = new Date((now - 8000 + 20 * 61) * 1000).toISOString();
      const until = new Date((now - 8000 + 30 * 61) * 1000).toISOString();
      const window = await walk(`?since=${encodeURIComponent(since)}&until=${encodeURIComponent(until)}&limit=3`);
      assert.deepEqual(
        window.map((e) => e.request_id),
        Array.from({ length: 11 }, (_, i) => `r${30 - i}`),
        'since and until are inclusive',
      );
    });

    test('bad filter values are a 400 naming the field', async () => {
      const { key } = await setUp();
      const old = new Date((now - 8 * 86400) * 1000).toISOString();
      const cases: [string, string][] = [
        ['domain=not a domain', 'domain'],
        ['reason=flooded', 'reason'],
        ['ip=999.1.1.1', 'ip'],
        ['ip=203.0.113.0%2F24', 'ip'],
        ['since=yesterday', 'since'],
        ['until=2026-13-45T00:00:00Z', 'until'],
        [`since=${encodeURIComponent(old)}`, 'since'],
        [`since=${encodeURIComponent(new Date(now * 1000).toISOString())}&until=${encodeURIComponent(new Date((now - 60) * 1000).toISOString())}`, 'since'],
        ['limit=0', 'limit'],
        ['limit=201', 'limit'],
        ['before=abc', 'before'],
        ['before=123456789', 'before'],
        ['requestId=a.b', 'requestId'],
        [`requestId=${'x'.repeat(65)}`, 'requestId'],
      ];
      for (const [query, field] of cases) {
        const r = await call(t.app, 'GET', `/api/waf/events?${query}`, { key });
        assert.equal(r.status, 400, query);
        assert.match(String(r.body.error), new RegExp(`^${field}\\b`), `${query}: ${JSON.stringify(r.body)}`);
      }
    });

    test("another account's events are never visible, nor usable as a cursor", async () => {
      const mine = await setUp();
      const theirs = await setUp();
      await mine.store([ev({ ip: '198.51.100.1' })]);
      await theirs.store([ev({ ip: '198.51.100.2' }), ev({ ip: '198.51.100.3' })]);
      const their = await list(theirs.key);
      assert.deepEqual(
        (await list(mine.key)).map((e) => e.source_ip),
        ['198.51.100.1'],
      );
      assert.deepEqual(await list(mine.key, '?ip=198.51.100.2'), []);
      const r = await call(t.app, 'GET', `/api/waf/events?before=${their[0]!.id}`, { key: mine.key });
      assert.equal(r.status, 400);
      assert.match(String(r.body.error), /^before\b/);
    });

    // Last: it rebuilds the table of request ids, as an upgrade from before it does.
    test('migration 0016: events stored before it are found by their request id', async () => {
      const { key, store } = await setUp();
      await store([ev({ ip: '198.51.100.90', requestId: 'storedBeforeUpgrade' })]);
      await t.ctx.db.schema.dropTable('waf_event_requests').execute();
      const migration = (await migrationProvider.getMigrations())['0016_event_request_ids']!;
      await migration.up(t.ctx.db);
      assert.deepEqual(
        (await list(key, '?requestId=storedBeforeUpgrade')).map((e) => [e.source_ip, e.request_id]),
        [['198.51.100.90', 'storedBeforeUpgrade']],
      );
    });
  });
}
