import { KEYED_RULE_FIELDS, parseRuleExpression, RULE_FIELDS, type RuleExpr, type RuleField, type RuleOperand, type RuleValueType } from '@rampart/protocol';

// The custom rule editor's builder (docs/rules.md "The language"): rows of field, operator and
// value joined with and/or, written out as expression text, and read back from the text the
// parser (the server's own) accepts. The text is the source of truth: an expression the rows
// cannot show (parentheses around an `or`, nested functions, a list value with a comma) is kept
// as it is and the builder says so. Pure functions, tested in test/rule-builder.test.ts.

/** A function a row applies to its field: none, lower() or len(). */
export type BuilderFn = '' | 'lower' | 'len';

export const BUILDER_OPS = [
  'eq',
  'ne',
  'contains',
  'not_contains',
  'matches',
  'not_matches',
  'starts_with',
  'not_starts_with',
  'ends_with',
  'not_ends_with',
  'in',
  'not_in',
  'lt',
  'le',
  'gt',
  'ge',
  'is_true',
  'is_false',
] as const;
export type BuilderOp = (typeof BUILDER_OPS)[number];

export const BUILDER_OP_LABELS: Record<BuilderOp, string> = {
  eq: 'equals',
  ne: 'does not equal',
  contains: 'contains',
  not_contains: 'does not contain',
  matches: 'matches regex',
  not_matches: 'does not match regex',
  starts_with: 'starts with',
  not_starts_with: 'does not start with',
  ends_with: 'ends with',
  not_ends_with: 'does not end with',
  in: 'is in',
  not_in: 'is not in',
  lt: 'less than',
  le: 'at most',
  gt: 'greater than',
  ge: 'at least',
  is_true: 'is true',
  is_false: 'is false',
};

/** The operators a value of each type takes (the parser's own table, with the negations spelled out). */
export const OPS_BY_TYPE: Record<RuleValueType, readonly BuilderOp[]> = {
  string: ['eq', 'ne', 'contains', 'not_contains', 'matches', 'not_matches', 'starts_with', 'not_starts_with', 'ends_with', 'not_ends_with', 'in', 'not_in'],
  ip: ['eq', 'ne', 'in', 'not_in'],
  int: ['eq', 'ne', 'lt', 'le', 'gt', 'ge', 'in', 'not_in'],
  bool: ['is_true', 'is_false'],
};

export interface BuilderRow {
  /** How this row joins the rows before it (`and` binds tighter than `or`); ignored on the first row. */
  join: 'and' | 'or';
  fn: BuilderFn;
  field: RuleField;
  /** The header or argument name of a keyed field, else ''. */
  key: string;
  op: BuilderOp;
  /** One value; for in / not in, the values separated by commas. */
  value: string;
}

export const BUILDER_FIELDS = Object.keys(RULE_FIELDS) as RuleField[];
export const isKeyed = (field: RuleField) => KEYED_RULE_FIELDS.includes(field);

/** The type of what a row compares: its field's, or len()'s number. */
export function rowType(r: Pick<BuilderRow, 'fn' | 'field'>): RuleValueType {
  return r.fn === 'len' ? 'int' : RULE_FIELDS[r.field];
}

/** Functions apply to text fields only. */
export const fnAllowed = (field: RuleField) => RULE_FIELDS[field] === 'string';

export function newRow(join: 'and' | 'or' = 'and'): BuilderRow {
  return { join, fn: '', field: 'http.request.uri.path', key: '', op: 'eq', value: '' };
}

/** A row after a change of field or function: the function and operator kept where they still apply. */
export function fitRow(r: BuilderRow): BuilderRow {
  const fn = fnAllowed(r.field) ? r.fn : '';
  const key = isKeyed(r.field) ? r.key : '';
  const ops = OPS_BY_TYPE[rowType({ fn, field: r.field })];
  return { ...r, fn, key, op: ops.includes(r.op) ? r.op : ops[0]! };
}

/** A string literal: in double quotes, `\` and `"` escaped (the language's only escapes). */
export function quote(s: string): string {
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/** A regular expression: a raw string r"..." when it has backslashes and no quote, so it reads as written. */
function regexLiteral(s: string): string {
  return s.includes('\\') && !s.includes('"') ? `r"${s}"` : quote(s);
}

/** The values of an in / not in row: commas apart (text), commas or blanks apart (addresses, numbers). */
export function listValues(r: Pick<BuilderRow, 'value'>, type: RuleValueType): string[] {
  return r.value
    .split(type === 'string' ? ',' : /[\s,]+/)
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

function operandText(r: BuilderRow): string {
  const field = isKeyed(r.field) ? `${r.field}[${quote(r.key)}]` : r.field;
  return r.fn ? `${r.fn}(${field})` : field;
}

/** One row as a condition of the language. */
export function conditionText(r: BuilderRow): string {
  const type = rowType(r);
  const o = operandText(r);
  const one = type === 'string' ? quote(r.value) : r.value.trim();
  const list = () =>
    `{${listValues(r, type)
      .map((v) => (type === 'string' ? quote(v) : v))
      .join(' ')}}`;
  switch (r.op) {
    case 'eq':
    case 'ne':
    case 'contains':
    case 'lt':
    case 'le':
    case 'gt':
    case 'ge':
      return `${o} ${r.op} ${one}`;
    case 'not_contains':
      return `not ${o} contains ${one}`;
    case 'matches':
      return `${o} matches ${regexLiteral(r.value)}`;
    case 'not_matches':
      return `not ${o} matches ${regexLiteral(r.value)}`;
    case 'starts_with':
    case 'ends_with':
      return `${r.op}(${o}, ${one})`;
    case 'not_starts_with':
    case 'not_ends_with':
      return `not ${r.op.slice(4)}(${o}, ${one})`;
    case 'in':
      return `${o} in ${list()}`;
    case 'not_in':
      return `not ${o} in ${list()}`;
    case 'is_true':
      return o;
    case 'is_false':
      return `not ${o}`;
  }
}

/** The expression the rows make: conditions joined by each row's and/or (`and` binding tighter, as the language reads it). */
export function rowsToText(rows: readonly BuilderRow[]): string {
  return rows.map((r, i) => (i === 0 ? conditionText(r) : `${r.join} ${conditionText(r)}`)).join(' ');
}

export type RowsFromText = { ok: true; rows: BuilderRow[] } | { ok: false; reason: string };

/** The rows an expression's text shows as, or why the builder cannot show it (a parse error: the parser's message). */
export function rowsFromText(text: string): RowsFromText {
  if (text.trim() === '') return { ok: true, rows: [] };
  const parsed = parseRuleExpression(text);
  if (!parsed.ok) return { ok: false, reason: parsed.message };
  return rowsFromExpr(parsed.expr);
}

class Unshowable extends Error {}

/** The rows of a parsed expression: an `or` of `and`s of conditions the rows can hold. */
export function rowsFromExpr(expr: RuleExpr): RowsFromText {
  const rows: BuilderRow[] = [];
  const ors: RuleExpr[] = [];
  const flatten = (e: RuleExpr, kind: 'and' | 'or', out: RuleExpr[]) => {
    if (e.kind === kind) {
      flatten(e.left, kind, out);
      flatten(e.right, kind, out);
    } else out.push(e);
  };
  flatten(expr, 'or', ors);
  try {
    for (const [i, group] of ors.entries()) {
      const ands: RuleExpr[] = [];
      flatten(group, 'and', ands);
      for (const [j, leaf] of ands.entries()) rows.push({ ...condition(leaf), join: i > 0 && j === 0 ? 'or' : 'and' });
    }
  } catch (e) {
    if (e instanceof Unshowable) return { ok: false, reason: e.message };
    throw e;
  }
  return { ok: true, rows };
}

function operandOf(o: RuleOperand): Pick<BuilderRow, 'fn' | 'field' | 'key'> {
  if (o.kind === 'field') return { fn: '', field: o.field, key: o.key ?? '' };
  if (o.arg.kind !== 'field') throw new Unshowable('a function of a function');
  return { fn: o.kind, field: o.arg.field, key: o.arg.key ?? '' };
}

/** A value the row's text input can hold as it is: one line; in a list, also no comma and no blanks around it. */
function fieldValue(v: string, inList: boolean): string {
  if (/[\r\n]/.test(v)) throw new Unshowable('a value on several lines');
  if (inList && (v.includes(',') || v !== v.trim() || v === '')) throw new Unshowable('a list value with a comma, blanks around it, or empty');
  return v;
}

function condition(e: RuleExpr): Omit<BuilderRow, 'join'> {
  const negated = e.kind === 'not';
  const outer = e.kind === 'not' ? e.expr : e;
  if (outer.kind === 'and' || outer.kind === 'or') throw new Unshowable(negated ? '"not" before parentheses' : `parentheses around an "${outer.kind}"`);
  if (outer.kind === 'not') throw new Unshowable('"not" twice');
  const inner = outer as Exclude<RuleExpr, { kind: 'and' | 'or' | 'not' }>;
  const operand = operandOf(inner.operand);
  if (inner.kind === 'bool') return { ...operand, op: negated ? 'is_false' : 'is_true', value: '' };
  const values = inner.values.map(String);
  const many = values.length > 1;
  const value = many ? values.map((v) => fieldValue(v, true)).join(', ') : fieldValue(values[0]!, false);
  if (inner.kind === 'ip' || inner.op === 'eq') {
    const op: BuilderOp = many ? (negated ? 'not_in' : 'in') : negated ? 'ne' : 'eq';
    return { ...operand, op, value };
  }
  if (inner.kind === 'int') {
    if (negated) throw new Unshowable(`"not" before ${inner.op}`);
    return { ...operand, op: inner.op, value };
  }
  return { ...operand, op: negated ? (`not_${inner.op}` as BuilderOp) : inner.op, value };
}

/** The part of the text before, at and after a 0-based position: the character marked in the editor. */
export function splitAt(text: string, position: number): { before: string; at: string; after: string } {
  const p = Math.max(0, Math.min(position, text.length));
  return { before: text.slice(0, p), at: text.slice(p, p + 1), after: text.slice(p + 1) };
}

// Run order and moving a rule up or down (docs/rules.md: priority, lower first; the same priority:
// the older rule first).

export interface Ordered {
  id: string;
  priority: number;
  createdAt: string;
}

const PRIORITY_MAX = 1_000_000;

function before(a: Ordered, b: Ordered): boolean {
  return a.priority !== b.priority ? a.priority < b.priority : a.createdAt < b.createdAt || (a.createdAt === b.createdAt && a.id < b.id);
}

/** Rules in the order they run. */
export function runOrder<T extends Ordered>(rules: readonly T[]): T[] {
  return [...rules].sort((a, b) => (before(a, b) ? -1 : before(b, a) ? 1 : 0));
}

/**
 * The priority changes that move rule `id` one place up (-1) or down (+1) among `shown` (the ids
 * of the rules on screen, in run order: a domain's page hides other domains' rules), the other
 * rules of `all` keeping their places. One change when a priority between its new neighbours
 * exists; otherwise every rule renumbered 10, 20, 30... in the new order (only the changed ones
 * returned). Empty when the rule is already first or last.
 */
export function moveRule(all: readonly Ordered[], shown: readonly string[], id: string, direction: -1 | 1): { id: string; priority: number }[] {
  const i = shown.indexOf(id);
  const past = shown[i + direction];
  if (i < 0 || past === undefined) return [];
  const order = runOrder(all);
  const moved = order.find((r) => r.id === id)!;
  const rest = order.filter((r) => r.id !== id);
  const at = rest.findIndex((r) => r.id === past) + (direction === 1 ? 1 : 0);
  const target = [...rest.slice(0, at), moved, ...rest.slice(at)];
  const prev = target[at - 1];
  const next = target[at + 1];
  const lo = prev?.priority ?? Math.max(0, (next?.priority ?? 0) - 20);
  const hi = next?.priority ?? Math.min(PRIORITY_MAX, (prev?.priority ?? 0) + 20);
  const candidates = [Math.floor((lo + hi) / 2), lo + 1, hi - 1, lo, hi].filter((p) => p >= 0 && p <= PRIORITY_MAX);
  for (const p of candidates) {
    const m = { ...moved, priority: p };
    if ((!prev || before(prev, m)) && (!next || before(m, next))) return p === moved.priority ? [] : [{ id, priority: p }];
  }
  return target.flatMap((r, k) => ((k + 1) * 10 === r.priority ? [] : [{ id: r.id, priority: (k + 1) * 10 }]));
}
