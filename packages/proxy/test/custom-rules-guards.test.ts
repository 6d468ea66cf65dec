import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { SnapshotCustomRule } from '@rampart/protocol';
import { candidateMap, compileCustomRules, guardLines, planGuards } from '../src/custom-rules.js';

// The shared lookups of custom rules (planGuards): substrings and regular expressions become one
// expression of alternatives. The differential test (custom-rules.test.ts) runs them through
// HAProxy; these check the plan's shape and the escaping on their own.

const DIR = '/cfg';
const rule = (n: number, expression: string): SnapshotCustomRule => ({
  id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
  expression,
  action: 'block',
  domainId: null,
  priority: n,
});
const plan = (expressions: string[]) =>
  planGuards(
    compileCustomRules(
      expressions.map((e, i) => rule(i + 1, e)),
      DIR,
      undefined,
    ).rules,
    DIR,
    'd0',
  );

test('substrings shared by rules are one regular expression of their escaped values, matching exactly where one of them occurs', () => {
  fc.assert(
    fc.property(
      fc.uniqueArray(fc.string({ minLength: 1, maxLength: 6, unit: fc.constantFrom('a', '.', '*', '(', ')', '|', '\\', '[', '?', '$', '^', '{', '}', '%', '+', '-', 'Z') }), {
        minLength: 2,
        maxLength: 5,
      }),
      fc.string({ maxLength: 12, unit: fc.constantFrom('a', '.', '*', '(', ')', '|', '\\', 'Z', 'b') }),
      (values, ua) => {
        const p = plan(values.map((v) => `http.user_agent contains ${JSON.stringify(v)}`));
        const line = p.lines.find((l) => l.includes('guard_d0_0.pat'));
        assert.ok(line?.includes('{ req.fhdr(user-agent) -m reg -f /cfg/guard_d0_0.pat }'), line);
        const patterns = p.files['guard_d0_0.pat']!.trimEnd().split('\n');
        assert.equal(patterns.length, 1);
        // PCRE2 and JavaScript read these escapes and groups alike.
        assert.equal(
          new RegExp(patterns[0]!).test(ua),
          values.some((v) => ua.includes(v)),
          `${patterns[0]} on ${ua}`,
        );
      },
    ),
  );
});

test('regular expressions join one alternation; one whose meaning would change there (backreference, named group, option, verb) stays alone', () => {
  const p = plan(['http.request.uri.path matches r"^/a+$"', 'http.request.uri.path matches r"b|c"']);
  assert.deepEqual(p.files['guard_d0_0.pat']!.trimEnd().split('\n'), ['(?:^/a+$)|(?:b|c)']);
  assert.equal(p.guardOf.size, 2);
  // The rule language refuses these; the plan keeps them apart whatever reaches it.
  const alone = ['(x)\\1', '(?<n>x)', '(?i)d', '(?x)e # f', '(*UTF)g', '\\Qh'];
  assert.deepEqual(guardLines([{ test: 'path -m reg', lines: ['^/a+$', ...alone, 'b|c'] }]), ['(?:^/a+$)|(?:b|c)', ...alone]);
});

test('one search a field: lowered values search the value without case, the path and the query their path with its query', () => {
  const p = plan([
    'lower(http.user_agent) contains "sqlmap"',
    'http.user_agent matches r"^curl/"',
    'lower(http.user_agent) matches r"nikto|zgrab"',
    'ends_with(lower(http.request.uri.path), ".bak")',
    'http.request.uri.query contains "XDEBUG"',
    'lower(http.request.uri) contains "../"',
    'ends_with(http.user_agent, "/1.0")',
  ]);
  assert.equal(p.lines.filter((l) => l.startsWith('    http-request')).length, 2, p.lines.join('\n'));
  const lookup = (fetch: string) => {
    const line = p.lines.find((l) => l.includes(`{ ${fetch} -m reg -f`));
    assert.ok(line, `a lookup on ${fetch}: ${p.lines.join('\n')}`);
    return p.files[/guard_d0_\d+\.pat/.exec(line)![0]]!.trimEnd();
  };
  assert.equal(lookup('req.fhdr(user-agent)'), '(?i:sqlmap)|(?:^curl/)|(?i:nikto|zgrab)|(?:\\/1\\.0$)');
  // A suffix of the path is somewhere in the path with its query: no $ there.
  assert.equal(lookup('pathq'), '(?i:\\.bak)|(?:XDEBUG)|(?i:\\.\\.\\/)');
  assert.equal(p.guardOf.size, 7);
});

test('a lowered expression that could match less without case (a negated class, a negative lookaround, a character property) keeps a lookup on the lowered value', () => {
  const p = plan(['lower(http.user_agent) matches r"^[^a-z]+$"', 'lower(http.user_agent) matches r"x[^y]"', 'http.user_agent matches r"^curl/"', 'http.user_agent contains "bot"']);
  const lowered = p.lines.find((l) => l.includes('{ req.fhdr(user-agent),lower -m reg -f'));
  const plain = p.lines.find((l) => l.includes('{ req.fhdr(user-agent) -m reg -f'));
  assert.ok(lowered && plain, p.lines.join('\n'));
  assert.equal(p.files[/guard_d0_\d+\.pat/.exec(lowered)![0]]!.trimEnd(), '(?:^[^a-z]+$)|(?:x[^y])');
  assert.equal(p.files[/guard_d0_\d+\.pat/.exec(plain)![0]]!.trimEnd(), '(?:^curl/)|(?:bot)');
  // The rule language refuses lookarounds and character properties (PCRE2 folds no case for
  // these); the plan keeps them on the lowered value whatever reaches it.
  assert.deepEqual(guardLines([{ test: 'req.fhdr(user-agent),lower -m reg', lines: ['\\p{Ll}x'] }]), ['(?:\\p{Ll}x)']);
  assert.deepEqual(guardLines([{ test: 'req.fhdr(user-agent),lower -m reg', lines: ['x(?!y)'] }]), ['(?:x(?!y))']);
  assert.deepEqual(guardLines([{ test: 'req.fhdr(user-agent),lower -m reg', lines: ['(?<!y)x'] }]), ['(?:(?<!y)x)']);
  assert.deepEqual(guardLines([{ test: 'req.fhdr(user-agent),lower -m reg', lines: ['ab(?=c)'] }]), ['(?i:ab(?=c))']);
});

test('an exact value joins the prefixes of the same field: one tree lookup for both', () => {
  const p = plan(['http.request.uri.path eq "/login"', 'starts_with(http.request.uri.path, "/admin")', 'http.request.uri.path in {"/x" "/y"}']);
  assert.match(p.lines[0]!, /set-var\(txn\.rp_g0\) path,map_beg\(\/cfg\/guard_d0_0\.map\)$/);
  assert.deepEqual([...membersOf(p.files['guard_d0_0.map']!).keys()].sort(), ['/admin', '/login', '/x', '/y']);
});

/** A member's patterns: the k-th rule's values, as candidateMap takes them. */
const membersOf = (map: string) =>
  new Map(
    map
      .trimEnd()
      .split('\n')
      .map((l) => {
        const [key, value] = l.split(' ');
        return [key!, value!.split(',').filter(Boolean).map(Number)] as const;
      }),
  );

test('a tree lookup shared by rules answers which of them could hold: each prefix with the rules of every prefix holding it', () => {
  const p = plan(['starts_with(http.request.uri.path, "/a")', 'http.request.uri.path eq "/ab"', 'starts_with(http.request.uri.path, "/b")']);
  assert.deepEqual(p.lines.slice(0, 4), [
    '    http-request set-var(txn.rp_g0) path,map_beg(/cfg/guard_d0_0.map)',
    '    acl rp_g0_0 var(txn.rp_g0) -m sub ,0,',
    '    acl rp_g0_1 var(txn.rp_g0) -m sub ,1,',
    '    acl rp_g0_2 var(txn.rp_g0) -m sub ,2,',
  ]);
  assert.deepEqual(
    membersOf(p.files['guard_d0_0.map']!),
    new Map([
      ['/a', [0]],
      ['/ab', [0, 1]],
      ['/b', [2]],
    ]),
  );
  assert.deepEqual([...p.guardOf.values()], ['rp_g0_0', 'rp_g0_1', 'rp_g0_2']);
});

test('address ranges nest: each range with the rules of every range holding it, IPv4 and IPv6 (an embedded IPv4 tail too)', () => {
  const v4 = plan(['ip.src in {10.0.0.0/8}', 'ip.src in {10.1.0.0/16 192.0.2.1}']);
  assert.match(v4.lines[0]!, /set-var\(txn\.rp_g0\) src,map_ip\(\/cfg\/guard_d0_0\.map\)$/);
  assert.deepEqual(
    membersOf(v4.files['guard_d0_0.map']!),
    new Map([
      ['10.0.0.0/8', [0]],
      ['10.1.0.0/16', [0, 1]],
      ['192.0.2.1', [1]],
    ]),
  );
  const v6 = plan(['ip.src in {2001:db8::/32 ::ffff:0.0.0.0/96}', 'ip.src in {2001:db8:1::/48 ::ffff:10.0.0.0/104 ::1}']);
  assert.deepEqual(
    membersOf(v6.files['guard_d0_0.map']!),
    new Map([
      ['2001:db8::/32', [0]],
      ['::ffff:0.0.0.0/96', [0]],
      ['2001:db8:1::/48', [0, 1]],
      ['::ffff:10.0.0.0/104', [0, 1]],
      ['::1', [1]],
    ]),
  );
});

test('a lookup whose patterns a map cannot hold keeps a pattern file: a value with a blank, IPv4 and IPv6 ranges together', () => {
  for (const expressions of [
    ['http.user_agent eq "a b"', 'http.user_agent eq "c"'],
    ['ip.src in {10.0.0.0/8}', 'ip.src in {2001:db8::/32}'],
  ]) {
    const p = plan(expressions);
    assert.match(p.lines[0]!, /bool\(1\) if \{ \S+ (?:-m beg )?-f \/cfg\/guard_d0_0\.pat \}$/, p.lines.join('\n'));
    assert.deepEqual([...p.guardOf.values()], ['rp_g0', 'rp_g0']);
  }
});

test('the longest prefix or range holding a value names exactly the rules one of whose patterns holds it (what map_beg and map_ip answer)', () => {
  fc.assert(
    fc.property(
      fc.array(fc.uniqueArray(fc.stringMatching(/^\/[ab/]{0,3}$/), { minLength: 1, maxLength: 3 }), { minLength: 2, maxLength: 5 }),
      fc.stringMatching(/^\/[ab/]{0,5}$/),
      (members, value) => {
        const map = candidateMap('path -m beg', members)!;
        const entries = membersOf(map.lines.join('\n'));
        const longest = [...entries.keys()].filter((k) => value.startsWith(k)).sort((a, b) => b.length - a.length)[0];
        const expected = members.flatMap((ps, k) => (ps.some((p) => value.startsWith(p)) ? [k] : []));
        assert.deepEqual(longest === undefined ? [] : entries.get(longest), expected);
      },
    ),
  );
  const ip = (n: number) => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
  const inRange = (addr: number, base: number, len: number) => len === 0 || addr >>> (32 - len) === base >>> (32 - len);
  fc.assert(
    fc.property(
      fc.array(fc.uniqueArray(fc.tuple(fc.integer({ min: 0, max: 0xffff }), fc.constantFrom(8, 16, 20, 24, 32)), { minLength: 1, maxLength: 3 }), { minLength: 2, maxLength: 5 }),
      fc.integer({ min: 0, max: 0xffff }),
      (ranges, addr) => {
        const full = (n: number) => (0x0a000000 | n) >>> 0;
        const members = ranges.map((rs) => rs.map(([n, len]) => `${ip((full(n) >>> (32 - len)) << (32 - len))}/${len}`.replace(/^(\d+)\.\d+\.\d+\.\d+\/8$/, '$1.0.0.0/8')));
        const map = candidateMap('src', members)!;
        const entries = membersOf(map.lines.join('\n'));
        const holding = [...entries.keys()].filter((k) => {
          const [a, len] = k.split('/');
          const base = a!.split('.').reduce((v, o) => v * 256 + Number(o), 0);
          return inRange(full(addr), base, Number(len));
        });
        const longest = holding.sort((a, b) => Number(b.split('/')[1]) - Number(a.split('/')[1]))[0];
        const expected = ranges.flatMap((rs, k) => (rs.some(([n, len]) => inRange(full(addr), full(n), len)) ? [k] : []));
        assert.deepEqual(longest === undefined ? [] : entries.get(longest), expected);
      },
    ),
  );
});
