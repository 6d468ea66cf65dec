import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { WebSocketServer } from 'ws';
import { answerUrl, leadingZeroBits, parseChallengePage, solveChallenge } from '@rampart/proxy';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// docs/architecture.md "The WAF" through a real control plane, agent and HAProxy (2 threads), with
// requests from different loopback source addresses.
describe('WAF through real HAProxy', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const dom: Record<string, string> = {};
  const rules: Record<string, string> = {};
  const get = (host: string, from: string, path = '/', headers: Record<string, string> = {}) => viaProxy(agent.httpPort, host, path, headers, from);
  const status = async (host: string, from: string, path = '/', headers: Record<string, string> = {}) => (await get(host, from, path, headers)).status;

  // With the response headers (viaProxy returns status and body only); with a body, a POST.
  const full = (host: string, from: string, path: string, headers: Record<string, string> = {}, body?: Buffer) =>
    new Promise<{ status: number; text: string; headers: Record<string, string | string[] | undefined> }>((resolve, reject) => {
      const method = body ? 'POST' : 'GET';
      const req = httpRequest({ host: '127.0.0.1', port: agent.httpPort, method, path, headers: { ...headers, host }, agent: false, localAddress: from }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text, headers: res.headers }));
        res.on('error', reject);
      });
      req.setTimeout(10_000, () => req.destroy(new Error('request timed out')));
      req.on('error', reject);
      req.end(body);
    });
  const requestIds: string[] = [];
  let geo = '';
  let silent: WebSocketServer | undefined;

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-waf' });
    // Loopback sources are in no country of the data set; an operator-supplied map places two
    // test ranges (the agent's --country-map, which also serves operators with their own geo data).
    geo = join(mkdtempSync(join(tmpdir(), 'rampart-geo-')), 'country.map');
    writeFileSync(geo, '127.0.40.0/24 KP\n127.0.41.0/24 IR\n1.0.1.0/24 CN\n');
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, nbthread: 2, countryMap: geo });
    for (const level of ['low', 'medium', 'high']) {
      const d = await api.call('POST', '/api/domains', {
        domain: `${level}.waf.test`,
        origins: [{ ip: '127.0.0.1', port: origin.port }],
        serverIds: [srv.body.id],
        sslEnabled: false,
        wafLevel: level,
      });
      dom[level] = d.body.id;
    }
    const add = async (name: string, body: object) => {
      const r = await api.call('POST', '/api/waf', body);
      assert.equal(r.status, 201, JSON.stringify(r.body));
      rules[name] = r.body.id;
    };
    await add('allow', { rule_type: 'allow_ip', value: '127.0.10.1' });
    await add('block', { rule_type: 'block_ip', value: '127.0.10.0/24' });
    await add('blockLow', { rule_type: 'block_ip', value: '127.0.11.1', domain_id: dom.low });
    await add('rate', { rule_type: 'rate_limit', value: JSON.stringify({ requests_per_minute: 5 }) });
    await add('gpt', { rule_type: 'block_ai_bot', value: 'GPTBot' });
    await add('kp', { rule_type: 'block_country', value: 'KP' });
    await add('irHigh', { rule_type: 'block_country', value: 'IR', domain_id: dom.high });
    await settle(api);
    await waitFor(async () => (await status('medium.waf.test', '127.0.20.1')) === 200, 'the origin to be up');
  });
  after(async () => {
    silent?.close();
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('step 2: a blacklisted address gets 403; step 1: a whitelisted one in the same range is never blocked or limited', async () => {
    assert.equal(await status('medium.waf.test', '127.0.10.2'), 403);
    for (let i = 0; i < 8; i++) assert.equal(await status('medium.waf.test', '127.0.10.1'), 200, `whitelisted request ${i + 1}`);
  });

  test('a per-domain blacklist applies to its domain only, at every level', async () => {
    assert.equal(await status('low.waf.test', '127.0.11.1'), 403);
    assert.equal(await status('medium.waf.test', '127.0.11.1'), 200);
  });

  test('step 4: medium limits per IP with 429 and a plain-text body; low stores but does not enforce', async () => {
    const seen: number[] = [];
    for (let i = 0; i < 7; i++) seen.push(await status('medium.waf.test', '127.0.12.1'));
    assert.deepEqual(seen, [200, 200, 200, 200, 200, 429, 429]);
    const r = await get('medium.waf.test', '127.0.12.1');
    assert.match(r.text, /rate limit was exceeded/i);
    for (let i = 0; i < 7; i++) assert.equal(await status('low.waf.test', '127.0.12.2'), 200);
  });

  test('counters live in memory only: a reload resets them', async () => {
    for (let i = 0; i < 5; i++) assert.equal(await status('medium.waf.test', '127.0.17.1'), 200);
    assert.equal(await status('medium.waf.test', '127.0.17.1'), 429);
    // any configuration change reloads HAProxy
    const tmp = await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: '192.0.2.77' });
    await settle(api);
    assert.equal(await status('medium.waf.test', '127.0.17.1'), 200, 'a fresh window after the reload');
    await api.call('DELETE', `/api/waf/${tmp.body.id}`);
    await settle(api);
  });

  test('the count is per IP for the whole server across 2 HAProxy threads and all domains, from its first requests on', async () => {
    // Each client's first 12 requests at once, so the two threads start its window together (a
    // race that once let a 6th through: the second thread's clear wiped the first one's count).
    for (let client = 1; client <= 6; client++) {
      const from = `127.0.13.${client}`;
      const results = await Promise.all(Array.from({ length: 12 }, (_, i) => status(i % 2 ? 'medium.waf.test' : 'high.waf.test', from)));
      assert.equal(results.filter((s) => s === 200).length, 5, `${from}: ${results.join(' ')}`);
      assert.equal(results.filter((s) => s === 429).length, 7, `${from}: ${results.join(' ')}`);
    }
  });

  test('step 5: OWASP patterns on path plus query, URL-decoded, case-insensitive, at high only', async () => {
    assert.equal(await status('high.waf.test', '127.0.14.1', "/search?q=1'%20Or%20'1'='1"), 403);
    assert.equal(await status('high.waf.test', '127.0.14.2', '/p?x=%3CScRiPt%3Ealert(1)%3C/script%3E'), 403);
    assert.equal(await status('high.waf.test', '127.0.14.3', '/a/UNION%20SELECT%20password%20FROM%20users'), 403);
    assert.equal(await status('medium.waf.test', '127.0.14.4', "/search?q=1'%20Or%20'1'='1"), 200);
    assert.equal(await status('high.waf.test', '127.0.14.5', '/blog/select-your-plan?q=update+profile'), 200);
    assert.equal(await status('high.waf.test', '127.0.14.6', '/s?q=%3Cscript%3Ealert(1)%3C/script%3E&x=%zz'), 403, 'a malformed escape cannot hide a payload');
  });

  test('step 5: at level high a gzip body is read inflated; one no detector can read is refused as compressed_body (an event) until the domain allows it', async () => {
    const attack = Buffer.from('{"cmd":"; cat /etc/passwd"}');
    const json = { 'content-type': 'application/json' };
    const gzip = { ...json, 'content-encoding': 'gzip' };
    const br = { ...json, 'content-encoding': 'br' };
    const eventOf = (reason: string, id: string | undefined, ip: string) =>
      waitFor(
        async () => {
          const events = (await api.call('GET', `/api/waf/events?reason=${reason}`)).body as any[];
          return events.some((e) => e.request_id === id && e.domain === 'high.waf.test' && e.source_ip === ip);
        },
        `the ${reason} event`,
        15_000,
        200,
      );
    // The attack inside a gzip body is what the detectors find
    const found = await full('high.waf.test', '127.0.14.7', '/api/run', gzip, gzipSync(attack));
    assert.equal(found.status, 403);
    assert.match(found.text, /blocked/i);
    await eventOf('cmdi_detected', found.headers['x-rampart-request-id'], '127.0.14.7');
    assert.equal((await full('high.waf.test', '127.0.14.11', '/api/run', gzip, gzipSync(Buffer.from('{"cmd":"hello"}')))).status, 200, 'an ordinary gzip body passes');
    // br: no detector reads it
    const refused = await full('high.waf.test', '127.0.14.12', '/api/run', br, brotliCompressSync(attack));
    assert.equal(refused.status, 403);
    await eventOf('compressed_body', refused.headers['x-rampart-request-id'], '127.0.14.12');
    assert.equal((await full('medium.waf.test', '127.0.14.8', '/api/run', br, brotliCompressSync(attack))).status, 200, 'below high, bodies are not read');
    const allowed = await api.call('PUT', `/api/domains/${dom.high}`, { wafCompressedBodies: 'allow' });
    assert.equal(allowed.body.wafCompressedBodies, 'allow');
    await settle(api);
    assert.equal((await full('high.waf.test', '127.0.14.9', '/api/run', br, brotliCompressSync(attack))).status, 200, 'allowed: it passes (its bytes as sent hold nothing a detector reads)');
    assert.equal((await full('high.waf.test', '127.0.14.13', '/api/run', gzip, gzipSync(attack))).status, 403, 'allowed: gzip is still read');
    await api.call('PUT', `/api/domains/${dom.high}`, { wafCompressedBodies: 'refuse' });
    await settle(api);
    assert.equal((await full('high.waf.test', '127.0.14.10', '/api/run', br, brotliCompressSync(attack))).status, 403, 'refused again');
  });

  test('block_country: global and per-domain country rules, looked up natively by source address', async () => {
    assert.equal(await status('low.waf.test', '127.0.40.9'), 403);
    assert.equal(await status('high.waf.test', '127.0.41.9'), 403);
    assert.equal(await status('medium.waf.test', '127.0.41.9'), 200);
  });

  test("a custom rule comparing the country with a list reads the agent's map of classes of countries, the one block_country reads", async () => {
    const r = await api.call('POST', '/api/rules', {
      name: 'ir-cn',
      expression: 'ip.src.country in {"IR" "CN"} and http.request.uri.path eq "/country-rule"',
      action: 'block',
      domainId: dom.low,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await settle(api);
    try {
      assert.equal(await status('low.waf.test', '127.0.41.9', '/country-rule'), 403, 'IR');
      assert.equal(await status('low.waf.test', '127.0.41.9', '/other'), 200);
      assert.equal(await status('low.waf.test', '127.0.42.9', '/country-rule'), 200, 'an address in no country');
      const cfg = readFileSync(join(agent.dataDir, 'haproxy', 'current', 'haproxy.cfg'), 'utf8');
      // (its IPv4 lines only: this agent's HAProxy is bound to an IPv4 address)
      const map = /src,map_ip\((\S+-classes-v1-[0-9a-f]{16}-v4\.map)\) -m str -f/.exec(cfg)?.[1];
      assert.ok(map, 'the rule reads a class map of IPv4 lines');
      const [header, end, ...lines] = readFileSync(map, 'utf8').trim().split('\n');
      assert.equal(end, '# end of classes');
      assert.equal(lines.pop(), '# end of map', 'the last line says the file is whole');
      // one map for the server: the domains' refused sets (KP everywhere, IR also on high) and the
      // rule's list each get what tells them apart, no more
      assert.equal(header, '# classes: c000=CN c001=IR c002=KP');
      // (longest prefix wins: the /23 of KP's class holds IR's /24)
      assert.deepEqual(lines.sort(), ['1.0.1.0/24 c000', '127.0.40.0/23 c002', '127.0.41.0/24 c001']);
    } finally {
      await api.call('DELETE', `/api/rules/${r.body.id}`);
      await settle(api);
    }
  });

  test('block_ai_bot: a listed crawler is refused by user-agent; others pass', async () => {
    assert.equal(await status('medium.waf.test', '127.0.15.1', '/', { 'user-agent': 'Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)' }), 403);
    assert.equal(await status('medium.waf.test', '127.0.15.2', '/', { 'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0' }), 200);
    assert.equal(await status('medium.waf.test', '127.0.15.3', '/', { 'user-agent': 'GPTBot/1.1, x' }), 403, 'a comma in the header does not hide the crawler');
  });

  test('the per-domain switch: off allows everything, on restores the kept rules', async () => {
    await api.call('PUT', `/api/domains/${dom.medium}`, { wafEnabled: false });
    await settle(api);
    assert.equal(await status('medium.waf.test', '127.0.10.3'), 200);
    assert.equal((await api.call('GET', '/api/waf')).body.length, Object.keys(rules).length, 'rules are kept');
    await api.call('PUT', `/api/domains/${dom.medium}`, { wafEnabled: true });
    await settle(api);
    assert.equal(await status('medium.waf.test', '127.0.10.3'), 403);
  });

  // What a browser does with the challenge page, done natively: find the counter, send the answer,
  // keep the cookie the answer gets.
  const answer = (host: string, from: string, ua: string, query: string) => full(host, from, query, { 'user-agent': ua });
  const earn = async (host: string, from: string, ua: string, path = '/') => {
    const page = await get(host, from, path, { 'user-agent': ua });
    const challenge = parseChallengePage(page.text);
    assert.ok(challenge, `a challenge page: ${page.text.slice(0, 200)}`);
    const res = await answer(host, from, ua, answerUrl(challenge.token, solveChallenge(challenge.token, challenge.difficulty).counter));
    assert.equal(res.status, 204, res.text);
    const setCookie = String(res.headers['set-cookie']);
    assert.match(setCookie, /^rampart_bot=[0-9a-z]+\.\d+\.[0-9a-f]{64}; Path=\/; Max-Age=86400; SameSite=Lax; HttpOnly$/);
    return { cookie: setCookie.split(';')[0]!, challenge };
  };
  const challenged = async (host: string, from: string, path: string, headers: Record<string, string>) => {
    const res = await get(host, from, path, headers);
    return res.status === 200 && parseChallengePage(res.text) !== undefined;
  };

  test('bot protection: bad user-agents 403, a client without JavaScript is challenged (200, a proof of work, never a cookie), the work earns a cookie bound to address and User-Agent', async () => {
    const bot = await api.call('POST', '/api/waf', { rule_type: 'block_bot', value: '{"enabled":true}' });
    await settle(api);
    assert.equal(await status('low.waf.test', '127.0.16.1', '/', { 'user-agent': 'sqlmap/1.7.2#stable (https://sqlmap.org)' }), 403);
    const ua = 'Mozilla/5.0 (X11; Linux x86_64) Chrome/130.0';
    const page = await full('low.waf.test', '127.0.16.2', '/', { 'user-agent': ua });
    assert.equal(page.status, 200);
    assert.match(page.text, /Checking your browser/);
    // the page names the request, and its event carries the same id
    const pageId = page.headers['x-rampart-request-id'] as string;
    assert.match(pageId, /^[0-9a-f]{16}$/);
    await waitFor(
      async () => ((await api.call('GET', '/api/waf/events?reason=bot_challenge&limit=200')).body as any[]).some((e) => e.request_id === pageId && e.source_ip === '127.0.16.2'),
      'the challenge event with the page id',
      15_000,
      200,
    );
    assert.match(page.text, /<noscript>.*turn on JavaScript/s, 'the page says what to do without JavaScript');
    assert.doesNotMatch(page.text, /"origin"/, 'the challenge, not the origin');
    // The scraper's one-liner finds nothing to replay.
    assert.doesNotMatch(page.text, /rampart_bot=|document\.cookie/, 'no cookie in the page');
    const challenge = parseChallengePage(page.text)!;
    assert.equal(challenge.difficulty, 14, 'the default difficulty');
    assert.equal(await challenged('low.waf.test', '127.0.16.2', '/', { 'user-agent': ua, cookie: `rampart_bot=${challenge.token}` }), true, 'the token is no cookie');

    const { counter } = solveChallenge(challenge.token, challenge.difficulty);
    const lazy = Array.from({ length: 50 }, (_, n) => n).find(
      (n) =>
        leadingZeroBits(
          createHash('sha256')
            .update(challenge.token + n)
            .digest(),
        ) < challenge.difficulty,
    )!;
    const refused: [string, string, string][] = [
      ['not enough work', '127.0.16.2', answerUrl(challenge.token, lazy)],
      ['another address', '127.0.16.3', answerUrl(challenge.token, counter)],
      [
        'a forged expiry',
        '127.0.16.2',
        answerUrl(
          challenge.token.replace(/^([0-9a-z]+)\.(\d+)/, (_, k, e) => `${k}.${Number(e) + 3600}`),
          counter,
        ),
      ],
      ['an easier difficulty', '127.0.16.2', answerUrl(challenge.token.replace(/^([0-9a-z]+\.\d+)\.14\./, '$1.8.'), counter)],
      ['no counter', '127.0.16.2', `/.well-known/rampart/bot?c=${challenge.token}`],
      ['a percent-encoded token', '127.0.16.2', `/.well-known/rampart/bot?c=${encodeURIComponent(challenge.token).replace(/\./g, '%2E')}&n=${counter}`],
    ];
    for (const [what, from, query] of refused) {
      const res = await answer('low.waf.test', from, ua, query);
      assert.equal(res.status, 403, what);
      assert.equal(res.headers['set-cookie'], undefined, `${what}: no cookie`);
    }
    assert.equal((await answer('low.waf.test', '127.0.16.2', 'curl/8.0', answerUrl(challenge.token, counter))).status, 403, 'another User-Agent');

    const ok = await answer('low.waf.test', '127.0.16.2', ua, answerUrl(challenge.token, counter));
    assert.equal(ok.status, 204);
    const cookie = String(ok.headers['set-cookie']).split(';')[0]!;
    assert.match(cookie, new RegExp(`^rampart_bot=${challenge.token.split('.')[0]}\\.`), 'signed with the key the challenge named');
    const passed = await get('low.waf.test', '127.0.16.2', '/', { 'user-agent': ua, cookie });
    assert.equal(JSON.parse(passed.text).origin, 'origin');
    assert.equal(await challenged('low.waf.test', '127.0.16.3', '/', { 'user-agent': ua, cookie }), true, 'another address gets the challenge again');
    assert.equal(await challenged('low.waf.test', '127.0.16.2', '/', { 'user-agent': 'curl/8.0', cookie }), true, 'another User-Agent gets the challenge again');
    assert.equal(await challenged('medium.waf.test', '127.0.16.2', '/', { 'user-agent': ua, cookie }), true, 'another domain of the same shield server gets the challenge again');
    const elsewhere = await answer('medium.waf.test', '127.0.16.2', ua, answerUrl(challenge.token, counter));
    assert.equal(elsewhere.status, 403, 'work done for one domain earns no pass on another');
    const [name, value] = cookie.split('=') as [string, string];
    const [kid, expiry, mac] = value.split('.') as [string, string, string];
    for (const [what, forged] of [
      ['a later expiry', `${name}=${kid}.${Number(expiry) + 86400}.${mac}`],
      ['an unknown key id', `${name}=zz.${expiry}.${mac}`],
      ['the old form without key id', `${name}=${expiry}.${mac}`],
    ] as const) {
      assert.equal(await challenged('low.waf.test', '127.0.16.2', '/', { 'user-agent': ua, cookie: forged }), true, what);
    }
    // On one keep-alive connection: a cookie verified once passes natively afterwards, but only
    // that very cookie with that very User-Agent; anything else is checked again.
    // (A raw socket: the requests must share one connection whatever the origin's keep-alive hint says.)
    const socket = connect({ host: '127.0.0.1', port: agent.httpPort, localAddress: '127.0.16.2' });
    await once(socket, 'connect');
    let buffered = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (buffered += d));
    const onConnection = async (headers: Record<string, string>) => {
      buffered = '';
      socket.write(
        `GET / HTTP/1.1\r\nHost: low.waf.test\r\n${Object.entries(headers)
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join('')}\r\n`,
      );
      await waitFor(
        () => {
          const end = buffered.indexOf('\r\n\r\n');
          const length = /\r\ncontent-length: *(\d+)/i.exec(buffered.slice(0, end))?.[1];
          return end > 0 && length !== undefined && buffered.length >= end + 4 + Number(length);
        },
        'a whole response on the connection',
        10_000,
        5,
      );
      return buffered;
    };
    try {
      const steps: [string, Record<string, string>, boolean][] = [
        ['the valid cookie', { 'user-agent': ua, cookie }, true],
        ["again, from the connection's memory", { 'user-agent': ua, cookie }, true],
        ['the same cookie with another User-Agent', { 'user-agent': 'curl/8.0', cookie }, false],
        ['a forged expiry', { 'user-agent': ua, cookie: `${name}=${kid}.${Number(expiry) + 86400}.${mac}` }, false],
        ['no cookie', { 'user-agent': ua }, false],
        ['the valid cookie once more', { 'user-agent': ua, cookie }, true],
      ];
      for (const [what, headers, passes] of steps) {
        const res = await onConnection(headers);
        assert.equal(res.includes('"origin"'), passes, `${what}: ${passes ? 'passes' : 'challenged'}`);
        assert.equal(socket.destroyed, false, `${what}: the connection stays open`);
      }
    } finally {
      socket.destroy();
    }
    // Every User-Agent header counts: a bad bot hiding behind a browser's, a crawler's name
    // behind a second header, and a crawler's name inside another client's stay refused.
    assert.equal(await status('low.waf.test', '127.0.16.2', '/', { 'user-agent': [ua, 'sqlmap/1.7'] as unknown as string, cookie }), 403, 'a bad bot in the second header');
    assert.equal(await challenged('low.waf.test', '127.0.16.6', '/', { 'user-agent': ['curl/8.0', 'Googlebot/2.1'] as unknown as string }), true, 'a second User-Agent naming Googlebot');
    assert.equal(await challenged('low.waf.test', '127.0.16.4', '/', { 'user-agent': 'evil-scraper googlebot' }), true, 'an unverified crawler name');
    assert.equal(await challenged('low.waf.test', '127.0.16.4', '/', { 'user-agent': 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)' }), true, 'an unverified Googlebot');

    // The secret is the account's: a cookie earned on one shield server is valid on the others.
    const other = await api.call('POST', '/api/servers', { name: 'edge-waf-2' });
    const second = await startAgent({ serverUrl: serve.url, token: other.body.connectionToken });
    try {
      const servers = (await api.call('GET', '/api/servers')).body.filter((x: any) => x.status !== 'decommissioned').map((x: any) => x.id);
      await api.call('PUT', `/api/domains/${dom.low}`, { serverIds: servers });
      await settle(api);
      const onSecond = await viaProxy(second.httpPort, 'low.waf.test', '/', { 'user-agent': ua, cookie }, '127.0.16.2');
      assert.equal(JSON.parse(onSecond.text).origin, 'origin');
      assert.match((await viaProxy(second.httpPort, 'low.waf.test', '/', { 'user-agent': ua }, '127.0.16.2')).text, /Checking your browser/);
    } finally {
      await second.stop();
      await api.call('DELETE', `/api/servers/${other.body.id}`);
    }

    // Challenged requests never reach the rate limiter: eight challenges, then the full quota of
    // five (medium, rate_limit 5) with the cookie, then 429.
    const from = '127.0.16.5';
    for (let i = 0; i < 8; i++) assert.match((await get('medium.waf.test', from, '/', { 'user-agent': ua })).text, /Checking your browser/, `challenge ${i + 1}`);
    const { cookie: earned } = await earn('medium.waf.test', from, ua);
    for (let i = 0; i < 5; i++) assert.equal((await get('medium.waf.test', from, '/', { 'user-agent': ua, cookie: earned })).status, 200, `request ${i + 1} with the cookie`);
    assert.equal((await get('medium.waf.test', from, '/', { 'user-agent': ua, cookie: earned })).status, 429, 'the 6th');

    await api.call('DELETE', `/api/waf/${bot.body.id}`);
    await settle(api);
  });

  test('bot protection with paths: only those prefixes are challenged; a harder difficulty reaches the page', async () => {
    const bot = await api.call('POST', '/api/waf', { rule_type: 'block_bot', value: '{"enabled":true,"difficulty":16,"paths":["/login","/api/"]}' });
    assert.equal(bot.status, 201, JSON.stringify(bot.body));
    assert.equal(bot.body.value, '{"enabled":true,"difficulty":16,"paths":["/login","/api/"]}');
    await settle(api);
    const ua = 'Mozilla/5.0 (X11; Linux x86_64) Firefox/131.0';
    assert.equal(JSON.parse((await get('low.waf.test', '127.0.17.1', '/', { 'user-agent': ua })).text).origin, 'origin', 'an unguarded path');
    assert.equal(JSON.parse((await get('low.waf.test', '127.0.17.1', '/apiary', { 'user-agent': ua })).text).origin, 'origin', 'a prefix of a guarded path is not one');
    for (const path of ['/login', '/login/reset', '/api/v1/items?x=1']) {
      const page = await get('low.waf.test', '127.0.17.1', path, { 'user-agent': ua });
      assert.equal(parseChallengePage(page.text)?.difficulty, 16, path);
    }
    assert.equal(await status('low.waf.test', '127.0.17.1', '/', { 'user-agent': 'sqlmap/1.7' }), 403, 'bad bots are refused on every path');
    const { cookie } = await earn('low.waf.test', '127.0.17.2', ua, '/login');
    assert.equal(JSON.parse((await get('low.waf.test', '127.0.17.2', '/login', { 'user-agent': ua, cookie })).text).origin, 'origin');
    for (const value of [
      '{"enabled":true,"difficulty":7}',
      '{"enabled":true,"difficulty":25}',
      '{"enabled":true,"paths":[]}',
      '{"enabled":true,"paths":["login"]}',
      '{"enabled":true,"paths":["/a b"]}',
      '{"enabled":true,"colour":1}',
    ]) {
      const bad = await api.call('PUT', `/api/waf/${bot.body.id}`, { value });
      assert.equal(bad.status, 400, value);
      assert.match(bad.body.error, /value/, value);
    }
    await api.call('DELETE', `/api/waf/${bot.body.id}`);
    await settle(api);
  });

  test('bot keys rotate: cookies of the previous key stay valid, new challenges and cookies use the new key, a second rotation retires the first key', async () => {
    const bot = await api.call('POST', '/api/waf', { rule_type: 'block_bot', value: '{"enabled":true}' });
    await settle(api);
    const ua = 'Mozilla/5.0 (Macintosh) Safari/605.1';
    const first = await earn('low.waf.test', '127.0.18.1', ua);
    const firstKey = first.challenge.token.split('.')[0]!;
    const rotated = await api.call('POST', '/api/waf/bot-secret/rotate');
    assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
    assert.deepEqual(Object.keys(rotated.body).sort(), ['key_id', 'previous_key_id', 'previous_valid_until', 'rotated_at']);
    assert.equal(rotated.body.previous_key_id, firstKey);
    assert.notEqual(rotated.body.key_id, firstKey);
    assert.equal(Date.parse(rotated.body.previous_valid_until) - Date.parse(rotated.body.rotated_at), 86_400_000, 'one cookie lifetime');
    await settle(api);
    assert.equal(JSON.parse((await get('low.waf.test', '127.0.18.1', '/', { 'user-agent': ua, cookie: first.cookie })).text).origin, 'origin', 'the previous key is still accepted');
    const second = await earn('low.waf.test', '127.0.18.2', ua);
    assert.equal(second.challenge.token.split('.')[0], rotated.body.key_id, 'new challenges name the new key');
    assert.ok(second.cookie.startsWith(`rampart_bot=${rotated.body.key_id}.`), 'new cookies are signed with it');
    // A challenge served just before a rotation can still be answered after it.
    const pending = parseChallengePage((await get('low.waf.test', '127.0.18.3', '/', { 'user-agent': ua })).text)!;
    const again = await api.call('POST', '/api/waf/bot-secret/rotate');
    assert.equal(again.body.previous_key_id, rotated.body.key_id);
    await settle(api);
    const late = await answer('low.waf.test', '127.0.18.3', ua, answerUrl(pending.token, solveChallenge(pending.token, pending.difficulty).counter));
    assert.equal(late.status, 204, "an answer to the previous key's challenge");
    assert.ok(String(late.headers['set-cookie']).startsWith(`rampart_bot=${again.body.key_id}.`), 'earns a cookie of the current key');
    assert.equal(await challenged('low.waf.test', '127.0.18.1', '/', { 'user-agent': ua, cookie: first.cookie }), true, 'the first key is no longer accepted');
    assert.equal(JSON.parse((await get('low.waf.test', '127.0.18.2', '/', { 'user-agent': ua, cookie: second.cookie })).text).origin, 'origin');
    await api.call('DELETE', `/api/waf/${bot.body.id}`);
    await settle(api);
  });

  test('every WAF answer names the request: browsers get the HTML page, other clients plain text; 429 carries Retry-After', async () => {
    const ID = /^[A-Za-z0-9_-]{1,64}$/;
    const sqli = "/search?q=1'%20Or%20'1'='1";
    const page = await full('high.waf.test', '127.0.15.1', sqli, { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' });
    assert.equal(page.status, 403);
    const id = page.headers['x-rampart-request-id'] as string;
    assert.match(id, ID);
    assert.equal(page.headers['content-type'], 'text/html; charset=utf-8');
    assert.equal(page.headers['cache-control'], 'no-store');
    assert.match(page.text, /^<!doctype html>/);
    assert.ok(page.text.includes("This request was blocked by the site's firewall (SQL injection)."), page.text);
    assert.ok(page.text.includes(`>${id}<`), 'the page shows the id of the header');
    assert.doesNotMatch(page.text, /(src|href)=|<script|<link/i, 'no external asset, no script');

    const plain = await full('high.waf.test', '127.0.15.2', sqli, { accept: '*/*' });
    assert.equal(plain.status, 403);
    assert.equal(plain.headers['content-type'], 'text/plain; charset=utf-8');
    const id2 = plain.headers['x-rampart-request-id'] as string;
    assert.match(id2, ID);
    assert.equal(plain.text, `Forbidden: the request was blocked by the web application firewall.\nRequest id: ${id2}\n`);
    assert.notEqual(id2, id, 'every request has its own id');

    // input is never reflected: only the generated id is put in the page
    const reflected = await full('high.waf.test', '127.0.15.3', '/x/%3Cscript%3Ealert(%22rp-reflect%22)%3C/script%3E?q=%3Cscript%3E', { accept: 'text/html' });
    assert.equal(reflected.status, 403);
    assert.doesNotMatch(reflected.text, /<script|rp-reflect|alert/i);

    // a native IP block (step 2) and the rate limit (step 4) answer the same way
    const listed = await full('medium.waf.test', '127.0.10.3', '/', { accept: 'text/html' });
    assert.equal(listed.status, 403);
    assert.ok(listed.text.includes(listed.headers['x-rampart-request-id'] as string));
    let limited: Awaited<ReturnType<typeof full>> | undefined;
    for (let i = 0; i < 7 && limited?.status !== 429; i++) limited = await full('medium.waf.test', '127.0.15.4', '/', { accept: 'text/html' });
    assert.equal(limited!.status, 429);
    const retry = Number(limited!.headers['retry-after']);
    assert.ok(Number.isInteger(retry) && retry >= 1 && retry <= 60, `Retry-After ${limited!.headers['retry-after']}`);
    assert.ok(limited!.text.includes(`Try again in ${retry} seconds`), 'the page says when');
    assert.match(limited!.headers['x-rampart-request-id'] as string, ID);
    const limitedPlain = await full('medium.waf.test', '127.0.15.4', '/');
    assert.equal(limitedPlain.status, 429);
    assert.ok(limitedPlain.headers['retry-after']);
    assert.match(limitedPlain.text, /rate limit was exceeded[\s\S]*Request id: [A-Za-z0-9_-]+\n$/i);
    // a host no domain has: our 404 page or text, with its id
    const unknown = await full('nobody.waf.test', '127.0.15.5', '/', { accept: 'text/html' });
    assert.equal(unknown.status, 404);
    assert.ok(unknown.text.includes(`<code id="request-id">${unknown.headers['x-rampart-request-id']}</code>`), unknown.text);
    const unknownPlain = await full('nobody.waf.test', '127.0.15.5', '/');
    assert.equal(unknownPlain.text, `Not Found: no site is set up for this name here.\nRequest id: ${unknownPlain.headers['x-rampart-request-id']}\n`);
    requestIds.push(id, id2);
  });

  test('every block is an event with its reason and rule, newest first', async () => {
    await waitFor(
      async () => {
        const events = (await api.call('GET', '/api/waf/events?limit=200')).body as any[];
        const reasons = new Set(events.map((e) => e.reason));
        return ['ip_blocked', 'country_blocked', 'rate_limited', 'sqli_detected', 'xss_detected', 'ai_bot_blocked', 'bot_blocked', 'bot_challenge'].every((r) => reasons.has(r));
      },
      'events of every reason',
      15_000,
      200,
    );
    const events = (await api.call('GET', '/api/waf/events?limit=200')).body as any[];
    const blocked = events.find((e) => e.reason === 'ip_blocked' && e.source_ip === '127.0.10.2');
    assert.equal(blocked.rule_id, rules.block);
    assert.equal(blocked.domain, 'medium.waf.test');
    assert.equal(events.find((e) => e.reason === 'rate_limited').rule_id, rules.rate);
    // HAProxy only knows the address is in the domain's set; the agent names the rule from the
    // address's country (the operator's map) and the domain's rules
    assert.equal(events.find((e) => e.reason === 'country_blocked' && e.source_ip === '127.0.40.9').rule_id, rules.kp);
    assert.equal(events.find((e) => e.reason === 'country_blocked' && e.source_ip === '127.0.41.9').rule_id, rules.irHigh, "the domain's own rule");
    const times = events.map((e) => Date.parse(e.timestamp));
    assert.deepEqual(
      times,
      [...times].sort((a, b) => b - a),
      'newest first',
    );
    // The id a blocked visitor quotes finds the block: the event stored it.
    await waitFor(
      async () => {
        const sqli = (await api.call('GET', '/api/waf/events?reason=sqli_detected&limit=200')).body as any[];
        return requestIds.every((id) => sqli.some((e) => e.request_id === id));
      },
      'the quoted request ids in the events',
      15_000,
      200,
    );
  });
  test('restarted, before any snapshot, the agent names country events from the configuration it runs', async () => {
    // A control plane that takes the agent's connection and its events but never sends a snapshot:
    // what names the rules can only be the last-known-good configuration's own country_rules.txt.
    silent = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(silent, 'listening');
    const heard: { reason: string; ip: string; ruleId: string | null }[] = [];
    const messages: string[] = [];
    silent.on('connection', (ws) =>
      ws.on('message', (data) => {
        const m = JSON.parse(String(data)) as { type: string; payload: { events?: typeof heard } };
        messages.push(m.type);
        if (m.type === 'events/batch') heard.push(...m.payload.events!);
      }),
    );
    const { dataDir, httpPort } = agent;
    await agent.stop();
    agent = await startAgent({ serverUrl: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, token: 'never-checked', nbthread: 2, countryMap: geo, dataDir, httpPort });
    await waitFor(async () => (await status('medium.waf.test', '127.0.40.21').catch(() => 0)) === 403, 'the restarted HAProxy to refuse KP');
    assert.equal(await status('high.waf.test', '127.0.41.21'), 403);
    const named = (ip: string) => heard.find((e) => e.reason === 'country_blocked' && e.ip === ip);
    await waitFor(() => named('127.0.40.21') && named('127.0.41.21'), 'both events to reach the silent control plane');
    assert.equal(named('127.0.40.21')!.ruleId, rules.kp);
    assert.equal(named('127.0.41.21')!.ruleId, rules.irHigh, "the domain's own rule");
    assert.ok(!messages.includes('config/ack'), 'no snapshot was applied');
  });
});
