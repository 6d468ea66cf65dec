import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, test } from 'node:test';
import type { CrawlerAddressList } from '@rampart/protocol';
import { crawlerRangesConfigFromEnv, CRAWLER_LIST_MAX_AGE_MS, currentCrawlerLists, runCrawlerRangesJob, type CrawlerRangesConfig } from '../src/services/crawler-ranges.js';
import { apiFixtures, FakeAgent, hubServer, WAIT_MS } from './fake-agent.js';
import { makeTestApp, newAccount } from './helpers.js';
import { waitFor } from '../../../test/support/processes.js';

// docs/bots.md "Verified crawlers": the control plane fetches the owners' published address lists
// (here from a loopback server holding fixtures in their format), stores them and hands them to
// every agent (crawlers/ranges). No test reaches the Internet.

const FIXTURES = new URL('./fixtures/crawlers/', import.meta.url);

/** A loopback HTTP server answering /<name> with fixtures/crawlers/<name>, or what a test sets. */
async function listServer() {
  const overrides = new Map<string, { status: number; body: string | Buffer }>();
  const server: Server = createServer((req, res) => {
    const name = (req.url ?? '/').slice(1);
    const o = overrides.get(name);
    if (o) {
      res.writeHead(o.status, { 'content-type': 'application/json' }).end(o.body);
      return;
    }
    readFile(new URL(name, FIXTURES)).then(
      (body) => res.writeHead(200, { 'content-type': 'application/json' }).end(body),
      () => res.writeHead(404).end(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: (name: string) => `${base}/${name}`, overrides };
}

const quiet = { warn: (_msg: string) => undefined };

describe('RAMPART_CRAWLER_RANGES', () => {
  test("unset: the owners' lists; off: none; entries <crawler>=<URL>; anything else names the variable", () => {
    const byDefault = crawlerRangesConfigFromEnv({});
    assert.deepEqual([...byDefault!.sources.keys()], ['google', 'bing', 'apple']);
    assert.deepEqual(byDefault!.sources.get('google'), [
      'https://developers.google.com/static/search/apis/ipranges/googlebot.json',
      'https://developers.google.com/static/search/apis/ipranges/special-crawlers.json',
    ]);
    assert.deepEqual(byDefault!.sources.get('bing'), ['https://www.bing.com/toolbox/bingbot.json']);
    assert.equal(byDefault!.intervalMs, 6 * 3600_000);
    assert.equal(crawlerRangesConfigFromEnv({ RAMPART_CRAWLER_RANGES: 'off' }), null);
    const own = crawlerRangesConfigFromEnv({
      RAMPART_CRAWLER_RANGES: 'google=http://127.0.0.1:1/a.json, google=https://x.test/b.json bing=http://127.0.0.1:1/c.json',
      RAMPART_CRAWLER_RANGES_INTERVAL: '60',
    });
    assert.deepEqual(
      [...own!.sources],
      [
        ['google', ['http://127.0.0.1:1/a.json', 'https://x.test/b.json']],
        ['bing', ['http://127.0.0.1:1/c.json']],
      ],
    );
    assert.equal(own!.intervalMs, 60_000);
    for (const bad of ['googlebot=https://x.test/a.json', 'google', 'google=file:///etc/passwd', '=https://x.test', 'google=not a url']) {
      assert.throws(() => crawlerRangesConfigFromEnv({ RAMPART_CRAWLER_RANGES: bad }), /RAMPART_CRAWLER_RANGES/, bad);
    }
    assert.throws(() => crawlerRangesConfigFromEnv({ RAMPART_CRAWLER_RANGES_INTERVAL: '0' }), /RAMPART_CRAWLER_RANGES_INTERVAL/);
  });
});

describe('the crawler-ranges job', async () => {
  const lists = await listServer();
  const config = (sources: [string, string[]][]): CrawlerRangesConfig => ({ sources: new Map(sources), intervalMs: 3600_000 });

  test("stores the union of a crawler's lists; a failing or refused list keeps the stored one; an old list expires", async () => {
    const t = await makeTestApp();
    const warnings: string[] = [];
    const log = { warn: (msg: string) => warnings.push(msg) };
    const good = config([
      ['google', [lists.url('googlebot.json'), lists.url('special-crawlers.json')]],
      ['bing', [lists.url('bingbot.json')]],
    ]);
    assert.deepEqual(await runCrawlerRangesJob(t.ctx, good, log), { stored: ['google', 'bing'], failed: [] });
    const stored = await currentCrawlerLists(t.ctx);
    assert.deepEqual(
      stored.map((l) => [l.crawlerId, l.prefixes.length]),
      [
        ['bing', 3],
        ['google', 7],
      ],
    );
    assert.ok(stored.find((l) => l.crawlerId === 'google')!.prefixes.includes('66.249.90.64/27'), 'the special crawlers too');
    assert.equal(stored[0]!.expiresAt, Math.floor((t.clock.now().getTime() + CRAWLER_LIST_MAX_AGE_MS) / 1000));
    assert.deepEqual(warnings, []);

    // A list that cannot be had, or is refused, leaves the stored one as it was.
    lists.overrides.set('broken.json', { status: 500, body: 'oops' });
    lists.overrides.set('huge.json', { status: 200, body: Buffer.alloc(3 * 1024 * 1024, 32) });
    lists.overrides.set('text.json', { status: 200, body: '<html>' });
    t.clock.advance(3600_000);
    for (const [name, why] of [
      ['broken.json', /answered 500/],
      ['too-wide.json', /prefixes\[1\]/],
      ['huge.json', /longer than/],
      ['text.json', /not JSON/],
      ['missing.json', /answered 404/],
    ] as const) {
      warnings.length = 0;
      const r = await runCrawlerRangesJob(
        t.ctx,
        config([
          ['google', [lists.url('googlebot.json')]],
          ['bing', [lists.url(name)]],
        ]),
        log,
      );
      assert.deepEqual(r, { stored: ['google'], failed: ['bing'] }, name);
      assert.match(warnings.join('\n'), why, name);
      assert.ok(!warnings.join('\n').includes(name), 'a URL is logged by its origin only');
    }
    const after = await currentCrawlerLists(t.ctx);
    assert.deepEqual(after.find((l) => l.crawlerId === 'bing')?.prefixes, stored.find((l) => l.crawlerId === 'bing')!.prefixes, 'bing kept');
    assert.equal(after.find((l) => l.crawlerId === 'google')!.prefixes.length, 5, "google's list replaced by the one fetched");

    // Bing's list was last fetched an hour ago: it expires 7 days after that.
    t.clock.advance(CRAWLER_LIST_MAX_AGE_MS - 3600_000);
    assert.deepEqual(
      (await currentCrawlerLists(t.ctx)).map((l) => l.crawlerId),
      ['google'],
    );

    // A crawler no longer configured loses its list.
    await runCrawlerRangesJob(t.ctx, config([['bing', [lists.url('bingbot.json')]]]), quiet);
    assert.deepEqual(
      (await currentCrawlerLists(t.ctx)).map((l) => l.crawlerId),
      ['bing'],
    );
  });

  test('agents get the lists after their snapshot, and again when they change; none are sent while there are none', async () => {
    const sources = config([['google', [lists.url('googlebot.json')]]]);
    const { srv, agentUrl, agents } = await hubServer({ agentHeartbeatMs: 100, crawlerRanges: null });
    const { key } = await newAccount(srv.app, 'pro');
    const api = apiFixtures(srv.app);
    const s1 = await api.newServer(key, 'edge-lists-1');
    const first = await FakeAgent.connect(agentUrl, s1.connectionToken);
    agents.push(first);
    await first.barrier();
    assert.deepEqual(first.of('crawlers/ranges'), [], 'no lists, no message');

    await runCrawlerRangesJob(srv.ctx, sources, quiet);
    const got = (a: FakeAgent, pred: (l: CrawlerAddressList[]) => boolean, what: string) => waitFor(() => a.of('crawlers/ranges').find((m) => pred(m.lists)), what, WAIT_MS, 10);
    const sent = await got(first, (l) => l.length === 1, 'the lists on the next sweep');
    assert.equal(sent.lists[0]!.crawlerId, 'google');
    assert.ok(sent.lists[0]!.prefixes.includes('66.249.64.0/27'));

    // A new agent gets them right after its snapshot.
    const s2 = await api.newServer(key, 'edge-lists-2');
    const second = await FakeAgent.connect(agentUrl, s2.connectionToken);
    agents.push(second);
    await got(second, (l) => l.length === 1 && l[0]!.prefixes.includes('66.249.64.0/27'), 'the lists after the hello');
    const types = second.received.map((m) => m.type);
    assert.ok(types.indexOf('config/snapshot') < types.indexOf('crawlers/ranges'), types.join());

    // A change reaches both; a list no longer configured is taken away.
    await runCrawlerRangesJob(
      srv.ctx,
      config([
        ['google', [lists.url('googlebot.json')]],
        ['bing', [lists.url('bingbot.json')]],
      ]),
      quiet,
    );
    for (const a of [first, second]) await got(a, (l) => l.map((x) => x.crawlerId).join() === 'bing,google', 'bing added');
    await runCrawlerRangesJob(srv.ctx, config([['bing', [lists.url('bingbot.json')]]]), quiet);
    for (const a of [first, second]) await got(a, (l) => l.map((x) => x.crawlerId).join() === 'bing', 'google removed');
    assert.deepEqual([...first.invalid, ...second.invalid], []);
  });
});
