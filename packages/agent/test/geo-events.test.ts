import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import fc from 'fast-check';
import { waitFor } from '../../../test/support/processes.js';
import type { ServerSnapshot, WafEventItem } from '@rampart/protocol';
import { COUNTRY_RULES_FILE, countryClasses, countryHolds, countryTests, parseCountryRules, refusedCountries, renderHaproxyConfig } from '@rampart/proxy';
import { bindsIPv6, capLength, countryLookup, countryOptions, decodeField, EventCollector, needsCountries, parseEventLine } from '../src/index.js';

/** A collector that ships into `shipped` and names country events' rules with `countryRule`. */
const namingCollector = (shipped: WafEventItem[], countryRule: (e: WafEventItem) => string | null) =>
  new EventCollector((batch) => (shipped.push(...batch), true), undefined, undefined, undefined, undefined, undefined, undefined, countryRule);

describe('WAF event collection', () => {
  const line = (ip: string, reason = 'ip_blocked') => `<134>Nov 22 07:20:00 haproxy[12]: rampart-waf 1795329600 ${ip} shop.example.com ${reason} 3f1c2e1a-9b0d-4c55-8f3e-0123456789ab`;

  test('with a secret, only lines carrying it are events: another local process cannot forge one', () => {
    const secret = 'a1'.repeat(16);
    const withSecret = (token: string) => line('127.0.0.9').replace('rampart-waf ', `rampart-waf ${token} `);
    assert.equal(parseEventLine(withSecret(secret), secret)?.ip, '127.0.0.9');
    assert.equal(parseEventLine(line('127.0.0.9'), secret), undefined, 'no secret');
    assert.equal(parseEventLine(withSecret('b2'.repeat(16)), secret), undefined, 'another secret');
    assert.equal(parseEventLine(withSecret(secret.slice(0, 31)), secret), undefined, 'a prefix of it');
    assert.equal(parseEventLine(withSecret(secret + '00'), secret), undefined, 'it, extended');
    const shipped: unknown[] = [];
    const c = new EventCollector(
      (batch) => (shipped.push(...batch), true),
      undefined,
      undefined,
      () => secret,
    );
    c.accept(line('127.0.0.7'));
    c.accept(withSecret('c3'.repeat(16)));
    c.accept(withSecret(secret));
    c.flush();
    assert.equal(shipped.length, 1);
  });

  test('parses HAProxy log lines and drops anything malformed', () => {
    assert.deepEqual(parseEventLine(line('127.0.0.9')), {
      ts: 1795329600,
      ip: '127.0.0.9',
      domain: 'shop.example.com',
      reason: 'ip_blocked',
      ruleId: '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab',
      method: null,
      path: null,
      query: null,
      location: null,
      matched: null,
      blocked: true,
    });
    assert.equal(parseEventLine(line('127.0.0.9', 'sqli_detected').replace(/ 3f1c\S+$/, ' -'))?.ruleId, null);
    assert.equal(parseEventLine(line('not-an-ip')), undefined);
    assert.equal(parseEventLine(line('127.0.0.9', 'made_up')), undefined);
    assert.equal(parseEventLine('rampart-waf 1 127.0.0.1 -'), undefined);
  });

  // The current format: <action> <method> <location> <path> <matched> after the rule, the last four percent-encoded.
  const detail = (rest: string, reason = 'sqli_detected', rule = '-') => `<134>Nov 22 07:20:00 haproxy[12]: rampart-waf 1795329600 2001:db8::7 shop.example.com ${reason} ${rule} ${rest}`;

  test('the ten-field line carries method, location, path, matched and whether the request was blocked', () => {
    assert.deepEqual(parseEventLine(detail('block GET query:id /items %27%20OR%201%3D1')), {
      ts: 1795329600,
      ip: '2001:db8::7',
      domain: 'shop.example.com',
      reason: 'sqli_detected',
      ruleId: null,
      method: 'GET',
      path: '/items',
      query: null,
      location: 'query:id',
      matched: "' OR 1=1",
      blocked: true,
    });
    const detected = parseEventLine(detail('detect POST body:comment /comments/new %3Cscript%3Ealert(1)', 'xss_detected'));
    assert.equal(detected?.blocked, false, 'detect: logged, not blocked');
    assert.deepEqual([detected?.method, detected?.location, detected?.path, detected?.matched], ['POST', 'body:comment', '/comments/new', '<script>alert(1)']);
    // '-' is absent for rule, location and matched; a rule id is kept as for the old format.
    const plain = parseEventLine(detail('block GET - / -', 'ip_blocked', '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab'));
    assert.deepEqual([plain?.ruleId, plain?.method, plain?.path, plain?.location, plain?.matched, plain?.blocked], ['3f1c2e1a-9b0d-4c55-8f3e-0123456789ab', 'GET', '/', null, null, true]);
    for (const [reason, location] of [
      ['cmdi_detected', 'header:referer'],
      ['traversal_detected', 'path'],
      ['ssrf_detected', 'cookie:sid'],
      ['xxe_detected', 'body:*'],
      ['injection_detected', 'query:q'],
      ['upload_blocked', 'body:file'],
    ]) {
      const e = parseEventLine(detail(`block PUT ${location} /x a`, reason));
      assert.deepEqual([e?.reason, e?.location], [reason, location], reason);
    }
  });

  test('the eleventh field is the request id; lines without it (older proxies) parse as before', () => {
    const e = parseEventLine(detail('block GET query:id /items %27%20OR%201%3D1 3f9c0a12b4e5d6f7'));
    assert.equal(e?.requestId, '3f9c0a12b4e5d6f7');
    assert.deepEqual([e?.method, e?.location, e?.path, e?.matched, e?.blocked], ['GET', 'query:id', '/items', "' OR 1=1", true]);
    assert.equal('requestId' in parseEventLine(detail('block GET query:id /items %27'))!, false, 'no id in a ten-field line');
    assert.equal(parseEventLine(detail('block GET - / - Abc_-09'))?.requestId, 'Abc_-09', 'the protocol alphabet');
    // an id not of the protocol's form (1-64 of A-Z a-z 0-9 _ -) is left out, the event kept
    for (const id of ['x'.repeat(65), 'a%2Fb', 'a.b', '<script>']) {
      const bad = parseEventLine(detail(`block GET - / - ${id}`));
      assert.equal(bad?.reason, 'sqli_detected', id);
      assert.equal('requestId' in bad!, false, id);
    }
  });

  test('the thirteenth field is the query excerpt, credential-like values redacted; lines without it (older proxies) have none', () => {
    const full = (query: string) => parseEventLine(detail(`block GET query:q /articles %3Cscript%3E 3f9c0a12b4e5d6f7 - ${query}`, 'xss_detected'));
    const e = full('q=%253Cscript%253Ealert(1)%253C%252Fscript%253E');
    assert.equal(e?.query, 'q=%3Cscript%3Ealert(1)%3C%2Fscript%3E', "the query as the client sent it (the proxy's escapes undone)");
    assert.deepEqual([e?.method, e?.path, e?.location, e?.matched, e?.requestId, e?.blocked], ['GET', '/articles', 'query:q', '<script>', '3f9c0a12b4e5d6f7', true]);
    assert.equal(full('-')?.query, null, "'-': no query string");
    assert.equal(full('q=%3Cb%3E%20x')?.query, 'q=<b> x', 'raw bytes the client sent unencoded');
    // Older lines: up to the claim, up to the request id, the ten-field form.
    assert.equal(parseEventLine(detail('block GET query:q /articles %3C 3f9c0a12b4e5d6f7 google'))?.query, null);
    assert.equal(parseEventLine(detail('block GET query:q /articles %3C 3f9c0a12b4e5d6f7'))?.query, null);
    assert.equal(parseEventLine(detail('block GET query:q /articles %3C'))?.query, null);
    // Credentials: the values of parameters named like them go, on the shield server already.
    assert.equal(
      full('q=1&token=abc&api_key=k1&Password=hunter2&x-signature=s&code=c&Authorization=Bearer%2520x&page=2')?.query,
      'q=1&token=[redacted]&api_key=[redacted]&Password=[redacted]&x-signature=[redacted]&code=[redacted]&Authorization=[redacted]&page=2',
    );
    assert.equal(full('to%256Ben=abc&q=1')?.query, 'to%6Ben=[redacted]&q=1', 'a percent-encoded name too');
    assert.equal(full('q=token&tok')?.query, 'q=token&tok', 'a value that reads like a name, and a name without a value, stay');
    // At most 192 characters after decoding (and after redacting, which may lengthen it).
    assert.equal(full(`q=${'%41'.repeat(300)}`)?.query, `q=${'A'.repeat(190)}`);
    assert.equal(full(`k=${'x'.repeat(180)}&key=1`)?.query, `k=${'x'.repeat(180)}&key=[reda`);
  });

  test('ten-field lines with an unknown action, or a field count other than 5, 10, 11, 12 or 13, are dropped', () => {
    for (const rest of [
      'allow GET - / -',
      'BLOCK GET - / -',
      'constructor GET - / -',
      'toString GET - / -',
      'block GET - /',
      'block GET - / - 0123456789abcdef google q=1 extra',
      'block',
      'block GET',
    ]) {
      assert.equal(parseEventLine(detail(rest)), undefined, rest);
    }
  });

  test('percent-escapes decode to bytes, then UTF-8 with U+FFFD for invalid sequences', () => {
    assert.equal(decodeField('%2F%25%20%0A%00'), '/% \n\u0000');
    assert.equal(decodeField('caf%C3%A9'), 'café', 'a multi-byte character split over escapes');
    assert.equal(decodeField('%c3%a9'), 'é', 'lowercase hex too');
    assert.equal(decodeField('%F0%9F%98%80'), '😀');
    assert.equal(decodeField('a%FFb'), 'a\ufffdb', 'an invalid byte');
    assert.equal(decodeField('%C3'), '\ufffd', 'a truncated sequence');
    assert.equal(decodeField('%ED%A0%80'), '\ufffd\ufffd\ufffd', 'an encoded surrogate is invalid UTF-8');
    assert.equal(decodeField('%EF%BB%BFx'), '\ufeffx', 'a leading BOM is kept');
    assert.equal(decodeField('100%'), '100%', "a '%' without two hex digits stays");
    assert.equal(decodeField('%zz%4'), '%zz%4');
    assert.equal(decodeField('plain-text_1.2~'), 'plain-text_1.2~');
    const e = parseEventLine(detail('detect GET header:user-agent /%E2%9C%93 a%FF%20b'));
    assert.deepEqual([e?.path, e?.matched], ['/✓', 'a\ufffd b']);
  });

  test('caps after decoding: method 16, path 256, matched 64, location 80 characters', () => {
    const e = parseEventLine(detail(`block ${'M'.repeat(40)} query:${'n'.repeat(200)} /${'p'.repeat(400)} ${'%41'.repeat(100)}`))!;
    assert.equal(e.method, 'M'.repeat(16));
    assert.equal(e.path, `/${'p'.repeat(255)}`);
    assert.equal(e.location, `query:${'n'.repeat(74)}`);
    assert.equal(e.matched, 'A'.repeat(64), 'counted after decoding, not on the escapes');
    const short = parseEventLine(detail(`block GET query:id /x ${'%41'.repeat(64)}`))!;
    assert.equal(short.matched, 'A'.repeat(64));
    // An astral character is two UTF-16 code units (the service's measure) and is never cut in half.
    const astral = parseEventLine(detail(`block GET - /x a${'%F0%9F%98%80'.repeat(40)}`))!;
    assert.equal(astral.matched, `a${'😀'.repeat(31)}`);
    assert.ok(astral.matched!.length <= 64);
    assert.equal(capLength('😀😀', 3), '😀');
    assert.equal(capLength('abc', 3), 'abc');
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 100 }), fc.integer({ min: 1, max: 80 }), (s, max) => {
        const c = capLength(s, max);
        assert.ok(c.length <= max && s.startsWith(c));
        assert.ok(c.length >= max - 1 || c === s);
      }),
    );
  });

  test('property: whatever the bytes, a percent-encoded field decodes back to their UTF-8 reading', () => {
    const encode = (b: Uint8Array) => [...b].map((x) => (x >= 0x21 && x <= 0x7e && x !== 0x25 ? String.fromCharCode(x) : `%${x.toString(16).toUpperCase().padStart(2, '0')}`)).join('');
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 80 }), (bytes) => {
        const field = encode(bytes);
        assert.ok(/^[\x21-\x7e]+$/.test(field), 'no spaces or control bytes on the log line');
        assert.equal(decodeField(field), new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes));
      }),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }), (s) => {
        assert.equal(decodeField(encode(new TextEncoder().encode(s))), s);
      }),
      { numRuns: 300 },
    );
  });

  /** A distinct source address for each n (identical lines fold into one event). */
  const ipOf = (n: number) => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;

  test('caps events at 5,000 per UTC day, 1,000 of them kept for detections: logging stops at the cap and starts again the next day', () => {
    let now = new Date('2026-11-22T10:00:00Z');
    const shipped: number[] = [];
    const c = new EventCollector(
      (batch) => (shipped.push(batch.length), true),
      () => now,
    );
    for (let i = 0; i < 5200; i++) c.accept(line(ipOf(i)));
    c.flush();
    assert.equal(
      shipped.reduce((a, b) => a + b, 0),
      4000,
      'blocks stop at 4,000',
    );
    assert.equal(c.dropped, 1200);
    for (let i = 0; i < 1200; i++) c.accept(line(ipOf(i), 'sqli_detected'));
    c.flush();
    assert.equal(
      shipped.reduce((a, b) => a + b, 0),
      5000,
      'detections take the rest',
    );
    assert.equal(c.dropped, 1400);
    now = new Date('2026-11-23T00:00:01Z');
    c.accept(line('127.0.0.9'));
    c.flush();
    assert.equal(
      shipped.reduce((a, b) => a + b, 0),
      5001,
    );
  });

  test('detect-mode events count toward the same daily cap as blocks', () => {
    const now = new Date('2026-11-22T10:00:00Z');
    const shipped: { blocked?: boolean | undefined }[] = [];
    const c = new EventCollector(
      (batch) => (shipped.push(...batch), true),
      () => now,
    );
    const from = (i: number, rest: string) => detail(rest).replace('2001:db8::7', ipOf(i));
    for (let i = 0; i < 3000; i++) c.accept(from(i, 'detect GET query:q /s x'));
    for (let i = 0; i < 3000; i++) c.accept(from(i, 'block GET query:q /s x'));
    c.flush();
    assert.equal(shipped.length, 5000);
    assert.equal(shipped.filter((e) => e.blocked === false).length, 3000);
    assert.equal(c.dropped, 1000);
  });

  test('held (while the agent loads what names rules), lines wait unread and are read in order at the last release', async () => {
    let rule: string | null = null;
    const shipped: WafEventItem[] = [];
    const c = namingCollector(shipped, () => rule);
    const port = await c.listen(0);
    const udp = createSocket('udp4');
    const refused = (ip: string) => `<134>Nov 22 07:20:00 haproxy[12]: rampart-waf 1795329600 ${ip} shop.example.com country_blocked - block GET - /x -`;
    try {
      c.hold();
      c.hold(); // a start's load and an apply's at once
      for (const ip of ['127.0.40.1', '127.0.40.2', '127.0.40.3']) udp.send(refused(ip), port, '127.0.0.1');
      await waitFor(() => c.waiting === 3, 'the lines to arrive');
      c.flush();
      assert.equal(shipped.length, 0, 'nothing read while held');
      c.release();
      c.flush();
      assert.equal(shipped.length, 0, 'still held by the other');
      rule = '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab';
      c.release();
      c.flush();
      assert.deepEqual(
        shipped.map((e) => [e.ip, e.reason, e.ruleId]),
        ['127.0.40.1', '127.0.40.2', '127.0.40.3'].map((ip) => [ip, 'country_blocked', rule]),
      );
      assert.equal(c.waiting, 0);
      c.release(); // one release too many changes nothing
      udp.send(refused('127.0.40.4'), port, '127.0.0.1');
      await waitFor(() => (c.flush(), shipped.length === 4), 'a line read at once');
    } finally {
      udp.close();
      c.close();
    }
  });

  test('keeps events while the service is unreachable and ships them when it returns', () => {
    let online = false;
    const shipped: unknown[] = [];
    const c = new EventCollector((batch) => (online ? (shipped.push(...batch), true) : false));
    for (let i = 0; i < 10; i++) c.accept(line(`127.0.0.${i + 1}`));
    c.flush();
    assert.equal(shipped.length, 0);
    online = true;
    c.flush();
    assert.equal(shipped.length, 10);
  });
});

test('the tests of the country in custom rules, each of its own, whatever the operator; which countries each holds for', () => {
  const rule = (expression: string) => ({ expression });
  assert.deepEqual(countryTests([]), []);
  const tests = countryTests([
    rule('ip.src.country in {"CN" "RU"} and http.request.uri.path eq "/x"'),
    rule('not lower(ip.geoip.country) eq "ir" or ip.src.country matches "^K"'),
    rule('len(ip.src.country) gt 2 or starts_with(ip.src.country, "U") or http.request.method eq "POST"'),
  ]);
  assert.equal(tests.length, 5);
  const holds = (country: string) => tests.map((t) => (countryHolds(t, country) ? 1 : 0)).join('');
  assert.equal(holds('CN'), '10000');
  assert.equal(holds('IR'), '01000');
  assert.equal(holds('KP'), '00100');
  assert.equal(holds('USA'), '00011', "an operator's map may hold longer values");
  assert.equal(holds('DE'), '00000');
});

test('countries in one class are those every test treats alike; a country no test holds for has none', () => {
  const classes = countryClasses(
    countryTests([{ expression: 'ip.src.country in {"CN" "RU"}' }, { expression: 'lower(ip.src.country) in {"ru" "IR"}' }, { expression: 'lower(ip.src.country) eq "ir"' }]),
    ['US', 'CN', 'RU', 'IR', 'KP', 'CN', 'ir'],
  );
  // CN: the first only; RU: the first two; IR and ir: the third only (both lowered are "ir"; the
  // second's "IR" is no lowered value); US, KP: none
  assert.deepEqual([...classes].sort(), [
    ['CN', 'c000'],
    ['IR', 'c001'],
    ['RU', 'c002'],
    ['ir', 'c001'],
  ]);
  assert.deepEqual(
    [...countryClasses([refusedCountries(['KP', 'IR'])], ['IR', 'KP', 'US'])],
    [
      ['IR', 'c000'],
      ['KP', 'c000'],
    ],
  );
});

test("a country_blocked line carries no rule ('-'): the collector asks the agent's lookup, before folding and shipping", () => {
  const kp = '00000000-0000-4000-8000-0000000000aa';
  const other = '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab';
  const shipped: WafEventItem[] = [];
  const asked: string[] = [];
  const c = namingCollector(shipped, (e) => (asked.push(`${e.domain} ${e.ip}`), e.ip === '127.0.40.9' ? kp : null));
  const at = (ip: string, reason: string, rule: string) => `<134>Nov 22 07:20:00 haproxy[12]: rampart-waf 1795329600 ${ip} shop.example.com ${reason} ${rule} block GET - /x -`;
  c.accept(at('127.0.40.9', 'country_blocked', '-'));
  c.accept(at('127.0.41.9', 'country_blocked', '-'));
  c.accept(at('127.0.11.5', 'ip_blocked', other));
  c.accept(at('127.0.12.5', 'country_blocked', other));
  c.flush();
  assert.deepEqual(
    shipped.map((e) => [e.ip, e.reason, e.ruleId]),
    [
      ['127.0.40.9', 'country_blocked', kp],
      ['127.0.41.9', 'country_blocked', null],
      ['127.0.11.5', 'ip_blocked', other],
      ['127.0.12.5', 'country_blocked', other],
    ],
  );
  assert.deepEqual(asked, ['shop.example.com 127.0.40.9', 'shop.example.com 127.0.41.9'], 'asked only for country lines without a rule');
});

test("one country map for the whole server, whatever the domains refuse and custom rules test; the configuration names each refused country's rule", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-country-options-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const domain = (n: number) => ({ id: `00000000-0000-4000-8000-00000000000${n}`, domain: `d${n}.example.com`, origins: [], sslEnabled: false, wafEnabled: n !== 4, wafLevel: 'low' as const });
  const refuse = (n: number, value: string, domainId: string | null) => ({
    id: `00000000-0000-4000-8000-0000000001${String(n).padStart(2, '0')}`,
    type: 'block_country' as const,
    value,
    domainId,
    priority: n,
  });
  const snapshot = {
    domains: [1, 2, 3, 4].map(domain),
    rules: [refuse(1, 'KP', null), refuse(2, 'IR', domain(2).id), refuse(3, 'RU', domain(3).id), refuse(4, 'CN', domain(3).id), refuse(5, 'US', domain(4).id)],
    customRules: [{ id: '00000000-0000-4000-8000-000000000201', expression: 'ip.src.country in {"CN" "BR"}', action: 'block' as const, domainId: null, priority: 1 }],
  };
  assert.equal(needsCountries(snapshot), true);
  assert.equal(needsCountries({ domains: snapshot.domains, rules: [], customRules: [] }), false);
  const o = await countryOptions(snapshot, dir);
  assert.match(o.countryMap!, /-classes-v1-[0-9a-f]{16}\.map$/);
  // KP: every domain; IR: d2; RU: d3; CN: d3 and the rule; BR: the rule (US: a domain with the WAF off)
  assert.deepEqual([...o.countryClasses!].sort(), [
    ['BR', 'c000'],
    ['CN', 'c001'],
    ['IR', 'c002'],
    ['KP', 'c003'],
    ['RU', 'c004'],
  ]);
  // what names the rule of an event: the configuration's own file (the domain's own rule first)
  const { files } = renderHaproxyConfig(
    snapshot as ServerSnapshot,
    { httpBind: { address: '127.0.0.1', port: 8080 }, runDir: dir, countryMap: o.countryMap, countryClasses: o.countryClasses },
    { configDir: dir },
  );
  assert.deepEqual(
    [...parseCountryRules(files[COUNTRY_RULES_FILE]!)].map(([d, m]) => [d, [...m]]),
    [
      ['d1.example.com', [['KP', refuse(1, 'KP', null).id]]],
      [
        'd2.example.com',
        [
          ['IR', refuse(2, 'IR', null).id],
          ['KP', refuse(1, 'KP', null).id],
        ],
      ],
      [
        'd3.example.com',
        [
          ['RU', refuse(3, 'RU', null).id],
          ['CN', refuse(4, 'CN', null).id],
          ['KP', refuse(1, 'KP', null).id],
        ],
      ],
    ],
  );
  const kp = readFileSync(o.countryMap!, 'utf8')
    .split('\n')
    .find((l) => l.endsWith(' c003'))!
    .split(/[ /]/)[0]!;
  assert.equal((await countryLookup(['KP', 'IR'])).countryOf(kp), 'KP', 'the lookup places an address of a KP line');
  const again = await countryOptions({ ...snapshot, rules: [...snapshot.rules].reverse() }, dir);
  assert.equal(again.countryMap, o.countryMap, 'the same map for the same sets, in any order');

  // An HAProxy that accepts no IPv6 client (bound to `*` or an IPv4 address) gets the IPv4 lines only.
  assert.deepEqual(['*', '0.0.0.0', '127.0.0.1', '[::]', '[2001:db8::1]'].map(bindsIPv6), [false, false, false, true, true]);
  const v4 = await countryOptions(snapshot, dir, undefined, false);
  assert.match(v4.countryMap!, /-classes-v1-[0-9a-f]{16}-v4\.map$/);
  assert.deepEqual(v4.countryClasses, o.countryClasses, 'the same classes');
  const lines = (file: string) => readFileSync(file, 'utf8').split('\n');
  const both = lines(o.countryMap!);
  const only = lines(v4.countryMap!);
  assert.ok(
    both.some((l) => /^[0-9a-f:]+:[0-9a-f:]*\/\d+ /.test(l)),
    'the map for both families has IPv6 lines',
  );
  assert.deepEqual(
    only.filter((l) => !l.startsWith('#')),
    both.filter((l) => !l.startsWith('#') && !l.includes(':')),
    'the IPv4 lines, the same, and nothing else',
  );
  assert.equal(only.at(-2), '# end of map');
});
