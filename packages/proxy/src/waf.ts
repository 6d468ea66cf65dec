import { readFileSync } from 'node:fs';
import {
  blockBotOf,
  BOT_DIFFICULTY_DEFAULT,
  COMPRESSED_BODY_POLICIES,
  BOT_CHALLENGE_TTL_SECONDS,
  BOT_COOKIE_TTL_SECONDS,
  isIP,
  BOT_KEY_ID_PATTERN,
  checkRuleValue,
  findAiBot,
  SEARCH_CRAWLERS,
  isUuid,
  LATENCY_SAMPLE_EVERY,
  rateLimitOf,
  wafExceptionOf,
  WAF_LEVELS,
  WAF_MODES,
  type ServerSnapshot,
  type SnapshotDomain,
  type SnapshotRule,
} from '@rampart/protocol';
import { UnsafeValueError } from './backend.js';
import { compileCustomRules, customRuleLines, planGuards, type GuardPlan } from './custom-rules.js';
import { DETECT_LUA_FILES } from './detect-lua.js';
import { GATE_FILES, gateAcls } from './gate.js';
import { BOT_ANSWER_PATH, cookieKeys } from './pow.js';
import { answerFiles, REQUEST_ID_HEADER, REQUEST_ID_VAR, requestIdLine, TEXT_403, TEXT_429 } from './waf-pages.js';

// The proxy package's own assets: the Lua engines (the detectors' glue and every module it
// requires, detect-lua.ts) and the curated lists. Read once at load.
const asset = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
export const WAF_ASSETS: Readonly<Record<string, string>> = {
  'rampart_waf.lua': asset('lua/rampart_waf.lua'),
  ...Object.fromEntries(DETECT_LUA_FILES.map((name) => [name, asset(`lua/${name}`)])),
  'badbots.lst': asset('assets/badbots.lst'),
  'pow-worker.js': asset('assets/pow-worker.js'),
};

/**
 * The search crawlers' User-Agent tokens -> crawler id (map_sub on the lowercased header). A claim
 * alone passes nothing: the address must be in VERIFIED_CRAWLERS_MAP with the same id.
 */
const CRAWLER_CLAIMS_MAP = SEARCH_CRAWLERS.flatMap((c) => c.tokens.map((t) => `${t} ${c.id}\n`)).join('');
/**
 * Addresses the agent verified by forward-confirmed reverse DNS -> crawler id. Rendered from the
 * agent's cache and kept current through HAProxy's runtime API (`add map` / `del map`), no reload.
 */
export const VERIFIED_CRAWLERS_MAP = 'verified_crawlers.map';

/** The rate limiter's stick table: addresses tracked, idle time before one is forgotten, window. */
export const RATE_TABLE = 'rampart_rate';
export const RATE_TRACKED = 50000;
export const RATE_EXPIRE = '6m';
export const RATE_WINDOW = 60;
/**
 * What the rate limiter counts by: an IPv4 client by its address, an IPv6 client by its /64 (one
 * customer line: counting single addresses would let a line rotate through its 2^64 addresses
 * past any limit). docs/architecture.md "The WAF", step 4.
 */
export const RATE_KEY = 'src,ipmask(32,64)';

/**
 * Bytes of a request body level high waits for before the gate and the detectors look at it.
 * HAProxy's buffer stays at its default size (16 KB; a larger one multiplies the memory of every
 * connection), so what is inspected is the body as far as the buffer holds it after the request's
 * headers and HAProxy's 1 KB reserve: about 15 KB for an ordinary request (docs/architecture.md).
 */
export const BODY_INSPECT_LIMIT = 16384;

const HEX_RE = /^[0-9a-f]{32,128}$/;
const KEY_ID_RE = new RegExp(BOT_KEY_ID_PATTERN);

function checkId(id: string): string {
  if (!isUuid(id)) throw new UnsafeValueError('id', id);
  return id;
}

/** A Lua string literal. Every value is validated first; escaping is the second line of defence. */
export function luaString(s: string): string {
  return `"${s.replace(/[^A-Za-z0-9 _.:/@+=-]/g, (c) => `\\${c.charCodeAt(0).toString().padStart(3, '0')}`)}"`;
}

interface DomainWaf {
  domain: SnapshotDomain;
  index: number;
  allow: Map<string, string>;
  block: Map<string, string>;
  ai: Map<string, string>;
  countries: Map<string, string>;
  exceptions: string[];
}

/** CIDR -> rule id, the first (lowest priority number) rule winning for an identical key. */
function addFirst(map: Map<string, string>, key: string, id: string): void {
  if (!map.has(key)) map.set(key, id);
}

/**
 * The renderer's own check of every rule, whatever the API let through: its id is a UUID and its
 * value passes the same validator as on the way in (returned in canonical form).
 */
function checkedRules(rules: readonly SnapshotRule[]): SnapshotRule[] {
  return rules.map((r) => {
    checkId(r.id);
    const checked = checkRuleValue(r.type, r.value);
    if (!checked.ok) throw new UnsafeValueError(`${r.type} value`, r.value);
    return { ...r, value: checked.value };
  });
}

function checkDomainSettings(d: SnapshotDomain): void {
  checkId(d.id);
  if (typeof d.wafEnabled !== 'boolean') throw new UnsafeValueError('wafEnabled', d.wafEnabled);
  if (!(WAF_LEVELS as readonly string[]).includes(d.wafLevel)) throw new UnsafeValueError('wafLevel', d.wafLevel);
  if (d.wafMode !== undefined && !(WAF_MODES as readonly string[]).includes(d.wafMode)) throw new UnsafeValueError('wafMode', d.wafMode);
  if (d.wafCompressedBodies !== undefined && !(COMPRESSED_BODY_POLICIES as readonly string[]).includes(d.wafCompressedBodies)) {
    throw new UnsafeValueError('wafCompressedBodies', d.wafCompressedBodies);
  }
}

function collect(rules: readonly SnapshotRule[], domainId: string | null) {
  const allow = new Map<string, string>();
  const block = new Map<string, string>();
  const ai = new Map<string, string>();
  const countries = new Map<string, string>();
  const exceptions: string[] = [];
  for (const r of rules) {
    if (r.domainId !== domainId) continue;
    switch (r.type) {
      case 'waf_exception': {
        // Rendered as escaped Lua data: path prefix, location and detector are never syntax.
        const x = wafExceptionOf(r.value)!;
        const fields = [`path = ${luaString(x.path)}`];
        if (x.location !== undefined) fields.push(`loc = ${luaString(x.location)}`);
        if (x.detector !== undefined) fields.push(`det = ${luaString(x.detector)}`);
        exceptions.push(`{ ${fields.join(', ')} }`);
        break;
      }
      case 'allow_ip':
      case 'block_ip':
        addFirst(r.type === 'allow_ip' ? allow : block, r.value.toLowerCase(), r.id);
        break;
      case 'block_country':
        addFirst(countries, r.value, r.id);
        break;
      case 'block_ai_bot':
        addFirst(ai, findAiBot(r.value)!.pattern.toLowerCase(), r.id);
        break;
    }
  }
  return { allow, block, ai, countries, exceptions };
}

/**
 * The file of a configuration that names, for the agent, the rule behind each country a domain
 * refuses: `<domain> <CC> <rule id>` lines (HAProxy does not read it). The agent names the rule of
 * a country_blocked event from it and the address's country, so an event is named as the
 * configuration that refused the request has it, from the agent's start on (parseCountryRules).
 */
export const COUNTRY_RULES_FILE = 'country_rules.txt';

/** A configuration's COUNTRY_RULES_FILE: domain -> country -> rule id; lines of any other shape are skipped. */
export function parseCountryRules(text: string): Map<string, Map<string, string>> {
  const out = new Map<string, Map<string, string>>();
  for (const line of text.split('\n')) {
    const [domain, cc, id, extra] = line.split(' ');
    if (!domain || !cc || !id || extra !== undefined || !isUuid(id)) continue;
    if (!out.has(domain)) out.set(domain, new Map());
    if (!out.get(domain)!.has(cc)) out.get(domain)!.set(cc, id);
  }
  return out;
}

/**
 * The countries each domain with the WAF on refuses (its own block_country rules first, then the
 * server-wide ones it does not name), each with the rule that refuses it, by domain name. HAProxy
 * only learns that an address is in one of them (its class of countries, RenderOptions.
 * countryClasses, may hold others of the set); the agent names the rule of an event from this and
 * the address's country.
 */
export function countryBlocks(snapshot: Pick<ServerSnapshot, 'rules' | 'domains'>): Map<string, Map<string, string>> {
  const rules = checkedRules(snapshot.rules.filter((r) => r.type === 'block_country'));
  const global = collect(rules, null).countries;
  const out = new Map<string, Map<string, string>>();
  for (const d of snapshot.domains) {
    if (!d.wafEnabled) continue;
    const countries = union(collect(rules, d.id).countries, global);
    if (countries.size) out.set(d.domain, countries);
  }
  return out;
}

/** The verified crawler map: only addresses and crawler ids the protocol knows reach the file. */
export function verifiedCrawlersFile(entries: ReadonlyMap<string, string> | undefined): string {
  const known = new Set(SEARCH_CRAWLERS.map((c) => c.id));
  const lines: string[] = [];
  for (const [ip, id] of entries ?? []) {
    if (!isIP(ip) || !known.has(id)) throw new UnsafeValueError('verified crawler', `${ip} ${id}`);
    lines.push(`${ip} ${id}\n`);
  }
  return lines.join('');
}

/** A bot key as the Lua engine takes it: its id, the key (base64, for the challenge's HMAC) and the pass cookie's derived keys. */
function luaBotKey(k: { id: string; secret: string }): string {
  const { inner, outer } = cookieKeys(k.secret);
  return `{ id = ${luaString(k.id)}, secret = ${luaString(Buffer.from(k.secret, 'hex').toString('base64'))}, inner = ${luaString(inner)}, outer = ${luaString(outer)} }`;
}

/** The keys alone (the whitelist: its rule ids are never reported). */
const listFile = (m: Map<string, string>) => [...m.keys()].map((k) => `${k}\n`).join('');
const mapFile = (m: Map<string, string>, reason?: string) => [...m].map(([k, v]) => `${k} ${reason ? `${reason}:${v}` : v}`).join('\n') + (m.size ? '\n' : '');

export interface WafRender {
  files: Record<string, string>;
  global: string[];
  /** Sections of their own (the rate limiter's stick table). */
  sections: string[];
  frontend: string[];
  /** Lines for a domain's backend, before the request headers are set. */
  backend(domain: SnapshotDomain): string[];
}

/** A txn variable is set (`{ var(txn.<name>) -m found }`). */
const found = (name: string) => `{ var(txn.${name}) -m found }`;

/**
 * The WAF part of a shield server's configuration. Every decision is native (maps, ACLs, a stick
 * table, `return` pages); Lua runs only for what nothing native can do: the challenge page and its
 * answer (rampart_waf.lua), and the attack detectors at level high, behind a native gate
 * (gate.ts). Each domain's backend does only what that domain turned on (docs/architecture.md
 * "The WAF"); a domain with the WAF off, or with nothing to decide, gets no WAF line at all. Rules
 * and settings reach HAProxy only as map/list data and escaped Lua data.
 *
 * The processing order (first decisive step wins) is carried by one variable, txn.rp_hit
 * ("<reason>:<rule id>"), set by the first step that matches: every later step runs only while it
 * is unset, and one answer block at the end of the backend answers every refusal.
 */
export function renderWaf(
  snapshot: ServerSnapshot,
  dir: string,
  opts: {
    eventsPort?: number | undefined;
    eventsSecret?: string | undefined;
    countryMap?: string | undefined;
    countryClasses?: ReadonlyMap<string, string> | undefined;
    verifiedCrawlers?: ReadonlyMap<string, string> | undefined;
  },
): WafRender {
  const rules = checkedRules(snapshot.rules);
  const global = collect(rules, null);
  // Rules come by priority, so the first rate_limit is the one with the lowest number.
  const rate = rules.find((r) => r.type === 'rate_limit');
  const rateOn = !!rate && snapshot.domains.some((d) => d.wafEnabled && d.wafLevel !== 'low');
  const bot = rules.find((r) => r.type === 'block_bot' && blockBotOf(r.value)?.enabled);
  const botSettings = bot ? blockBotOf(bot.value) : undefined;
  const keys = snapshot.botKeys ?? [];
  for (const k of keys) {
    if (!KEY_ID_RE.test(k.id)) throw new UnsafeValueError('bot key id', k.id);
    if (!HEX_RE.test(k.secret)) throw new UnsafeValueError('bot key', '<redacted>');
  }
  // Bot protection needs a key to sign with; the settings of the enabled rule, when on.
  const botOn = bot && botSettings && keys.length > 0 ? botSettings : undefined;
  // Custom rules (custom-rules.ts): each domain's, with the server-wide ones, by priority.
  const custom = compileCustomRules(snapshot.customRules ?? [], dir, opts.countryMap === undefined ? undefined : { map: opts.countryMap, classes: opts.countryClasses });
  const customOf = (d: SnapshotDomain) => custom.rules.filter((r) => r.domainId === null || r.domainId === d.id);
  // A challenge rule runs the bot challenge, which needs a key to sign with.
  const challenging = (r: (typeof custom.rules)[number]) => r.action === 'challenge' || r.rate?.settings.mitigation === 'challenge';
  const challengeOn = keys.length > 0 && snapshot.domains.some((d) => d.wafEnabled && customOf(d).some(challenging));
  const signs = !!botOn || challengeOn;
  const anyHigh = snapshot.domains.some((d) => d.wafEnabled && d.wafLevel === 'high');

  const files: Record<string, string> = { ...WAF_ASSETS, ...answerFiles(dir), ...custom.files };
  if (global.allow.size) files['allow_global.lst'] = listFile(global.allow);
  if (global.block.size) files['block_global.map'] = mapFile(global.block, 'ip_blocked');
  if (botOn) {
    files['crawlers.map'] = CRAWLER_CLAIMS_MAP;
    files[VERIFIED_CRAWLERS_MAP] = verifiedCrawlersFile(opts.verifiedCrawlers);
  }
  if (signs) {
    // The pass cookie's derived keys by key id (pow.ts cookieKeys), for the native cookie check.
    files['bot_inner.map'] = keys.map((k) => `${k.id} ${cookieKeys(k.secret).inner}\n`).join('');
    files['bot_outer.map'] = keys.map((k) => `${k.id} ${cookieKeys(k.secret).outer}\n`).join('');
  }
  if (botOn?.paths) files['bot_paths.lst'] = botOn.paths.join('\n') + '\n';
  if (anyHigh) Object.assign(files, GATE_FILES);

  const perDomain = new Map<string, DomainWaf>();
  const countryRules: string[] = [];
  const guardPlans = new Map<string, GuardPlan>();
  snapshot.domains.forEach((d, index) => {
    checkDomainSettings(d);
    const c = collect(rules, d.id);
    perDomain.set(d.id, { domain: d, index, ...c });
    if (!d.wafEnabled) return;
    if (c.allow.size) files[`allow_d${index}.lst`] = listFile(c.allow);
    if (c.block.size) files[`block_d${index}.map`] = mapFile(c.block, 'ip_blocked');
    // One lookup a request for each of these: the domain's own rules first, then the server-wide
    // ones it does not name (its own rule wins for the same key, as priority order has it).
    const ai = union(c.ai, global.ai);
    if (ai.size) {
      files[`ai_d${index}.map`] = mapFile(ai, 'ai_bot_blocked');
      // Its names as one regex (case-insensitive): a pass over the User-Agent that tells whether the
      // map has anything to find, where map_sub searches for each name in turn.
      files[`ai_guard_d${index}.lst`] = `(?:${[...ai.keys()].map((k) => k.replace(/[^A-Za-z0-9_-]/g, '\\$&')).join('|')})\n`;
    }
    // The countries it refuses, as the values of the country map: their classes, or themselves.
    const refusing = union(c.countries, global.countries);
    const countries = [...refusing.keys()];
    const refused = new Set(opts.countryClasses ? countries.flatMap((k) => opts.countryClasses!.get(k) ?? []) : countries);
    if (opts.countryMap && refused.size) {
      files[`countries_d${index}.pat`] = [...refused].sort().join('\n') + '\n';
      // for the agent, not HAProxy: the rule of each refused country, for the events of this configuration
      countryRules.push(...[...refusing].map(([cc, id]) => `${d.domain} ${cc} ${id}\n`));
    }
    const guards = planGuards(customOf(d), dir, `d${index}`);
    Object.assign(files, guards.files);
    guardPlans.set(d.id, guards);
  });
  if (countryRules.length) files[COUNTRY_RULES_FILE] = countryRules.join('');

  // The bot challenge's settings for the Lua engine (only the challenge page and its answer).
  files['waf_data.lua'] = [
    "-- Generated by Rampart: this shield server's bot challenge settings. Do not edit.",
    'rampart_waf_configure({',
    `  bot = ${botOn ? luaString(bot!.id) : challengeOn ? luaString('custom') : 'nil'},`,
    `  keys = { ${signs ? keys.map(luaBotKey).join(', ') : ''} },`,
    `  difficulty = ${botOn ? botOn.difficulty : challengeOn ? BOT_DIFFICULTY_DEFAULT : 0},`,
    `  cookie_ttl = ${BOT_COOKIE_TTL_SECONDS},`,
    `  worker_file = ${luaString(`${dir}/pow-worker.js`)},`,
    `  challenge_ttl = ${BOT_CHALLENGE_TTL_SECONDS},`,
    '})',
    '',
  ].join('\n');
  // Loaded into every thread's own Lua state (lua-load-per-thread) next to the detectors.
  files['detect_data.lua'] = [
    "-- Generated by Rampart: attack detection settings of this shield server's level-high domains. Do not edit.",
    'rampart_detect_configure({',
    ...[...perDomain.values()]
      .filter((w) => w.domain.wafEnabled && w.domain.wafLevel === 'high')
      .map(
        (w) =>
          `  [${luaString(w.domain.id)}] = { mode = ${luaString(w.domain.wafMode ?? 'block')}, compressed = ${luaString(w.domain.wafCompressedBodies ?? 'refuse')}, exceptions = { ${w.exceptions.join(', ')} } },`,
      ),
    '})',
    '',
  ].join('\n');

  const frontend: string[] = [];
  if (opts.eventsPort !== undefined) {
    frontend.push(
      // Method, path and query arrive percent-encoded (url_enc natively, or by the Lua actions), and
      // so do location and excerpt: no field holds a blank. 4 KB fits the longest line (a path of
      // 256 bytes and a query of 192, every byte escaped). The query comes last: older agents read
      // lines without it, and newer ones lines of older proxies. Then the backend and the
      // request's total active time (%Ta, ms): the latency samples below are lines without a reason.
      `    log 127.0.0.1:${opts.eventsPort} len 4096 local0 info`,
      `    log-format "rampart-waf${opts.eventsSecret ? ` ${opts.eventsSecret}` : ''} %Ts %ci %[var(txn.rp_domain)] %[var(txn.rp_reason)] %[var(txn.rp_rule)] %[var(txn.rp_action)] %[var(txn.rp_method)] %[var(txn.rp_loc)] %[var(txn.rp_path)] %[var(txn.rp_match)] %[var(${REQUEST_ID_VAR})] %[var(txn.rp_claim)] %[var(txn.rp_query)] %b %Ta"`,
    );
  }
  // (No unique-id-format: the request id is made where an answer or an event line reads it, requestIdLine.)
  // Only WAF events are logged (each sets the level info), and one request in LATENCY_SAMPLE_EVERY,
  // at random, for its latency (staged rollout's p99 signal, docs/api.md "Rollout"). Without an
  // events port there is no log to silence.
  if (opts.eventsPort !== undefined) frontend.push(`    http-request set-log-level silent if !{ rand(${LATENCY_SAMPLE_EVERY}) -m int 0 }`);

  const global_: string[] = [];
  // HAProxy 2.6 copies every request's request line for the log once a frontend's log-format has
  // a sample expression (%[...]), which the event line needs; it shows no request line (its path
  // and query are variables), so the copy is cut to nothing: about 600 instructions a request,
  // 1,800 for the mix's longer ones (callgrind).
  if (opts.eventsPort !== undefined) global_.push('    tune.http.logurilen 1');
  // Lua runs in each thread's own state: no request ever waits for another thread's. The one
  // thing threads share, the rate limiter's counters, is a stick table. Loaded only when used.
  if (signs || anyHigh) global_.push(`    lua-load-per-thread ${dir}/rampart_waf.lua`, `    lua-load-per-thread ${dir}/waf_data.lua`);
  // The detectors' glue requires its modules (rampart_detect_*.lua, detect-lua.ts) from this
  // directory: the path is set before the glue is loaded (each thread's state reads it then).
  if (anyHigh) {
    global_.push(`    lua-prepend-path ${dir}/?.lua`, `    lua-load-per-thread ${dir}/rampart_detect.lua`, `    lua-load-per-thread ${dir}/detect_data.lua`);
  }

  return {
    files,
    global: global_,
    sections: [
      ...(rateOn
        ? [
            [
              '# The rate limiter: per client (an IPv4 address, an IPv6 /64), the start of its 60 s window',
              '# (gpt0) and its count (gpc0). At most RATE_TRACKED clients; one idle for RATE_EXPIRE is forgotten.',
              `backend ${RATE_TABLE}`,
              `    stick-table type ipv6 size ${RATE_TRACKED} expire ${RATE_EXPIRE} store gpt0,gpc0`,
            ].join('\n'),
          ]
        : []),
      ...custom.sections,
    ],
    frontend,
    backend(domain) {
      const w = perDomain.get(domain.id)!;
      if (!domain.wafEnabled) return []; // switched off: no checks at all; the rules stay stored
      const i = w.index;
      const allow = global.allow.size + w.allow.size > 0;
      const block = global.block.size + w.block.size > 0;
      const countries = !!files[`countries_d${i}.pat`];
      const ai = !!files[`ai_d${i}.map`];
      const limits = !!rate && domain.wafLevel !== 'low';
      const detects = domain.wafLevel === 'high';
      const customs = customOf(domain);
      if (!allow && !block && !countries && !ai && !botOn && !limits && !detects && !customs.length) return [];

      // Conditions: not whitelisted (only when there is a whitelist), and no step decided yet. A
      // step that decides sets txn.rp_hit to "<reason>:<rule id>" (its map's value, or a constant).
      const listed = allow || customs.some((r) => r.action === 'allow') ? ' !{ var(txn.rp_wl) -m found }' : '';
      const open = `${listed} !${found('rp_hit')}`;
      const lines: string[] = [];
      // Steps 1 and 2 look the client's address up; their lists are fixed for the life of this
      // HAProxy process, and a connection's address never changes. So a connection whose address
      // passed them for this domain (nothing listed, blocked or refused) is remembered
      // (sess.rp_ipdom), and its later requests to the domain skip the lookups: they run only under
      // txn.rp_ipn, set for an address not remembered (a test of a variable that is not set is the
      // cheapest a rule has, about 220 instructions).
      const addressed = allow || block || countries;
      const unknown = addressed ? ` ${found('rp_ipn')}` : '';
      // The domain's name (txn.rp_domain: the event line, the cookie, this memory) is set by a rule
      // of its own, or on the way by the test of that memory.
      if (addressed) lines.push(`    http-request set-var(txn.rp_ipn) bool(1) if !{ str(${domain.domain}),set-var(txn.rp_domain),strcmp(sess.rp_ipdom) eq 0 }`);
      else lines.push(`    http-request set-var(txn.rp_domain) str(${domain.domain})`);
      const decide = (lookup: string, cond = '') => lines.push(`    http-request set-var(txn.rp_hit) ${lookup} if${unknown}${open}${cond}`);

      // Step 1: the whitelist, server-wide and the domain's own; it bypasses every later step.
      const allowFiles = [global.allow.size ? `${dir}/allow_global.lst` : '', w.allow.size ? `${dir}/allow_d${i}.lst` : ''].filter(Boolean);
      if (allow) lines.push(`    http-request set-var(txn.rp_wl) bool(1) if${unknown} { src ${allowFiles.map((f) => `-f ${f}`).join(' ')} }`);
      // Step 2: the blacklist (the server-wide list first), then countries.
      if (global.block.size) decide(`src,map_ip(${dir}/block_global.map)`);
      if (w.block.size) decide(`src,map_ip(${dir}/block_d${i}.map)`);
      // (The rule is named by the agent when it reads the event: a class may hold several countries.)
      if (countries) decide('str(country_blocked:-)', ` { src,map_ip(${opts.countryMap}) -m str -f ${dir}/countries_d${i}.pat }`);
      if (addressed) lines.push(`    http-request set-var(sess.rp_ipdom) var(txn.rp_domain) if${unknown}${open}`);
      const challenges = challengeOn && customs.some(challenging);
      const cookie = botOn || challenges ? cookieCheck(dir, open) : undefined;
      lines.push(...(cookie?.check ?? []));
      // Then the custom rules, by priority (first decisive match wins).
      lines.push(...customRuleLines(customs, { on: challenges, answerPath: BOT_ANSWER_PATH }, dir, guardPlans.get(domain.id)));
      // Step 3: known-bad user-agents (with bot protection on), AI crawlers, then the challenge.
      if (botOn) {
        // Every User-Agent header counts: a bad bot in any of them is refused (the ACL checks each
        // occurrence). A valid cookie was earned with this very header (it is bound to it), so with
        // one header and a valid cookie the list is not searched again.
        // (The test that is false for an ordinary request comes first in every condition: HAProxy
        // stops at the first false one, and each test costs a few hundred instructions.)
        lines.push(
          `    http-request set-var(txn.rp_hit) str(bot_blocked:${bot!.id}) if !${found('rp_cookie_ok')}${open} { req.fhdr(user-agent) -m sub -i -f ${dir}/badbots.lst } or { req.fhdr_cnt(user-agent) gt 1 }${open} { req.fhdr(user-agent) -m sub -i -f ${dir}/badbots.lst }`,
        );
      }
      if (ai) {
        // The guard reads every User-Agent header, the map the last one: when the guard fires
        // (txn.rp_ai, the number of them), a crawler named in another of several (which a client
        // sends to hide it) is looked up in the header block.
        const named = found('rp_ai');
        // A request on the connection's remembered pass cookie shows the one User-Agent header that
        // passed this guard when the cookie was remembered (SEEN): it is not searched again.
        lines.push(
          `    http-request set-var(txn.rp_ai) req.fhdr_cnt(user-agent) if ${cookie ? `!${SEEN} ` : ''}{ req.fhdr(user-agent) -m reg -i -f ${dir}/ai_guard_d${i}.lst }${open}`,
          `    http-request set-var(txn.rp_hit) req.fhdr(user-agent),lower,map_sub(${dir}/ai_d${i}.map) if ${named}`,
          `    http-request set-var(txn.rp_hit) req.hdrs,lower,map_sub(${dir}/ai_d${i}.map) if { var(txn.rp_ai) -m int gt 1 } !${found('rp_hit')}`,
        );
      }
      if (cookie) lines.push(cookie.remember);
      if (botOn) {
        // A search crawler's claim (only with exactly one User-Agent header) passes when the agent
        // verified the address for that very crawler (FCrDNS; docs/bots.md).
        const unproven = ` !${found('rp_cookie_ok')}${open}`;
        // The claim (txn.rp_claim, which the event line shows) is stored as it is looked up.
        lines.push(
          `    http-request set-var(txn.rp_crawler) bool(1) if${unproven} { req.fhdr_cnt(user-agent) eq 1 } { req.fhdr(user-agent),lower,map_sub(${dir}/crawlers.map),set-var(txn.rp_claim) -m found } { src,map_ip(${dir}/${VERIFIED_CRAWLERS_MAP}),strcmp(txn.rp_claim) eq 0 }`,
        );
        const challenged = `${unproven} !${found('rp_crawler')}`;
        const where = botOn.paths ? [`${challenged} { path -m beg -f ${dir}/bot_paths.lst }`, `${challenged} { path -m str ${BOT_ANSWER_PATH} }`].join(' or') : challenged;
        // The challenge page (answered by the engine) or the check of its answer (a pass cookie,
        // or a refusal the answer block below gives).
        lines.push(`    http-request lua.rampart_bot ${bot!.id} if${where}`);
      }
      if (limits) {
        // Step 4, for requests steps 1 to 3 let through: a fixed 60 s window from the client's first
        // request, counted natively in the stick table (an IPv6 client by its /64, RATE_KEY).
        // A new client's entry holds no window start (gpt0 0) and a count of 0: only a window that
        // ran out is cleared. (Clearing a new entry too let two first requests on two threads race:
        // the second one's clear wiped what the first had counted.) Only this step tracks sc0, and
        // only for a request the earlier steps let through, so a fetch of sc0 (which fails when it
        // is not tracked) stands for all of that: each rule after the first tests one thing. The
        // window start is read in the condition of the rule that takes the age; sc_inc_gpc0 counts
        // the request and answers the new count.
        const expired = `{ var(txn.rp_age) -m int ge ${RATE_WINDOW} }`;
        lines.push(
          `    http-request track-sc0 ${RATE_KEY} table ${RATE_TABLE} if${open}`,
          `    http-request set-var(txn.rp_age) date,sub(txn.rp_wstart) if { sc_get_gpt0(0),set-var(txn.rp_wstart) -m found }`,
          `    http-request set-var(txn.rp_cleared) sc_clr_gpc0(0) if ${expired} { var(txn.rp_wstart) -m int gt 0 }`,
          `    http-request sc-set-gpt0(0) date if ${expired}`,
          `    http-request set-var(txn.rp_hit) str(rate_limited:${rate.id}) if { sc_inc_gpc0(0) gt ${rateLimitOf(rate.value)} }`,
        );
        // Retry-After: the seconds left in the window (the age is below 60 in a window that counts).
        // Only for this step's own decision: a custom rate-limiting rule's 429 has set its own.
        lines.push(`    http-request set-var(txn.rp_retry) int(${RATE_WINDOW}),sub(txn.rp_age) if { var(txn.rp_hit) -m str rate_limited:${rate.id} }`);
      }
      if (detects) {
        lines.push(
          // Step 5: the body is read (as far as the buffer holds it, BODY_INSPECT_LIMIT) before the
          // gate and the detectors look at it; a client that stops sending is not waited for more than 5 s.
          `    http-request wait-for-body time 5s at-least ${BODY_INSPECT_LIMIT} if${open} { req.hdr(content-length) -m found } or${open} { req.hdr(transfer-encoding) -m found }`,
          ...compressedBodies(domain, open),
          ...gateAcls(dir, open),
          // Only requests the gate picks can hold what a detector recognises (gate.ts), and bodies
          // the detectors inflate (the gate reads the compressed bytes); in block mode a finding
          // becomes a hit (rampart_waf.lua's rampart_waf_answer).
          `    http-request lua.rampart_detect ${domain.id} if ${found('rp_inflate')}${open} or${open} rp_gate`,
        );
      }
      lines.push(...answers(dir));
      return lines;
    },
  };
}

/**
 * Level high and a compressed request body (a Content-Encoding other than identity, in any of its
 * values, on a request that carries a body). One Content-Encoding header naming one coding the
 * detectors inflate (INFLATED_CODINGS: gzip and deflate) sets txn.rp_inflate, and the detectors
 * read the body as sent and inflated, within the body budget (rampart_detect.lua, D.inflations),
 * whatever its Content-Type. Any other coding (br, several codings, a coding in several headers)
 * no detector can read, so unless the domain allows such bodies (wafCompressedBodies "allow": they
 * pass with only their bytes as sent inspected) it is refused as compressed_body, or in detect mode
 * logged as such and let through (docs/detection.md "Compressed request bodies"); so is a gzip or
 * deflate body that does not inflate. A body in a
 * coding no detector reads whose one Content-Type is a binary format (BINARY_TYPES: protobuf, octet
 * streams, media) passes, as telemetry SDKs send them.
 */
function compressedBodies(domain: SnapshotDomain, open: string): string[] {
  // (a binary type matters only where an unreadable body is refused)
  const binary = `    http-request set-var(txn.rp_binct) bool(1) if { req.hdr(content-encoding) -m found }${open} { req.fhdr_cnt(content-type) eq 1 } { req.fhdr(content-type),lower -m beg ${BINARY_TYPES.join(' ')} }`;
  // (whatever the Content-Type: an image/svg+xml or application/octet-stream body is text an
  // application may read, and the detectors read it as they read it uncompressed)
  const inflated = `    http-request set-var(txn.rp_inflate) req.fhdr(content-encoding),lower if { req.fhdr_cnt(content-encoding) eq 1 }${open} { req.fhdr(content-encoding),lower -m str ${INFLATED_CODINGS.join(' ')} }`;
  if (domain.wafCompressedBodies === 'allow') return [inflated];
  // (a named ACL: the refusal's condition names it twice, and HAProxy reads at most 64 words a line)
  const coded = '    acl rp_coded req.hdr(content-encoding) -m reg -i ^(?!identity$).';
  const encoded = `rp_coded !${found('rp_binct')} !${found('rp_inflate')}`;
  const carried = `${open} ${encoded} { req.hdr(content-length) -m int gt 0 } or${open} ${encoded} { req.hdr(transfer-encoding) -m found }`;
  if (domain.wafMode !== 'detect') return [binary, inflated, coded, `    http-request set-var(txn.rp_hit) str(compressed_body:-) if${carried}`];
  const seen = found('rp_cz');
  return [
    binary,
    inflated,
    coded,
    `    http-request set-var(txn.rp_cz) bool(1) if${carried}`,
    `    http-request set-var(txn.rp_reason) str(compressed_body) if ${seen}`,
    `    http-request set-var(txn.rp_rule) str(-) if ${seen}`,
    `    http-request set-var(txn.rp_action) str(detect) if ${seen}`,
    `    http-request set-var(txn.rp_method) method,url_enc if ${seen}`,
    `    http-request set-var(txn.rp_path) path,bytes(0,256),url_enc if ${seen}`,
    `    http-request set-var(txn.rp_query) query,bytes(0,192),url_enc if ${seen}`,
    requestIdLine(seen),
    `    http-request set-log-level info if ${seen}`,
  ];
}

/** The codings the detectors inflate (x-gzip is gzip's old name); "deflate" is a zlib stream, or raw deflate. */
const INFLATED_CODINGS = ['gzip', 'x-gzip', 'deflate'];

/** Content-Types of binary formats: a compressed body of one of these is no evasion (compressedBodies). */
const BINARY_TYPES = ['application/x-protobuf', 'application/protobuf', 'application/vnd.google.protobuf', 'application/grpc', 'application/octet-stream', 'image/', 'audio/', 'video/'];

/** The condition that holds when a request passed on the connection's remembered pass cookie, with that one User-Agent header (cookieCheck). */
const SEEN = '{ var(txn.rp_cookie_ok) -m str seen }';

/**
 * The pass cookie "<key id>.<expiry>.<MAC>" checked natively: the MAC the Lua engine signs (pow.ts
 * passCookieMac, two SHA-256 with the key's derived keys from bot_inner.map and bot_outer.map),
 * over the domain (its configured name), the client's address, its User-Agent and the expiry. A
 * verified cookie is remembered for the connection (whose address cannot change) with its domain,
 * User-Agent and expiry (`remember`, placed after the steps that read the User-Agent), so later
 * requests to that domain showing that very cookie and that one User-Agent header pass on a few
 * comparisons, without hashing (rp_cookie_ok "seen"); a cookie past its expiry never passes.
 */
function cookieCheck(dir: string, open: string): { check: string[]; remember: string } {
  const fresh = ` !${found('rp_cookie_ok')}${open}`;
  // Every line here is passed by every request (a rule costs about 220 instructions even when its
  // first test fails), so values a later line reads are stored by set-var converters inside the
  // conditions that fetch them where the fetch has one value: the outer key (rp_ckout) and the
  // address (rp_ip) with the inner key, the inner hash (rp_ckinner, upper-case hex) on the way to
  // the outer one. The cookie and the User-Agent keep rules of their own: inside a condition a
  // fetch tries each occurrence in turn (several Cookie or User-Agent headers, a cookie named
  // twice) and stops at the first that matches, where the rule reads the last one, as the Lua
  // engine signs it.
  const shaped = `{ var(txn.rp_ck) -m reg ^[0-9a-z]{1,16}[.][0-9]{1,12}[.][0-9a-fA-F]{64}$ }`;
  const keyed = `${found('rp_ckexp')} { date,sub(txn.rp_ckexp) -m int lt 0 } { var(txn.rp_ck),field(1,.),map(${dir}/bot_outer.map),set-var(txn.rp_ckout) -m found } { src,set-var(txn.rp_ip) -m found }`;
  const inner = 'var(txn.rp_ckin),concat(|,txn.rp_domain,|),concat(,txn.rp_ip,|),concat(,txn.rp_ua,|),concat(,txn.rp_ckexp),sha2(256),hex,set-var(txn.rp_ckinner)';
  const mac = `${inner},bytes(0,0),concat(,txn.rp_ckout),concat(,txn.rp_ckinner),sha2(256),hex,lower`;
  // The session's cookie, User-Agent, domain and expiry, stored by set-var converters on the way
  // (bytes(0,0) empties the sample for the next concat): one rule for the four.
  const remembered = ['var(txn.rp_ck),set-var(sess.rp_okck)', 'concat(,txn.rp_ua),set-var(sess.rp_okua)', 'concat(,txn.rp_domain),set-var(sess.rp_okdom)', 'concat(,txn.rp_ckexp)'].join(
    ',bytes(0,0),',
  );
  return {
    check: [
      `    http-request set-var(txn.rp_cookie_ok) str(seen) if { req.cook(rampart_bot),strcmp(sess.rp_okck) eq 0 } { req.fhdr(user-agent),strcmp(sess.rp_okua) eq 0 } { var(txn.rp_domain),strcmp(sess.rp_okdom) eq 0 } { date,sub(sess.rp_okexp) -m int lt 0 } { req.fhdr_cnt(user-agent) eq 1 }`,
      `    http-request set-var(txn.rp_ck) req.cook(rampart_bot) if${fresh}`,
      `    http-request set-var(txn.rp_ckexp) var(txn.rp_ck),field(2,.) if${fresh} ${shaped}`,
      `    http-request set-var(txn.rp_ckin) var(txn.rp_ck),field(1,.),map(${dir}/bot_inner.map) if ${keyed}`,
      `    http-request set-var(txn.rp_ua) req.fhdr(user-agent) if ${found('rp_ckin')}`,
      `    http-request set-var(txn.rp_ckmac) ${mac} if ${found('rp_ckin')}`,
      `    http-request set-var(txn.rp_cookie_ok) bool(1) if ${found('rp_ckmac')} { var(txn.rp_ck),field(3,.),lower,strcmp(txn.rp_ckmac) eq 0 }`,
    ],
    // Only a request nothing refused or let through unchecked: the User-Agent it showed passed the
    // bad-bot and AI-crawler steps, which a request on the remembered cookie skips.
    remember: `    http-request set-var(sess.rp_okexp) ${remembered} if ${found('rp_ckmac')} ${found('rp_cookie_ok')}${open}`,
  };
}

/**
 * The answer to every refusal of a backend, natively: the event's log level, then the page
 * (browsers) or text, whose body sets the event line's fields and makes the request id (waf-pages.ts
 * HIT_FIELDS and ID); 429 with Retry-After. Every refusal is a hit
 * ("<reason>:<rule id>"): the native steps', the challenge answer's and, in block mode, the
 * detectors' (through rampart_waf_answer). A detection in detect-only mode is logged by the
 * detector and passes.
 */
function answers(dir: string): string[] {
  const hit = found('rp_hit');
  const limited = '{ var(txn.rp_hit) -m beg rate_limited: }';
  const html = '{ req.hdr(accept) -m sub -i text/html }';
  return [
    // (the event line's fields and the request id: set by the answer's body, below)
    `    http-request set-log-level info if ${hit}`,
    `    http-request return status 429 content-type "text/html; charset=utf-8" lf-file ${dir}/limited.html ${REQUEST_ID_HEADER} hdr retry-after %[var(txn.rp_retry)] if ${limited} ${html}`,
    `    http-request return status 429 content-type "text/plain; charset=utf-8" lf-string ${TEXT_429} ${REQUEST_ID_HEADER} hdr retry-after %[var(txn.rp_retry)] if ${limited}`,
    `    http-request return status 403 content-type "text/html; charset=utf-8" lf-file ${dir}/blocked.html ${REQUEST_ID_HEADER} if ${hit} ${html}`,
    `    http-request return status 403 content-type "text/plain; charset=utf-8" lf-string ${TEXT_403} ${REQUEST_ID_HEADER} if ${hit}`,
  ];
}

/** a's entries, then b's for keys a does not have. */
function union(a: Map<string, string>, b: Map<string, string>): Map<string, string> {
  const out = new Map(a);
  for (const [k, v] of b) if (!out.has(k)) out.set(k, v);
  return out;
}
