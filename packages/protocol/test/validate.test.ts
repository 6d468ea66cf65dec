import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  AI_BOTS,
  checkRuleValue,
  evaluateRule,
  ipBits,
  isCidr,
  isHostname,
  isIP,
  isIPv4,
  isIPv6,
  parseRuleExpression,
  RATE_LIMIT_DEFAULT,
  RULE_TYPES,
  WAF_DETECTORS,
  wafExceptionOf,
  type RuleType,
} from '../src/index.js';

function accepts(fn: (v: string) => boolean, values: string[]) {
  for (const v of values) assert.equal(fn(v), true, `${fn.name} should accept ${JSON.stringify(v)}`);
}
function rejects(fn: (v: string) => boolean, values: string[]) {
  for (const v of values) assert.equal(fn(v), false, `${fn.name} should reject ${JSON.stringify(v)}`);
}

describe('isIPv4', () => {
  test('accepts dotted quads 0..255', () => {
    accepts(isIPv4, ['0.0.0.0', '1.2.3.4', '10.0.0.1', '192.168.1.254', '255.255.255.255', '100.200.249.199']);
  });
  test('rejects leading zeros, out of range octets, wrong shapes and padding', () => {
    rejects(isIPv4, [
      '01.2.3.4',
      '1.02.3.4',
      '1.2.3.004',
      '00.0.0.0',
      '256.1.1.1',
      '1.2.3.256',
      '999.1.1.1',
      '1.2.3.-1',
      '1.2.3',
      '1.2.3.4.5',
      '1.2.3.',
      '.1.2.3',
      '1..2.3',
      '',
      ' 1.2.3.4',
      '1.2.3.4 ',
      '1.2.3.4\n',
      '1.2.3.4#',
      '1.2.3.4/32',
      'a.b.c.d',
      '0x1.2.3.4',
      '１.2.3.4',
    ]);
  });
});

describe('isIPv6', () => {
  test('accepts full, compressed and IPv4-tailed forms', () => {
    accepts(isIPv6, [
      '2001:0db8:0000:0000:0000:ff00:0042:8329',
      '2001:db8:0:0:0:ff00:42:8329',
      '2001:db8::ff00:42:8329',
      '2001:DB8::1',
      '::',
      '::1',
      '1::',
      'fe80::1:2',
      '1:2:3:4:5:6:7::',
      '::2:3:4:5:6:7:8',
      '1::8',
      '::ffff:1.2.3.4',
      '::1.2.3.4',
      '1:2:3:4:5:6:1.2.3.4',
      '64:ff9b::192.0.2.33',
    ]);
  });
  test('rejects zones, brackets, triple colons, two "::", 9 groups and junk', () => {
    rejects(isIPv6, [
      'fe80::1%eth0',
      '[::1]',
      '[2001:db8::1]',
      ':::',
      '1:::2',
      '1::2::3',
      '::1::',
      '1:2:3:4:5:6:7:8:9',
      '1:2:3:4:5:6:7',
      '1:2:3:4:5:6:7:8::',
      '12345::1',
      'g::1',
      ':1:2:3:4:5:6:7',
      '1:2:3:4:5:6:7:',
      '1.2.3.4',
      '::1.2.3',
      '::256.1.1.1',
      '::01.2.3.4',
      '1:2:3:4:5:6:7:1.2.3.4',
      '1:2:3:4:5:1.2.3.4',
      '::1.2.3.4:5',
      ':',
      '',
      ' ::1',
      '::1\n',
      '::1/64',
    ]);
  });
  test('isIP is the union of both families', () => {
    accepts(isIP, ['1.2.3.4', '::1', '2001:db8::1']);
    rejects(isIP, ['01.2.3.4', 'fe80::1%eth0', 'localhost', '']);
  });
});

describe('isCidr', () => {
  test('every IPv4 prefix length from /0 to /32 is accepted, /33 is not', () => {
    for (let n = 0; n <= 32; n++) assert.equal(isCidr(`10.0.0.0/${n}`), true, `/${n}`);
    rejects(isCidr, ['10.0.0.0/33', '10.0.0.0/100', '10.0.0.0/128']);
  });
  test('every IPv6 prefix length from /0 to /128 is accepted, /129 is not', () => {
    for (let n = 0; n <= 128; n++) assert.equal(isCidr(`2001:db8::/${n}`), true, `/${n}`);
    rejects(isCidr, ['2001:db8::/129', '::/200']);
  });
  test('plain addresses without a suffix are accepted', () => {
    accepts(isCidr, ['1.2.3.4', '0.0.0.0', '::1', '::ffff:1.2.3.4']);
  });
  test('malformed suffixes and addresses are rejected', () => {
    rejects(isCidr, [
      '1.2.3.4/01',
      '1.2.3.4/00',
      '1.2.3.4/-1',
      '1.2.3.4/',
      '1.2.3.4/+8',
      '1.2.3.4/ 8',
      '1.2.3.4/8 ',
      '1.2.3.4/8/8',
      '1.2.3.4/0x10',
      '1.2.3.4/1e1',
      '/8',
      '1.2.3/8',
      '01.2.3.4/8',
      '::/01',
      'fe80::1%eth0/64',
      '1.2.3.4 #x',
      '1.2.3.4/32#',
      '1.2.3.4\n',
      '',
    ]);
  });
});

describe('isHostname', () => {
  test('accepts lowercase FQDNs', () => {
    accepts(isHostname, ['example.com', 'www.example.com', 'a.b.c.d.example.org', 'xn--bcher-kva.example', 'a-b.c-d.io', '1.2.3.example', '123.com', 'a.co', `${'a'.repeat(63)}.com`]);
  });
  test('rejects single labels, bad labels, numeric TLDs, uppercase, length overflow and hostile characters', () => {
    rejects(isHostname, [
      'localhost',
      'com',
      '',
      '.',
      'example.com.',
      '.example.com',
      'a..b.com',
      '-a.com',
      'a-.com',
      'a.-com',
      'Example.com',
      'exa mple.com',
      'example.com ',
      'example.com\n',
      'example.com\r\nX: y',
      'exa#mple.com',
      'exa"mple.com',
      "exa'mple.com",
      'exa\\mple.com',
      'exa\u0000mple.com',
      'exa{mple}.com',
      'exa%mple.com',
      'exa_mple.com',
      'a.b/c.com',
      '1.2.3.4',
      'example.123',
      `${'a'.repeat(64)}.com`,
      `${'a.'.repeat(126)}com`,
      'exämple.com',
      'example.com:80',
    ]);
  });
  test('the 253 character limit is inclusive', () => {
    const name253 = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`;
    assert.equal(name253.length, 253);
    assert.equal(isHostname(name253), true);
    assert.equal(isHostname(`${name253}x`), false);
  });
});

describe('checkRuleValue', () => {
  const ok = (t: RuleType, v: string, canonical: string = v) => assert.deepEqual(checkRuleValue(t, v), { ok: true, value: canonical }, `${t} ${JSON.stringify(v)}`);
  const bad = (t: RuleType, v: string) => {
    const r = checkRuleValue(t, v);
    assert.equal(r.ok, false, `${t} should reject ${JSON.stringify(v)}`);
    if (!r.ok) assert.match(r.message, /value/, 'the message names the value');
  };

  test('block_ip and allow_ip take addresses and CIDR ranges', () => {
    for (const t of ['block_ip', 'allow_ip'] as const) {
      for (const v of ['1.2.3.4', '1.2.3.0/24', '0.0.0.0/0', '2001:db8::/32', '::1']) ok(t, v);
      for (const v of ['1.2.3.4/33', '1.2.3', 'abc', '1.2.3.4 #x', '01.2.3.4', '1.2.3.4/01', '', '1.2.3.4\n']) bad(t, v);
    }
  });

  test('block_country takes exactly 2 uppercase letters', () => {
    for (const v of ['US', 'DE', 'CN', 'ZZ']) ok('block_country', v);
    for (const v of ['us', 'Us', 'USA', 'U', 'U1', '12', '', ' US', 'US\n', 'ÜS']) bad('block_country', v);
  });

  test('rate_limit: default 60, bounds 1 and 10000, canonical re-serialization', () => {
    ok('rate_limit', '{}', JSON.stringify({ requests_per_minute: RATE_LIMIT_DEFAULT }));
    assert.equal(RATE_LIMIT_DEFAULT, 60);
    ok('rate_limit', '{"requests_per_minute":1}');
    ok('rate_limit', '{"requests_per_minute":10000}');
    ok('rate_limit', ' { "requests_per_minute" : 120 } ', '{"requests_per_minute":120}');
    ok('rate_limit', '{"requests_per_minute":1e3}', '{"requests_per_minute":1000}');
    ok('rate_limit', '{"requests_per_minute":5.0}', '{"requests_per_minute":5}');
    for (const v of [
      '{"requests_per_minute":0}',
      '{"requests_per_minute":10001}',
      '{"requests_per_minute":1.5}',
      '{"requests_per_minute":"60"}',
      '{"requests_per_minute":-1}',
      '{"requests_per_minute":null}',
      '{"requests_per_minute":true}',
      '{"requests_per_minute":[60]}',
      'not json',
      '[]',
      '[60]',
      '60',
      'null',
      '"x"',
      '',
      '{"requests_per_minute":60,"burst":10}',
      '{"rpm":60}',
    ])
      bad('rate_limit', v);
    const unknown = checkRuleValue('rate_limit', '{"requests_per_minute":60,"burst":10}');
    assert.deepEqual(unknown, { ok: false, message: 'value has an unknown field: burst' });
  });

  test('block_bot needs exactly {"enabled": boolean}', () => {
    ok('block_bot', '{"enabled":true}');
    ok('block_bot', '{"enabled":false}');
    ok('block_bot', ' {"enabled" : true} ', '{"enabled":true}');
    for (const v of ['{}', '{"enabled":"yes"}', '{"enabled":1}', '{"enabled":null}', '{"enabled":true,"x":1}', 'true', '[]', 'not json', '']) {
      bad('block_bot', v);
    }
  });

  test('block_ai_bot matches names case-insensitively and returns the canonical name', () => {
    ok('block_ai_bot', 'GPTBot');
    ok('block_ai_bot', 'gptbot', 'GPTBot');
    ok('block_ai_bot', 'CLAUDEBOT', 'ClaudeBot');
    ok('block_ai_bot', 'meta-externalagent', 'Meta-ExternalAgent');
    for (const b of AI_BOTS) {
      ok('block_ai_bot', b.name);
      ok('block_ai_bot', b.name.toUpperCase(), b.name);
    }
    for (const v of ['NotABot', '', 'GPTBot ', ' GPTBot', 'GPTBot\n', 'GPT Bot', 'Googlebot']) bad('block_ai_bot', v);
  });

  describe('waf_exception', () => {
    const ex = (o: Record<string, unknown>) => JSON.stringify(o);
    const message = (v: string) => {
      const r = checkRuleValue('waf_exception', v);
      assert.equal(r.ok, false, `should reject ${v}`);
      return r.ok ? '' : r.message;
    };

    test('is a rule type', () => {
      assert.ok((RULE_TYPES as readonly string[]).includes('waf_exception'));
    });

    test('path alone, and with a location and a detector; canonical order path, location, detector', () => {
      ok('waf_exception', '{"path":"/comments"}');
      ok('waf_exception', '{"path":"/comments","location":"body:content","detector":"xss"}');
      ok('waf_exception', ' { "detector" : "xss", "location": "body:content", "path": "/comments" } ', '{"path":"/comments","location":"body:content","detector":"xss"}');
      ok('waf_exception', ex({ detector: 'sqli', path: '/' }), '{"path":"/","detector":"sqli"}');
      ok('waf_exception', ex({ location: 'path', path: '/search' }), '{"path":"/search","location":"path"}');
    });

    test('path: starts with /, 1 to 256 printable ASCII characters 0x21-0x7E', () => {
      const printable = Array.from({ length: 0x7e - 0x21 + 1 }, (_, i) => String.fromCharCode(0x21 + i)).join('');
      ok('waf_exception', ex({ path: `/${printable}` }));
      ok('waf_exception', ex({ path: `/${'a'.repeat(255)}` }));
      ok('waf_exception', ex({ path: '/api/v1/items?x=1#frag' }));
      for (const path of [
        '',
        'comments',
        ' /comments',
        '/com ments',
        '/tab\t',
        '/nl\n',
        '/nul\u0000',
        '/del\u007f',
        '/caf\u00e9',
        '/\u2028',
        `/${'a'.repeat(256)}`,
        5,
        null,
        true,
        ['/'],
        { p: '/' },
      ]) {
        assert.match(message(ex({ path })), /^value has an invalid path: it must be a string that starts with \//, JSON.stringify(path));
      }
      assert.match(message('{}'), /^value needs a path/);
      assert.match(message(ex({ location: 'path' })), /^value needs a path/);
    });

    test('location: query, body, cookie or header with a name or *, or exactly path; header names lowercased', () => {
      for (const kind of ['query', 'body', 'cookie']) {
        ok('waf_exception', ex({ path: '/', location: `${kind}:*` }));
        ok('waf_exception', ex({ path: '/', location: `${kind}:Item[0].Name_x-y` })); // case is kept
        ok('waf_exception', ex({ path: '/', location: `${kind}:${'n'.repeat(64)}` }));
      }
      ok('waf_exception', ex({ path: '/', location: 'header:X-Forwarded-For' }), ex({ path: '/', location: 'header:x-forwarded-for' }));
      ok('waf_exception', ex({ path: '/', location: 'header:*' }));
      ok('waf_exception', ex({ path: '/', location: 'header:Referer' }), ex({ path: '/', location: 'header:referer' }));
      for (const location of [
        '',
        'query',
        'query:',
        'body:',
        'query:a b',
        'query:a*',
        'query:**',
        'query:é',
        'query:a=b',
        'query:a/b',
        `query:${'n'.repeat(65)}`,
        'QUERY:id',
        'Header:referer',
        'path:x',
        'PATH',
        'paths',
        'url:x',
        'args:id',
        'query:id\n',
        'cookie:a;b',
        5,
        null,
        false,
        ['path'],
      ]) {
        assert.match(message(ex({ path: '/', location })), /^value has an invalid location: it must be path, or query:, body:, cookie:, header: followed by \*/, JSON.stringify(location));
      }
    });

    test('detector: one of the detectors', () => {
      assert.deepEqual([...WAF_DETECTORS], ['sqli', 'xss', 'cmdi', 'traversal', 'ssrf', 'xxe', 'injection', 'upload']);
      for (const detector of WAF_DETECTORS) ok('waf_exception', ex({ path: '/x', detector }));
      for (const detector of ['SQLI', 'sql', '', 'all', 'xss ', 1, null, ['xss']]) {
        assert.match(message(ex({ path: '/', detector })), /^value has an invalid detector: it must be one of sqli, xss, cmdi, traversal, ssrf, xxe, injection, upload$/, JSON.stringify(detector));
      }
    });

    test('anything else is refused: not an object, unknown fields', () => {
      for (const v of ['', 'not json', '[]', '"/"', 'null', '/comments', '[{"path":"/"}]']) {
        assert.match(message(v), /^value must be a JSON object with a path/, v);
      }
      assert.equal(message(ex({ path: '/', action: 'allow' })), 'value has an unknown field: action');
      assert.equal(message('{"path":"/","__proto__":{}}'), 'value has an unknown field: __proto__');
      assert.equal(message(ex({ path: '/', Path: '/' })), 'value has an unknown field: Path');
    });

    test('wafExceptionOf gives the fields of a valid value, undefined otherwise', () => {
      assert.deepEqual(wafExceptionOf('{"path":"/c","location":"header:Referer","detector":"xss"}'), { path: '/c', location: 'header:referer', detector: 'xss' });
      assert.deepEqual(wafExceptionOf('{"path":"/c"}'), { path: '/c' });
      assert.equal(wafExceptionOf('{"path":"c"}'), undefined);
    });

    test('property: an accepted value is canonical (checking it again gives itself) and its path is a plain token', () => {
      const location = fc.oneof(
        fc.constant('path'),
        fc.tuple(fc.constantFrom('query', 'body', 'cookie', 'header', 'Header', 'x'), fc.oneof(fc.constant('*'), fc.string({ maxLength: 70 }))).map(([k, n]) => `${k}:${n}`),
        fc.string(),
      );
      fc.assert(
        fc.property(
          fc.record(
            {
              path: fc.oneof(
                fc.string({ maxLength: 300 }).map((s) => `/${s}`),
                fc.string(),
              ),
              location,
              detector: fc.oneof(fc.constantFrom(...WAF_DETECTORS), fc.string()),
            },
            { requiredKeys: ['path'] },
          ),
          (o) => {
            const r = checkRuleValue('waf_exception', JSON.stringify(o));
            if (!r.ok) return;
            assert.deepEqual(checkRuleValue('waf_exception', r.value), r);
            const parsed = JSON.parse(r.value);
            assert.match(parsed.path, /^\/[\x21-\x7e]{0,255}$/);
            assert.deepEqual(
              Object.keys(parsed),
              ['path', 'location', 'detector'].filter((k) => k in o),
            );
          },
        ),
        { numRuns: 500 },
      );
    });
  });
});

describe('property: accepted hostnames and CIDRs are plain tokens', () => {
  const FORBIDDEN = /[\s#"'`\\\u0000-\u001f\u007f-\u009f{}%]/;
  const hostile = fc.constantFrom(
    'a',
    'b',
    'z',
    '0',
    '1',
    '9',
    '-',
    '.',
    '/',
    ':',
    'f',
    'F',
    '2',
    '5',
    ' ',
    '\t',
    '\r',
    '\n',
    '\u000b',
    '\u000c',
    '#',
    '"',
    "'",
    '`',
    '\\',
    '\u0000',
    '\u0001',
    '\u001f',
    '\u007f',
    '\u0085',
    '\u00a0',
    '\u2028',
    '{',
    '}',
    '%',
    '[',
    ']',
    '$',
    ';',
  );
  const hostileString = fc.array(hostile, { maxLength: 40 }).map((a) => a.join(''));
  // Valid shapes with one hostile character spliced in somewhere.
  const spliced = fc.tuple(fc.constantFrom('example.com', 'a.b.co', '1.2.3.4', '10.0.0.0/8', '::1', '2001:db8::/32', '::ffff:1.2.3.4'), fc.nat(), hostile).map(([s, i, c]) => {
    const at = i % (s.length + 1);
    return s.slice(0, at) + c + s.slice(at);
  });
  const anyString = fc.oneof(fc.string({ unit: 'binary', maxLength: 60 }), fc.string({ maxLength: 60 }), hostileString, spliced);

  test('isHostname never accepts a forbidden character', () => {
    fc.assert(
      fc.property(anyString, (s) => {
        if (isHostname(s)) assert.doesNotMatch(s, FORBIDDEN);
      }),
      { numRuns: 3000 },
    );
  });

  test('isCidr never accepts a forbidden character', () => {
    fc.assert(
      fc.property(anyString, (s) => {
        if (isCidr(s)) assert.doesNotMatch(s, FORBIDDEN);
      }),
      { numRuns: 3000 },
    );
  });

  test('hostile characters spliced into valid values always make them invalid', () => {
    fc.assert(
      fc.property(fc.tuple(fc.constantFrom('example.com', 'a.b.co'), fc.nat(), fc.constantFrom(' ', '\n', '#', '"', '\\', '\u0000', '{', '}', '%', "'")), ([s, i, c]) => {
        const at = i % (s.length + 1);
        assert.equal(isHostname(s.slice(0, at) + c + s.slice(at)), false);
      }),
      { numRuns: 500 },
    );
    fc.assert(
      fc.property(fc.tuple(fc.constantFrom('1.2.3.4', '10.0.0.0/8', '::1', '2001:db8::/32'), fc.nat(), fc.constantFrom(' ', '\n', '#', '"', '\\', '\u0000', '{', '}', '%', "'")), ([s, i, c]) => {
        const at = i % (s.length + 1);
        assert.equal(isCidr(s.slice(0, at) + c + s.slice(at)), false);
      }),
      { numRuns: 500 },
    );
  });
});

test('ipBits: an address as its bits, IPv6 written out (an IPv4 tail read as its two groups)', () => {
  assert.equal(ipBits('10.1.2.3'), '00001010000000010000001000000011');
  const bits = (groups: number[]) => groups.map((g) => g.toString(2).padStart(16, '0')).join('');
  assert.equal(ipBits('2001:db8::1'), bits([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]));
  assert.equal(ipBits('::'), bits([0, 0, 0, 0, 0, 0, 0, 0]));
  assert.equal(ipBits('::ffff:192.0.2.1'), bits([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0201]));
  assert.equal(ipBits('::ffff:c000:201'), ipBits('::ffff:192.0.2.1'));
  assert.equal(ipBits('1:2:3:4:5:6:1.2.3.4'), bits([1, 2, 3, 4, 5, 6, 0x102, 0x304]));
  for (const bad of ['', '10.1.2', 'x', '10.0.0.0/8']) assert.equal(ipBits(bad), undefined, bad);
  // the rules' reference evaluator reads a range written with an IPv4 tail by its bits too
  const parsed = parseRuleExpression('ip.src in {::ffff:192.0.2.0/120}');
  assert.ok(parsed.ok);
  const seen = (src: string) => evaluateRule(parsed.expr, { method: 'GET', path: '/', query: undefined, headers: [], src, ssl: false });
  assert.equal(seen('::ffff:c000:2ff'), true);
  assert.equal(seen('::ffff:c000:301'), false);
});

test('a regular expression with an escape PCRE2 (HAProxy) and JavaScript (the evaluator) read differently is refused, with its position; a stored rule keeps parsing', () => {
  const expr = (re: string) => `ip.src.country matches ${JSON.stringify(re)}`;
  for (const [re, why] of [
    ['^(CN|RU)\\z', /\\z is not supported/],
    ['\\A(CN|RU)', /\\A is not supported/],
    ['^\\x{43}N$', /\\x takes two hex digits/],
    ['\\xZ', /\\x takes two hex digits/],
    ['a\\hb', /\\h is not supported/],
    ['a\\vb', /\\v is not supported/],
    ['\\Qa.b\\E', /\\Q is not supported/],
    ['\\d\\z', /\\z is not supported/],
  ] as const) {
    const parsed = parseRuleExpression(expr(re));
    assert.equal(parsed.ok, false, re);
    if (parsed.ok) continue;
    assert.match(parsed.message, why, re);
    assert.equal(parsed.position, 'ip.src.country matches '.length, re);
    assert.equal(parseRuleExpression(expr(re), { stored: true }).ok, true, `${re}, stored`);
  }
  for (const re of ['^\\d+\\.\\w\\s\\b$', '\\x41\\x4a', '\\\\z', '[\\d\\-]\\/\\.', '\\n\\r\\t\\f\\D\\W\\S\\B']) assert.equal(parseRuleExpression(expr(re)).ok, true, re);
});
