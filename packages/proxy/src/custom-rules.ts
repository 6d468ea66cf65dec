import {
  CUSTOM_RULE_ACTIONS,
  evaluateRule,
  EVENT_FIELD_MAX,
  ipBits,
  isIPv4,
  isUuid,
  parseRuleExpression,
  rateLimitProblem,
  type CustomRuleAction,
  type RuleExpr,
  type RuleOperand,
  type RuleRateLimit,
  type SnapshotCustomRule,
} from '@rampart/protocol';
import { UnsafeValueError } from './backend.js';
import { requestIdLine } from './waf-pages.js';

// The compiler of custom rules (the expression language of @rampart/protocol rule-language.ts) to
// native HAProxy: an expression becomes ACLs over sample fetches, in the shape HAProxy conditions
// take (or of ands of ACLs), and every value the user wrote goes into a per-rule pattern file,
// never into configuration text. Only the header and argument names a fetch takes are written as
// its argument, after the parser's strict check (letters, digits, '-', '_', '.'). No Lua runs for
// a custom rule, except the bot challenge of a matching `challenge` rule.

/** A named ACL as a condition takes it: `rp_r0_1`, `!rp_r0_1` when negated. */
type Literal = string;
/** A condition: an or of ands of ACLs. [] never holds; [[]] always does. */
type Dnf = Literal[][];

/**
 * HAProxy reads at most 64 words a line. A condition's terms each carry up to two words of their
 * own (a shared lookup's ACL, !rp_done and one more: customRuleLines) besides their ACLs, and the line's action takes 4.
 * A condition that would pass MAX_WORDS or MAX_TERMS has parts kept in variables instead.
 */
const MAX_WORDS = 56;
const TERM_WORDS = 3;
const MAX_TERMS = 8;
const words = (d: Dnf) => d.reduce((n, t) => n + t.length + TERM_WORDS, 0) + Math.max(0, d.length - 1);
const fits = (d: Dnf) => d.length <= MAX_TERMS && words(d) <= MAX_WORDS;

export interface CompiledCustomRule {
  id: string;
  action: CustomRuleAction;
  domainId: string | null;
  /** Its named ACLs (`acl rp_r<rule>_<n> ...` lines), declared before the lines that use them. */
  acls: string[];
  /** A rate-limiting rule's settings and the stick table it counts in (rampart_rl<index>). */
  rate?: { settings: RuleRateLimit; table: string; index: number };
  /** Parts of the condition kept in variables, set before the rule's own line (in this order). */
  steps: { variable: string; when: Dnf }[];
  when: Dnf;
  /** The fields its expression reads, as written in the language (an event's location). */
  fields: string[];
  /** Its ACLs that match a pattern file, by name: the test without the file, and the file's lines (planGuards). */
  lookups: Record<Literal, { test: string; lines: string[] }>;
}

/** The fields an expression reads, in order, each once: `http.request.uri.path`, `http.request.headers["x-token"]`. */
function fieldsOf(e: RuleExpr, out: string[] = []): string[] {
  switch (e.kind) {
    case 'and':
    case 'or':
      return fieldsOf(e.right, fieldsOf(e.left, out));
    case 'not':
      return fieldsOf(e.expr, out);
  }
  let o: RuleOperand = e.operand;
  while (o.kind !== 'field') o = o.arg;
  const name = o.key === undefined ? o.field : `${o.field}["${o.key}"]`;
  if (!out.includes(name)) out.push(name);
  return out;
}

const negate = (l: Literal): Literal => (l.startsWith('!') ? l.slice(1) : `!${l}`);

/**
 * Compiles one rule; `files` receives its pattern files (`rule<index>_<n>.pat` in `dir`). The
 * expression is parsed again here, whatever the API let through.
 */
function compileRule(rule: SnapshotCustomRule, index: number, dir: string, country: CountryRead | undefined, files: Record<string, string>): CompiledCustomRule {
  if (!isUuid(rule.id)) throw new UnsafeValueError('custom rule id', rule.id);
  if (!(CUSTOM_RULE_ACTIONS as readonly string[]).includes(rule.action)) throw new UnsafeValueError('custom rule action', rule.action);
  if (rule.domainId !== null && !isUuid(rule.domainId)) throw new UnsafeValueError('custom rule domain', rule.domainId);
  if ((rule.action === 'rate_limit') !== (rule.rateLimit !== undefined) || (rule.rateLimit && rateLimitProblem(rule.rateLimit))) throw new UnsafeValueError('custom rule rateLimit', rule.rateLimit);
  const parsed = parseRuleExpression(rule.expression, { stored: true });
  if (!parsed.ok) throw new UnsafeValueError('custom rule expression', rule.expression);
  const steps: CompiledCustomRule['steps'] = [];
  const acls: string[] = [];
  const lookups: CompiledCustomRule['lookups'] = {};
  const written = new Map<string, string[]>();
  let fileCount = 0;
  const patterns = (lines: string[]): string => {
    const name = `rule${index}_${fileCount++}.pat`;
    files[name] = lines.map((l) => `${l}\n`).join('');
    written.set(`${dir}/${name}`, lines);
    return `${dir}/${name}`;
  };
  const acl = (test: string): Literal => {
    const name = `rp_r${index}_${acls.length}`;
    acls.push(`    acl ${name} ${test}`);
    const m = LOOKUP.exec(test);
    if (m && written.has(m[2]!)) lookups[name] = { test: m[1]!, lines: written.get(m[2]!)! };
    return name;
  };
  // Every Dnf built here fits (a leaf's does); keep() takes one that fits and gives one literal.
  const keep = (d: Dnf): Dnf => {
    const variable = `txn.rp_v${index}_${steps.length}`;
    steps.push({ variable, when: d });
    return [[acl(`var(${variable}) -m bool`)]];
  };
  const single = (d: Dnf) => d.length === 1 && d[0]!.length <= 1;
  const or = (a: Dnf, b: Dnf): Dnf => {
    if (fits([...a, ...b])) return [...a, ...b];
    if (!single(a)) a = keep(a);
    if (fits([...a, ...b])) return [...a, ...b];
    return [...a, ...keep(b)];
  };
  const product = (a: Dnf, b: Dnf): Dnf => a.flatMap((x) => b.map((y) => [...x, ...y]));
  const and = (a: Dnf, b: Dnf): Dnf => {
    if (fits(product(a, b))) return product(a, b);
    if (words(a) >= words(b)) a = keep(a);
    else b = keep(b);
    if (fits(product(a, b))) return product(a, b);
    return product(single(a) ? a : keep(a), single(b) ? b : keep(b));
  };
  // Negations are pushed down to the ACLs (De Morgan), so a condition never needs parentheses.
  const compile = (e: RuleExpr, negated: boolean): Dnf => {
    switch (e.kind) {
      case 'and':
        return negated ? or(compile(e.left, true), compile(e.right, true)) : and(compile(e.left, false), compile(e.right, false));
      case 'or':
        return negated ? and(compile(e.left, true), compile(e.right, true)) : or(compile(e.left, false), compile(e.right, false));
      case 'not':
        return compile(e.expr, !negated);
      default: {
        const named = leaf(e, country, patterns).map(acl);
        if (!negated) return named.map((l) => [l]);
        return named.length === 0 ? [[]] : [named.map(negate)];
      }
    }
  };
  const when = compile(parsed.expr, false);
  const rate = rule.rateLimit ? { settings: rule.rateLimit, table: `rampart_rl${index}`, index } : undefined;
  return { id: rule.id, action: rule.action, domainId: rule.domainId, acls, steps, when, fields: fieldsOf(parsed.expr), lookups, ...(rate ? { rate } : {}) };
}

/** A test that looks a value up in a pattern file: what it matches with (fetch and method), and the file. */
const LOOKUP = /^(\S+(?: -m (?:str|beg|sub|end|reg))?) -f (\S+)$/;

/** Shared lookups of a domain's custom rules (planGuards). */
export interface GuardPlan {
  /** Pattern files, by name. */
  files: Record<string, string>;
  /** The lookups, each setting its variable, and their ACLs: after customRuleLines' own ACLs. */
  lines: string[];
  /** The ACL of the shared lookup that guards a rule, by rule id. */
  guardOf: Map<string, string>;
}

/**
 * One lookup for many rules. Rules that each need a positive match of the same family (one fetch
 * and a tree: a path prefix or exact path, an address range, a method, ...; or one value searched
 * with regular expressions: substrings, suffixes and expressions) in every part of their condition
 * share one lookup in the union of their patterns, made once a request: a request that matches
 * none of them skips all those rules with one variable check each, instead of one lookup each. The
 * lookup is a necessary condition only (its patterns match whatever each part's own do, and more),
 * so a rule still decides with its own ACLs. Only families that two rules or more share get a
 * lookup; `tag` names the files (one set per domain).
 */
export function planGuards(rules: readonly CompiledCustomRule[], dir: string, tag: string): GuardPlan {
  // The families every part (term) of a rule's condition needs a positive match of.
  const needs = new Map<CompiledCustomRule, string[]>();
  const shared = new Map<string, number>();
  for (const r of rules) {
    if (r.when.length === 0) continue;
    const families = r.when.map((t) => new Set(t.flatMap((l) => (r.lookups[l] ? [guardFamily(r.lookups[l])] : []))));
    const common = [...families[0]!].filter((k) => families.every((s) => s.has(k)));
    if (common.length === 0) continue;
    needs.set(r, common);
    for (const k of common) shared.set(k, (shared.get(k) ?? 0) + 1);
  }
  // Each rule joins the family most rules share (the first of them, for a stable plan).
  const groups = new Map<string, CompiledCustomRule[]>();
  for (const [r, families] of needs) {
    const best = families.reduce((a, b) => (shared.get(b)! > shared.get(a)! ? b : a));
    groups.set(best, [...(groups.get(best) ?? []), r]);
  }
  const plan: GuardPlan = { files: {}, lines: [], guardOf: new Map() };
  let n = -1;
  for (const [key, members] of groups) {
    if (members.length < 2) continue;
    n++;
    const patterns = members.map((r) => Object.values(r.lookups).filter((l) => guardFamily(l) === key));
    const map = candidateMap(
      key,
      patterns.map((ls) => ls.flatMap((l) => l.lines)),
    );
    if (map) {
      // A tree's lookup answers which of its rules could hold: ",<k>,..." for each member k.
      const name = `guard_${tag}_${n}.map`;
      plan.files[name] = map.lines.map((l) => `${l}\n`).join('');
      plan.lines.push(`    http-request set-var(txn.rp_g${n}) ${map.fetch},${map.converter}(${dir}/${name})`);
      members.forEach((r, k) => {
        plan.lines.push(`    acl rp_g${n}_${k} var(txn.rp_g${n}) -m sub ,${k},`);
        plan.guardOf.set(r.id, `rp_g${n}_${k}`);
      });
      continue;
    }
    const name = `guard_${tag}_${n}.pat`;
    const lines = guardLines(patterns.flat());
    plan.files[name] = lines.map((l) => `${l}\n`).join('');
    plan.lines.push(`    http-request set-var(txn.rp_g${n}) bool(1) if { ${key} -f ${dir}/${name} }`, `    acl rp_g${n} var(txn.rp_g${n}) -m found`);
    for (const r of members) plan.guardOf.set(r.id, `rp_g${n}`);
  }
  return plan;
}

/**
 * The map of a tree family's shared lookup (prefixes, exact values joined as prefixes, or address
 * ranges), when its patterns can be map keys: each pattern to the members (`,<k>,` for the k-th
 * of `members`, each member's patterns) that a request finding that pattern could satisfy. HAProxy
 * answers a prefix or an address with the longest pattern that holds it, and every other pattern
 * that holds the request then holds that one too (prefixes of one string are prefixes of each
 * other; address ranges nest), so a pattern's members are those of every pattern holding it,
 * itself included. A request that matches a member's pattern then finds that member in the answer;
 * the member's own tests still decide. Undefined for a search, for a pattern with a blank (a map
 * key ends at the first one), and for IPv4 and IPv6 ranges together (HAProxy looks an address up in
 * the tree of its own family first).
 */
export function candidateMap(key: string, members: readonly (readonly string[])[]): { fetch: string; converter: string; lines: string[] } | undefined {
  const beg = / -m beg$/.exec(key);
  const ip = key === 'src';
  if (!beg && !ip) return undefined;
  const owners = new Map<string, Set<number>>();
  members.forEach((patterns, k) => patterns.forEach((p) => owners.set(p, (owners.get(p) ?? new Set()).add(k))));
  const keys = [...owners.keys()];
  if (keys.some((p) => /\s/.test(p))) return undefined;
  // What the tree matches by prefix: the text, or an address range's first bits.
  const prefixes = new Map(keys.map((p) => [p, beg ? p : rangeBits(p)] as const));
  if (ip) {
    const families = new Set(keys.map((p) => (isIPv4(p.split('/')[0]!) ? 4 : 6)));
    if ([...prefixes.values()].some((b) => b === undefined) || families.size > 1) return undefined;
  }
  const byPrefix = new Map<string, string[]>();
  for (const [p, b] of prefixes) byPrefix.set(b!, [...(byPrefix.get(b!) ?? []), p]);
  const lines = keys.map((p) => {
    // the patterns whose prefix starts this one's (the /0 range's is empty), itself included
    const b = prefixes.get(p)!;
    const holders = Array.from({ length: b.length + 1 }, (_, i) => byPrefix.get(b.slice(0, i)) ?? []).flat();
    const ks = [...new Set(holders.flatMap((q) => [...owners.get(q)!]))].sort((x, y) => x - y);
    return `${p} ,${ks.join(',')},`;
  });
  return { fetch: beg ? key.slice(0, beg.index) : key, converter: beg ? 'map_beg' : 'map_ip', lines };
}

/** The first bits of an address or range as HAProxy reads it ("10.0.0.0/8": 8 bits); undefined for anything else. */
function rangeBits(text: string): string | undefined {
  const [addr = '', len] = text.split('/');
  const bits = ipBits(addr);
  if (bits === undefined) return undefined;
  const n = len === undefined ? bits.length : Number(len);
  return Number.isInteger(n) && n >= 0 && n <= bits.length && len !== '' ? bits.slice(0, n) : undefined;
}

type Lookup = CompiledCustomRule['lookups'][string];

/** A search with regular expressions: the fetch, whether it is lowered first, and the method. */
const SEARCH = /^(\S+?)(,lower)? -m (sub|end|reg)$/;

/**
 * Whether an expression that matches a lowered value also matches the value itself when searched
 * without case: not when it holds a negated class ([^A-Z] refuses what a lowered value never has),
 * a negative lookaround, or a character property (\p{Ll}: PCRE2 does not fold case for those),
 * nor when it cannot be one branch of a larger expression.
 */
const caselessHolds = (re: string) => BRANCHABLE(re) && !/\[\^|\(\?<?!|\\[pP]/.test(re);

/**
 * The shared lookup a rule's lookup can join: the test (fetch and method) of its family. A tree lookup
 * joins its own test; an exact value also starts with itself, so `-m str` joins `-m beg` of the same
 * fetch. Searches join one regular expression on their fetch: a lowered value's substrings and
 * suffixes, and its expressions that keep their meaning without case, as caseless branches; the
 * path's and the query's substrings and suffixes as substrings of the path with its query (pathq).
 */
function guardFamily(l: Lookup): string {
  const m = SEARCH.exec(l.test);
  if (!m) return l.test.replace(/ -m str$/, ' -m beg');
  const [, fetch, lower, method] = m;
  if (method === 'reg') return lower && !l.lines.every(caselessHolds) ? l.test : `${fetch} -m reg`;
  return `${fetch === 'path' || fetch === 'query' ? 'pathq' : fetch} -m reg`;
}

/** The longest line of a combined pattern (HAProxy reads a pattern file line by line). */
const GUARD_LINE_MAX = 4000;

/**
 * The pattern file of a shared lookup. A tree lookup's is the union of the patterns. A search's
 * is one regular expression of alternatives (in as few lines as fit): PCRE2 skips to where one
 * could start, where HAProxy's substring match scans the value once per pattern, and a list of
 * expressions runs each in turn; an expression that cannot be a branch keeps a line of its own.
 */
export function guardLines(lookups: Lookup[]): string[] {
  const branches: string[] = [];
  const alone: string[] = [];
  const tree: string[] = [];
  for (const l of lookups) {
    const m = SEARCH.exec(l.test);
    if (!m) {
      tree.push(...l.lines);
      continue;
    }
    const [, fetch, lower, method] = m;
    const moved = method !== 'reg' && (fetch === 'path' || fetch === 'query');
    // A lowered value's branches search without case, unless its family is the lowered value itself.
    const open = lower && guardFamily(l) !== l.test ? '(?i:' : '(?:';
    for (const p of l.lines) {
      const re = method === 'reg' ? p : `${escapeRegex(p)}${method === 'end' && !moved ? '$' : ''}`;
      if (method === 'reg' && !BRANCHABLE(p)) alone.push(p);
      else branches.push(`${open}${re})`);
    }
  }
  if (tree.length) return [...new Set(tree)];
  const lines: string[] = [];
  let current: string[] = [];
  const flush = () => {
    if (current.length) lines.push(current.join('|'));
    current = [];
  };
  for (const b of new Set(branches)) {
    if (current.length && current.reduce((n, c) => n + c.length + 1, b.length + 1) > GUARD_LINE_MAX) flush();
    current.push(b);
  }
  flush();
  return [...lines, ...new Set(alone)];
}

/** Every character of a literal that a regular expression gives a meaning to, escaped. */
const escapeRegex = (literal: string) => literal.replace(/[^A-Za-z0-9_ ]/g, '\\$&');

/**
 * A user's regular expression that keeps its meaning as one branch of a larger one: no
 * backreference or named group (their numbers and names would clash), no verb or \Q (which
 * belong to a whole pattern), no inline option (extended mode would read the rest as a comment).
 */
const BRANCHABLE = (re: string) => !/\\[1-9gkQ]|\(\*|\(\?(?![:=!]|<[=!])|\(\?P/.test(re);

/**
 * How custom rules read the client's country: `map`, a CIDR map HAProxy looks the address up in;
 * its values are country codes, or, with `classes`, the class of each country (countryClasses).
 */
export interface CountryRead {
  map: string;
  classes?: ReadonlyMap<string, string> | undefined;
}

/**
 * A test of the client's country that a map of classes answers: a comparison of a custom rule
 * whose operand is ip.src.country (any operator, through lower() and len() too), or a domain's
 * refused countries (refusedCountries). Countries are finitely many, so which of them a test holds
 * for is known before any request.
 */
export type CountryTest = Extract<RuleExpr, { kind: 'string' | 'int' }>;

/** The test of a domain's refused countries: `ip.src.country in {...}`. */
export const refusedCountries = (countries: readonly string[]): CountryTest => ({ kind: 'string', op: 'eq', operand: { kind: 'field', field: 'ip.src.country' }, values: [...countries] });

/** The field an operand reads, through lower() and len(). */
function operandField(o: RuleOperand): string {
  while (o.kind !== 'field') o = o.arg;
  return o.field;
}

/** Whether a country satisfies a test: as the reference evaluator decides (which the differential test holds HAProxy to). */
export function countryHolds(test: CountryTest, country: string): boolean {
  return evaluateRule(test, { method: 'GET', path: '/', headers: [], src: '0.0.0.0', country, ssl: false });
}

/** A test as text, the same for the same test (a list's values in any order, repeated or not). */
export const countryTestKey = (t: CountryTest): string => JSON.stringify(t.kind === 'string' && t.op === 'eq' ? { ...t, values: [...new Set(t.values)].sort() } : t);

/** Tests that are the same test once (a server-wide set of countries is every domain's test). */
export function distinctCountryTests(tests: readonly CountryTest[]): CountryTest[] {
  return [...new Map(tests.map((t) => [countryTestKey(t), t] as const)).values()];
}

/** The tests of the country in custom rules: every comparison whose operand is ip.src.country, each of its own (a rule may read the country twice). */
export function countryTests(rules: readonly Pick<SnapshotCustomRule, 'expression'>[]): CountryTest[] {
  const out: CountryTest[] = [];
  const walk = (e: RuleExpr): void => {
    if (e.kind === 'and' || e.kind === 'or') {
      walk(e.left);
      walk(e.right);
    } else if (e.kind === 'not') walk(e.expr);
    else if ((e.kind === 'string' || e.kind === 'int') && operandField(e.operand) === 'ip.src.country') out.push(e);
  };
  for (const r of rules) {
    const parsed = parseRuleExpression(r.expression, { stored: true });
    if (parsed.ok) walk(parsed.expr);
  }
  return out;
}

/**
 * The classes of countries for a map that answers every test (countryTests, refusedCountries):
 * two countries are in one class when every test holds for both or for neither, so a map of
 * classes has fewer lines than a map of the countries themselves (neighbours of one class need no
 * line between them). Countries no test holds for get no class (the map gives them none). Class
 * ids are `c` and three digits (four past 1,000 classes): lower() leaves them as they are.
 */
export function countryClasses(tests: readonly CountryTest[], countries: Iterable<string>): Map<string, string> {
  const distinct = distinctCountryTests(tests);
  const bySignature = new Map<string, string[]>();
  for (const country of [...new Set(countries)].sort()) {
    const signature = distinct.map((t) => (countryHolds(t, country) ? '1' : '0')).join('');
    if (!signature.includes('1')) continue;
    const members = bySignature.get(signature);
    if (members) members.push(country);
    else bySignature.set(signature, [country]);
  }
  const out = new Map<string, string>();
  [...bySignature.values()].forEach((members, i) => members.forEach((c) => out.set(c, `c${String(i).padStart(3, '0')}`)));
  return out;
}

/** The sample fetch of an operand, or undefined when this shield server cannot read it (no country map). */
function fetchOf(o: RuleOperand, country: CountryRead | undefined): string | undefined {
  if (o.kind !== 'field') {
    const inner = fetchOf(o.arg, country);
    return inner === undefined ? undefined : `${inner},${o.kind === 'lower' ? 'lower' : 'length'}`;
  }
  switch (o.field) {
    case 'http.host':
      return 'req.fhdr(host)';
    case 'http.request.method':
      return 'method';
    case 'http.request.uri':
      return 'pathq';
    case 'http.request.uri.path':
      return 'path';
    case 'http.request.uri.query':
      return 'query';
    case 'http.request.uri.args':
      return `url_param(${checkedName(o.key!, /^[A-Za-z0-9_.-]{1,64}$/)})`;
    case 'http.request.headers':
      return `req.fhdr(${checkedName(o.key!, /^[a-z0-9_-]{1,64}$/)})`;
    case 'http.cookie':
      return 'req.fhdr(cookie)';
    case 'http.user_agent':
      return 'req.fhdr(user-agent)';
    case 'http.referer':
      return 'req.fhdr(referer)';
    case 'ip.src':
      return 'src';
    case 'ip.src.country':
      return country === undefined ? undefined : `src,map_ip(${country.map})`;
    case 'ssl':
      return 'ssl_fc';
  }
}

function checkedName(name: string, re: RegExp): string {
  if (!re.test(name)) throw new UnsafeValueError('header or argument name', name);
  return name;
}

/**
 * A value a pattern file holds as it is: HAProxy reads a file line by line, strips leading blanks,
 * skips empty lines and lines starting with '#', so only printable ASCII not starting with a blank
 * or '#' is written plain. Any other value (empty aside) is matched by an escaped regular expression.
 */
const PLAIN = /^[\x21-\x22\x24-\x7e][\x20-\x7e]*$/;

/** Every byte of the value's UTF-8 but letters, digits and '_' as \xHH: a regular expression that matches it literally. */
function literalRegex(value: string): string {
  return [...new TextEncoder().encode(value)].map((b) => (/[A-Za-z0-9_]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`)).join('');
}

/**
 * The tests (ACL bodies) of one comparison, any of which makes it hold (an or); none for one
 * that never holds. A comparison on a field the request lacks holds for none of them (HAProxy: no
 * sample).
 */
function leaf(e: Extract<RuleExpr, { kind: 'bool' | 'string' | 'ip' | 'int' }>, country: CountryRead | undefined, patterns: (lines: string[]) => string): string[] {
  const fetch = fetchOf(e.operand, country);
  if (fetch === undefined) return [];
  if (country?.classes && (e.kind === 'string' || e.kind === 'int') && operandField(e.operand) === 'ip.src.country') {
    // The map gives the address's class: the classes of the countries this test holds for.
    const ids = [...new Set([...country.classes].filter(([c]) => countryHolds(e, c)).map(([, k]) => k))].sort();
    return ids.length ? [`src,map_ip(${country.map}) -m str -f ${patterns(ids)}`] : [];
  }
  switch (e.kind) {
    case 'bool':
      return [fetch];
    case 'ip':
      return [`${fetch} -f ${patterns(e.values)}`];
    case 'int': {
      // Ranges of HAProxy's integer match: "n", "lo:hi", "lo:" ("lt 0" matches nothing).
      const ranges = e.values.flatMap((v) => ({ eq: [`${v}`], lt: v > 0 ? [`0:${v - 1}`] : [], le: [`0:${v}`], gt: [`${v + 1}:`], ge: [`${v}:`] })[e.op]);
      return ranges.length ? [`${fetch} -m int -f ${patterns(ranges)}`] : [];
    }
    case 'string': {
      if (e.op === 'matches') {
        const re = e.values[0]!;
        if (re === '') return [`${fetch} -m found`];
        // A leading blank or '#' would be lost from the file: an empty group in front keeps it.
        return [`${fetch} -m reg -f ${patterns([/^[ #]/.test(re) ? `(?:)${re}` : re])}`];
      }
      const tests: string[] = [];
      const empty = e.values.filter((v) => v === '');
      const plain = e.values.filter((v) => PLAIN.test(v));
      const other = e.values.filter((v) => v !== '' && !PLAIN.test(v));
      if (empty.length) tests.push(e.op === 'eq' ? `${fetch} -m len 0` : `${fetch} -m found`);
      const method = { eq: 'str', contains: 'sub', starts_with: 'beg', ends_with: 'end' }[e.op];
      if (plain.length) tests.push(`${fetch} -m ${method} -f ${patterns(plain)}`);
      if (other.length) {
        const shape = { eq: (r: string) => `^${r}$`, contains: (r: string) => r, starts_with: (r: string) => `^${r}`, ends_with: (r: string) => `${r}$` }[e.op];
        tests.push(`${fetch} -m reg -f ${patterns(other.map((v) => shape(literalRegex(v))))}`);
      }
      return tests;
    }
  }
}

/**
 * Every custom rule of a snapshot compiled (by priority, as they come), with their pattern files
 * and, for each rate-limiting rule, its stick table: the request rate over its period and the end
 * of a running mitigation (gpt0), per client as its characteristics tell them apart. Counters live
 * in memory, as the SPEC rate limiter's: a reload resets them.
 */
export function compileCustomRules(
  rules: readonly SnapshotCustomRule[],
  dir: string,
  country: CountryRead | undefined,
): { rules: CompiledCustomRule[]; files: Record<string, string>; sections: string[] } {
  const files: Record<string, string> = {};
  const compiled = rules.map((r, i) => compileRule(r, i, dir, country, files));
  const sections = compiled.flatMap((r) => {
    if (!r.rate) return [];
    const { period, duration, characteristics } = r.rate.settings;
    const type = characteristics[0] === 'ip' && characteristics.length === 1 ? 'ipv6' : 'string len 300';
    return [
      [`# Custom rate-limiting rule ${r.id}`, `backend ${r.rate.table}`, `    stick-table type ${type} size 100k expire ${Math.max(period, duration)}s store http_req_rate(${period}s),gpt0`].join(
        '\n',
      ),
    ];
  });
  if (compiled.length > 0) {
    files[RULE_FIELDS_MAP] = compiled.map((r) => `${r.id} ${locationOf(r.fields)}\n`).join('');
    // Every pair a request can hit (its first log rule or none, its decisive rule or none) has
    // room, so no entry is ever pushed out; entries do not expire (the agent reads differences).
    const logs = compiled.filter((r) => r.action === 'log').length;
    const size = Math.min(HITS_TABLE_MAX, (logs + 1) * (compiled.length - logs + 1));
    sections.push(
      [
        '# Hits of custom rules (docs/rules.md "Hits"): one entry per request a rule acted on, keyed',
        '# "<first log rule>|<decisive rule>" ("-" for none); the agent reads them every minute.',
        `backend ${HITS_TABLE}`,
        `    stick-table type string len ${HITS_KEY_LENGTH} size ${size} store http_req_cnt`,
      ].join('\n'),
    );
  }
  return { rules: compiled, files, sections };
}

/** Each rule's fields by rule id: the location of its events. */
export const RULE_FIELDS_MAP = 'rule_fields.map';

/** Fields joined by commas, as many whole ones as fit an event's location, percent-encoded as event fields travel. */
function locationOf(fields: readonly string[]): string {
  let text = '';
  for (const f of fields) {
    const next = text ? `${text},${f}` : f;
    if (next.length > EVENT_FIELD_MAX.location) break;
    text = next;
  }
  return encodeURIComponent(text || fields[0]!.slice(0, EVENT_FIELD_MAX.location));
}

/** The stick table counting the hits of custom rules (sticky counter 2). */
export const HITS_TABLE = 'rampart_hits';
/**
 * The entries of `show table rampart_hits` ("0x...: key=<key> use=0 exp=0 http_req_cnt=<n>"):
 * the requests counted under each key. Lines of another shape are skipped.
 */
export function parseRuleHits(showTable: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of showTable.split('\n')) {
    const key = /\bkey=(\S+)/.exec(line)?.[1];
    const n = /\bhttp_req_cnt=(\d+)/.exec(line)?.[1];
    if (key !== undefined && n !== undefined && Number.isSafeInteger(Number(n))) out.set(key, Number(n));
  }
  return out;
}

/** The rules a key of the hits table names: its first log rule and its deciding rule, each when there is one. */
export const rulesOfHitKey = (key: string): string[] => key.split('|').filter((id) => isUuid(id));

/** Two rule ids and their separator. */
const HITS_KEY_LENGTH = 36 + 1 + 36;
const HITS_TABLE_MAX = 100_000;

/**
 * The request's hit, counted in HITS_TABLE when `guard` holds: the key is the first log rule that
 * matched ("-" when none) and, after "|", the rule that decided (txn.rp_hd), if one did.
 */
function hitLines(guard: string, logs: boolean): string[] {
  const decided = `${guard} { var(txn.rp_hd) -m found }`;
  return [
    `    http-request set-var(txn.rp_hk) str(-) if ${guard}`,
    ...(logs ? [`    http-request set-var(txn.rp_hk) var(txn.rp_lg) if ${guard} rp_logged`] : []),
    `    http-request set-var(txn.rp_hk) var(txn.rp_hk),concat(|,txn.rp_hd) if ${decided}`,
    `    http-request track-sc2 var(txn.rp_hk) table ${HITS_TABLE} if ${guard}`,
  ];
}

/** What a rate-limiting rule counts by: the client (an IPv6 client by its /64, as the SPEC rate limiter), with the path, or a header's value. */
function rateKey(c: readonly string[]): string {
  if (c[0] === 'ip' && c[1] === 'path') return 'src,ipmask(32,64),concat(|,txn.rp_rlp)';
  if (c[0] === 'ip') return 'src,ipmask(32,64)';
  return `req.fhdr(${checkedName(c[0]!.slice('header:'.length), /^[a-z0-9_-]{1,64}$/)}),bytes(0,256)`;
}

/**
 * A rate-limiting rule: the first one whose expression matches a request counts it (in sticky
 * counter 1; the SPEC rate limiter has 0); a client past `requests` in `period` starts the
 * mitigation for `duration` seconds (the end of it kept in gpt0, compared with txn.rp_now, the
 * request's time): 429 with Retry-After (rate_limited, the rule's id), or the bot challenge for a
 * client without a valid pass cookie. Every line after the one that selects starts with the rule's
 * own variable check, so a request another rule counts (or none) passes each of them with one test.
 */
function rateLimitLines(r: CompiledCustomRule, challengeOn: boolean, open: (when: Dnf, extra?: string) => string): string[] {
  const { settings, table, index } = r.rate!;
  const mine = `rp_rl${index}`;
  const lines = [`    acl ${mine} var(txn.rp_rl) -m str ${index}`, `    http-request set-var(txn.rp_rl) str(${index}) if ${open(r.when, '!rp_limited')}`];
  if (settings.characteristics[1] === 'path') lines.push(`    http-request set-var(txn.rp_rlp) path,bytes(0,256) if ${mine}`);
  const left = 'sc_get_gpt0(1),sub(txn.rp_now)';
  lines.push(
    `    http-request track-sc1 ${rateKey(settings.characteristics)} table ${table} if ${mine}`,
    `    http-request sc-set-gpt0(1) var(txn.rp_now),add(${settings.duration}) if ${mine} { sc_http_req_rate(1) gt ${settings.requests} } { ${left} le 0 }`,
  );
  const mitigated = `${mine} { ${left} gt 0 }`;
  if (settings.mitigation === 'challenge' && challengeOn) return [...lines, `    http-request set-var(txn.rp_ch) str(${r.id}) if ${mitigated} !rp_pass`];
  return [...lines, `    http-request set-var(txn.rp_retry) ${left} if ${mitigated}`, `    http-request set-var(txn.rp_hit) str(rate_limited:${r.id}) if ${mine} { var(txn.rp_retry) -m found }`];
}

/** The bot challenge's argument that makes it take the rule from txn.rp_ch (rampart_waf.lua). */
const CHALLENGE_OF_VARIABLE = '-';

/** The reasons a custom rule decides with (the bot challenge's refusal of a wrong answer included). */
const HIT_PREFIXES = 'custom_rule_blocked: rate_limited: bot_challenge:';

/**
 * A condition whose every term is `first`, the term's own ACLs, then `last` (named ACLs, negated
 * or not): `if` takes it as it is. HAProxy stops a term at its first test that fails, so what fails
 * most often comes first: a shared lookup's variable, then the rule's own tests, and the checks that
 * nothing decided yet (which seldom fail) last.
 */
function condition(first: string, when: Dnf, last: string): string {
  return when.map((t) => [first, ...t, last].filter(Boolean).join(' ')).join(' or ');
}

/**
 * A domain's custom rules, in priority order, after the blacklist and countries and before bot
 * protection. The first decisive match wins: block sets the hit (the backend's answer block
 * answers 403), allow sets the whitelist variable (later rules and steps skip the request),
 * challenge marks the request (txn.rp_ch) for the bot challenge, which runs after the last rule,
 * for a client without a valid pass cookie (with `challenge.on` false, as no key signs one:
 * block). A log rule decides nothing: the first one to match is the request's event
 * (custom_rule_logged, logged as let through) unless a later step refuses it. Every rule holds
 * only while nothing is decided (rp_done: a hit, whitelisted or challenged).
 *
 * Each rule is one line (two or more only when its condition is split into variables, or for a
 * rate-limiting rule's counting), since every line costs HAProxy time on every request.
 */
export function customRuleLines(rules: readonly CompiledCustomRule[], challenge: { on: boolean; answerPath: string }, dir: string, guards?: GuardPlan): string[] {
  const fieldsMap = `${dir}/${RULE_FIELDS_MAP}`;
  if (rules.length === 0) return [];
  // The first rule that can challenge answers the challenge's own path (below); with none, no challenge lines.
  const challenger = challenge.on ? rules.find((r) => r.action === 'challenge' || r.rate?.settings.mitigation === 'challenge') : undefined;
  const challenges = challenger !== undefined;
  const lines = [
    '    acl rp_done var(txn.rp_hit) -m found',
    '    acl rp_done var(txn.rp_wl) -m found',
    ...(challenges ? ['    acl rp_done var(txn.rp_ch) -m found'] : []),
    '    acl rp_pass var(txn.rp_cookie_ok) -m found',
    '    acl rp_logged var(txn.rp_lg) -m found',
    ...(rules.some((r) => r.rate) ? ['    acl rp_limited var(txn.rp_rl) -m found', '    http-request set-var(txn.rp_now) date'] : []),
    ...(guards?.lines ?? []),
  ];
  const logs = rules.some((r) => r.action === 'log');
  for (const r of rules) {
    if (r.when.length === 0) continue; // never holds
    // A rule with a shared lookup is skipped at its first test when the lookup found nothing.
    const g = guards?.guardOf.get(r.id) ?? '';
    const open = (when: Dnf, extra = '') => condition(g, when, `!rp_done${extra ? ` ${extra}` : ''}`);
    lines.push(...r.acls);
    for (const s of r.steps) lines.push(`    http-request set-var(${s.variable}) bool(1) if ${open(s.when)}`);
    if (r.action === 'rate_limit') lines.push(...rateLimitLines(r, challenge.on, open));
    // The whitelist sets it to true; an allow rule to its own id (36 characters), which counts its hit.
    else if (r.action === 'allow') lines.push(`    http-request set-var(txn.rp_wl) str(${r.id}) if ${open(r.when)}`);
    else if (r.action === 'log') lines.push(`    http-request set-var(txn.rp_lg) str(${r.id}) if ${open(r.when, '!rp_logged')}`);
    else if (r.action === 'challenge' && challenge.on) lines.push(`    http-request set-var(txn.rp_ch) str(${r.id}) if ${open(r.when, '!rp_pass')}`);
    else lines.push(`    http-request set-var(txn.rp_hit) str(custom_rule_blocked:${r.id}) if ${open(r.when)}`);
  }
  // The answer to a challenge comes to its own path, which the rule's expression need not match.
  if (challenger) lines.push(`    http-request lua.rampart_bot ${challenger.id} if !rp_done !rp_pass { path -m str ${challenge.answerPath} }`);
  // The request's hit: its first log rule, and the rule that decided it here. Steps before the
  // custom rules decide with other reasons (ip_blocked, country_blocked) and the whitelist with true.
  const decided = `{ var(txn.rp_hit) -m beg ${HIT_PREFIXES} }`;
  const challenged = '{ var(txn.rp_ch) -m found }';
  lines.push(
    `    acl rp_counted var(txn.rp_hit) -m beg ${HIT_PREFIXES}`,
    '    acl rp_counted var(txn.rp_wl) -m len 36',
    ...(challenges ? ['    acl rp_counted var(txn.rp_ch) -m found'] : []),
    ...(logs ? ['    acl rp_counted var(txn.rp_lg) -m found'] : []),
    `    http-request set-var(txn.rp_hd) var(txn.rp_hit),field(2,:) if ${decided}`,
    `    http-request set-var(txn.rp_hd) var(txn.rp_wl) if { var(txn.rp_wl) -m len 36 }`,
    ...(challenges ? [`    http-request set-var(txn.rp_hd) var(txn.rp_ch) if ${challenged}`] : []),
    ...hitLines('rp_counted', logs),
    // The event's location: the fields of the rule that decided, else of the first log rule.
    `    http-request set-var(txn.rp_loc) var(txn.rp_hd),map(${fieldsMap}) if { var(txn.rp_hd) -m found }`,
    ...(logs ? [`    http-request set-var(txn.rp_loc) var(txn.rp_lg),map(${fieldsMap}) if rp_logged !{ var(txn.rp_hd) -m found }`] : []),
    // The challenge of the rule that decided (the engine reads its id from txn.rp_ch): its page
    // ends the request here, its hit already counted.
    ...(challenges ? [`    http-request lua.rampart_bot ${CHALLENGE_OF_VARIABLE} if ${challenged}`] : []),
  );
  if (logs) {
    const logged = 'rp_logged !{ var(txn.rp_hit) -m found }';
    lines.push(
      `    http-request set-var(txn.rp_reason) str(custom_rule_logged) if ${logged}`,
      `    http-request set-var(txn.rp_rule) var(txn.rp_lg) if ${logged}`,
      `    http-request set-var(txn.rp_action) str(detect) if ${logged}`,
      `    http-request set-var(txn.rp_method) method,url_enc if ${logged}`,
      `    http-request set-var(txn.rp_path) path,bytes(0,256),url_enc if ${logged}`,
      `    http-request set-var(txn.rp_query) query,bytes(0,192),url_enc if ${logged}`,
      requestIdLine(logged),
      `    http-request set-log-level info if ${logged}`,
    );
  }
  return lines;
}
