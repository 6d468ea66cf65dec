import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AGENT_LIMITS, EVENT_ROWS, parseAgentMessage, type WafEventItem } from '@rampart/protocol';
import { BOT_ANSWER_PATH } from '@rampart/proxy';
import { EventCollector, parseEventLine } from '../src/index.js';

// docs/architecture.md "The event log": the agent folds repeats of the very same event (source,
// reason, rule, domain, method, path, location, blocked), counts the day's cap in events, keeps
// room for detections, and does not log a served challenge page as a block.

const T0 = 1795329600; // 2026-11-22T07:20:00Z
const RULE = '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab';

interface Line {
  ts?: number;
  ip?: string;
  domain?: string;
  reason?: string;
  rule?: string;
  action?: string;
  method?: string;
  location?: string;
  path?: string;
  matched?: string;
  id?: string;
  /** The query field, percent-encoded as the proxy writes it; '-' when absent. */
  query?: string;
}
/** A line as HAProxy's log-format writes it (packages/proxy/src/waf.ts), fields percent-encoded. */
const line = (l: Line = {}) =>
  `<134>Nov 22 07:20:00 haproxy[12]: rampart-waf ${l.ts ?? T0} ${l.ip ?? '203.0.113.9'} ${l.domain ?? 'shop.example.com'} ${l.reason ?? 'ip_blocked'} ${l.rule ?? RULE} ${l.action ?? 'block'} ${l.method ?? 'GET'} ${l.location ?? '-'} ${l.path ?? '/'} ${l.matched ?? '-'} ${l.id ?? '-'} - ${l.query ?? '-'}`;
const ipOf = (n: number) => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;

function collector(now = new Date('2026-11-22T10:00:00Z')) {
  const batches: WafEventItem[][] = [];
  const c = new EventCollector(
    (batch) => (batches.push(batch), true),
    () => now,
  );
  const shipped = () => batches.flat();
  /** Occurrences shipped per event (items of one event share ip, reason, path, ... and ts). */
  const occurrences = (pick: (e: WafEventItem) => boolean) =>
    shipped()
      .filter(pick)
      .reduce((n, e) => n + (e.count ?? 1), 0);
  return { c, batches, shipped, occurrences };
}

describe('folding at the agent', () => {
  test('10,000 identical blocked requests, then one SQL injection: one event with a count, and the injection shipped', () => {
    const { c, shipped, occurrences } = collector();
    for (let i = 0; i < 10_000; i++) {
      c.accept(line({ ts: T0 + Math.floor(i / 500), id: `flood${i}` }));
      if (i % 1000 === 999) c.flush(); // the collector ships every second
    }
    c.accept(line({ ts: T0 + 21, ip: '198.51.100.66', reason: 'sqli_detected', rule: '-', location: 'query:id', path: '/items', matched: '%27%20OR%201%3D1', id: 'attack1' }));
    c.flush();
    assert.equal(c.dropped, 0, 'nothing dropped: the flood took one event of the day');
    const flood = shipped().filter((e) => e.reason === 'ip_blocked');
    assert.ok(
      flood.every((e) => e.ts === T0),
      'every item of the flood names its first occurrence',
    );
    assert.equal(
      occurrences((e) => e.reason === 'ip_blocked'),
      10_000,
    );
    assert.ok(flood.length <= 10, `${flood.length} items, one per shipment`);
    assert.equal(Math.max(...flood.map((e) => e.lastTs ?? e.ts)), T0 + 19);
    const ids = flood.flatMap((e) => (e.requestId === undefined ? [] : [e.requestId, ...(e.requestIds ?? [])]));
    assert.deepEqual(
      ids,
      Array.from({ length: AGENT_LIMITS.requestIdsPerEvent }, (_, i) => `flood${i}`),
      'the first 32 request ids, once each',
    );
    const [attack] = shipped().filter((e) => e.reason === 'sqli_detected');
    assert.deepEqual([attack?.ip, attack?.path, attack?.location, attack?.matched, attack?.requestId], ['198.51.100.66', '/items', 'query:id', "' OR 1=1", 'attack1']);
    for (const batch of [flood]) assert.equal(parseAgentMessage(JSON.stringify({ type: 'events/batch', payload: { events: batch } })).ok, true, 'items are valid events/batch items');
  });

  test('a GET /articles?q=<script> and a POST /comment with an XSS body from one source stay two events, each with its request id', () => {
    const { c, shipped } = collector();
    c.accept(line({ reason: 'xss_detected', rule: '-', method: 'GET', location: 'query:q', path: '/articles', matched: '%3Cscript%3E', id: 'getId1', query: 'q=%253Cscript%253E' }));
    c.accept(line({ reason: 'xss_detected', rule: '-', method: 'POST', location: 'body:text', path: '/comment', matched: '%3Cimg%20onerror%3D', id: 'postId2' }));
    c.flush();
    assert.deepEqual(
      shipped().map((e) => [e.method, e.path, e.query, e.location, e.requestId, e.count ?? 1]),
      [
        ['GET', '/articles', 'q=%3Cscript%3E', 'query:q', 'getId1', 1],
        ['POST', '/comment', null, 'body:text', 'postId2', 1],
      ],
    );
  });

  test('only the very same event folds: each of source, reason, rule, domain, method, path, location and blocked keeps events apart', () => {
    const { c, shipped } = collector();
    const base: Line = { reason: 'sqli_detected', rule: '-', location: 'query:id', path: '/a', matched: 'x', query: 'id=1' };
    const variants: Line[] = [
      base,
      { ...base, ip: '203.0.113.10' },
      { ...base, reason: 'xss_detected' },
      { ...base, domain: 'blog.example.com' },
      { ...base, method: 'POST' },
      { ...base, path: '/b' },
      { ...base, location: 'query:other' },
      { ...base, action: 'detect' },
      { ...base, reason: 'ip_blocked', rule: RULE, location: '-', matched: '-' },
      { ...base, reason: 'ip_blocked', rule: '3f1c2e1a-9b0d-4c55-8f3e-0123456789ac', location: '-', matched: '-' },
    ];
    for (const v of variants) c.accept(line(v));
    // repeats: the excerpt and the query are not part of the identity
    for (const v of variants) c.accept(line({ ...v, ts: T0 + 30, matched: 'another-excerpt', query: 'id=2%2520OR%25201%253D1' }));
    c.flush();
    assert.equal(shipped().length, variants.length);
    assert.ok(shipped().every((e) => e.count === 2 && e.lastTs === T0 + 30));
    assert.ok(
      shipped().every((e) => e.query === 'id=1' && e.matched !== 'another-excerpt'),
      "the event keeps its first occurrence's query and excerpt",
    );
  });

  test('a repeat more than 60 s after the first occurrence starts a new event; repeats after a shipment go out as increments', () => {
    const { c, batches } = collector();
    c.accept(line({ id: 'a1' }));
    c.flush();
    c.accept(line({ ts: T0 + 40, id: 'a2' }));
    c.accept(line({ ts: T0 + 60, id: 'a3' }));
    c.flush();
    c.accept(line({ ts: T0 + 61, id: 'b1' }));
    c.flush();
    assert.deepEqual(batches, [
      [
        {
          ts: T0,
          ip: '203.0.113.9',
          domain: 'shop.example.com',
          reason: 'ip_blocked',
          ruleId: RULE,
          method: 'GET',
          path: '/',
          query: null,
          location: null,
          matched: null,
          blocked: true,
          requestId: 'a1',
        },
      ],
      [
        {
          ts: T0,
          ip: '203.0.113.9',
          domain: 'shop.example.com',
          reason: 'ip_blocked',
          ruleId: RULE,
          method: 'GET',
          path: '/',
          query: null,
          location: null,
          matched: null,
          blocked: true,
          requestId: 'a2',
          count: 2,
          lastTs: T0 + 60,
          requestIds: ['a3'],
        },
      ],
      [
        {
          ts: T0 + 61,
          ip: '203.0.113.9',
          domain: 'shop.example.com',
          reason: 'ip_blocked',
          ruleId: RULE,
          method: 'GET',
          path: '/',
          query: null,
          location: null,
          matched: null,
          blocked: true,
          requestId: 'b1',
        },
      ],
    ]);
  });

  test('the cap counts events: a flood of distinct blocks, rate limits and challenges cannot take the room kept for detections', () => {
    const { c, shipped } = collector();
    const reasons = ['ip_blocked', 'rate_limited', 'bot_challenge', 'country_blocked', 'bot_blocked'];
    for (let i = 0; i < 20_000; i++) c.accept(line({ ip: ipOf(i), reason: reasons[i % reasons.length]!, path: BOT_ANSWER_PATH }));
    c.flush();
    const floodRows = shipped().length;
    assert.equal(floodRows, EVENT_ROWS.perDay - EVENT_ROWS.reservedForDetections);
    assert.ok(shipped().filter((e) => e.reason === 'rate_limited' || e.reason === 'bot_challenge').length <= EVENT_ROWS.flood);
    for (let i = 0; i < 1500; i++) c.accept(line({ ip: ipOf(100_000 + i), reason: i % 2 ? 'sqli_detected' : 'upload_blocked', rule: '-', location: 'body:f', matched: 'x' }));
    c.flush();
    assert.equal(shipped().length, EVENT_ROWS.perDay, 'detections fill the kept room');
    assert.equal(shipped().length - floodRows, EVENT_ROWS.reservedForDetections);
    // A repeat of a stored event still counts: folding takes no room, even on a full day.
    c.accept(line({ ts: T0 + 1, ip: ipOf(0), reason: 'ip_blocked', path: BOT_ANSWER_PATH }));
    c.flush();
    assert.equal(shipped().at(-1)!.lastTs, T0 + 1);
  });

  test('a served challenge page is not logged as a block; a refused answer to it is', () => {
    const served = parseEventLine(line({ reason: 'bot_challenge', path: '/pricing', id: 'page1' }))!;
    assert.deepEqual([served.reason, served.blocked], ['bot_challenge', false]);
    // HAProxy's url_enc writes the answer path with its slashes encoded.
    const refused = parseEventLine(line({ reason: 'bot_challenge', path: BOT_ANSWER_PATH.replaceAll('/', '%2F') }))!;
    assert.deepEqual([refused.reason, refused.path, refused.blocked], ['bot_challenge', BOT_ANSWER_PATH, true]);
    // The older five-field line has no path: it stays a block.
    assert.equal(parseEventLine(`rampart-waf ${T0} 203.0.113.9 shop.example.com bot_challenge ${RULE}`)!.blocked, true);
    const { c, shipped } = collector();
    c.accept(line({ reason: 'bot_challenge', path: '/pricing' }));
    c.accept(line({ reason: 'bot_challenge', path: BOT_ANSWER_PATH }));
    c.flush();
    assert.deepEqual(
      shipped().map((e) => [e.path, e.blocked]),
      [
        ['/pricing', false],
        [BOT_ANSWER_PATH, true],
      ],
    );
  });

  test('while the service is away at most 5,000 events wait to be shipped; the oldest is given up', () => {
    let online = false;
    let offers = 0;
    const shipped: WafEventItem[] = [];
    const c = new EventCollector(
      (b) => (offers++, online ? (shipped.push(...b), true) : false),
      () => new Date('2026-11-22T10:00:00Z'),
      2 * AGENT_LIMITS.bufferedEvents,
    );
    for (let i = 0; i <= AGENT_LIMITS.bufferedEvents; i++) c.accept(line({ ip: ipOf(i), reason: 'sqli_detected', rule: '-', id: `q${i}` }));
    // A refused batch waits for the next flush (the timer's, once a second): a flood while the
    // service is away is not offered again with every line.
    assert.equal(offers, 1, 'the full queue was offered once, when it first filled a batch');
    c.flush();
    online = true;
    c.flush();
    assert.equal(shipped.length, AGENT_LIMITS.bufferedEvents);
    assert.deepEqual([shipped[0]!.requestId, shipped.at(-1)!.requestId], ['q1', `q${AGENT_LIMITS.bufferedEvents}`]);
  });

  test('the largest item the collector ships (every request id at its longest) keeps a full batch under the message size cap', () => {
    const { c, batches } = collector();
    for (let i = 0; i < AGENT_LIMITS.eventsPerBatch; i++) {
      for (let k = 0; k < AGENT_LIMITS.requestIdsPerEvent; k++) c.accept(line({ ip: ipOf(i), id: `${String(k).padStart(2, '0')}${'x'.repeat(62)}` }));
    }
    c.flush();
    const raw = JSON.stringify({ type: 'events/batch', payload: { events: batches[0] } });
    assert.equal(batches[0]!.length, AGENT_LIMITS.eventsPerBatch);
    assert.equal(batches[0]![0]!.requestIds!.length, AGENT_LIMITS.requestIdsPerEvent - 1);
    assert.equal(parseAgentMessage(raw).ok, true);
    assert.ok(Buffer.byteLength(raw) < AGENT_LIMITS.messageBytes);
  });
});
