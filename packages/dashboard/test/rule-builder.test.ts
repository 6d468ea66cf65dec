import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { parseRuleExpression, regexProblem, RULE_FIELDS, type RuleField } from '@rampart/protocol';
import {
  BUILDER_FIELDS,
  fitRow,
  fnAllowed,
  isKeyed,
  moveRule,
  newRow,
  OPS_BY_TYPE,
  rowType,
  rowsFromText,
  rowsToText,
  runOrder,
  splitAt,
  type BuilderRow,
  type Ordered,
} from '../src/views/rule-builder.js';

// The custom rule editor's builder <-> text logic (docs/rules.md "The language").

const row = (r: Partial<BuilderRow>): BuilderRow => ({ ...newRow(), ...r });

describe('rows to text', () => {
  test('each operator writes the language the parser reads', () => {
    const cases: [Partial<BuilderRow>, string][] = [
      [{ field: 'http.request.method', op: 'eq', value: 'POST' }, 'http.request.method eq "POST"'],
      [{ field: 'http.user_agent', op: 'not_contains', value: 'curl' }, 'not http.user_agent contains "curl"'],
      [{ op: 'matches', value: '^/api/v\\d+/' }, 'http.request.uri.path matches r"^/api/v\\d+/"'],
      [{ op: 'matches', value: 'a"\\b' }, 'http.request.uri.path matches "a\\"\\\\b"'],
      [{ op: 'not_starts_with', value: '/wp-admin' }, 'not starts_with(http.request.uri.path, "/wp-admin")'],
      [{ field: 'ip.src', op: 'not_in', value: '192.0.2.0/24, 2001:db8::/32' }, 'not ip.src in {192.0.2.0/24 2001:db8::/32}'],
      [{ field: 'ip.src.country', op: 'in', value: 'CN, RU' }, 'ip.src.country in {"CN" "RU"}'],
      [{ field: 'http.request.headers', key: 'x-api-key', op: 'ne', value: 's"cret' }, 'http.request.headers["x-api-key"] ne "s\\"cret"'],
      [{ fn: 'len', field: 'http.cookie', op: 'gt', value: '4096' }, 'len(http.cookie) gt 4096'],
      [{ fn: 'lower', field: 'http.host', op: 'ends_with', value: '.test' }, 'ends_with(lower(http.host), ".test")'],
      [{ field: 'ssl', op: 'is_false', value: '' }, 'not ssl'],
    ];
    for (const [r, text] of cases) {
      assert.equal(rowsToText([row(r)]), text);
      assert.equal(parseRuleExpression(text).ok, true, text);
    }
  });

  test('rows join with their and/or, and binding tighter as the language reads it', () => {
    const rows = [row({ value: '/a' }), row({ join: 'and', field: 'ssl', op: 'is_true' }), row({ join: 'or', value: '/b' })];
    assert.equal(rowsToText(rows), 'http.request.uri.path eq "/a" and ssl or http.request.uri.path eq "/b"');
    const r = rowsFromText(rowsToText(rows));
    assert.ok(r.ok);
    assert.deepEqual(r.rows, rows);
  });

  test('a change of field keeps the operator where it still applies, else takes the first one', () => {
    assert.equal(fitRow(row({ op: 'contains', field: 'http.host' })).op, 'contains');
    assert.equal(fitRow(row({ op: 'contains', field: 'ip.src' })).op, 'eq');
    assert.deepEqual(fitRow(row({ fn: 'len', op: 'contains', field: 'ssl', key: 'x' })), row({ fn: '', op: 'is_true', field: 'ssl', key: '' }));
    assert.equal(fitRow(row({ fn: 'len', op: 'contains' })).op, 'eq');
  });
});

describe('text to rows', () => {
  test("an empty expression is no rows; a parse error is the parser's message with its column", () => {
    assert.deepEqual(rowsFromText('  '), { ok: true, rows: [] });
    const bad = rowsFromText('http.request.uri.path eq');
    assert.deepEqual(bad, { ok: false, reason: 'at column 25: expected a string in double quotes, found the end of the expression' });
  });

  test('other spellings read into the same rows (==, &&, in with one value, aliases, parentheses around and)', () => {
    const r = rowsFromText('(ip.geoip.country in {"CN"} && http.request.method == "GET") || ip.src in {192.0.2.1 198.51.100.0/24}');
    assert.ok(r.ok);
    assert.deepEqual(r.rows, [
      row({ join: 'and', field: 'ip.src.country', op: 'eq', value: 'CN' }),
      row({ join: 'and', field: 'http.request.method', op: 'eq', value: 'GET' }),
      row({ join: 'or', field: 'ip.src', op: 'in', value: '192.0.2.1, 198.51.100.0/24' }),
    ]);
  });

  test('what the rows cannot show is named, and the text is left to the user', () => {
    const cases: [string, RegExp][] = [
      ['(ssl or http.host eq "a") and http.host eq "b"', /parentheses around an "or"/],
      ['not (ssl and http.host eq "a")', /"not" before parentheses/],
      ['not not ssl', /"not" twice/],
      ['len(lower(http.cookie)) gt 3', /a function of a function/],
      ['http.host in {"a,b" "c"}', /a list value with a comma/],
      ['http.host in {" a" "c"}', /blanks around it/],
      ['http.host eq "a\nb"', /several lines/],
      ['not len(http.cookie) lt 3', /"not" before lt/],
    ];
    for (const [text, reason] of cases) {
      assert.equal(parseRuleExpression(text).ok, true, text);
      const r = rowsFromText(text);
      assert.equal(r.ok, false, text);
      assert.match((r as { reason: string }).reason, reason, text);
    }
  });
});

describe('rows -> text -> rows', () => {
  const textValue = fc.string({ maxLength: 12 }).filter((s) => !/[\r\n]/.test(s));
  const listItem = fc.string({ minLength: 1, maxLength: 8 }).filter((s) => !/[\r\n,]/.test(s) && s === s.trim() && s !== '');
  const ipv4 = fc.tuple(fc.ipV4(), fc.option(fc.integer({ min: 0, max: 32 }), { nil: undefined })).map(([ip, bits]) => (bits === undefined ? ip : `${ip}/${bits}`));
  const number = fc.integer({ min: 0, max: 1_000_000_000 }).map(String);
  const headerName = fc.stringMatching(/^[a-z0-9_-]{1,16}$/);
  const argName = fc.stringMatching(/^[A-Za-z0-9_.-]{1,16}$/);

  const arbRow: fc.Arbitrary<BuilderRow> = fc
    .record({
      join: fc.constantFrom('and' as const, 'or' as const),
      field: fc.constantFrom(...BUILDER_FIELDS),
      fn: fc.constantFrom('' as const, 'lower' as const, 'len' as const),
      opIndex: fc.nat(),
      header: headerName,
      arg: argName,
    })
    .chain(({ join, field, fn, opIndex, header, arg }) => {
      const f = fnAllowed(field) ? fn : '';
      const type = rowType({ fn: f, field });
      const ops = OPS_BY_TYPE[type];
      const op = ops[opIndex % ops.length]!;
      const key = !isKeyed(field) ? '' : field === 'http.request.headers' ? header : arg;
      const many = op === 'in' || op === 'not_in';
      const regex = op === 'matches' || op === 'not_matches';
      const one = regex ? textValue.filter((s) => regexProblem(s) === undefined) : type === 'string' ? textValue : type === 'ip' ? ipv4 : type === 'int' ? number : fc.constant('');
      const item = type === 'string' ? listItem : type === 'ip' ? ipv4 : number;
      const value = many ? fc.array(item, { minLength: 2, maxLength: 4 }).map((v) => v.join(', ')) : one;
      return value.map((v): BuilderRow => ({ join, fn: f, field: field as RuleField, key, op, value: v }));
    });

  test('random rows write an expression the parser accepts, which reads back into the same rows', () => {
    fc.assert(
      fc.property(fc.array(arbRow, { minLength: 1, maxLength: 6 }), (rows) => {
        // The first row's join is not written; IPv4 addresses are canonical as generated
        // (fc.ipV4 gives no leading zeros), so the rows read back exactly.
        const expected = rows.map((r, i) => (i === 0 ? { ...r, join: 'and' as const } : r)).map((r) => ({ ...r, value: canonicalIps(r) }));
        const text = rowsToText(rows);
        const parsed = parseRuleExpression(text);
        assert.ok(parsed.ok, `${text}: ${!parsed.ok && parsed.message}`);
        const back = rowsFromText(text);
        assert.ok(back.ok, text);
        assert.deepEqual(back.rows, expected, text);
      }),
      { numRuns: 300 },
    );
  });

  /** The parser writes a range with its network address (192.0.2.7/24 -> 192.0.2.0/24). */
  function canonicalIps(r: BuilderRow): string {
    if (rowType(r) !== 'ip') return r.value;
    const text = `ip.src in {${r.value.split(', ').join(' ')}}`;
    const p = parseRuleExpression(text);
    assert.ok(p.ok);
    return (p.expr as { values: string[] }).values.join(', ');
  }

  test('every field of the scheme is offered', () => {
    assert.deepEqual([...BUILDER_FIELDS].sort(), Object.keys(RULE_FIELDS).sort());
  });
});

describe('the error position', () => {
  test("splits the text at the parser's position, past the end too", () => {
    assert.deepEqual(splitAt('http.host eq', 12), { before: 'http.host eq', at: '', after: '' });
    assert.deepEqual(splitAt('a $ b', 2), { before: 'a ', at: '$', after: ' b' });
  });
});

describe('moving a rule up or down', () => {
  const at = (n: number) => new Date(Date.UTC(2025, 0, 1, 0, 0, n)).toISOString();
  const rule = (id: string, priority: number, age: number): Ordered => ({ id, priority, createdAt: at(age) });
  /** The order after applying the changes. */
  function apply(all: Ordered[], changes: { id: string; priority: number }[]): string[] {
    return runOrder(all.map((r) => ({ ...r, priority: changes.find((c) => c.id === r.id)?.priority ?? r.priority }))).map((r) => r.id);
  }

  test('one change when a priority fits between the new neighbours', () => {
    const all = [rule('a', 10, 1), rule('b', 20, 2), rule('c', 30, 3)];
    const up = moveRule(all, ['a', 'b', 'c'], 'c', -1);
    assert.deepEqual(up, [{ id: 'c', priority: 15 }]);
    assert.deepEqual(apply(all, up), ['a', 'c', 'b']);
    const first = moveRule(all, ['a', 'b', 'c'], 'b', -1);
    assert.deepEqual(apply(all, first), ['b', 'a', 'c']);
    assert.equal(first.length, 1);
    assert.deepEqual(moveRule(all, ['a', 'b', 'c'], 'a', -1), []);
    assert.deepEqual(moveRule(all, ['a', 'b', 'c'], 'c', 1), []);
  });

  test('equal priorities (the age decides) renumber the rules 10, 20, 30 in the new order', () => {
    const all = [rule('a', 100, 1), rule('b', 100, 2), rule('c', 100, 3)];
    const down = moveRule(all, ['a', 'b', 'c'], 'a', 1);
    assert.deepEqual(apply(all, down), ['b', 'a', 'c']);
    assert.deepEqual(down, [
      { id: 'b', priority: 10 },
      { id: 'a', priority: 20 },
      { id: 'c', priority: 30 },
    ]);
  });

  test("on a domain's page the hidden rules keep their places", () => {
    // x is another domain's rule, between a and b in the run order.
    const all = [rule('a', 10, 1), rule('x', 20, 2), rule('b', 30, 3)];
    const up = moveRule(all, ['a', 'b'], 'b', -1);
    assert.deepEqual(apply(all, up), ['b', 'a', 'x']);
  });

  test('random orders: the rule lands one place up or down among the shown ones, the rest keep their order', () => {
    const arb = fc.array(fc.record({ priority: fc.integer({ min: 0, max: 40 }), age: fc.integer({ min: 0, max: 1000 }), shown: fc.boolean() }), { minLength: 2, maxLength: 12 });
    fc.assert(
      fc.property(arb, fc.nat(), fc.constantFrom(-1 as const, 1 as const), (specs, pick, direction) => {
        const all = specs.map((s, i) => rule(`r${i}`, s.priority, s.age));
        const order = runOrder(all).map((r) => r.id);
        const shown = order.filter((id) => specs[Number(id.slice(1))]!.shown);
        if (shown.length < 2) return;
        const id = shown[pick % shown.length]!;
        const changes = moveRule(all, shown, id, direction);
        const after = apply(all, changes);
        const i = shown.indexOf(id);
        const past = shown[i + direction];
        if (past === undefined) return assert.deepEqual(changes, []);
        for (const c of changes) assert.ok(c.priority >= 0 && c.priority <= 1_000_000);
        const expectedShown = [...shown];
        [expectedShown[i], expectedShown[i + direction]] = [past, id];
        assert.deepEqual(
          after.filter((x) => shown.includes(x)),
          expectedShown,
        );
        assert.deepEqual(
          after.filter((x) => x !== id),
          order.filter((x) => x !== id),
        );
      }),
      { numRuns: 500 },
    );
  });
});
