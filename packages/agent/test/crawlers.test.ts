import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CrawlerVerifier, fcrdns, RuntimeCrawlerMap, type CrawlerDns, type CrawlerMapSink } from '../src/crawlers.js';
import { EventCollector, parseEvent, parseEventLine } from '../src/events.js';
import { FakeClock } from './fake-clock.js';

// docs/bots.md "Verified crawlers": forward-confirmed reverse DNS of claimed search crawlers,
// bounded and cached, kept in HAProxy's map through its runtime API.

const HOUR = 3_600_000;

function dnsError(code: string): Error {
  return Object.assign(new Error(`query failed: ${code}`), { code });
}

/** A DNS that answers from tables (PTR by address, A/AAAA by name), counting its questions. */
class FakeDns {
  ptr = new Map<string, string[] | string>();
  a = new Map<string, string[] | string>();
  aaaa = new Map<string, string[] | string>();
  questions: string[] = [];
  /** Questions about these (addresses or names) are never answered: a zone whose servers stay silent. */
  silent = new Set<string>();
  /** When set, every answer waits for release(). */
  gate: Promise<void> | undefined;
  private open: (() => void) | undefined;
  cancelled = 0;

  hold(): void {
    this.gate = new Promise((r) => (this.open = r));
  }

  release(): void {
    this.gate = undefined;
    this.open?.();
  }

  private async answer(table: Map<string, string[] | string>, key: string, q: string): Promise<string[]> {
    this.questions.push(q);
    if (this.silent.has(key)) await new Promise(() => {});
    if (this.gate) await this.gate;
    const v = table.get(key);
    if (v === undefined) throw dnsError('ENOTFOUND');
    if (typeof v === 'string') throw dnsError(v);
    return v;
  }

  resolver(): CrawlerDns {
    return {
      reverse: (ip) => this.answer(this.ptr, ip, `PTR ${ip}`),
      resolve4: (name) => this.answer(this.a, name, `A ${name}`),
      resolve6: (name) => this.answer(this.aaaa, name, `AAAA ${name}`),
      cancel: () => void this.cancelled++,
    };
  }
}

/** A sink that records what it is told, and the map it would hold. */
class RecordingSink implements CrawlerMapSink {
  map = new Map<string, string>();
  calls: string[] = [];
  add(ip: string, id: string): void {
    this.calls.push(`add ${ip} ${id}`);
    this.map.set(ip, id);
  }
  remove(ip: string): void {
    this.calls.push(`del ${ip}`);
    this.map.delete(ip);
  }
}

function setup(opts: Partial<ConstructorParameters<typeof CrawlerVerifier>[0]> = {}) {
  const dns = new FakeDns();
  dns.ptr.set('66.249.66.1', ['crawl-66-249-66-1.googlebot.com']);
  dns.a.set('crawl-66-249-66-1.googlebot.com', ['66.249.66.1']);
  const clock = new FakeClock();
  const sink = new RecordingSink();
  const v = new CrawlerVerifier({ dns: () => dns.resolver(), sink, clock, ...opts });
  return { dns, clock, sink, v };
}

describe('FCrDNS', () => {
  test("accepts a PTR name under the claimed crawler's domains that resolves back to the address", async () => {
    const { dns } = setup();
    assert.deepEqual(await fcrdns(dns.resolver(), '66.249.66.1'), { id: 'google' });
    dns.ptr.set('157.55.39.1', ['msnbot-157-55-39-1.search.msn.com.']); // trailing dot tolerated
    dns.a.set('msnbot-157-55-39-1.search.msn.com', ['10.0.0.1', '157.55.39.1']);
    assert.deepEqual(await fcrdns(dns.resolver(), '157.55.39.1'), { id: 'bing' });
  });

  test('IPv6: the forward AAAA answer is compared canonically', async () => {
    const { dns } = setup();
    dns.ptr.set('2001:4860:4801:10::1', ['crawl-2001-4860-4801-10--1.googlebot.com']);
    dns.aaaa.set('crawl-2001-4860-4801-10--1.googlebot.com', ['2001:4860:4801:0010:0000:0000:0000:0001']);
    assert.deepEqual(await fcrdns(dns.resolver(), '2001:4860:4801:0010::1'), { id: 'google' });
    assert.ok(dns.questions.includes('PTR 2001:4860:4801:10::1'), 'asked with the canonical spelling');
  });

  test('refuses PTR names outside the documented domains, without a forward query', async () => {
    const { dns } = setup();
    for (const [ip, name] of [
      ['203.0.113.1', 'googlebot.com.evil.test'],
      ['203.0.113.2', 'crawl.googlebot.com.evil.test'],
      ['203.0.113.3', 'evilgooglebot.com'],
      ['203.0.113.4', 'googlebot.co'],
      ['203.0.113.5', 'crawl googlebot.com'],
    ] as const) {
      dns.ptr.set(ip, [name]);
      dns.a.set(name, [ip]); // even when it resolves back
      assert.deepEqual(await fcrdns(dns.resolver(), ip), { id: null, transient: false }, name);
    }
    assert.ok(!dns.questions.some((q) => q.startsWith('A ')), dns.questions.join(', '));
  });

  test("accepts only the names each crawler's owner documents: a cloud machine's default name is refused, without a forward query", async () => {
    const { dns } = setup();
    const accepted: [string, string, string][] = [
      ['66.249.66.2', 'crawl-66-249-66-2.googlebot.com', 'google'],
      ['66.249.66.3', 'geo-crawl-66-249-66-3.geo.googlebot.com', 'google'],
      ['66.249.90.77', 'rate-limited-proxy-66-249-90-77.google.com', 'google'],
      ['157.55.39.2', 'msnbot-157-55-39-2.search.msn.com', 'bing'],
      ['5.255.253.1', '5-255-253-1.spider.yandex.com', 'yandex'],
      ['213.180.203.1', 'spider-213-180-203-1.yandex.ru', 'yandex'],
      ['87.250.224.1', 'x.yandex.net', 'yandex'],
      ['123.125.66.120', 'baiduspider-123-125-66-120.crawl.baidu.com', 'baidu'],
      ['119.63.195.254', 'baiduspider-119-63-195-254.crawl.baidu.jp', 'baidu'],
      ['17.58.101.1', '17-58-101-1.applebot.apple.com', 'apple'],
      ['74.6.67.218', 'lj612134.crawl.yahoo.net', 'yahoo'],
    ];
    for (const [ip, name, id] of accepted) {
      dns.ptr.set(ip, [name]);
      dns.a.set(name, [ip]);
      assert.deepEqual(await fcrdns(dns.resolver(), ip), { id }, name);
    }
    dns.questions = [];
    const refused: [string, string][] = [
      // Every Google Cloud machine's default reverse name, and App Engine's
      ['34.105.1.2', '2.1.105.34.bc.googleusercontent.com'],
      ['35.187.1.2', 'x.gae.googleusercontent.com'],
      ['35.187.1.3', 'googleusercontent.com'],
      // the owners' other names, not their crawlers'
      ['40.77.1.1', 'x.msn.com'],
      ['40.77.1.2', 'bing.com'],
      ['17.1.1.1', 'x.apple.com'],
      ['74.6.1.1', 'x.yahoo.net'],
      ['74.6.1.2', 'x.yahoo.com'],
    ];
    for (const [ip, name] of refused) {
      dns.ptr.set(ip, [name]);
      dns.a.set(name, [ip]); // even when it resolves back
      assert.deepEqual(await fcrdns(dns.resolver(), ip), { id: null, transient: false }, name);
    }
    assert.ok(!dns.questions.some((q) => q.startsWith('A ')), dns.questions.join(', '));
  });

  test('refuses a right PTR name whose forward answer points elsewhere, or is missing', async () => {
    const { dns } = setup();
    dns.ptr.set('203.0.113.9', ['crawl-66-249-66-1.googlebot.com']); // someone else's name
    assert.deepEqual(await fcrdns(dns.resolver(), '203.0.113.9'), { id: null, transient: false });
    dns.ptr.set('203.0.113.10', ['crawl-203-0-113-10.googlebot.com']);
    assert.deepEqual(await fcrdns(dns.resolver(), '203.0.113.10'), { id: null, transient: false });
  });

  test('no PTR record is a definite failure; a DNS error is a transient one', async () => {
    const { dns } = setup();
    assert.deepEqual(await fcrdns(dns.resolver(), '203.0.113.20'), { id: null, transient: false });
    dns.ptr.set('203.0.113.21', 'ESERVFAIL');
    assert.deepEqual(await fcrdns(dns.resolver(), '203.0.113.21'), { id: null, transient: true });
    dns.ptr.set('203.0.113.22', ['crawl.googlebot.com']);
    dns.a.set('crawl.googlebot.com', 'ETIMEOUT');
    assert.deepEqual(await fcrdns(dns.resolver(), '203.0.113.22'), { id: null, transient: true });
  });

  test('looks at the first few PTR names only', async () => {
    const { dns } = setup();
    dns.ptr.set('203.0.113.30', ['a.example', 'b.example', 'c.example', 'd.example', 'crawl.googlebot.com']);
    dns.a.set('crawl.googlebot.com', ['203.0.113.30']);
    assert.deepEqual(await fcrdns(dns.resolver(), '203.0.113.30', 4), { id: null, transient: false });
    assert.deepEqual(await fcrdns(dns.resolver(), '203.0.113.30', 5), { id: 'google' });
  });
});

describe('CrawlerVerifier', () => {
  test('a verified address goes to the map once; later claims cost no lookup', async () => {
    const { dns, sink, v } = setup();
    v.claim('66.249.66.1', 'google');
    await v.settled();
    assert.deepEqual([...v.entries()], [['66.249.66.1', 'google']]);
    assert.deepEqual(sink.calls, ['add 66.249.66.1 google']);
    const asked = dns.questions.length;
    for (let i = 0; i < 50; i++) v.claim('66.249.66.1', 'google');
    await v.settled();
    assert.equal(dns.questions.length, asked);
    assert.equal(v.lookups, 1);
  });

  test('a verified Google address claiming Bingbot: no lookup, the map keeps google (HAProxy compares)', async () => {
    const { sink, v } = setup();
    v.claim('66.249.66.1', 'google');
    await v.settled();
    v.claim('66.249.66.1', 'bing');
    await v.settled();
    assert.equal(v.lookups, 1);
    assert.deepEqual([...sink.map], [['66.249.66.1', 'google']]);
  });

  test('unknown crawler ids and anything but an IP address are ignored', async () => {
    const { v } = setup();
    for (const [ip, id] of [
      ['66.249.66.1', 'googlebot'],
      ['66.249.66.1', 'GOOGLE'],
      ['66.249.66.1', 'google x'],
      ['66.249.66.1', '__proto__'],
      ['66.249.66.1 ', 'google'],
      ['66.249.66.1\n@1 clear map', 'google'],
      ['crawl.googlebot.com', 'google'],
      ['66.249.66.0/24', 'google'],
    ])
      v.claim(ip!, id!);
    await v.settled();
    assert.equal(v.lookups, 0);
  });

  test('negative caching: a flood of fake claims from one address costs one lookup an hour', async () => {
    const { dns, clock, sink, v } = setup();
    dns.ptr.set('198.51.100.7', ['host.example.net']);
    for (let i = 0; i < 1000; i++) v.claim('198.51.100.7', i % 2 ? 'google' : 'bing');
    await v.settled();
    assert.equal(v.lookups, 1);
    clock.advance(HOUR - 1);
    v.claim('198.51.100.7', 'google');
    await v.settled();
    assert.equal(v.lookups, 1, 'still cached');
    clock.advance(1);
    v.claim('198.51.100.7', 'google');
    await v.settled();
    assert.equal(v.lookups, 2, 'asked again once the hour is over');
    assert.deepEqual(sink.calls, []);
  });

  test('a DNS error is cached for minutes, not an hour', async () => {
    const { dns, clock, v } = setup({ errorTtlMs: 300_000 });
    dns.ptr.set('198.51.100.8', 'ESERVFAIL');
    v.claim('198.51.100.8', 'google');
    await v.settled();
    clock.advance(299_999);
    v.claim('198.51.100.8', 'google');
    await v.settled();
    assert.equal(v.lookups, 1);
    clock.advance(1);
    v.claim('198.51.100.8', 'google');
    await v.settled();
    assert.equal(v.lookups, 2);
  });

  test('a verified address expires: removed from the map by the sweep, verified again on its next claim', async () => {
    const { clock, sink, v } = setup({ verifiedTtlMs: 24 * HOUR });
    v.claim('66.249.66.1', 'google');
    await v.settled();
    clock.advance(24 * HOUR - 1);
    v.sweep();
    assert.equal(v.entries().size, 1);
    clock.advance(1);
    assert.equal(v.entries().size, 0, 'an expired entry is never handed to a new configuration');
    v.sweep();
    assert.deepEqual(sink.calls, ['add 66.249.66.1 google', 'del 66.249.66.1']);
    v.claim('66.249.66.1', 'google');
    await v.settled();
    assert.equal(v.lookups, 2);
    assert.deepEqual([...sink.map], [['66.249.66.1', 'google']]);
  });

  test('the sweep loop runs on the clock until stopped', async () => {
    const { clock, sink, v } = setup({ verifiedTtlMs: HOUR, sweepIntervalMs: 60_000 });
    v.claim('66.249.66.1', 'google');
    await v.settled();
    const stop = new AbortController();
    const loop = v.start(stop.signal);
    for (let i = 0; i < 61; i++) {
      clock.advance(60_000);
      await new Promise((r) => setImmediate(r));
    }
    assert.deepEqual(sink.calls, ['add 66.249.66.1 google', 'del 66.249.66.1']);
    stop.abort();
    await loop;
  });

  test('in flight: claims for an address being looked up are folded into that lookup', async () => {
    const { dns, sink, v } = setup();
    dns.hold();
    for (let i = 0; i < 100; i++) v.claim('66.249.66.1', 'google');
    assert.equal(v.inFlight, 1);
    assert.equal(v.queued, 0);
    dns.release();
    await v.settled();
    assert.equal(v.lookups, 1);
    assert.deepEqual(sink.calls, ['add 66.249.66.1 google']);
  });

  test('flood bound: at most `concurrency` lookups, one per network, bounded queues, the rest dropped', async () => {
    const { dns, v } = setup({ concurrency: 3, queueMax: 10, networkQueueMax: 4 });
    dns.hold();
    for (let i = 0; i < 500; i++) v.claim(`10.0.${i >> 8}.${i & 255}`, 'google');
    assert.equal(v.inFlight, 1, 'one network, one lookup');
    assert.equal(v.queued, 4, "the network's own queue");
    for (let i = 1; i <= 20; i++) v.claim(`10.${i}.0.1`, 'google');
    assert.equal(v.inFlight, 3);
    assert.equal(v.queued, 10);
    assert.equal(v.dropped, 520 - 13);
    assert.equal(dns.questions.length, 3, 'only the running lookups have asked anything');
    dns.release();
    await v.settled();
    assert.equal(v.lookups, 13);
    assert.ok(dns.questions.filter((q) => q.startsWith('PTR 10.0.')).length <= 2, "newcomers displaced the flooding network's queue");
    // the dropped ones were not cached: they are looked up when they come back
    v.claim('10.0.1.200', 'google');
    await v.settled();
    assert.equal(v.lookups, 14);
  });

  /** Lets the verifier's promise chains run (no timer moves). */
  const ticks = async (n = 20) => {
    for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
  };

  test('300 claims whose reverse zones never answer neither drop nor delay a genuine crawler (defaults)', async () => {
    const { dns, clock, sink, v } = setup();
    // An attacker's addresses in three networks whose reverse DNS it runs, and lets hang.
    const attackers = Array.from({ length: 300 }, (_, i) => `100.${64 + (i % 3)}.${Math.floor(i / 3)}.1`);
    for (const ip of attackers) dns.silent.add(ip);
    for (const ip of attackers) v.claim(ip, 'google');
    v.claim('66.249.66.1', 'google');
    await ticks();
    assert.deepEqual([...sink.map], [['66.249.66.1', 'google']], 'verified at once, the clock never moved');
    // The attacker keeps at most one lookup per network running, and its queue is bounded.
    assert.ok(v.inFlight <= 3, `in flight ${v.inFlight}`);
    assert.ok(v.queued <= 3 * 8, `queued ${v.queued}`);
    // Its networks' lookups time out; the next genuine crawler still goes first.
    clock.advance(3000);
    await ticks();
    dns.ptr.set('66.249.66.2', ['crawl-66-249-66-2.googlebot.com']);
    dns.a.set('crawl-66-249-66-2.googlebot.com', ['66.249.66.2']);
    for (const ip of attackers) v.claim(ip, 'google');
    v.claim('66.249.66.2', 'google');
    await ticks();
    assert.equal(sink.map.get('66.249.66.2'), 'google');
  });

  test('claims from 300 networks that never answer: the genuine crawler is queued, never dropped, and verified within a bounded time', async () => {
    const { dns, clock, sink, v } = setup();
    const attackers = Array.from({ length: 300 }, (_, i) => `${11 + (i >> 8)}.${i & 255}.0.1`);
    for (const ip of attackers) dns.silent.add(ip);
    for (const ip of attackers) v.claim(ip, 'google');
    v.claim('66.249.66.1', 'google');
    let waited = 0;
    while (!sink.map.has('66.249.66.1') && waited < 120_000) {
      clock.advance(1000);
      waited += 1000;
      await ticks();
    }
    assert.equal(sink.map.get('66.249.66.1'), 'google', `not verified after ${waited} ms`);
    assert.ok(waited <= 60_000, `verified after ${waited} ms`);
  });

  test('a lookup that hangs times out, frees its slot, and is cached as a DNS error', async () => {
    const { dns, clock, v } = setup({ concurrency: 1, lookupTimeoutMs: 5000 });
    dns.hold();
    v.claim('66.249.66.1', 'google');
    v.claim('66.249.66.2', 'google');
    assert.equal(v.inFlight, 1);
    clock.advance(5000);
    await new Promise((r) => setImmediate(r));
    assert.equal(dns.cancelled, 1, 'the resolver of the timed-out lookup is cancelled');
    assert.equal(v.lookups, 2, 'the next address got the slot');
    dns.release();
    await v.settled();
    v.claim('66.249.66.1', 'google');
    await v.settled();
    assert.equal(v.lookups, 2, 'the timed-out address is cached for a while');
    assert.equal(v.entries().size, 0);
  });

  test('cache caps: the oldest verified address leaves the map, the oldest failed one is forgotten', async () => {
    const { dns, sink, v } = setup({ maxVerified: 2, maxFailed: 2 });
    for (const n of [1, 2, 3]) {
      dns.ptr.set(`66.249.66.${n}`, [`crawl-${n}.googlebot.com`]);
      dns.a.set(`crawl-${n}.googlebot.com`, [`66.249.66.${n}`]);
      v.claim(`66.249.66.${n}`, 'google');
      await v.settled();
    }
    assert.deepEqual([...v.entries().keys()], ['66.249.66.2', '66.249.66.3']);
    assert.deepEqual([...sink.map.keys()], ['66.249.66.2', '66.249.66.3']);
    for (const n of [1, 2, 3]) v.claim(`198.51.100.${n}`, 'google');
    await v.settled();
    assert.equal(v.lookups, 6);
    v.claim('198.51.100.1', 'google'); // forgotten: asked again
    v.claim('198.51.100.3', 'google'); // still cached
    await v.settled();
    assert.equal(v.lookups, 7);
  });
});

describe('published address lists', () => {
  const lists = (expiresAt: number) => [
    { crawlerId: 'google', prefixes: ['66.249.64.0/19', '2001:4860:4801:10::/64'], expiresAt },
    { crawlerId: 'bing', prefixes: ['157.55.39.0/24'], expiresAt },
  ];

  test("an address in its owner's list is verified without DNS; outside every list, a claim of a listed crawler fails without DNS", async () => {
    const { dns, clock, sink, v } = setup();
    v.setAddressLists(lists(clock.now() / 1000 + 3600));
    v.claim('66.249.70.1', 'google');
    v.claim('2001:4860:4801:10::abcd', 'google');
    v.claim('157.55.39.9', 'google'); // a Bing address claiming Googlebot: verified as Bing (HAProxy compares)
    v.claim('34.105.1.2', 'google'); // a cloud machine: not in Google's list
    v.claim('34.105.1.3', 'bing');
    await v.settled();
    assert.deepEqual(dns.questions, []);
    assert.deepEqual(
      [...sink.map],
      [
        ['66.249.70.1', 'google'],
        ['2001:4860:4801:10::abcd', 'google'],
        ['157.55.39.9', 'bing'],
      ],
    );
    assert.equal(v.listed, 5);
    v.claim('34.105.1.2', 'google');
    assert.equal(v.listed, 5, 'the failure is cached');
    // New lists: what failed before is checked again, against them.
    v.setAddressLists([...lists(clock.now() / 1000 + 3600), { crawlerId: 'apple', prefixes: ['34.105.1.0/24'], expiresAt: clock.now() / 1000 + 3600 }]);
    v.claim('34.105.1.2', 'apple');
    assert.equal(sink.map.get('34.105.1.2'), 'apple');
    // A crawler without a list is checked by reverse DNS.
    dns.ptr.set('5.255.253.1', ['5-255-253-1.spider.yandex.com']);
    dns.a.set('5-255-253-1.spider.yandex.com', ['5.255.253.1']);
    v.claim('5.255.253.1', 'yandex');
    await v.settled();
    assert.equal(sink.map.get('5.255.253.1'), 'yandex');
    assert.deepEqual(dns.questions, ['PTR 5.255.253.1', 'A 5-255-253-1.spider.yandex.com']);
  });

  test('an expired list, or one with a prefix out of bounds or an unknown crawler, is not used: reverse DNS decides', async () => {
    const { dns, clock, sink, v } = setup();
    v.setAddressLists(lists(clock.now() / 1000 + 60));
    clock.advance(60_000);
    v.claim('66.249.66.1', 'google'); // FCrDNS answers for this one (setup)
    v.claim('66.249.70.2', 'google'); // in the expired list, no PTR
    await v.settled();
    assert.deepEqual([...sink.map], [['66.249.66.1', 'google']]);
    assert.equal(v.lookups, 2);
    const warnings: string[] = [];
    const other = setup({ log: (_l, msg) => warnings.push(msg) });
    other.v.setAddressLists([
      { crawlerId: 'google', prefixes: ['0.0.0.0/0'], expiresAt: clock.now() / 1000 + 3600 },
      { crawlerId: 'evilbot', prefixes: ['198.51.100.0/24'], expiresAt: clock.now() / 1000 + 3600 },
    ]);
    other.v.claim('198.51.100.1', 'google');
    await other.v.settled();
    assert.equal(other.v.lookups, 1, 'asked DNS');
    assert.equal(other.sink.map.size, 0);
    assert.equal(warnings.length, 2);
  });

  test('300 claims and a resolver that never answers anything: a crawler in its published list is verified at once', async () => {
    const { dns, sink, v, clock } = setup();
    dns.hold(); // nothing is ever answered
    v.setAddressLists(lists(clock.now() / 1000 + 3600));
    for (let i = 0; i < 300; i++) v.claim(`198.${18 + (i >> 8)}.${i & 255}.1`, 'bing');
    for (let i = 0; i < 300; i++) v.claim(`100.${64 + (i % 4)}.${i >> 2}.1`, 'yandex');
    v.claim('66.249.66.1', 'google');
    assert.deepEqual([...sink.map], [['66.249.66.1', 'google']]);
  });
});

describe('event lines carry the claim', () => {
  const SECRET = 'a'.repeat(32);
  const line = (claim: string, ip = '66.249.66.1', secret = SECRET) =>
    `<134>Nov 22 00:00:00 haproxy[1]: rampart-waf ${secret} 1795400000 ${ip} low.waf.test bot_challenge - block GET - / - AbC-12_x ${claim}`;

  test('parseEvent returns a known crawler id, nothing else; the stored event is unchanged', () => {
    assert.equal(parseEvent(line('google'), SECRET)?.claim, 'google');
    assert.equal(parseEvent(line('-'), SECRET)?.claim, null);
    assert.equal(parseEvent(line('evilbot'), SECRET)?.claim, null);
    assert.equal(parseEvent(line('google'), SECRET)?.event.requestId, 'AbC-12_x');
    assert.deepEqual(parseEventLine(line('google'), SECRET), parseEvent(line('-'), SECRET)?.event);
    assert.equal(parseEvent(line('google'), 'b'.repeat(32)), undefined);
  });

  test('the collector hands claims of authenticated lines to the verifier, also past the daily cap', () => {
    const claims: string[] = [];
    const c = new EventCollector(
      () => true,
      () => new Date(Date.UTC(2026, 10, 22)),
      1,
      () => SECRET,
      (ip, id) => claims.push(`${ip} ${id}`),
    );
    c.accept(line('google'));
    c.accept(line('bing', '157.55.39.1')); // over the cap of 1: not stored, still verified
    c.accept(line('google', '66.249.66.9', 'c'.repeat(32))); // forged: another secret
    c.accept(line('-', '66.249.66.10'));
    c.accept(line('google', 'not-an-ip'));
    assert.deepEqual(claims, ['66.249.66.1 google', '157.55.39.1 bing']);
    assert.equal(c.dropped, 2, 'two valid lines past the cap');
  });
});

describe('RuntimeCrawlerMap', () => {
  /** HAProxy 2.6's answers to the map commands (as measured), on one map at PATH. */
  function fakeHaproxy(path: string) {
    const entries: [string, string][] = [];
    const versions = new Map<number, [string, string][]>();
    let next = 0;
    const sent: string[] = [];
    const command = async (cmd: string): Promise<string> => {
      sent.push(cmd);
      const [head, ...payload] = cmd.split('\n');
      const a = head!.split(' ');
      assert.equal(a[0], '@1');
      const verb = `${a[1]} ${a[2]}`;
      const versioned = a[3]?.startsWith('@') ? Number(a[3].slice(1)) : undefined;
      const rest = versioned === undefined ? a.slice(3) : a.slice(4);
      if (rest[0] !== path) return 'Unknown map identifier. Please use #<id> or <file>.\n';
      switch (verb) {
        case 'set map': {
          const e = entries.find(([k]) => k === rest[1]);
          if (!e) return 'entry not found.\n';
          e[1] = rest[2]!;
          return '\n';
        }
        case 'add map':
          if (rest[1] === '<<') for (const l of payload.filter(Boolean)) (versions.get(versioned!) ?? entries).push(l.split(' ') as [string, string]);
          else (versioned === undefined ? entries : versions.get(versioned)!).push([rest[1]!, rest[2]!]);
          return '\n';
        case 'del map': {
          const before = entries.length;
          for (let i = entries.length - 1; i >= 0; i--) if (entries[i]![0] === rest[1]) entries.splice(i, 1);
          return before === entries.length ? 'Key not found.\n' : '\n';
        }
        case 'prepare map':
          versions.set(++next, []);
          return `New version created: ${next}\n`;
        case 'commit map':
          entries.splice(0, entries.length, ...versions.get(versioned!)!);
          return '\n';
      }
      return 'Unknown command.\n';
    };
    return { entries, sent, command };
  }

  test('add sets an existing key instead of duplicating it; remove deletes; sync replaces everything atomically', async () => {
    const path = '/data/haproxy/cfg-0123456789abcdef/verified_crawlers.map';
    const h = fakeHaproxy(path);
    const warnings: string[] = [];
    const m = new RuntimeCrawlerMap({ command: h.command, mapPath: async () => path, log: (_l, msg) => warnings.push(msg) });
    m.add('66.249.66.1', 'google');
    m.add('66.249.66.1', 'google');
    m.add('2001:db8::1', 'bing');
    await m.idle();
    assert.deepEqual(h.entries, [
      ['66.249.66.1', 'google'],
      ['2001:db8::1', 'bing'],
    ]);
    m.remove('66.249.66.1');
    m.remove('66.249.66.1'); // not there any more: fine
    await m.idle();
    assert.deepEqual(h.entries, [['2001:db8::1', 'bing']]);
    h.entries.push(['203.0.113.1', 'google']); // a stale entry of the file
    await m.sync(() => new Map(Array.from({ length: 150 }, (_, i) => [`10.1.${i >> 8}.${i & 255}`, 'google'])));
    assert.equal(h.entries.length, 150);
    assert.ok(!h.entries.some(([k]) => k === '203.0.113.1' || k === '2001:db8::1'));
    assert.equal(h.sent.filter((c) => c.includes(' <<\n')).length, 2, 'in payloads of at most 100 lines');
    assert.deepEqual(warnings, []);
  });

  test('only canonical addresses and known ids reach a command; an unsafe path or a map the config lacks sends nothing harmful', async () => {
    const path = '/data/haproxy/cfg-0123456789abcdef/verified_crawlers.map';
    const h = fakeHaproxy(path);
    const warnings: string[] = [];
    let mapPath = path;
    const m = new RuntimeCrawlerMap({ command: h.command, mapPath: async () => mapPath, log: (_l, msg) => warnings.push(msg) });
    m.add('66.249.66.1 google\n@1 clear map', 'google');
    m.add('66.249.66.1', 'google; @1 clear map x');
    m.add('2001:DB8::1', 'google'); // not canonical
    m.add('66.249.66.1', 'evil');
    m.remove('66.249.66.1; show map');
    await m.idle();
    assert.deepEqual(h.sent, []);
    mapPath = '/data dir/haproxy/cfg-0123456789abcdef/verified_crawlers.map';
    m.add('66.249.66.1', 'google');
    await m.idle();
    assert.deepEqual(h.sent, []);
    assert.equal(warnings.length, 1);
    mapPath = '/data/haproxy/cfg-other/verified_crawlers.map'; // bot protection off: no such map
    m.add('66.249.66.1', 'google');
    await m.sync(() => new Map([['66.249.66.1', 'google']]));
    assert.equal(warnings.length, 1, 'not an error worth a warning');
    assert.deepEqual(h.entries, []);
  });
});
