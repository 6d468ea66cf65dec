import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ServerSnapshot, SnapshotRule } from '@rampart/protocol';
import { countryBlocks, passCookieMac, renderHaproxyConfig } from '../src/index.js';
import { freePort, startProcess, waitFor, type Proc } from '../../../test/support/processes.js';

// docs/architecture.md "The WAF": the processing order (first decisive step wins), the levels and
// the per-domain switch, decided natively by the rendered configuration and checked here through a
// real HAProxy: each request's status, and the reason and rule of its event line (the syslog line
// the agent receives). Loopback sources stand for clients; a map of classes of countries (as the
// agent makes it from its data) places two of their ranges. The control plane and agent are not involved (test/e2e/waf.test.ts runs them).

const HAPROXY = process.env.HAPROXY ?? 'haproxy';
/** Where two countries are, for these tests. */
const COUNTRY_RANGES: Record<string, string> = { KP: '127.0.40.0/24', IR: '127.0.41.0/24' };
const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const DOMAINS = { low: id(1), medium: id(2), high: id(3), off: id(4), zip: id(5), watch: id(6) } as const;
/** Level high with a setting other than the defaults: zip allows compressed bodies, watch only detects. */
const HIGH_VARIANTS: Record<string, Partial<ServerSnapshot['domains'][number]>> = {
  zip: { wafLevel: 'high', wafCompressedBodies: 'allow' },
  watch: { wafLevel: 'high', wafMode: 'detect' },
};
const RULE = {
  allow: id(10),
  block: id(11),
  blockMedium: id(12),
  rate: id(13),
  bot: id(14),
  gpt: id(15),
  claudeHigh: id(16),
  kp: id(17),
  irMedium: id(18),
} as const;
const KEY = { id: 'k1', secret: 'ab'.repeat(32) };
const BAD_UA = 'sqlmap/1.7';
const UA = 'Mozilla/5.0 order-test';
const RATE = 3;

function snapshot(botOn: boolean): ServerSnapshot {
  const r = (rid: string, type: SnapshotRule['type'], value: string, domainId: string | null, priority = 100): SnapshotRule => ({ id: rid, type, value, domainId, priority });
  return {
    serverId: 'order',
    revision: 1,
    botKeys: [KEY],
    domains: Object.entries(DOMAINS).map(([level, did]) => ({
      id: did,
      domain: `${level}.order.test`,
      origins: [{ ip: '127.0.0.1', port: 0 }],
      sslEnabled: false,
      wafEnabled: level !== 'off',
      wafLevel: level === 'off' ? 'high' : (level as 'low' | 'medium' | 'high'),
      wafMode: 'block',
      ...HIGH_VARIANTS[level],
    })),
    rules: [
      r(RULE.allow, 'allow_ip', '127.0.10.1', null, 1),
      r(RULE.block, 'block_ip', '127.0.10.0/24', null, 2),
      r(RULE.blockMedium, 'block_ip', '127.0.11.0/24', DOMAINS.medium, 3),
      r(RULE.rate, 'rate_limit', JSON.stringify({ requests_per_minute: RATE }), null),
      ...(botOn ? [r(RULE.bot, 'block_bot', JSON.stringify({ enabled: true }), null)] : []),
      r(RULE.gpt, 'block_ai_bot', 'GPTBot', null),
      r(RULE.claudeHigh, 'block_ai_bot', 'ClaudeBot', DOMAINS.high),
      r(RULE.kp, 'block_country', 'KP', null),
      r(RULE.irMedium, 'block_country', 'IR', DOMAINS.medium),
    ],
  };
}

interface Seen {
  status: number;
  reason?: string | undefined;
  rule?: string | undefined;
}

describe('the processing order, natively in HAProxy', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rampart-order-'));
  const procs: Proc[] = [];
  const events = createSocket('udp4');
  const lines: string[] = [];
  const origin = createServer((_req, res) => res.end('origin'));
  const ports: Record<string, number> = {};

  async function start(name: string, botOn: boolean): Promise<void> {
    const port = await freePort();
    const configDir = join(tmp, name);
    const runDir = join(tmp, `${name}-run`);
    mkdirSync(configDir);
    mkdirSync(runDir);
    const snap = snapshot(botOn);
    for (const d of snap.domains) d.origins = [{ ip: '127.0.0.1', port: (origin.address() as AddressInfo).port }];
    // The country map as the agent writes it when rules only refuse countries: one class for the
    // countries every domain's set treats alike (KP is refused everywhere, IR on one domain only).
    const countryMap = join(configDir, 'classes.map');
    writeFileSync(countryMap, `${COUNTRY_RANGES.KP} c000\n${COUNTRY_RANGES.IR} c001\n`);
    const countryClasses = new Map([
      ['KP', 'c000'],
      ['IR', 'c001'],
    ]);
    const { files } = renderHaproxyConfig(
      snap,
      { httpBind: { address: '127.0.0.1', port }, runDir, eventsPort: (events.address() as AddressInfo).port, countryMap, countryClasses, nbthread: 2 },
      { configDir },
    );
    for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
    const proc = startProcess(HAPROXY, ['-f', join(configDir, 'haproxy.cfg')]);
    procs.push(proc);
    await waitFor(async () => {
      if (proc.child.exitCode !== null) throw new Error(`haproxy exited: ${proc.output()}`);
      return (await send(port, 'off.order.test', '127.0.20.1')).status === 200;
    }, `${name} HAProxy to answer`);
    ports[name] = port;
  }

  /** The token in the path of the request sent last. */
  let lastToken = '';
  /**
   * One request on its own connection: its status and, when the origin did not answer it, the
   * reason and rule of its event line (found by a random token in its path).
   */
  async function send(port: number, host: string, from: string, headers: Record<string, string> = {}, path = '/', body?: Buffer, on?: { agent: Agent; sockets: Set<unknown> }): Promise<Seen> {
    const token = `t${Math.random().toString(36).slice(2)}`;
    const method = body ? 'POST' : 'GET';
    const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, method, path: `/${token}${path}`, headers: { 'user-agent': UA, ...headers, host }, agent: on?.agent ?? false, localAddress: from }, (res) => {
        on?.sockets.add(req.socket);
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      });
      req.on('error', reject);
      req.end(body);
    });
    lastToken = token;
    if (status === 200 && text === 'origin') return { status };
    const { reason, rule } = await eventOf(token);
    return { status, reason, rule };
  }

  /** The reason, rule and action of the event line of the request with this token. */
  async function eventOf(token: string): Promise<{ reason?: string | undefined; rule?: string | undefined; action?: string | undefined }> {
    const line = await waitFor(() => lines.find((l) => l.includes(token)), `the event of /${token}`, 5_000, 10);
    const fields = line.slice(line.indexOf('rampart-waf ')).split(' ');
    // rampart-waf <ts> <ip> <domain> <reason> <rule> <action> ...
    return { reason: fields[4], rule: fields[5], action: fields[6] };
  }

  before(async () => {
    events.on('message', (m) => lines.push(m.toString()));
    events.bind(0, '127.0.0.1');
    await once(events, 'listening');
    origin.listen(0, '127.0.0.1');
    await once(origin, 'listening');
    await start('bots', true);
    await start('nobots', false);
  });
  after(async () => {
    for (const p of procs) await p.stop();
    events.close();
    origin.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  const cookie = (ip: string, ua = UA, expiry = Math.floor(Date.now() / 1000) + 3600, key = KEY, domain = 'medium.order.test') =>
    `rampart_bot=${key.id}.${expiry}.${passCookieMac(key.secret, domain, ip, ua, expiry)}`;
  /** A request with a valid pass cookie for its source (bot protection on), else none. */
  const get = (server: 'bots' | 'nobots', level: string, from: string, headers: Record<string, string> = {}, path = '/', body?: Buffer) =>
    send(
      ports[server]!,
      `${level}.order.test`,
      from,
      server === 'bots' && !('cookie' in headers) ? { cookie: cookie(from, headers['user-agent'] ?? UA, undefined, KEY, `${level}.order.test`), ...headers } : headers,
      path,
      body,
    );

  test('step 6: a clean request passes at every level, and with the WAF off', async () => {
    for (const level of ['low', 'medium', 'high', 'off']) {
      for (const server of ['bots', 'nobots'] as const) assert.equal((await get(server, level, '127.0.20.2')).status, 200, `${server} ${level}`);
    }
  });

  test('step 1: the whitelist beats the blacklist, bad bots, the challenge and the rate limit, at every level', async () => {
    for (const level of ['low', 'medium', 'high']) {
      for (let i = 0; i < RATE + 2; i++) {
        assert.equal((await get('bots', level, '127.0.10.1', { 'user-agent': BAD_UA, cookie: '' })).status, 200, `${level} request ${i}`);
      }
    }
  });

  test('step 2: the blacklist gets 403 ip_blocked with its rule, at every level, before bad bots and AI crawlers', async () => {
    for (const level of ['low', 'medium', 'high']) {
      assert.deepEqual(await get('bots', level, '127.0.10.7', { 'user-agent': `${BAD_UA} GPTBot` }), { status: 403, reason: 'ip_blocked', rule: RULE.block }, level);
    }
    assert.deepEqual(await get('nobots', 'medium', '127.0.11.5'), { status: 403, reason: 'ip_blocked', rule: RULE.blockMedium }, "the domain's own list");
    assert.equal((await get('nobots', 'low', '127.0.11.5')).status, 200, 'another domain does not apply it');
    assert.equal((await get('bots', 'off', '127.0.10.7', { 'user-agent': BAD_UA })).status, 200, 'the WAF off: nothing is checked');
  });

  test("step 2: countries, the server-wide rules and the domain's own; unlisted countries pass (the agent names the rule)", async () => {
    // HAProxy only knows the address is in the domain's set: the event's rule is "-", and the agent
    // names it from the address's country and countryBlocks (packages/agent/test/geo-events.test.ts).
    assert.deepEqual(await get('nobots', 'low', '127.0.40.9'), { status: 403, reason: 'country_blocked', rule: '-' });
    assert.deepEqual(await get('nobots', 'medium', '127.0.41.9'), { status: 403, reason: 'country_blocked', rule: '-' });
    assert.deepEqual(await get('nobots', 'medium', '127.0.40.9'), { status: 403, reason: 'country_blocked', rule: '-' }, 'the server-wide KP on a domain with its own IR');
    const blocks = countryBlocks(snapshot(false));
    assert.deepEqual(
      blocks.get('medium.order.test'),
      new Map([
        ['IR', RULE.irMedium],
        ['KP', RULE.kp],
      ]),
      "the domain's own rule first",
    );
    assert.deepEqual(blocks.get('low.order.test'), new Map([['KP', RULE.kp]]));
    assert.equal(blocks.has('off.order.test'), false, 'no country is refused where the WAF is off');
    assert.equal((await get('nobots', 'high', '127.0.41.9')).status, 200, "IR is the medium domain's rule only");
    assert.equal((await get('nobots', 'high', '127.0.42.9')).status, 200, 'an address in no listed country');
  });

  test('step 3: a bad user-agent gets 403 bot_blocked (any of its headers) only with bot protection on, before AI crawlers', async () => {
    // (no cookie: a bad bot is refused before the challenge, so it never earns one)
    assert.deepEqual(await get('bots', 'low', '127.0.21.1', { 'user-agent': `${BAD_UA} GPTBot`, cookie: '' }), { status: 403, reason: 'bot_blocked', rule: RULE.bot });
    assert.deepEqual(await get('nobots', 'low', '127.0.21.1', { 'user-agent': BAD_UA }), { status: 200 });
    // a valid cookie does not cover a second User-Agent header naming a bad bot
    const two = await send(ports.bots!, 'low.order.test', '127.0.21.2', { 'user-agent': [BAD_UA, UA] as unknown as string, cookie: cookie('127.0.21.2', UA, undefined, KEY, 'low.order.test') });
    assert.deepEqual(two, { status: 403, reason: 'bot_blocked', rule: RULE.bot });
  });

  test('step 3: AI crawlers by user-agent, server-wide and per domain, with or without bot protection', async () => {
    for (const server of ['bots', 'nobots'] as const) {
      assert.deepEqual(await get(server, 'medium', '127.0.22.1', { 'user-agent': 'Mozilla/5.0 (compatible; GPTBot/1.0)' }), { status: 403, reason: 'ai_bot_blocked', rule: RULE.gpt }, server);
      assert.deepEqual(await get(server, 'high', '127.0.22.2', { 'user-agent': 'ClaudeBot/1.0' }), { status: 403, reason: 'ai_bot_blocked', rule: RULE.claudeHigh }, server);
      assert.equal((await get(server, 'medium', '127.0.22.3', { 'user-agent': 'ClaudeBot/1.0' })).status, 200, `${server}: the high domain's rule only`);
      // A crawler named in any of several User-Agent headers, not only the last (which the others would hide it behind).
      for (const uas of [
        ['Mozilla/5.0 (compatible; GPTBot/1.0)', UA],
        [UA, 'Mozilla/5.0 (compatible; GPTBot/1.0)', UA],
      ]) {
        const hidden = await send(ports[server]!, 'medium.order.test', '127.0.22.4', {
          'user-agent': uas as unknown as string,
          ...(server === 'bots' ? { cookie: cookie('127.0.22.4', UA, undefined, KEY, 'medium.order.test') } : {}),
        });
        assert.deepEqual(hidden, { status: 403, reason: 'ai_bot_blocked', rule: RULE.gpt }, `${server}: ${uas.join(' / ')}`);
      }
      assert.equal(
        (
          await send(ports[server]!, 'medium.order.test', '127.0.22.5', {
            'user-agent': [UA, UA] as unknown as string,
            ...(server === 'bots' ? { cookie: cookie('127.0.22.5', UA, undefined, KEY, 'medium.order.test') } : {}),
          })
        ).status,
        200,
        `${server}: two ordinary User-Agent headers`,
      );
    }
  });

  test('step 3: the challenge without a valid cookie (200, bot_challenge); forged cookies are challenged too', async () => {
    const ip = '127.0.23.1';
    const challenged = async (c: string | undefined, what: string) => {
      const r = await get('bots', 'medium', ip, { cookie: c ?? '' });
      assert.deepEqual(r, { status: 200, reason: 'bot_challenge', rule: RULE.bot }, what);
    };
    await challenged(undefined, 'no cookie');
    await challenged(cookie('127.0.23.2'), 'a cookie of another address');
    await challenged(cookie(ip, 'Other/1.0'), 'a cookie of another user-agent');
    await challenged(cookie(ip, UA, Math.floor(Date.now() / 1000) - 5), 'an expired cookie');
    await challenged(cookie(ip, UA, undefined, { id: 'k9', secret: KEY.secret }), 'an unknown key id');
    const forged = cookie(ip).replace(/\.(\d+)\./, (_m, e) => `.${Number(e) + 100}.`);
    await challenged(forged, 'a changed expiry');
    await challenged(`${cookie(ip)}x`, 'a malformed cookie');
    await challenged(cookie(ip, UA, undefined, KEY, 'low.order.test'), 'a cookie earned on another domain of the server');
    assert.deepEqual(await get('bots', 'medium', ip), { status: 200 }, 'its own cookie passes to the origin');
  });

  test('step 3: with a cookie named twice, or several Cookie or User-Agent headers, the last one counts, as the engine signs it', async () => {
    const ip = '127.0.23.7';
    const challenge = { status: 200, reason: 'bot_challenge', rule: RULE.bot };
    const on = (headers: Record<string, string | string[]>) => send(ports.bots!, 'low.order.test', ip, headers as Record<string, string>);
    const valid = cookie(ip, UA, undefined, KEY, 'low.order.test');
    const wrongMac = `rampart_bot=${KEY.id}.${Math.floor(Date.now() / 1000) + 3600}.${'0'.repeat(64)}`;
    assert.deepEqual(await on({ cookie: `${valid}; rampart_bot=junk` }), challenge, 'a valid cookie, then the name again with junk');
    assert.deepEqual(await on({ cookie: `${valid}; rampart_bot=` }), challenge, 'a valid cookie, then the name again, empty');
    assert.deepEqual(await on({ cookie: [valid, 'rampart_bot=junk'] }), challenge, 'two Cookie headers, the valid one first');
    assert.deepEqual(await on({ cookie: [valid, wrongMac] }), challenge, 'two Cookie headers, a well-formed wrong MAC last');
    assert.deepEqual(await on({ cookie: ['rampart_bot=junk', valid] }), { status: 200 }, 'two Cookie headers, the valid one last');
    const [a, b] = ['Mozilla/5.0 first', 'Mozilla/5.0 second'];
    assert.deepEqual(await on({ 'user-agent': [a, b], cookie: cookie(ip, b, undefined, KEY, 'low.order.test') }), { status: 200 }, 'two User-Agent headers, the MAC over the last');
    assert.deepEqual(await on({ 'user-agent': [a, b], cookie: cookie(ip, a, undefined, KEY, 'low.order.test') }), challenge, 'two User-Agent headers, the MAC over the first');
  });

  test('step 3: a pass is bound to its domain on a kept-alive connection too, and stops at its expiry', async () => {
    // The first request verifies the cookie (and the connection remembers it); the next ones on the
    // same connection must not reuse that for another domain, nor after the expiry.
    const ip = '127.0.23.5';
    const keep = new Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<unknown>();
    const on = (host: string, c: string) =>
      new Promise<string>((resolve, reject) => {
        const req = httpRequest({ host: '127.0.0.1', port: ports.bots!, path: '/', headers: { 'user-agent': UA, cookie: c, host }, agent: keep, localAddress: ip }, (res) => {
          sockets.add(req.socket);
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d) => (text += d));
          res.on('end', () => resolve(text));
        });
        req.on('error', reject);
        req.end();
      });
    try {
      const pass = cookie(ip, UA, undefined, KEY, 'low.order.test');
      assert.equal(await on('low.order.test', pass), 'origin', 'its own domain');
      assert.notEqual(await on('medium.order.test', pass), 'origin', 'another domain on the same connection is challenged');
      assert.equal(await on('low.order.test', pass), 'origin', 'its own domain again');
      const soon = Math.floor(Date.now() / 1000) + 2;
      const brief = cookie(ip, UA, soon, KEY, 'low.order.test');
      assert.equal(await on('low.order.test', brief), 'origin', 'a cookie about to expire still passes');
      await waitFor(() => Math.floor(Date.now() / 1000) > soon, 'the cookie to expire', 5_000, 50);
      assert.notEqual(await on('low.order.test', brief), 'origin', 'past its expiry it no longer passes, even on the connection that verified it');
      assert.equal(sockets.size, 1, 'all on one connection');
    } finally {
      keep.destroy();
    }
  });

  test('what a kept-alive connection remembers (its address passed for a domain, its pass cookie) never lets through what a new connection would refuse', async () => {
    // One connection per source, every request on it: the address a connection passed the lists
    // with is remembered for that domain only, never when it was refused or whitelisted; a pass
    // cookie is remembered only once its User-Agent passed the AI guard, and skips the guard only
    // with that one User-Agent header.
    const keep = () => ({ agent: new Agent({ keepAlive: true, maxSockets: 1 }), sockets: new Set<unknown>() });
    const at = (c: ReturnType<typeof keep>, server: 'bots' | 'nobots', level: string, from: string, headers: Record<string, string> = {}) =>
      send(ports[server]!, `${level}.order.test`, from, headers, '/', undefined, c);
    const all: ReturnType<typeof keep>[] = [];
    try {
      // 127.0.11.0/24 is blacklisted on the medium domain only, 127.0.41.0/24 (IR) refused there only.
      for (const [ip, reason, rule] of [
        ['127.0.11.6', 'ip_blocked', RULE.blockMedium],
        ['127.0.41.10', 'country_blocked', '-'],
      ] as const) {
        const c = keep();
        all.push(c);
        for (let round = 0; round < 2; round++) {
          assert.deepEqual(await at(c, 'nobots', 'low', ip), { status: 200 }, `${ip} on low, round ${round}`);
          assert.deepEqual(await at(c, 'nobots', 'medium', ip), { status: 403, reason, rule }, `${ip} on medium after low, round ${round}`);
        }
        assert.equal(c.sockets.size, 1, `${ip}: one connection`);
      }
      // Refused first, then again; the whitelisted address (in the blacklisted /24) stays whitelisted.
      const refused = keep();
      all.push(refused);
      for (let i = 0; i < 2; i++) assert.deepEqual(await at(refused, 'nobots', 'low', '127.0.10.8'), { status: 403, reason: 'ip_blocked', rule: RULE.block }, `refused ${i}`);
      const listed = keep();
      all.push(listed);
      for (let i = 0; i < 2; i++) assert.deepEqual(await at(listed, 'bots', 'low', '127.0.10.1', { 'user-agent': BAD_UA, cookie: '' }), { status: 200 }, `whitelisted ${i}`);

      // The pass cookie: remembered with an ordinary User-Agent, it does not carry a crawler through.
      const ip = '127.0.22.8';
      const pass = cookie(ip, UA, undefined, KEY, 'medium.order.test');
      const gpt = 'Mozilla/5.0 (compatible; GPTBot/1.0)';
      const refusedAi = { status: 403, reason: 'ai_bot_blocked', rule: RULE.gpt };
      const c = keep();
      all.push(c);
      assert.deepEqual(await at(c, 'bots', 'medium', ip, { cookie: pass }), { status: 200 }, 'verified and remembered');
      assert.deepEqual(await at(c, 'bots', 'medium', ip, { cookie: pass }), { status: 200 }, 'on the remembered cookie');
      assert.deepEqual(await at(c, 'bots', 'medium', ip, { cookie: pass, 'user-agent': gpt }), refusedAi, 'the remembered cookie with a crawler User-Agent');
      assert.deepEqual(await at(c, 'bots', 'medium', ip, { cookie: pass, 'user-agent': [gpt, UA] as unknown as string }), refusedAi, 'a crawler header before the remembered one');
      assert.deepEqual(await at(c, 'bots', 'medium', ip, { cookie: pass }), { status: 200 }, 'and the ordinary request again');
      assert.equal(c.sockets.size, 1, 'the cookie requests: one connection');
      // A crawler that earned a cookie for its own User-Agent is refused on every request of its connection.
      const crawler = keep();
      all.push(crawler);
      const its = cookie('127.0.22.9', gpt, undefined, KEY, 'medium.order.test');
      for (let i = 0; i < 3; i++) assert.deepEqual(await at(crawler, 'bots', 'medium', '127.0.22.9', { cookie: its, 'user-agent': gpt }), refusedAi, `crawler request ${i}`);
      assert.equal(crawler.sockets.size, 1, 'the crawler: one connection');
    } finally {
      for (const c of all) c.agent.destroy();
    }
  });

  test('step 4: medium and high count and limit (429 rate_limited); low stores the rule but never limits', async () => {
    for (const level of ['medium', 'high']) {
      const ip = level === 'medium' ? '127.0.24.1' : '127.0.24.2';
      const seen: Seen[] = [];
      for (let i = 0; i < RATE + 1; i++) seen.push(await get('bots', level, ip));
      assert.deepEqual(
        seen.map((s) => s.status),
        [200, 200, 200, 429],
        level,
      );
      assert.deepEqual(seen.at(-1), { status: 429, reason: 'rate_limited', rule: RULE.rate });
    }
    for (let i = 0; i < RATE + 3; i++) assert.equal((await get('bots', 'low', '127.0.24.3')).status, 200, `low request ${i}`);
  });

  test('refused requests are not counted: blacklisted, bad bots and the challenged do not use up the limit', async () => {
    const ip = '127.0.25.1';
    for (let i = 0; i < RATE + 2; i++) assert.equal((await get('bots', 'medium', ip, { cookie: '' })).status, 200, 'challenged');
    for (let i = 0; i < RATE + 2; i++) assert.equal((await get('bots', 'medium', ip, { 'user-agent': BAD_UA, cookie: '' })).status, 403, 'bad bot');
    const seen = [];
    for (let i = 0; i < RATE + 1; i++) seen.push((await get('bots', 'medium', ip)).status);
    assert.deepEqual(seen, [200, 200, 200, 429], 'the limit starts with the first request that reached it');
  });

  test('step 5: attack detection at level high only, after the rate limit', async () => {
    const attack = "/search?q=1'%20OR%20'1'='1";
    assert.equal((await get('nobots', 'high', '127.0.26.1', {}, attack)).status, 403);
    assert.equal((await get('nobots', 'medium', '127.0.26.1', {}, attack)).status, 200);
    assert.equal((await get('nobots', 'off', '127.0.26.1', {}, attack)).status, 200);
  });

  test('step 5: a gzip or deflate body at level high is read inflated; any other coding is refused (compressed_body) unless the domain allows it; detect mode logs it', async () => {
    const attack = Buffer.from('{"q":"1\' OR \'1\'=\'1"}');
    const clean = Buffer.from('{"q":"hello","page":2}');
    const json = { 'content-type': 'application/json' };
    // A fresh source for every request: the rate limit (RATE a minute) counts by address.
    let n = 0;
    const from = () => `127.0.27.${++n}`;
    // One coding the detectors inflate: the attack inside is found, whatever the domain allows
    // (the switch is for what cannot be read); an ordinary body passes.
    for (const [encoding, pack] of [
      ['gzip', gzipSync],
      ['x-gzip', gzipSync],
      ['GZip', gzipSync],
      ['deflate', deflateSync],
      ['deflate', deflateRawSync],
    ] as const) {
      for (const level of ['high', 'zip'])
        assert.deepEqual(
          await get('nobots', level, from(), { ...json, 'content-encoding': encoding }, '/api', pack(attack)),
          { status: 403, reason: 'sqli_detected', rule: '-' },
          `${level} ${encoding}`,
        );
      assert.equal((await get('nobots', 'high', from(), { ...json, 'content-encoding': encoding }, '/api', pack(clean))).status, 200, `an ordinary ${encoding} body`);
      // Below level high nothing reads bodies.
      assert.equal((await get('nobots', 'medium', from(), { ...json, 'content-encoding': encoding }, '/api', pack(attack))).status, 200, `medium ${encoding}`);
    }
    // What an attacker does with the format (each kept from an attack run against this very code):
    // - text in the gzip header's comment (FCOMMENT) or name (FNAME) field, which zlib skips and an
    //   application that ignores Content-Encoding parses as part of the body: the bytes as sent are read too;
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const xss = '&q=%3Cscript%3Ealert(document.cookie)%3C%2Fscript%3E&z=';
    const withField = (flag: number, text: string) => {
      const gz = gzipSync(Buffer.from('a=1'));
      return Buffer.concat([gz.subarray(0, 3), Buffer.from([gz[3]! | flag]), gz.subarray(4, 10), Buffer.from(`${text}\0`, 'latin1'), gz.subarray(10)]);
    };
    for (const [what, body] of [
      ['FCOMMENT', withField(0x10, xss)],
      ['FNAME', withField(0x08, xss)],
    ] as const) {
      for (const level of ['high', 'zip']) assert.equal((await get('nobots', level, from(), { ...form, 'content-encoding': 'gzip' }, '/api', body)).reason, 'xss_detected', `${level} ${what}`);
    }
    // - a body that is not compressed at all, on a domain that lets unreadable compressed bodies through;
    assert.equal((await get('nobots', 'zip', from(), { ...json, 'content-encoding': 'gzip' }, '/api', attack)).reason, 'sqli_detected', 'a plain body called gzip');
    // - bytes that are a zlib stream cut short and, read as raw deflate, an attack (some servers read deflate raw);
    const polyglot = Buffer.from('eAEA/v8BAAAA//9TS7Q1VCu0VTV2Lk4uyiwoUTV2TcxJLSrRMNQEiqkaucGFAQ==', 'base64');
    assert.equal((await get('nobots', 'high', from(), { ...form, 'content-encoding': 'deflate' }, '/api', polyglot)).reason, 'xss_detected', 'zlib and raw deflate at once');
    // - a type the binary exemption named (it passes only in a coding no detector reads).
    for (const type of ['image/svg+xml', 'application/octet-stream', 'application/grpc+json']) {
      const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(document.domain)"><script>alert(1)</script></svg>');
      assert.equal((await get('nobots', 'high', from(), { 'content-type': type, 'content-encoding': 'gzip' }, '/api', gzipSync(type.startsWith('image') ? svg : attack))).status, 403, type);
    }
    // Chunked (no Content-Length) is read the same way.
    assert.equal((await get('nobots', 'high', from(), { ...json, 'content-encoding': 'gzip', 'transfer-encoding': 'chunked' }, '/api', gzipSync(attack))).reason, 'sqli_detected');
    // What cannot be read is refused, or passes uninspected where the domain allows it: a coding
    // no detector decodes, two codings, two headers, bytes that are no gzip stream, and a second
    // gzip member after the first (gunzip reads both; the attack would be in the second).
    const unreadable: [string, Record<string, string | string[]>, Buffer][] = [
      ['br', { 'content-encoding': 'br' }, brotliCompressSync(attack)],
      ['two codings', { 'content-encoding': 'identity, GZIP' }, gzipSync(attack)],
      ['gzip twice', { 'content-encoding': 'gzip, gzip' }, gzipSync(gzipSync(attack))],
      ['two headers', { 'content-encoding': ['gzip', 'gzip'] }, gzipSync(gzipSync(attack))],
      ['not gzip', { 'content-encoding': 'gzip' }, Buffer.concat([gzipSync(clean).subarray(0, 10), Buffer.from('not a deflate stream at all')])],
      ['two members', { 'content-encoding': 'gzip' }, Buffer.concat([gzipSync(clean), gzipSync(attack)])],
    ];
    for (const [what, headers, body] of unreadable) {
      const high = await send(ports.nobots!, 'high.order.test', from(), { ...json, ...headers } as Record<string, string>, '/api', body);
      assert.deepEqual(high, { status: 403, reason: 'compressed_body', rule: '-' }, what);
      assert.equal((await eventOf(lastToken)).action, 'block');
      assert.equal((await send(ports.nobots!, 'zip.order.test', from(), { ...json, ...headers } as Record<string, string>, '/api', body)).status, 200, `allowed: ${what}`);
    }
    // A "bomb" (20 MB of one byte in 20 KB) is inflated only up to the body budget, and read.
    const bomb = gzipSync(Buffer.concat([Buffer.from('{"a":"'), Buffer.alloc(20_000_000, 'a'), Buffer.from('"}')]), { level: 9 });
    assert.ok(bomb.length < 30_000, `${bomb.length} bytes`);
    assert.equal((await get('nobots', 'high', from(), { ...json, 'content-encoding': 'gzip' }, '/api', bomb)).status, 200, 'a bomb of ordinary bytes');
    // A compressed binary format (telemetry SDKs' protobuf) is no evasion and passes; with a second
    // Content-Type that could name a text format, it is read.
    const proto = { 'content-type': 'application/x-protobuf', 'content-encoding': 'gzip' };
    assert.equal((await get('nobots', 'high', from(), proto, '/api/logs', gzipSync(Buffer.from('\u0008\u0001\u0012\u0003abc')))).status, 200, 'compressed protobuf');
    const twoTypes = await send(
      ports.nobots!,
      'high.order.test',
      from(),
      { ...proto, 'content-type': ['application/x-protobuf', 'application/json'] as unknown as string },
      '/api/logs',
      gzipSync(attack),
    );
    assert.equal(twoTypes.reason, 'sqli_detected', 'two Content-Types');
    // identity, and an encoding without a body, pass.
    assert.equal((await get('nobots', 'high', from(), { ...json, 'content-encoding': 'identity' }, '/api', clean)).status, 200);
    assert.equal((await get('nobots', 'high', from(), { 'content-encoding': 'gzip' }, '/api')).status, 200);
    // Detect mode: let through, and logged: what is found inside, and what cannot be read.
    assert.equal((await get('nobots', 'watch', from(), { ...json, 'content-encoding': 'gzip' }, '/api', gzipSync(attack))).status, 200);
    assert.deepEqual(await eventOf(lastToken), { reason: 'sqli_detected', rule: '-', action: 'detect' });
    assert.equal((await get('nobots', 'watch', from(), { ...json, 'content-encoding': 'br' }, '/api', brotliCompressSync(clean))).status, 200);
    assert.deepEqual(await eventOf(lastToken), { reason: 'compressed_body', rule: '-', action: 'detect' });
  });
});
