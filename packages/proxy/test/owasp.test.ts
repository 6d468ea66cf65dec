import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';

// docs/architecture.md "The WAF", step 5: the OWASP pattern lists (assets/sqli.lst, assets/xss.lst) that
// HAProxy matches with `url,url_dec -m reg -i -f <list>` on path plus query. Here the same patterns
// run as JavaScript RegExps with the 'i' flag against URLs decoded the way HAProxy 2.6 decodes them.

const here = (p: string) => new URL(p, import.meta.url);

/** Lines of a pattern or fixture file the way HAProxy reads `-f` files: '#' comments and blank lines skipped, leading blanks stripped. */
function lines(url: URL): string[] {
  return readFileSync(url, 'utf8')
    .split('\n')
    .map((l) => l.replace(/\r$/, '').replace(/^[ \t]+/, ''))
    .filter((l) => l !== '' && !l.startsWith('#'));
}

interface Pattern {
  list: string;
  source: string;
  re: RegExp;
}

const PATTERNS: Pattern[] = ['sqli.lst', 'xss.lst'].flatMap((list) =>
  lines(here(`../assets/${list}`)).map((source) => ({ list, source, re: new RegExp(source, 'i') })),
);

/**
 * HAProxy 2.6's `url_dec` converter (url_decode(str, in_form=0) in src/tools.c): %XX becomes the
 * byte, '+' becomes a space once a '?' has been seen (in the query string only; verified against
 * /usr/sbin/haproxy 2.6.12), and a malformed escape makes the converter fail (null here), in which
 * case the `-m reg` ACL does not match. Bytes are kept as Latin-1 characters, as PCRE2 sees them.
 */
function haproxyUrlDec(raw: string): string | null {
  const bytes: number[] = [];
  let inForm = false;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i]!;
    if (c === '%') {
      const hex = raw.slice(i + 1, i + 3);
      if (!/^[0-9a-fA-F]{2}$/.test(hex)) return null;
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else if (c === '+') {
      bytes.push(inForm ? 0x20 : 0x2b);
    } else {
      if (c === '?') inForm = true;
      for (const b of Buffer.from(c, 'utf8')) bytes.push(b);
    }
  }
  return Buffer.from(bytes).toString('latin1');
}

/** The request target the tests send for an attack payload (see fixtures/attacks.txt). */
function attackTarget(payload: string): string {
  return '/search?q=' + (/%[0-9a-f]{2}/i.test(payload) ? payload : encodeURIComponent(payload));
}

const matching = (decoded: string) => PATTERNS.filter((p) => p.re.test(decoded));

describe('OWASP pattern lists (assets/sqli.lst, assets/xss.lst)', () => {
  test('the lists load and every pattern compiles as a JavaScript RegExp', () => {
    assert.ok(PATTERNS.filter((p) => p.list === 'sqli.lst').length >= 5, 'sqli.lst has patterns');
    assert.ok(PATTERNS.filter((p) => p.list === 'xss.lst').length >= 3, 'xss.lst has patterns');
  });

  test('the HAProxy url_dec model: %XX decoded, + is a space only in the query, malformed escapes fail', () => {
    assert.equal(haproxyUrlDec('/a+b/c%20d?q=x+y%2Bz'), '/a+b/c d?q=x y+z');
    assert.equal(haproxyUrlDec('/a?q=%zz'), null);
    assert.equal(haproxyUrlDec('/a?q=50%'), null);
  });

  test('(a) no ordinary URL is matched by any pattern after URL-decoding', () => {
    const urls = lines(here('./fixtures/ordinary-urls.txt'));
    assert.ok(urls.length >= 200, `at least 200 ordinary URLs (got ${urls.length})`);
    const blocked: string[] = [];
    for (const url of urls) {
      const decoded = haproxyUrlDec(url);
      assert.notEqual(decoded, null, `fixture URL ${url} is validly encoded`);
      for (const p of matching(decoded!)) blocked.push(`${url}\n      decoded ${JSON.stringify(decoded)}\n      matched by ${p.list}: ${p.source}`);
    }
    assert.deepEqual(blocked, [], `ordinary URLs blocked by a too-broad pattern:\n  ${blocked.join('\n  ')}`);
  });

  test('(b) every attack is matched by at least one pattern', () => {
    const attacks = lines(here('./fixtures/attacks.txt'));
    assert.ok(attacks.length >= 40, `at least 40 attacks (got ${attacks.length})`);
    const missed: string[] = [];
    for (const attack of attacks) {
      const target = attackTarget(attack);
      const decoded = haproxyUrlDec(target);
      assert.notEqual(decoded, null, `attack ${attack} is validly encoded`);
      if (matching(decoded!).length === 0) missed.push(`${attack}  (decoded ${JSON.stringify(decoded)})`);
    }
    assert.deepEqual(missed, [], `attacks no pattern matches:\n  ${missed.join('\n  ')}`);
  });

  test('(b) SQL attacks hit sqli.lst and XSS attacks hit xss.lst', () => {
    const attacks = readFileSync(here('./fixtures/attacks.txt'), 'utf8').split('\n');
    let section = '';
    const wrong: string[] = [];
    for (const line of attacks) {
      if (line.startsWith('# SQL')) section = 'sqli.lst';
      else if (line.startsWith('# XSS')) section = 'xss.lst';
      if (!section || line.trim() === '' || line.startsWith('#')) continue;
      const lists = new Set(matching(haproxyUrlDec(attackTarget(line))!).map((p) => p.list));
      if (!lists.has(section)) wrong.push(`${line} (expected ${section}, got ${[...lists].join(',') || 'none'})`);
    }
    assert.deepEqual(wrong, []);
  });

  test('(c) no pattern contains a nested quantifier such as (a+)+, (a*)* or (a+)*', () => {
    const nested = PATTERNS.filter((p) => hasNestedQuantifier(p.source)).map((p) => `${p.list}: ${p.source}`);
    assert.deepEqual(nested, []);
  });

  test('(c) the nested-quantifier check itself', () => {
    for (const bad of ['(a+)+', '(?:a*)*', '(a+)*', '(\\w+\\s)+x', '(?:x(?:ab+)c){2,}', '((a|b)+)*']) assert.ok(hasNestedQuantifier(bad), bad);
    for (const ok of ['a+b*', '(?:ab)+', '(?:a+|b)?', '[(+]+', '\\(a+\\)+', '[\\s/*+(]+(?:all[\\s/*+]+)?select']) assert.ok(!hasNestedQuantifier(ok), ok);
  });

  test('(c) no catastrophic backtracking: every pattern against 20,000-character adversarial inputs in under 50 ms each', () => {
    const N = 20_000;
    const slow: string[] = [];
    for (const p of PATTERNS) {
      for (const input of adversarialInputs(p.source, N)) {
        // the best of up to 3 runs, so that a GC pause or a busy machine does not fail a linear pattern
        let ms = Infinity;
        for (let run = 0; run < 3 && ms >= 50; run++) {
          const t0 = performance.now();
          p.re.test(input);
          ms = Math.min(ms, performance.now() - t0);
        }
        if (ms >= 50) {
          slow.push(`${p.list}: ${p.source}  took ${ms.toFixed(0)} ms on ${describeInput(input)}`);
          break; // one slow input is enough to condemn a pattern; keep the suite quick
        }
      }
    }
    assert.deepEqual(slow, [], `patterns with super-linear backtracking:\n  ${slow.join('\n  ')}`);
  });
});

/** True when a quantified group contains a quantifier that can repeat (+, *, {n,} or {n,m} with m > 1). */
function hasNestedQuantifier(source: string): boolean {
  const stack: boolean[] = []; // per open group: does its content contain a repeating quantifier?
  let inner = false; // the same for the current (top-level or group) content
  const repeating = (i: number): { len: number } | null => {
    const c = source[i];
    if (c === '+' || c === '*') return { len: 1 };
    if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(i));
      if (m && m[2] !== undefined && (m[3] === '' || Number(m[3]) > 1)) return { len: m[0].length };
    }
    return null;
  };
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === '\\') {
      i++;
      continue;
    }
    if (c === '[') {
      // skip a character class ('[' then an optional '^' and a literal ']' first)
      let j = i + 1;
      if (source[j] === '^') j++;
      if (source[j] === ']') j++;
      while (j < source.length && source[j] !== ']') j += source[j] === '\\' ? 2 : 1;
      i = j;
      continue;
    }
    if (c === '(') {
      stack.push(inner);
      inner = false;
      continue;
    }
    if (c === ')') {
      const groupRepeats = inner;
      inner = stack.pop() ?? false;
      if (repeating(i + 1) && groupRepeats) return true;
      inner = inner || groupRepeats;
      continue;
    }
    if (repeating(i)) inner = true;
  }
  return false;
}

/**
 * Inputs meant to make a backtracking matcher work hard: long runs of the pattern's own literal
 * words and punctuation, of the characters its classes accept, and near-misses that almost match.
 */
function adversarialInputs(source: string, n: number): string[] {
  const words = [...new Set(source.replace(/\\[a-zA-Z]/g, ' ').match(/[a-zA-Z]{2,}/g) ?? [])];
  const punct = [...new Set(source.replace(/\\[a-zA-Z]/g, '').replace(/[a-zA-Z0-9\\?:|{}^$]/g, '').split(''))];
  const fills = [' ', '\t', 'a', '1', '+', '/*', '/', '(', "'", '<', '=', '-', ';'];
  const heads = [...words, ...punct, ...words.flatMap((w) => punct.map((p) => p + w)), ...words.map((w) => w + ' '), "' or ", "' or a", ') and ', 'union ', 'union all ', 'insert into t ', 'update t set ', 'delete from t ', 'on', 'java', '<script'];
  const fit = (s: string) => (s.length >= n ? s.slice(0, n) : s);
  const rep = (s: string) => fit(s.repeat(Math.ceil(n / s.length)));
  const out = new Set<string>([rep('a'), rep(' ') + 'x', rep('1'), rep(' '), rep('\t') + 'x']);
  for (const h of heads) {
    out.add(rep(h));
    out.add(rep(h + ' '));
    for (const f of fills) {
      out.add(fit(h + f.repeat(Math.ceil((n - h.length) / f.length))).slice(0, n - 1) + '\u0001');
      out.add(rep(h + f));
    }
  }
  return [...out];
}

function describeInput(s: string): string {
  return `${JSON.stringify(s.slice(0, 24))}... (${s.length} chars)`;
}
