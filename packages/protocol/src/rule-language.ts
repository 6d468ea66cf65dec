import { canonicalCidr, ipBits, isCidr } from './validate.js';

// The expression language of custom rules: a subset of Cloudflare's Rules language (same field
// names, operators and functions, so a rule written for Cloudflare pastes in). As in Cloudflare's
// wirefilter, the fields and their types are declared once (the scheme), the lexer keeps the
// offset of every token so an error points at a column, the parser checks types against the
// scheme as it builds the AST, and the reference evaluator below defines what an expression means
// (the proxy's compiler, packages/proxy/src/custom-rules.ts, is tested against it). docs/rules.md.

/** The type of a field or of a function's result. */
export type RuleValueType = 'string' | 'ip' | 'bool' | 'int';

/** The scheme: every field an expression can name, with its type. Two take a key: `["name"]`. */
export const RULE_FIELDS = {
  'http.host': 'string',
  'http.request.method': 'string',
  'http.request.uri': 'string',
  'http.request.uri.path': 'string',
  'http.request.uri.query': 'string',
  'http.request.uri.args': 'string',
  'http.request.headers': 'string',
  'http.cookie': 'string',
  'http.user_agent': 'string',
  'http.referer': 'string',
  'ip.src': 'ip',
  'ip.src.country': 'string',
  ssl: 'bool',
} as const satisfies Record<string, RuleValueType>;
export type RuleField = keyof typeof RULE_FIELDS;
/** Fields that are maps, read with a key: `http.request.headers["x-api-key"]`. */
export const KEYED_RULE_FIELDS: readonly RuleField[] = ['http.request.uri.args', 'http.request.headers'];
/** Other names Cloudflare gives the same field. */
const FIELD_ALIASES: Record<string, RuleField> = { 'ip.geoip.country': 'ip.src.country' };

/** Size limits of one expression (docs/rules.md "Limits"). */
export const RULE_LIMITS = {
  /** Characters of an expression. */
  expression: 4096,
  /** Comparisons (and bare boolean fields) in one expression. */
  conditions: 32,
  /** Items of one `in { ... }` list. */
  listItems: 256,
  /** Characters of one string value (a regular expression included). */
  stringValue: 1024,
  /** Nesting of parentheses and `not`. */
  depth: 16,
  /** The largest number a comparison takes. */
  number: 1_000_000_000,
} as const;

/** Header and argument names: written into the configuration as a fetch's argument, so a plain token. */
const HEADER_NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;
const ARG_NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;

/** A value an operator reads: a field (with its key), or lower()/len() of one. */
export type RuleOperand = { kind: 'field'; field: RuleField; key?: string } | { kind: 'lower'; arg: RuleOperand } | { kind: 'len'; arg: RuleOperand };

export type StringOp = 'eq' | 'contains' | 'matches' | 'starts_with' | 'ends_with';
export type IntOp = 'eq' | 'lt' | 'le' | 'gt' | 'ge';

/**
 * The checked AST. `ne` is parsed as not(eq): on a field with several values (a repeated header)
 * a comparison holds when any value satisfies it, so `ne` means "no value equals".
 */
export type RuleExpr =
  | { kind: 'and' | 'or'; left: RuleExpr; right: RuleExpr }
  | { kind: 'not'; expr: RuleExpr }
  | { kind: 'bool'; operand: RuleOperand }
  | { kind: 'string'; op: StringOp; operand: RuleOperand; values: string[] }
  | { kind: 'ip'; operand: RuleOperand; values: string[] }
  | { kind: 'int'; op: IntOp; operand: RuleOperand; values: number[] };

export type RuleParse = { ok: true; expr: RuleExpr; regexes: string[] } | { ok: false; position: number; expected: string; message: string };

type Token = { t: 'word'; v: string; at: number } | { t: 'string'; v: string; at: number } | { t: 'punct'; v: string; at: number } | { t: 'end'; at: number };

class RuleSyntaxError extends Error {
  constructor(
    readonly position: number,
    readonly expected: string,
    found: string,
  ) {
    super(`at column ${position + 1}: expected ${expected}, found ${found}`);
  }
}

const PUNCT = ['==', '!=', '&&', '||', '(', ')', '{', '}', '[', ']', ',', '!', '~'];
const WORD_RE = /[A-Za-z0-9_.:/-]/;

function lex(src: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i++;
      continue;
    }
    const at = i;
    const raw = /^r(#*)"/.exec(src.slice(i, i + 40));
    if (raw) {
      // A raw string r"..." or r#"..."#: no escapes (handy for regular expressions).
      const close = `"${raw[1]}`;
      const end = src.indexOf(close, i + raw[0].length);
      if (end === -1) throw new RuleSyntaxError(at, `the end of the raw string (${close})`, 'the end of the expression');
      out.push({ t: 'string', v: src.slice(i + raw[0].length, end), at });
      i = end + close.length;
      continue;
    }
    if (c === '"') {
      let v = '';
      i++;
      for (;;) {
        if (i >= src.length) throw new RuleSyntaxError(at, 'a closing quote (")', 'the end of the expression');
        const d = src[i]!;
        if (d === '"') break;
        if (d === '\\') {
          const e = src[i + 1];
          if (e !== '"' && e !== '\\') throw new RuleSyntaxError(i, 'an escape \\" or \\\\ (write other characters as they are, or use a raw string r"...")', `\\${e ?? ''}`);
          v += e;
          i += 2;
          continue;
        }
        v += d;
        i++;
      }
      out.push({ t: 'string', v, at });
      i++;
      continue;
    }
    const p = PUNCT.find((q) => src.startsWith(q, i));
    if (p) {
      out.push({ t: 'punct', v: p, at });
      i += p.length;
      continue;
    }
    if (WORD_RE.test(c)) {
      let j = i;
      while (j < src.length && WORD_RE.test(src[j]!)) j++;
      out.push({ t: 'word', v: src.slice(i, j), at });
      i = j;
      continue;
    }
    throw new RuleSyntaxError(at, 'a field, a value or an operator', JSON.stringify(c));
  }
  out.push({ t: 'end', at: src.length });
  return out;
}

const describe = (t: Token) => (t.t === 'end' ? 'the end of the expression' : t.t === 'string' ? `the string ${JSON.stringify(t.v.slice(0, 40))}` : `"${t.v}"`);
const COMPARISONS: Record<string, string> = { eq: 'eq', '==': 'eq', ne: 'ne', '!=': 'ne', contains: 'contains', matches: 'matches', '~': 'matches', in: 'in', lt: 'lt', le: 'le', gt: 'gt', ge: 'ge' };
const OPERATOR_LIST = 'an operator (eq, ne, contains, matches, in, lt, le, gt, ge)';

/**
 * An escape HAProxy's PCRE2 and the rules' evaluator (JavaScript) read differently: a letter other
 * than d D w W s S b B n r t f (PCRE2's \\z \\A \\h \\v \\Q... are anchors, classes or quoting;
 * JavaScript reads most of them as the letter itself), and \\x not followed by two hex digits
 * (PCRE2's \\x{41}). The evaluator decides which countries a test of ip.src.country holds for, so
 * it must read a pattern as HAProxy does.
 */
function portabilityProblem(re: string): string | undefined {
  for (const m of re.matchAll(/\\([\s\S])(?=([\s\S]{0,2}))/g)) {
    const [, c = '', next = ''] = m;
    if (c === 'x' && !/^[0-9A-Fa-f]{2}$/.test(next)) return '\\x takes two hex digits (\\xHH); \\x{...} is not supported';
    if (/[A-Za-z]/.test(c) && !'dDwWsSbBnrtfx'.includes(c)) return `\\${c} is not supported (regular expression engines read it differently); use \\d \\w \\s \\b, ^, $ or a class`;
  }
  return undefined;
}

/** A regular expression both JavaScript (the reference) and PCRE2 (HAProxy) read the same way, or why not. */
export function regexProblem(re: string, stored = false): string | undefined {
  // eslint-disable-next-line no-control-regex -- deliberate: finding control characters in user input is the point
  if (/[\x00-\x1f\x7f]/.test(re)) return 'a regular expression cannot hold control characters: write \\t, \\n or \\xHH';
  if (/\(\?(?:[=!]|<[=!]|<[A-Za-z])/.test(re)) return 'lookahead, lookbehind and named groups are not supported';
  if (/\\(?:[1-9]|k)/.test(re)) return 'backreferences are not supported';
  if (/\\[pPuc]|\[\^?\]/.test(re)) return '\\p, \\u, \\c and empty classes are not supported';
  if (!stored) {
    const escape = portabilityProblem(re);
    if (escape) return escape;
  }
  try {
    new RegExp(re);
  } catch (e) {
    return `invalid regular expression: ${(e as Error).message.replace(/^Invalid regular expression: /, '')}`;
  }
  return undefined;
}

class Parser {
  private i = 0;
  private conditions = 0;
  readonly regexes: string[] = [];
  constructor(
    private readonly toks: Token[],
    private readonly stored: boolean,
  ) {}

  private peek(): Token {
    return this.toks[this.i]!;
  }
  private next(): Token {
    return this.toks[this.i++]!;
  }
  private isWord(v: string): boolean {
    const t = this.peek();
    return t.t === 'word' && t.v === v;
  }
  private isPunct(v: string): boolean {
    const t = this.peek();
    return t.t === 'punct' && t.v === v;
  }
  private expect(v: string): void {
    const t = this.next();
    if (t.t !== 'punct' || t.v !== v) throw new RuleSyntaxError(t.at, `"${v}"`, describe(t));
  }

  parse(): RuleExpr {
    const e = this.or(0);
    const t = this.peek();
    if (t.t !== 'end') throw new RuleSyntaxError(t.at, 'and, or, or the end of the expression', describe(t));
    return e;
  }

  private or(depth: number): RuleExpr {
    let left = this.and(depth);
    while (this.isWord('or') || this.isPunct('||')) {
      this.next();
      left = { kind: 'or', left, right: this.and(depth) };
    }
    return left;
  }

  private and(depth: number): RuleExpr {
    let left = this.unary(depth);
    while (this.isWord('and') || this.isPunct('&&')) {
      this.next();
      left = { kind: 'and', left, right: this.unary(depth) };
    }
    return left;
  }

  private unary(depth: number): RuleExpr {
    const t = this.peek();
    if (depth > RULE_LIMITS.depth) throw new RuleSyntaxError(t.at, `at most ${RULE_LIMITS.depth} levels of parentheses and not`, 'a deeper one');
    if (this.isWord('not') || this.isPunct('!')) {
      this.next();
      return { kind: 'not', expr: this.unary(depth + 1) };
    }
    if (this.isPunct('(')) {
      this.next();
      const e = this.or(depth + 1);
      this.expect(')');
      return e;
    }
    return this.comparison();
  }

  /** A field, or lower()/len() of one, with its type. */
  private operand(): { operand: RuleOperand; type: RuleValueType; at: number } {
    const t = this.next();
    if (t.t !== 'word') throw new RuleSyntaxError(t.at, 'a field (e.g. http.request.uri.path), a function (lower, len, starts_with, ends_with), not or "("', describe(t));
    if (t.v === 'lower' || t.v === 'len') {
      this.expect('(');
      const inner = this.operand();
      if (inner.type !== 'string') throw new RuleSyntaxError(inner.at, `a text field inside ${t.v}()`, `a field of type ${inner.type}`);
      this.expect(')');
      return t.v === 'lower' ? { operand: { kind: 'lower', arg: inner.operand }, type: 'string', at: t.at } : { operand: { kind: 'len', arg: inner.operand }, type: 'int', at: t.at };
    }
    const field = (FIELD_ALIASES[t.v] ?? t.v) as RuleField;
    if (!Object.hasOwn(RULE_FIELDS, field)) {
      throw new RuleSyntaxError(t.at, 'a supported field', `"${t.v}", which is not a field Rampart supports (fields: ${Object.keys(RULE_FIELDS).join(', ')}, ip.geoip.country)`);
    }
    if (!KEYED_RULE_FIELDS.includes(field)) return { operand: { kind: 'field', field }, type: RULE_FIELDS[field], at: t.at };
    this.expect('[');
    const k = this.next();
    const re = field === 'http.request.headers' ? HEADER_NAME_RE : ARG_NAME_RE;
    const what = field === 'http.request.headers' ? 'a header name in quotes (1 to 64 letters, digits, - or _)' : 'an argument name in quotes (1 to 64 letters, digits, ., - or _)';
    if (k.t !== 'string' || !re.test(k.v)) throw new RuleSyntaxError(k.at, what, describe(k));
    this.expect(']');
    // Header names are case-insensitive (HAProxy compares them so); argument names are not.
    const key = field === 'http.request.headers' ? k.v.toLowerCase() : k.v;
    return { operand: { kind: 'field', field, key }, type: 'string', at: t.at };
  }

  private count(at: number): void {
    if (++this.conditions > RULE_LIMITS.conditions) throw new RuleSyntaxError(at, `at most ${RULE_LIMITS.conditions} conditions in one expression`, 'one more');
  }

  private comparison(): RuleExpr {
    const start = this.peek();
    if (start.t === 'word' && (start.v === 'starts_with' || start.v === 'ends_with')) {
      this.next();
      this.count(start.at);
      this.expect('(');
      const o = this.operand();
      if (o.type !== 'string') throw new RuleSyntaxError(o.at, `a text field as the first argument of ${start.v}()`, `a field of type ${o.type}`);
      this.expect(',');
      const v = this.string();
      this.expect(')');
      return { kind: 'string', op: start.v, operand: o.operand, values: [v] };
    }
    const o = this.operand();
    this.count(o.at);
    const opTok = this.peek();
    const op = (opTok.t === 'word' || opTok.t === 'punct') && Object.hasOwn(COMPARISONS, opTok.v) ? COMPARISONS[opTok.v]! : undefined;
    if (o.type === 'bool') {
      if (op !== undefined) throw new RuleSyntaxError(opTok.at, `no operator after ${(o.operand as { field: string }).field}, a true/false field (write "ssl" or "not ssl")`, describe(opTok));
      return { kind: 'bool', operand: o.operand };
    }
    if (op === undefined) throw new RuleSyntaxError(opTok.at, OPERATOR_LIST, describe(opTok));
    this.next();
    const allowed: Record<RuleValueType, string[]> = { string: ['eq', 'ne', 'contains', 'matches', 'in'], ip: ['eq', 'ne', 'in'], int: ['eq', 'ne', 'lt', 'le', 'gt', 'ge', 'in'], bool: [] };
    if (!allowed[o.type].includes(op)) throw new RuleSyntaxError(opTok.at, `an operator for a value of type ${o.type} (${allowed[o.type].join(', ')})`, describe(opTok));
    let e: RuleExpr;
    if (op === 'in') {
      e = this.list(o.type, o.operand);
    } else if (o.type === 'ip') {
      e = { kind: 'ip', operand: o.operand, values: [this.ip()] };
    } else if (o.type === 'int') {
      e = { kind: 'int', op: op === 'ne' ? 'eq' : (op as IntOp), operand: o.operand, values: [this.int()] };
    } else {
      const at = this.peek().at;
      const v = this.string();
      if (op === 'matches') {
        const problem = regexProblem(v, this.stored);
        if (problem) throw new RuleSyntaxError(at, 'a regular expression', `${JSON.stringify(v.slice(0, 40))}: ${problem}`);
        this.regexes.push(v);
      }
      e = { kind: 'string', op: op === 'ne' ? 'eq' : (op as StringOp), operand: o.operand, values: [v] };
    }
    return op === 'ne' ? { kind: 'not', expr: e } : e;
  }

  private list(type: RuleValueType, operand: RuleOperand): RuleExpr {
    this.expect('{');
    const values: (string | number)[] = [];
    while (!this.isPunct('}')) {
      const t = this.peek();
      if (t.t === 'end') throw new RuleSyntaxError(t.at, 'a value or "}"', describe(t));
      if (values.length >= RULE_LIMITS.listItems) throw new RuleSyntaxError(t.at, `at most ${RULE_LIMITS.listItems} values in one list`, 'more');
      values.push(type === 'ip' ? this.ip() : type === 'int' ? this.int() : this.string());
    }
    this.next();
    if (values.length === 0) throw new RuleSyntaxError(this.peek().at, 'at least one value in the list', 'an empty list');
    if (type === 'ip') return { kind: 'ip', operand, values: values as string[] };
    if (type === 'int') return { kind: 'int', op: 'eq', operand, values: values as number[] };
    return { kind: 'string', op: 'eq', operand, values: values as string[] };
  }

  private string(): string {
    const t = this.next();
    if (t.t !== 'string') throw new RuleSyntaxError(t.at, 'a string in double quotes', describe(t));
    if (t.v.length > RULE_LIMITS.stringValue) throw new RuleSyntaxError(t.at, `a string of at most ${RULE_LIMITS.stringValue} characters`, `one of ${t.v.length}`);
    return t.v;
  }

  private ip(): string {
    const t = this.next();
    if (t.t !== 'word' || !isCidr(t.v)) throw new RuleSyntaxError(t.at, 'an IP address or CIDR range, without quotes (e.g. 192.0.2.0/24)', describe(t));
    return canonicalCidr(t.v)!;
  }

  private int(): number {
    const t = this.next();
    if (t.t !== 'word' || !/^[0-9]{1,10}$/.test(t.v) || Number(t.v) > RULE_LIMITS.number) {
      throw new RuleSyntaxError(t.at, `a whole number from 0 to ${RULE_LIMITS.number}`, describe(t));
    }
    return Number(t.v);
  }
}

/**
 * Parses and checks an expression. Errors are values: the 0-based offset, what was expected there
 * and a sentence for the user ("at column 12: expected ..., found ..."). `stored`: an expression
 * the API accepted before, as the renderer reads it: a check added since (portabilityProblem)
 * does not refuse it, so an upgrade never makes a shield server's configuration fail.
 */
export function parseRuleExpression(src: string, opts: { stored?: boolean } = {}): RuleParse {
  if (typeof src !== 'string' || src.trim() === '') return { ok: false, position: 0, expected: 'an expression', message: 'at column 1: expected an expression, found nothing' };
  if (src.length > RULE_LIMITS.expression) {
    return {
      ok: false,
      position: RULE_LIMITS.expression,
      expected: `at most ${RULE_LIMITS.expression} characters`,
      message: `the expression has ${src.length} characters; the limit is ${RULE_LIMITS.expression}`,
    };
  }
  try {
    const p = new Parser(lex(src), opts.stored ?? false);
    const expr = p.parse();
    return { ok: true, expr, regexes: p.regexes };
  } catch (e) {
    if (e instanceof RuleSyntaxError) return { ok: false, position: e.position, expected: e.expected, message: e.message };
    throw e;
  }
}

/**
 * A request as the reference evaluator sees it: what HAProxy's fetches return for it, as byte
 * strings (one character per byte, as Node's latin1 decoding gives them); rule values are compared
 * as their UTF-8 bytes, as the proxy matches them.
 */
export interface RuleRequest {
  method: string;
  /** The path as sent (not decoded). */
  path: string;
  /** The query string after the first '?', undefined when the URL has none. */
  query?: string | undefined;
  /** Header fields in order, names as sent, values without surrounding blanks. */
  headers: readonly (readonly [string, string])[];
  src: string;
  /** The country of src, undefined when the country map has none. */
  country?: string | undefined;
  ssl: boolean;
}

const header = (req: RuleRequest, name: string) => req.headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);

/** The query's values of one argument: parts split at & and ;, the name followed by "=". */
function argValues(query: string | undefined, name: string): string[] {
  if (query === undefined) return [];
  return query
    .split(/[&;]/)
    .filter((p) => p.startsWith(`${name}=`))
    .map((p) => p.slice(name.length + 1));
}

/** The values of a field in this request: none when it has none, several for a repeated header. */
function fieldValues(req: RuleRequest, field: RuleField, key?: string): (string | boolean)[] {
  switch (field) {
    case 'http.host':
      return header(req, 'host');
    case 'http.request.method':
      return [req.method];
    case 'http.request.uri':
      return [req.query === undefined ? req.path : `${req.path}?${req.query}`];
    case 'http.request.uri.path':
      return [req.path];
    case 'http.request.uri.query':
      return req.query === undefined ? [] : [req.query];
    case 'http.request.uri.args':
      return argValues(req.query, key!);
    case 'http.request.headers':
      return header(req, key!);
    case 'http.cookie':
      return header(req, 'cookie');
    case 'http.user_agent':
      return header(req, 'user-agent');
    case 'http.referer':
      return header(req, 'referer');
    case 'ip.src':
      return [req.src];
    case 'ip.src.country':
      return req.country === undefined ? [] : [req.country];
    case 'ssl':
      return [req.ssl];
  }
}

/** ASCII-only lowercasing, as HAProxy's lower converter does. */
const asciiLower = (s: string) => s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));

function operandValues(req: RuleRequest, o: RuleOperand): (string | number | boolean)[] {
  if (o.kind === 'field') return fieldValues(req, o.field, o.key);
  const inner = operandValues(req, o.arg) as string[];
  return o.kind === 'lower' ? inner.map(asciiLower) : inner.map((s) => s.length);
}

function ipInCidr(ip: string, cidr: string): boolean {
  const [net, bitsText] = cidr.split('/');
  const a = ipBits(ip);
  const b = ipBits(net!);
  if (a === undefined || b === undefined || a.length !== b.length) return false;
  const bits = bitsText === undefined ? a.length : Number(bitsText);
  return a.slice(0, bits) === b.slice(0, bits);
}

/** A string's UTF-8 bytes, one character each. */
const utf8Bytes = (s: string) => String.fromCharCode(...new TextEncoder().encode(s));

/**
 * A comparison's values as UTF-8 bytes, made once per comparison (an `in` list of hundreds is then
 * a set lookup, however many requests or countries it is asked about).
 */
const encodedValues = new WeakMap<object, { list: string[]; set: Set<string> }>();
function valuesOf(e: Extract<RuleExpr, { kind: 'string' }>): { list: string[]; set: Set<string> } {
  let v = encodedValues.get(e);
  if (!v) {
    const list = e.values.map(utf8Bytes);
    v = { list, set: new Set(list) };
    encodedValues.set(e, v);
  }
  return v;
}

function holds(e: Extract<RuleExpr, { kind: 'string' | 'ip' | 'int' }>, v: string | number | boolean): boolean {
  if (e.kind === 'ip') return e.values.some((c) => ipInCidr(v as string, c));
  if (e.kind === 'int') {
    const n = v as number;
    const cmp = { eq: (x: number) => n === x, lt: (x: number) => n < x, le: (x: number) => n <= x, gt: (x: number) => n > x, ge: (x: number) => n >= x }[e.op];
    return e.values.some(cmp);
  }
  const s = v as string;
  const { list: values, set } = valuesOf(e);
  switch (e.op) {
    case 'eq':
      return set.has(s);
    case 'contains':
      return s.includes(values[0]!);
    case 'starts_with':
      return s.startsWith(values[0]!);
    case 'ends_with':
      return s.endsWith(values[0]!);
    case 'matches':
      return new RegExp(values[0]!).test(s);
  }
}

/**
 * The reference meaning of an expression for one request. A comparison holds when any value of
 * its field satisfies it; a field the request lacks (no query, no such header or argument, no
 * country) satisfies none, so `not` of it holds.
 */
export function evaluateRule(e: RuleExpr, req: RuleRequest): boolean {
  switch (e.kind) {
    case 'and':
      return evaluateRule(e.left, req) && evaluateRule(e.right, req);
    case 'or':
      return evaluateRule(e.left, req) || evaluateRule(e.right, req);
    case 'not':
      return !evaluateRule(e.expr, req);
    case 'bool':
      return operandValues(req, e.operand).some((v) => v === true);
    default:
      return operandValues(req, e.operand).some((v) => holds(e, v));
  }
}

/**
 * What a custom rule does when its expression matches: block (403), challenge (the bot
 * challenge), allow (skips bot protection, rate limits and attack detection; never the blacklist)
 * or log (the request goes on; the hit is logged).
 */
export const CUSTOM_RULE_ACTIONS = ['block', 'challenge', 'allow', 'log', 'rate_limit'] as const;
export type CustomRuleAction = (typeof CUSTOM_RULE_ACTIONS)[number];
export const CUSTOM_RULE_NAME_MAX = 100;

/**
 * A rate-limiting rule's settings: more than `requests` requests in `period` seconds from one
 * client (as `characteristics` tells clients apart) get the mitigation for `duration` seconds.
 */
export interface RuleRateLimit {
  requests: number;
  period: number;
  characteristics: string[];
  mitigation: 'block' | 'challenge';
  duration: number;
}
export const RULE_RATE_LIMITS = { requests: [1, 1_000_000], period: [10, 3600], duration: [10, 86_400] } as const;
const RATE_HEADER_RE = /^header:[a-z0-9_-]{1,64}$/;

/** The problem of a rateLimit object (naming its field), or undefined when it is valid. */
export function rateLimitProblem(r: unknown): string | undefined {
  if (typeof r !== 'object' || r === null || Array.isArray(r)) return 'rateLimit: must be an object with requests, period, characteristics, mitigation and duration';
  const o = r as Record<string, unknown>;
  const unknown = Object.keys(o).filter((k) => !['requests', 'period', 'characteristics', 'mitigation', 'duration'].includes(k));
  if (unknown.length) return `rateLimit.${unknown[0]}: unknown field`;
  for (const k of ['requests', 'period', 'duration'] as const) {
    const [min, max] = RULE_RATE_LIMITS[k];
    if (!Number.isInteger(o[k]) || (o[k] as number) < min || (o[k] as number) > max) return `rateLimit.${k}: must be a whole number from ${min} to ${max}`;
  }
  const c = o.characteristics;
  const ok = Array.isArray(c) && ((c.length === 1 && (c[0] === 'ip' || (typeof c[0] === 'string' && RATE_HEADER_RE.test(c[0])))) || (c.length === 2 && c[0] === 'ip' && c[1] === 'path'));
  if (!ok) return 'rateLimit.characteristics: must be ["ip"], ["ip", "path"] or ["header:<name>"] (a lowercase header name)';
  if (o.mitigation !== 'block' && o.mitigation !== 'challenge') return 'rateLimit.mitigation: must be block or challenge';
  return undefined;
}
