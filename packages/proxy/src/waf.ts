import { readFileSync } from 'node:fs';
import { blockBotOf, BOT_CHALLENGE_TTL_SECONDS, BOT_COOKIE_TTL_SECONDS, isIP, BOT_KEY_ID_PATTERN, checkRuleValue, findAiBot, SEARCH_CRAWLERS, isUuid, rateLimitOf, wafExceptionOf, WAF_LEVELS, WAF_MODES, type ServerSnapshot, type SnapshotDomain, type SnapshotRule } from '@rampart/protocol';
import { UnsafeValueError } from './backend.js';
import { cookieKeys } from './pow.js';

// The proxy package's own assets: the Lua engine and the curated lists. Read once at load.
const asset = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
export const WAF_ASSETS = {
  'rampart_waf.lua': asset('lua/rampart_waf.lua'),
  'rampart_detect.lua': asset('lua/rampart_detect.lua'),
  'badbots.lst': asset('assets/badbots.lst'),
  'pow-worker.js': asset('assets/pow-worker.js'),
} as const;

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
 * The request id every WAF answer carries (X-Rampart-Request-Id, the body, the event): 16 hex
 * digits from HAProxy's random UUID.
 */
export const REQUEST_ID_FORMAT = '%[uuid,regsub(-,,g),bytes(0,16)]';

/** Bytes of a request body the detectors read (rampart_detect.lua's BODY_LIMIT). */
export const BODY_INSPECT_LIMIT = 65536;

const HEX_RE = /^[0-9a-f]{32,128}$/;
const KEY_ID_RE = new RegExp(BOT_KEY_ID_PATTERN);

function checkId(id: string): string {
  if (!isUuid(id)) throw new UnsafeValueError('id', id);
  return id;
}

/** A Lua string literal. Every value is validated first; escaping is the second line of defence. */
export function luaString(s: string): string {
  return `"${s.replace(/[^A-Za-z0-9 _.:\/@+=-]/g, (c) => `\\${c.charCodeAt(0).toString().padStart(3, '0')}`)}"`;
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

const mapFile = (m: Map<string, string>) => [...m].map(([k, v]) => `${k} ${v}`).join('\n') + (m.size ? '\n' : '');

export interface WafRender {
  files: Record<string, string>;
  global: string[];
  /** Sections of their own (the rate limiter's stick table). */
  sections: string[];
  frontend: string[];
  /** Lines for a domain's backend, before the request headers are set. */
  backend(domain: SnapshotDomain): string[];
}

/**
 * The WAF part of a shield server's configuration: native lookups (IP maps, user-agent lists,
 * OWASP regexes) whose results land in txn variables, then one Lua action that applies docs/architecture.md's
 * processing order. Rules and settings reach HAProxy only as map/list data and escaped Lua data.
 */
export function renderWaf(
  snapshot: ServerSnapshot,
  dir: string,
  opts: { eventsPort?: number | undefined; eventsSecret?: string | undefined; countryMap?: string | undefined; verifiedCrawlers?: ReadonlyMap<string, string> | undefined },
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

  const files: Record<string, string> = { ...WAF_ASSETS };
  files['allow_global.map'] = mapFile(global.allow);
  files['block_global.map'] = mapFile(global.block);
  files['ai_global.map'] = mapFile(global.ai);
  if (botOn) {
    files['crawlers.map'] = CRAWLER_CLAIMS_MAP;
    files[VERIFIED_CRAWLERS_MAP] = verifiedCrawlersFile(opts.verifiedCrawlers);
    if (botOn.paths) files['bot_paths.lst'] = botOn.paths.join('\n') + '\n';
  }

  const perDomain = new Map<string, DomainWaf>();
  snapshot.domains.forEach((d, index) => {
    checkDomainSettings(d);
    const c = collect(rules, d.id);
    perDomain.set(d.id, { domain: d, index, ...c });
    if (c.allow.size) files[`allow_d${index}.map`] = mapFile(c.allow);
    if (c.block.size) files[`block_d${index}.map`] = mapFile(c.block);
    if (c.ai.size) files[`ai_d${index}.map`] = mapFile(c.ai);
  });

  const luaDomains = [...perDomain.values()]
    .map((w) => {
      const countries = [...w.countries].map(([cc, id]) => `${cc} = ${luaString(id)}`).join(', ');
      return `    [${luaString(w.domain.id)}] = { enabled = ${w.domain.wafEnabled}, level = ${luaString(w.domain.wafLevel)}, countries = { ${countries} } },`;
    })
    .join('\n');
  const globalCountries = [...global.countries].map(([cc, id]) => `${cc} = ${luaString(id)}`).join(', ');
  files['waf_data.lua'] = [
    '-- Generated by Rampart: this shield server\'s WAF settings. Do not edit.',
    'rampart_waf_configure({',
    '  domains = {',
    luaDomains,
    '  },',
    `  countries = { ${globalCountries} },`,
    `  bot = ${botOn ? luaString(bot!.id) : 'nil'},`,
    `  keys = { ${botOn ? keys.map(luaBotKey).join(', ') : ''} },`,
    `  difficulty = ${botOn ? botOn.difficulty : 0},`,
    `  all_paths = ${!botOn || botOn.paths === null},`,
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
      .map((w) => `  [${luaString(w.domain.id)}] = { mode = ${luaString(w.domain.wafMode ?? 'block')}, exceptions = { ${w.exceptions.join(', ')} } },`),
    '})',
    '',
  ].join('\n');

  const frontend: string[] = [];
  if (opts.eventsPort !== undefined) {
    frontend.push(
      `    log 127.0.0.1:${opts.eventsPort} len 1024 local0 info`,
      // Method, location, path and excerpt arrive percent-encoded by the Lua actions (no blanks).
      `    log-format "rampart-waf${opts.eventsSecret ? ` ${opts.eventsSecret}` : ''} %Ts %ci %[var(txn.rp_domain)] %[var(txn.rp_reason)] %[var(txn.rp_rule)] %[var(txn.rp_action)] %[var(txn.rp_method)] %[var(txn.rp_loc)] %[var(txn.rp_path)] %[var(txn.rp_match)] %[unique-id] %[var(txn.rp_claim)]"`,
    );
  }
  frontend.push(`    unique-id-format ${REQUEST_ID_FORMAT}`, '    http-request set-log-level silent');
  if (global.allow.size) frontend.push(`    http-request set-var(txn.rp_wl) src,map_ip(${dir}/allow_global.map)`);
  if (global.block.size) frontend.push(`    http-request set-var(txn.rp_bl) src,map_ip(${dir}/block_global.map)`);
  if (global.ai.size) frontend.push(`    http-request set-var(txn.rp_ai) req.fhdr(user-agent),lower,map_sub(${dir}/ai_global.map)`);
  if (opts.countryMap && rules.some((r) => r.type === 'block_country')) {
    frontend.push(`    http-request set-var(txn.rp_cc) src,map_ip(${opts.countryMap})`);
  }
  if (botOn) {
    // The pass cookie "<key id>.<expiry>.<MAC>" is verified by the Lua engine (rampart_waf.lua,
    // the same MAC it signs; pow.ts passCookieMac), which then keeps the verified cookie,
    // User-Agent and expiry in session variables: later requests on the same connection (whose
    // address cannot change) showing that very cookie with that very User-Agent pass here,
    // natively, without Lua or hashing.
    frontend.push(
      '    http-request set-var(txn.rp_cookie_ok) str(1) if { req.cook(rampart_bot),strcmp(sess.rp_okck) eq 0 } { req.fhdr(user-agent),strcmp(sess.rp_okua) eq 0 } { date,sub(sess.rp_okexp) -m int lt 0 }',
      // Every User-Agent header counts: a bad bot in any of them is refused (the ACL checks each
      // occurrence), and only a request with exactly one can claim to be a search crawler. A valid
      // cookie was earned by a client that passed this check with this very header (the cookie is
      // bound to it), so with one header and a valid cookie neither list is searched again.
      `    http-request set-var(txn.rp_badbot) str(1) if !{ var(txn.rp_cookie_ok) -m found } { req.fhdr(user-agent) -m sub -i -f ${dir}/badbots.lst } or { req.fhdr_cnt(user-agent) gt 1 } { req.fhdr(user-agent) -m sub -i -f ${dir}/badbots.lst }`,
      `    http-request set-var(txn.rp_claim) req.fhdr(user-agent),lower,map_sub(${dir}/crawlers.map) if !{ var(txn.rp_cookie_ok) -m found } { req.fhdr_cnt(user-agent) eq 1 }`,
      `    http-request set-var(txn.rp_vcrawler) src,map_ip(${dir}/${VERIFIED_CRAWLERS_MAP}) if { var(txn.rp_claim) -m found }`,
      '    http-request set-var(txn.rp_crawler) str(1) if { var(txn.rp_claim) -m found } { var(txn.rp_vcrawler),strcmp(txn.rp_claim) eq 0 }',
      ...(botOn.paths ? [`    http-request set-var(txn.rp_guarded) str(1) if { path -m beg -f ${dir}/bot_paths.lst }`] : []),
    );
  }

  return {
    files,
    global: [
      // A level-high domain's body is inspected up to BODY_INSPECT_LIMIT bytes: the buffer holds
      // it with the request headers (16 KiB by default).
      ...(snapshot.domains.some((d) => d.wafEnabled && d.wafLevel === 'high') ? ['    tune.bufsize 81920'] : []),
      // Both engines run in each thread's own Lua state: no request ever waits for another
      // thread's. The one thing threads share, the rate limiter's counters, is a stick table.
      `    lua-load-per-thread ${dir}/rampart_waf.lua`,
      `    lua-load-per-thread ${dir}/waf_data.lua`,
      `    lua-load-per-thread ${dir}/rampart_detect.lua`,
      `    lua-load-per-thread ${dir}/detect_data.lua`,
    ],
    sections: rateOn
      ? [
          [
            '# The rate limiter: per client (an IPv4 address, an IPv6 /64), the start of its 60 s window',
            '# (gpt0) and its count (gpc0). At most RATE_TRACKED clients; one idle for RATE_EXPIRE is forgotten.',
            `backend ${RATE_TABLE}`,
            `    stick-table type ipv6 size ${RATE_TRACKED} expire ${RATE_EXPIRE} store gpt0,gpc0`,
          ].join('\n'),
        ]
      : [],
    frontend,
    backend(domain) {
      const w = perDomain.get(domain.id)!;
      if (!domain.wafEnabled) return []; // switched off: no checks at all; the rules stay stored
      // Nothing the engine could decide in steps 2 and 3 for this domain (no list, country,
      // crawler or bot rule): it is not called.
      const lists = w.block.size + w.ai.size + w.countries.size + global.block.size + global.ai.size + global.countries.size > 0;
      const decides = lists || !!botOn;
      const limits = !!rate && domain.wafLevel !== 'low';
      const detects = domain.wafLevel === 'high';
      if (!decides && !limits && !detects) return [];
      const lines = [`    http-request set-var(txn.rp_domain) str(${domain.domain})`];
      const unless = (v: string) => `if !{ var(txn.${v}) -m found }`;
      if (w.allow.size) lines.push(`    http-request set-var(txn.rp_wl) src,map_ip(${dir}/allow_d${w.index}.map) ${unless('rp_wl')}`);
      if (w.block.size) lines.push(`    http-request set-var(txn.rp_bl) src,map_ip(${dir}/block_d${w.index}.map) ${unless('rp_bl')}`);
      if (w.ai.size) lines.push(`    http-request set-var(txn.rp_ai) req.fhdr(user-agent),lower,map_sub(${dir}/ai_d${w.index}.map) ${unless('rp_ai')}`);
      // A whitelisted client skips the engines altogether (step 1 decides before any other).
      const listed = '!{ var(txn.rp_wl) -m found }';
      if (lists || !botOn) {
        if (decides) lines.push(`    http-request lua.rampart_waf ${domain.id} if ${listed}`);
      } else {
        // Bot protection is all the engine would decide: a request with a valid pass cookie and
        // no bad user-agent skips the call.
        lines.push(`    http-request lua.rampart_waf ${domain.id} if ${listed} !{ var(txn.rp_cookie_ok) -m found } or ${listed} { var(txn.rp_badbot) -m found }`);
      }
      if (limits) {
        // Step 4, for requests steps 1 to 3 let through (the engine ends the others): a fixed
        // 60 s window from the client's first request, counted natively in the stick table (an
        // IPv6 client by its /64, RATE_KEY).
        const tracked = `${listed} { sc0_tracked }`;
        const expired = `${tracked} { var(txn.rp_age) -m int ge ${RATE_WINDOW} }`;
        lines.push(
          `    http-request track-sc0 ${RATE_KEY} table ${RATE_TABLE} if ${listed}`,
          `    http-request set-var(txn.rp_wstart) sc_get_gpt0(0) if ${tracked}`,
          `    http-request set-var(txn.rp_age) date,sub(txn.rp_wstart) if ${tracked}`,
          `    http-request set-var(txn.rp_cleared) sc_clr_gpc0(0) if ${expired}`,
          `    http-request sc-set-gpt0(0) date if ${expired}`,
          `    http-request sc-inc-gpc0(0) if ${tracked}`,
          `    http-request lua.rampart_rate_limited ${rate!.id} if ${tracked} { sc_get_gpc0(0) gt ${rateLimitOf(rate!.value)} }`,
        );
      }
      if (detects) {
        lines.push(
          // Step 5: the body is read (up to the buffer, BODY_INSPECT_LIMIT bytes) before the
          // detectors run; a client that stops sending is not waited for more than 5 s.
          `    http-request wait-for-body time 5s at-least ${BODY_INSPECT_LIMIT} if { req.hdr(content-length) -m found } || { req.hdr(transfer-encoding) -m found }`,
          `    http-request lua.rampart_detect ${domain.id} if ${listed}`,
        );
      }
      return lines;
    },
  };
}

