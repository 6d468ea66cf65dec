import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { SnapshotCustomRule } from '@rampart/protocol';
import { compileCustomRules, guardLines, planGuards } from '../src/custom-rules.js';

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
  assert.match(p.lines[0]!, /\{ path -m beg -f \/cfg\/guard_d0_0\.pat \}/);
  assert.deepEqual(p.files['guard_d0_0.pat']!.trimEnd().split('\n').sort(), ['/admin', '/login', '/x', '/y']);
});
