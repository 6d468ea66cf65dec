import assert from 'node:assert/strict';
import { test } from 'node:test';
import { backendName, histogramP99, LATENCY_BUCKETS_MS, latencyBucket, parseAgentMessage, type AnalyticsBatchPayload } from '@rampart/protocol';
import { AnalyticsCollector, counterDelta, minuteOf, parseInfoPid, parseStatCsv } from '../src/analytics.js';
import { EventCollector } from '../src/events.js';

const HEADER =
  '# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot';

/** A `show stat` answer: a frontend row (ignored) and one BACKEND row per backend. */
function stat(backends: Record<string, { req: number; s2: number; s4?: number; s5?: number; bin: number; bout: number }>): string {
  const cols = HEADER.slice(2).split(',');
  const row = (values: Record<string, string | number>) => cols.map((c) => String(values[c] ?? '')).join(',');
  const lines = [HEADER, row({ pxname: 'http_in', svname: 'FRONTEND', stot: 999, req_tot: 999, bin: 1, bout: 1, hrsp_2xx: 999 })];
  for (const [name, b] of Object.entries(backends)) {
    lines.push(row({ pxname: name, svname: 'origin1', stot: b.req, bin: b.bin }));
    lines.push(
      row({
        pxname: name,
        svname: 'BACKEND',
        stot: b.req,
        req_tot: b.req,
        bin: b.bin,
        bout: b.bout,
        hrsp_1xx: 0,
        hrsp_2xx: b.s2,
        hrsp_3xx: 0,
        hrsp_4xx: b.s4 ?? 0,
        hrsp_5xx: b.s5 ?? 0,
        hrsp_other: 0,
      }),
    );
  }
  return lines.join('\n') + '\n\n';
}

/** A collector over a fake HAProxy whose counters, pid and reachability the test sets. */
function harness(opts: { maxBuffered?: number } = {}) {
  const h = {
    pid: 100,
    csv: stat({}),
    fail: false,
    connected: true,
    sent: [] as AnalyticsBatchPayload[],
    now: new Date('2026-11-23T06:41:00.500Z'),
    domains: ['shop.example.com', 'blog.example.com'],
    ruleIds: new Set<string>(),
    /** The hits table's entries (`show table rampart_hits`), by key. */
    hits: new Map<string, number>(),
    tableMissing: false,
  };
  const c = new AnalyticsCollector({
    command: async (cmd) => {
      if (h.fail) throw new Error('connect ECONNREFUSED');
      if (cmd.endsWith('show table rampart_hits')) {
        if (h.tableMissing) throw new Error('No such table');
        return `# table: rampart_hits, type: string, size:10, used:${h.hits.size}\n${[...h.hits].map(([k, n], i) => `0x55d${i}: key=${k} use=0 exp=0 shard=0 http_req_cnt=${n}\n`).join('')}\n`;
      }
      return cmd.endsWith('show info') ? `Name: HAProxy\nVersion: 2.6.12\nPid: ${h.pid}\nUptime_sec: 3\n` : h.csv;
    },
    domains: () => h.domains,
    ruleIds: () => h.ruleIds,
    send: (b) => {
      if (!h.connected) return false;
      // What the agent puts on the wire must be a valid message.
      const parsed = parseAgentMessage(JSON.stringify({ type: 'analytics/batch', payload: b }));
      assert.ok(parsed.ok, parsed.ok ? '' : parsed.error);
      h.sent.push(b);
      return true;
    },
    now: () => h.now,
    ...(opts.maxBuffered !== undefined ? { maxBuffered: opts.maxBuffered } : {}),
  });
  const minute = () => (h.now = new Date(h.now.getTime() + 60_000));
  return { h, c, minute };
}

test('show stat: BACKEND rows by name, requests from req_tot, status classes and bytes', () => {
  const m = parseStatCsv(stat({ be_shop_example_com: { req: 7, s2: 5, s4: 2, bin: 700, bout: 9000 } }));
  assert.deepEqual([...m.keys()], ['be_shop_example_com']);
  assert.deepEqual(m.get('be_shop_example_com'), { requests: 7, status: { '1xx': 0, '2xx': 5, '3xx': 0, '4xx': 2, '5xx': 0, other: 0 }, bytesIn: 700, bytesOut: 9000 });
  // Without req_tot (older HAProxy), stot counts the requests.
  const old = parseStatCsv('# pxname,svname,stot,bin,bout\nbe_x,BACKEND,4,1,2\n');
  assert.equal(old.get('be_x')!.requests, 4);
  assert.equal(parseStatCsv('Unknown command\n').size, 0);
  assert.equal(parseInfoPid('Name: HAProxy\nPid: 4242\nUptime_sec: 1\n'), 4242);
  assert.equal(parseInfoPid('nothing'), undefined);
  assert.equal(minuteOf(new Date('2026-11-23T06:41:59.999Z')), '2026-11-23T06:41:00.000Z');
});

test('deltas: a counter that went down means a new process, whose value is all of the delta', () => {
  const c = (requests: number, bytes = requests * 10) => ({ requests, status: { '1xx': 0, '2xx': requests, '3xx': 0, '4xx': 0, '5xx': 0, other: 0 }, bytesIn: bytes, bytesOut: bytes });
  assert.equal(counterDelta(undefined, c(5)).requests, 5, 'no previous reading: all of it');
  assert.equal(counterDelta(c(5), c(12)).requests, 7);
  assert.equal(counterDelta(c(12), c(3)).requests, 3, 'restarted: the new value');
  assert.equal(counterDelta(c(12), c(12)).requests, 0);
});

test('each interval ships the deltas since the last reading, across a reload (new worker pid) and a restart (counters down)', async () => {
  const { h, c, minute } = harness();
  h.csv = stat({ be_shop_example_com: { req: 10, s2: 8, s4: 2, bin: 1000, bout: 5000 }, be_other_example_com: { req: 50, s2: 50, bin: 1, bout: 1 } });
  minute();
  await c.tick();
  assert.equal(h.sent.length, 1);
  assert.equal(h.sent[0]!.minute, '2026-11-23T06:41:00.000Z', 'the minute the interval began in');
  assert.deepEqual(
    h.sent[0]!.domains,
    [{ domain: 'shop.example.com', requests: 10, status: { '1xx': 0, '2xx': 8, '3xx': 0, '4xx': 2, '5xx': 0, other: 0 }, bytesIn: 1000, bytesOut: 5000, blocked: {} }],
    'only the domains this server serves',
  );

  h.csv = stat({ be_shop_example_com: { req: 25, s2: 20, s4: 5, bin: 2500, bout: 12000 }, be_blog_example_com: { req: 1, s2: 1, bin: 10, bout: 20 } });
  minute();
  await c.tick();
  assert.equal(h.sent[1]!.minute, '2026-11-23T06:42:00.000Z');
  assert.deepEqual(
    h.sent[1]!.domains.map((d) => [d.domain, d.requests, d.status['2xx'], d.status['4xx'], d.bytesIn, d.bytesOut]),
    [
      ['shop.example.com', 15, 12, 3, 1500, 7000],
      ['blog.example.com', 1, 1, 0, 10, 20],
    ],
  );

  // A reload: a new worker whose counters are already above the old ones (busy); the pid tells.
  h.pid = 101;
  h.csv = stat({ be_shop_example_com: { req: 40, s2: 40, bin: 4000, bout: 4000 }, be_blog_example_com: { req: 1, s2: 1, bin: 10, bout: 20 } });
  minute();
  await c.tick();
  assert.deepEqual(
    h.sent[2]!.domains.map((d) => [d.domain, d.requests]),
    [
      ['shop.example.com', 40],
      ['blog.example.com', 1],
    ],
  );

  // A restart the pid does not show (same pid number): the counters went down.
  h.csv = stat({ be_shop_example_com: { req: 3, s2: 3, bin: 30, bout: 30 }, be_blog_example_com: { req: 1, s2: 1, bin: 10, bout: 20 } });
  minute();
  await c.tick();
  assert.deepEqual(
    h.sent[3]!.domains.map((d) => [d.domain, d.requests, d.bytesIn]),
    [['shop.example.com', 3, 30]],
    'blog: unchanged, left out',
  );

  // Nothing happened: nothing is sent.
  minute();
  await c.tick();
  assert.equal(h.sent.length, 4);
});

test('WAF blocks by reason are counted from every parsed event, before the daily event cap; detect-mode events are not blocks', async () => {
  const { h, c, minute } = harness();
  const secret = 'a1'.repeat(16);
  const stored: unknown[] = [];
  const events = new EventCollector(
    (b) => (stored.push(...b), true),
    () => new Date('2026-11-23T06:41:30Z'),
    3,
    () => secret,
    undefined,
    (e) => c.countEvent(e),
  );
  const line = (reason: string, action = 'block', domain = 'shop.example.com') => `<134>haproxy[1]: rampart-waf ${secret} 1795329600 203.0.113.9 ${domain} ${reason} - ${action} GET - /x -`;
  for (let i = 0; i < 10; i++) events.accept(line('rate_limited'));
  events.accept(line('sqli_detected'));
  events.accept(line('sqli_detected', 'detect'));
  events.accept(line('ip_blocked', 'block', 'blog.example.com'));
  events.accept(`rampart-waf ${'b2'.repeat(16)} 1795329600 203.0.113.9 shop.example.com ip_blocked - block GET - /x -`); // forged: not counted
  events.flush();
  assert.equal(stored.length, 3, 'the daily cap (3 here) limits the stored events');
  assert.equal(events.dropped, 1, 'the ten rate limits are one event (folded); the block of blog is past the cap');
  minute();
  await c.tick();
  assert.equal(h.sent.length, 1);
  const byDomain = Object.fromEntries(h.sent[0]!.domains.map((d) => [d.domain, d]));
  assert.deepEqual(byDomain['shop.example.com']!.blocked, { rate_limited: 10, sqli_detected: 1 });
  assert.deepEqual(byDomain['blog.example.com']!.blocked, { ip_blocked: 1 });
  assert.equal(byDomain['shop.example.com']!.requests, 0);
  // Counted once: the next interval starts from zero.
  minute();
  await c.tick();
  assert.equal(h.sent.length, 1);
});

test("latency samples: lines without a reason, authenticated, count in their domain's histogram; events and forgeries do not", async () => {
  const { h, c, minute } = harness();
  const secret = 'c3'.repeat(16);
  const stored: unknown[] = [];
  const events = new EventCollector(
    (b) => (stored.push(...b), true),
    () => new Date('2026-11-23T06:41:30Z'),
    100,
    () => secret,
    undefined,
    (e) => c.countEvent(e),
    (s) => c.countLatency(s),
  );
  // The proxy's line: every field, then the backend (%b) and the total active time (%Ta, ms).
  const sample = (backend: string, ms: number | string, token = secret) =>
    `<134>haproxy[1]: rampart-waf ${token} 1795329600 203.0.113.9 - - - - - - - - 0123456789abcdef0123456789abcdef - - ${backend} ${ms}`;
  const shop = backendName('shop.example.com');
  for (const ms of [3, 4, 12, 12, 480, 20000]) events.accept(sample(shop, ms));
  events.accept(sample(backendName('blog.example.com'), 70));
  events.accept(sample(shop, 9, 'd4'.repeat(16))); // forged: another secret
  events.accept(sample(shop, -1)); // aborted before an answer: no time
  events.accept(sample('not_a_backend', 5)); // no domain of this server
  // An event line carries them too, and stays an event, not a sample.
  events.accept(`rampart-waf ${secret} 1795329600 203.0.113.9 shop.example.com ip_blocked - block GET - /x - 0123456789abcdef0123456789abcdef - - ${shop} 0`);
  events.flush();
  assert.equal(stored.length, 1, 'samples are not events');
  minute();
  await c.tick();
  const byDomain = Object.fromEntries(h.sent[0]!.domains.map((d) => [d.domain, d]));
  const histogram = (entries: [number, number][]) => {
    const counts = new Array(LATENCY_BUCKETS_MS.length + 1).fill(0);
    for (const [ms, n] of entries) counts[latencyBucket(ms)] += n;
    return counts;
  };
  assert.deepEqual(
    byDomain['shop.example.com']!.latency,
    histogram([
      [5, 2],
      [25, 2],
      [500, 1],
      [20000, 1],
    ]),
  );
  assert.deepEqual(byDomain['blog.example.com']!.latency, histogram([[100, 1]]));
  assert.deepEqual(byDomain['shop.example.com']!.blocked, { ip_blocked: 1 });
  minute();
  await c.tick();
  assert.equal(h.sent.length, 1, 'counted once');
  assert.equal(
    histogramP99(
      histogram([
        [5, 99],
        [500, 1],
      ]),
    ),
    5,
  );
  assert.equal(
    histogramP99(
      histogram([
        [5, 98],
        [500, 2],
      ]),
    ),
    500,
  );
  assert.equal(histogramP99(histogram([[20000, 1]])), Infinity);
  assert.equal(histogramP99(histogram([])), undefined);
});

test('while the service is away batches are kept, the oldest dropped past the bound, and sent in order once it is back', async () => {
  const { h, c, minute } = harness({ maxBuffered: 5 });
  h.connected = false;
  for (let i = 1; i <= 8; i++) {
    h.csv = stat({ be_shop_example_com: { req: i * 10, s2: i * 10, bin: i, bout: i } });
    minute();
    await c.tick();
  }
  assert.equal(c.buffer.length, 5);
  assert.equal(c.droppedBatches, 3);
  assert.equal(h.sent.length, 0);
  h.connected = true;
  c.flush();
  assert.equal(h.sent.length, 5);
  assert.deepEqual(
    h.sent.map((b) => b.minute.slice(11, 16)),
    ['06:44', '06:45', '06:46', '06:47', '06:48'],
    'the newest five, oldest first',
  );
  assert.ok(h.sent.every((b) => b.domains[0]!.requests === 10));
});

test('the default buffer bound is 120 batches', async () => {
  const { h, c, minute } = harness();
  h.connected = false;
  for (let i = 1; i <= 130; i++) {
    h.csv = stat({ be_shop_example_com: { req: i, s2: i, bin: i, bout: i } });
    minute();
    await c.tick();
  }
  assert.equal(c.buffer.length, 120);
  assert.equal(c.droppedBatches, 10);
});

test('a failed reading keeps the baseline: the next one covers both intervals', async () => {
  const { h, c, minute } = harness();
  h.csv = stat({ be_shop_example_com: { req: 5, s2: 5, bin: 1, bout: 1 } });
  minute();
  await c.tick();
  h.fail = true;
  minute();
  await c.tick();
  assert.equal(h.sent.length, 1);
  h.fail = false;
  h.csv = stat({ be_shop_example_com: { req: 12, s2: 12, bin: 1, bout: 1 } });
  minute();
  await c.tick();
  assert.equal(h.sent.at(-1)!.domains[0]!.requests, 7);
});

test("hits of custom rules: each key credits its log rule and its deciding rule; differences between readings, reset by a new worker; only the snapshot's rules", async () => {
  const { h, c, minute } = harness();
  const [log, block, allow, gone] = ['a', 'b', 'c', 'd'].map((x) => `00000000-0000-4000-8000-00000000000${x}`) as [string, string, string, string];
  h.ruleIds = new Set([log, block, allow]);
  h.hits = new Map([
    [`${log}|${block}`, 2],
    [log, 3],
    [`-|${allow}`, 5],
    [`-|${gone}`, 7],
  ]);
  minute();
  await c.tick();
  const hitsOf = (b: AnalyticsBatchPayload | undefined) => Object.fromEntries((b?.rules ?? []).map((r) => [r.ruleId, r.hits]));
  assert.deepEqual(hitsOf(h.sent.at(-1)), { [log]: 5, [block]: 2, [allow]: 5 }, 'a batch with hits and no traffic counters is still sent');
  // The next minute: only what was added.
  h.hits.set(`-|${allow}`, 6);
  minute();
  await c.tick();
  assert.deepEqual(hitsOf(h.sent.at(-1)), { [allow]: 1 });
  // Nothing new: no batch at all (no traffic either).
  const count = h.sent.length;
  minute();
  await c.tick();
  assert.equal(h.sent.length, count);
  // A reload: the new worker's table starts again.
  h.pid = 101;
  h.hits = new Map([[`-|${allow}`, 2]]);
  minute();
  await c.tick();
  assert.deepEqual(hitsOf(h.sent.at(-1)), { [allow]: 2 });
  // A worker without the table yet (its configuration predates the first rule): the traffic counters still go.
  h.tableMissing = true;
  h.csv = stat({ be_shop_example_com: { req: 4, s2: 4, bin: 10, bout: 10 } });
  minute();
  await c.tick();
  assert.equal(h.sent.at(-1)?.rules, undefined);
  assert.equal(h.sent.at(-1)?.domains[0]?.requests, 4);
});

test('staged rollout: a baking canary sends every reading, traffic or not, whatever its usual interval; an idle server sends none', async () => {
  const { h, c, minute } = harness();
  minute();
  await c.tick();
  assert.equal(h.sent.length, 0, 'nothing to say, nothing sent');
  c.setReportInterval(120); // longer than the usual interval: the reading stays at the usual one
  minute();
  await c.tick();
  assert.equal(h.sent.length, 1, 'a baking canary reports even an empty interval');
  assert.deepEqual(h.sent[0]!.domains, []);
  c.setReportInterval(undefined);
  minute();
  await c.tick();
  assert.equal(h.sent.length, 1);
});

test("staged rollout: a baking canary reports at the snapshot's reportSeconds, then at its usual interval again", async () => {
  const { h, c } = harness();
  h.csv = stat({ be_shop_example_com: { req: 5, s2: 5, bin: 1, bout: 1 } });
  c.start();
  c.setReportInterval(1);
  const deadline = Date.now() + 5_000;
  while (h.sent.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.equal(h.sent.length, 1, 'a batch within a few seconds, not a minute');
  assert.equal(h.sent[0]!.domains[0]!.requests, 5);
  h.csv = stat({ be_shop_example_com: { req: 9, s2: 9, bin: 1, bout: 1 } }); // there is something to send
  c.setReportInterval(undefined);
  await new Promise((r) => setTimeout(r, 1_300));
  c.stop();
  assert.equal(h.sent.length, 1, 'back to the 60 s interval');
});
