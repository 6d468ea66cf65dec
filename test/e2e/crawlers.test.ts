import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { readFile, readlink } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, rawRequest, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { setRecords, startPdns, type Pdns } from '../support/pdns.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// docs/bots.md "Verified crawlers" through real processes: the control plane, an agent and its
// HAProxy, and PowerDNS answering the PTR and A records. A User-Agent claiming Googlebot passes
// the bot challenge only from an address verified by forward-confirmed reverse DNS, which the
// agent hands to the running HAProxy through its runtime API, without a reload. Bing's published
// address list comes from a loopback server (the fixture, with a loopback range added): the
// control plane fetches it and the agent verifies a Bingbot claim from inside it without DNS.
// The agent asks PowerDNS through a small UDP relay (below) that never answers questions about
// the attackers' reverse zones, like an attacker's own name servers left silent.

/**
 * A DNS relay on loopback UDP: each query goes to `upstream` and its answer back, except queries
 * whose name ends with one of `silent`, which are swallowed (counted, never answered).
 */
async function startSilentRelay(upstream: number, silent: readonly string[]) {
  const socket: Socket = createSocket('udp4');
  const swallowed: string[] = [];
  socket.on('message', (msg, from) => {
    // The question's name: length-prefixed labels after the 12-byte header.
    const labels: string[] = [];
    for (let i = 12; i < msg.length && msg[i]! > 0 && msg[i]! < 64; i += msg[i]! + 1) labels.push(msg.subarray(i + 1, i + 1 + msg[i]!).toString('latin1'));
    const name = labels.join('.').toLowerCase();
    if (silent.some((zone) => name.endsWith(zone))) {
      swallowed.push(name);
      return;
    }
    const relay = createSocket('udp4');
    const done = setTimeout(() => relay.close(), 5_000);
    relay.on('message', (answer) => {
      clearTimeout(done);
      socket.send(answer, from.port, from.address, () => relay.close());
    });
    relay.send(msg, upstream, '127.0.0.1');
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { port: socket.address().port, swallowed, close: () => new Promise<void>((resolve) => socket.close(() => resolve())) };
}

const GOOGLEBOT = 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)';
const BINGBOT = 'Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)';
const CHALLENGE = /Checking your browser/;

describe('verified search crawlers', () => {
  let pdns: Pdns;
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let serverId: string;
  let lists: Server;
  let relay: Awaited<ReturnType<typeof startSilentRelay>>;
  /** The attackers' networks (IPv4 /16s, as the agent's queues go) whose reverse zones never answer. */
  const SILENT_NETS = ['127.64', '127.65', '127.66'];
  const host = 'crawl.test';
  const get = (from: string, headers: Record<string, string> = {}) => viaProxy(agent.httpPort, host, '/', headers, from);
  const reached = async (from: string, headers: Record<string, string>) => {
    const r = await get(from, headers);
    return r.status === 200 && r.text.includes('"origin":"origin"');
  };
  const challenged = async (from: string, headers: Record<string, string>, what: string) => {
    const r = await get(from, headers);
    assert.equal(r.status, 200, what);
    assert.match(r.text, CHALLENGE, what);
  };

  /** One command on the agent's HAProxy master CLI. */
  const master = (cmd: string) =>
    new Promise<string>((resolve, reject) => {
      const sock = connect(join(agent.dataDir, 'run', 'master.sock'));
      let out = '';
      sock.setEncoding('utf8');
      sock.on('connect', () => sock.end(`${cmd}\n`));
      sock.on('data', (d: string) => (out += d));
      sock.on('error', reject);
      sock.on('close', () => resolve(out));
    });
  /** The master's reload count and the worker's pid ("show proc"). */
  const proc = async () => {
    const lines = (await master('show proc')).split('\n');
    const m = /^(\d+)\s+master\s+(\d+)/.exec(lines.find((l) => /\smaster\s/.test(l)) ?? '');
    const w = /^(\d+)\s+worker\s/.exec(lines.find((l) => /\sworker\s/.test(l)) ?? '');
    assert.ok(m && w, lines.join('\n'));
    return { reloads: Number(m[2]), worker: Number(w[1]) };
  };
  const configDir = () => readlink(join(agent.dataDir, 'haproxy', 'current'));
  const runtimeMap = async () => {
    const out = await master(`@1 show map ${join(await configDir(), 'verified_crawlers.map')}`);
    return out
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ').slice(1).join(' '));
  };
  /** Waits until pdns has been asked this question ("<name>|<type>"). */
  const asked = (question: string) => waitFor(() => pdns.output().includes(`wants '${question}'`), `pdns to be asked ${question}`, 10_000, 25);

  before(async () => {
    pdns = await startPdns({ zones: ['60.0.127.in-addr.arpa', 'googlebot.com', 'evil.test', 'googleusercontent.com'], logQueries: true });
    const ptr = (n: number, name: string) => setRecords(pdns, '60.0.127.in-addr.arpa', `${n}.60.0.127.in-addr.arpa`, 'PTR', [name]);
    await ptr(1, 'crawl-60-1.googlebot.com');
    await setRecords(pdns, 'googlebot.com', 'crawl-60-1.googlebot.com', 'A', ['127.0.60.1']);
    // Forward-confirmed, but not under Google's domains.
    await ptr(2, 'crawl.googlebot.com.evil.test');
    await setRecords(pdns, 'evil.test', 'crawl.googlebot.com.evil.test', 'A', ['127.0.60.2']);
    // Any Google Cloud machine's default reverse name: Google's, but not its crawlers'.
    await ptr(4, '4.60.0.127.bc.googleusercontent.com');
    await setRecords(pdns, 'googleusercontent.com', '4.60.0.127.bc.googleusercontent.com', 'A', ['127.0.60.4']);
    // Under Google's domains, but the name points elsewhere.
    await ptr(3, 'crawl-60-3.googlebot.com');
    await setRecords(pdns, 'googlebot.com', 'crawl-60-3.googlebot.com', 'A', ['127.0.60.99']);
    // A genuine crawler that comes while attackers fill the lookup queue.
    await ptr(5, 'crawl-60-5.googlebot.com');
    await setRecords(pdns, 'googlebot.com', 'crawl-60-5.googlebot.com', 'A', ['127.0.60.5']);
    relay = await startSilentRelay(
      pdns.dnsPort,
      SILENT_NETS.map((n) => `.${n.split('.').reverse().join('.')}.in-addr.arpa`),
    );

    // Bing's list: its fixture's ranges and 127.0.61.0/28 (no PTR record exists for it).
    const bing = JSON.parse(await readFile(new URL('../../packages/server/test/fixtures/crawlers/bingbot.json', import.meta.url), 'utf8')) as { prefixes: object[] };
    bing.prefixes.push({ ipv4Prefix: '127.0.61.0/28' });
    lists = createServer((req, res) => (req.url === '/bingbot.json' ? res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(bing)) : res.writeHead(404).end()));
    await new Promise<void>((resolve) => lists.listen(0, '127.0.0.1', resolve));
    const listUrl = `http://127.0.0.1:${(lists.address() as AddressInfo).port}/bingbot.json`;
    serve = await startServe({ port: await freePort(), adminToken: ADMIN, env: { RAMPART_CRAWLER_RANGES: `bing=${listUrl}` } });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-crawlers' });
    serverId = srv.body.id;
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, nbthread: 2, args: ['--resolver', `127.0.0.1:${relay.port}`] });
    const d = await api.call('POST', '/api/domains', { domain: host, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [serverId], sslEnabled: false });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    const bot = await api.call('POST', '/api/waf', { rule_type: 'block_bot', value: '{"enabled":true}' });
    assert.equal(bot.status, 201, JSON.stringify(bot.body));
    await settle(api);
    await waitFor(async () => CHALLENGE.test((await get('127.0.60.9', { 'user-agent': 'curl/8.0' })).text), 'the bot challenge to be served');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
    await pdns?.stop();
    await relay?.close();
    await new Promise((resolve) => (lists ? lists.close(resolve) : resolve(undefined)));
  });

  test('a Googlebot claim passes once FCrDNS verifies its address, without a reload; unverified claims stay challenged', async () => {
    const dir = await configDir();
    const before = await proc();

    // Claims whose check fails: .2's PTR name is outside Google's domains (never resolved forward),
    // .3's name resolves to another address.
    await challenged('127.0.60.2', { 'user-agent': GOOGLEBOT }, 'PTR under evil.test, first request');
    await challenged('127.0.60.3', { 'user-agent': GOOGLEBOT }, 'forward mismatch, first request');
    await challenged('127.0.60.4', { 'user-agent': GOOGLEBOT }, 'a Google Cloud machine, first request');
    await asked('2.60.0.127.in-addr.arpa|PTR');
    await asked('crawl-60-3.googlebot.com|A');
    await asked('4.60.0.127.in-addr.arpa|PTR');

    // Until verified, the claimed crawler is challenged like any other client.
    await challenged('127.0.60.1', { 'user-agent': GOOGLEBOT }, 'the first request from the real crawler');
    await waitFor(() => reached('127.0.60.1', { 'user-agent': GOOGLEBOT }), 'the verified crawler to reach the origin', 10_000, 25);

    assert.equal(await configDir(), dir, 'the same configuration directory');
    assert.deepEqual(await proc(), before, 'no reload, the same worker');

    await challenged('127.0.60.2', { 'user-agent': GOOGLEBOT }, 'PTR under evil.test');
    await challenged('127.0.60.3', { 'user-agent': GOOGLEBOT }, 'forward answer points elsewhere');
    await challenged('127.0.60.4', { 'user-agent': GOOGLEBOT }, 'a Google Cloud machine');
    await challenged('127.0.60.1', { 'user-agent': BINGBOT }, 'the verified Google address claiming Bingbot');
    await challenged('127.0.60.1', { 'user-agent': 'curl/8.0' }, 'the verified address without a crawler claim');
    // Two User-Agent headers claim nothing, whatever the first one says.
    const twoHeaders = await rawRequest(agent.httpPort, `GET / HTTP/1.1\r\nHost: ${host}\r\nUser-Agent: ${GOOGLEBOT}\r\nUser-Agent: curl/8.0\r\nConnection: close\r\n\r\n`, '127.0.60.1');
    assert.equal(twoHeaders.status, 200);
    assert.match(twoHeaders.text, CHALLENGE, 'two User-Agent headers');

    assert.ok(!pdns.output().includes("wants 'crawl.googlebot.com.evil.test|A'"), 'a name outside the documented domains is never resolved');
    assert.ok(!pdns.output().includes("wants '4.60.0.127.bc.googleusercontent.com|A'"), "a cloud machine's name is never resolved");
    assert.deepEqual(await runtimeMap(), ['127.0.60.1 google'], 'the running map holds the verified address only');
  });

  test('a new configuration keeps the verified crawler (the map file it is rendered with, then a resync)', async () => {
    const dir = await configDir();
    const d = await api.call('POST', '/api/domains', { domain: 'other.crawl.test', origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [serverId], sslEnabled: false });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    await settle(api);
    await waitFor(async () => (await configDir()) !== dir, 'the new configuration directory');
    assert.ok(await reached('127.0.60.1', { 'user-agent': GOOGLEBOT }), 'still verified after the reload');
    await waitFor(async () => (await runtimeMap()).join() === '127.0.60.1 google', "the new worker's map to hold exactly the verified address", 5_000, 25);
    await challenged('127.0.60.3', { 'user-agent': GOOGLEBOT }, 'still refused after the reload');
  });

  test("a claim from inside the owner's published list passes without any DNS question; outside it, that crawler's claim fails without one", async () => {
    await challenged('127.0.61.5', { 'user-agent': BINGBOT }, 'the first request of the listed crawler');
    await waitFor(() => reached('127.0.61.5', { 'user-agent': BINGBOT }), 'the listed Bingbot to reach the origin', 20_000, 50);
    await challenged('127.0.61.5', { 'user-agent': GOOGLEBOT }, 'a Bing address claiming Googlebot');
    // A Bingbot claim outside Bing's list, then a Googlebot claim (Google has no list here, so
    // reverse DNS is asked): once the second is asked, the first was handled, with no question.
    await challenged('127.0.60.9', { 'user-agent': BINGBOT }, 'Bingbot outside its list');
    await challenged('127.0.60.10', { 'user-agent': GOOGLEBOT }, 'Googlebot, checked by DNS');
    await asked('10.60.0.127.in-addr.arpa|PTR');
    await challenged('127.0.60.9', { 'user-agent': BINGBOT }, 'Bingbot outside its list, again');
    for (const q of ['5.61.0.127.in-addr.arpa|PTR', '9.60.0.127.in-addr.arpa|PTR']) assert.ok(!pdns.output().includes(`wants '${q}'`), `never asked ${q}`);
    assert.ok((await runtimeMap()).includes('127.0.61.5 bing'));
  });

  test('300 Googlebot claims whose reverse zones never answer do not starve a genuine crawler: verified after its one request', async () => {
    // The attackers: 300 addresses in three networks, each request claiming Googlebot.
    const attackers = Array.from({ length: 300 }, (_, i) => `${SILENT_NETS[i % 3]}.${Math.floor(i / 3)}.1`);
    const statuses: number[] = [];
    for (let i = 0; i < attackers.length; i += 30) {
      const batch = await Promise.all(attackers.slice(i, i + 30).map((from) => get(from, { 'user-agent': GOOGLEBOT })));
      statuses.push(...batch.map((r) => (CHALLENGE.test(r.text) ? r.status : -r.status)));
    }
    assert.deepEqual([...new Set(statuses)], [200], 'every attacker is challenged');
    // Their lookups are out, and hang: the relay swallowed a question from each network.
    await waitFor(
      () => SILENT_NETS.every((n) => relay.swallowed.some((q) => q.endsWith(`.${n.split('.').reverse().join('.')}.in-addr.arpa`))),
      'a lookup of each attacking network to hang',
      10_000,
      25,
    );
    // The genuine crawler's one request: its claim must be queued and answered, not dropped. The
    // map is read through the master CLI, so nothing claims the address again.
    await challenged('127.0.60.5', { 'user-agent': GOOGLEBOT }, 'the genuine crawler, first request');
    await waitFor(async () => (await runtimeMap()).includes('127.0.60.5 google'), 'the genuine crawler to be verified while the attackers hang', 10_000, 25);
    await asked('5.60.0.127.in-addr.arpa|PTR');
    assert.ok(await reached('127.0.60.5', { 'user-agent': GOOGLEBOT }), 'the genuine crawler reaches the origin');
    // The attackers' claims are bounded per network (one lookup running, 8 waiting, the rest
    // dropped): of the 300 addresses, at most 27 are ever asked about, however long they hang.
    const askedAbout = new Set(relay.swallowed).size;
    assert.ok(askedAbout >= 3 && askedAbout <= 3 * 9, `${askedAbout} attacker addresses asked about`);
    assert.ok(!(await runtimeMap()).some((l) => SILENT_NETS.some((n) => l.startsWith(`${n}.`))), 'no attacker verified');
  });
});
