// npm run bench:waf — the WAF's cost inside HAProxy, in one run, measured with wrk (Debian's):
//  1. the baseline is what a user would run instead of Rampart: a plain HAProxy reverse proxy (the
//     configuration export's backend: host routing, forwarding headers, health-checked origin; no
//     WAF), shared with bench:tls. It, Rampart and nginx + ModSecurity all forward to the same origin,
//     a bare HAProxy answering a fixed 200, which is also measured alone for reference. Rampart's
//     rendered HAProxy runs with the WAF off, and at levels low, medium and high, with 10,000
//     blacklist entries, 100 other rules and bot protection on; requests per second, p50 and p99
//     latency, as ratios to the plain proxy;
//  2. nginx + ModSecurity v3 + the OWASP CRS at paranoia level 1 (Debian's nginx,
//     libnginx-mod-http-modsecurity and modsecurity-crs; skipped when not installed) as the same
//     reverse proxy, the WAF most self-hosters would run instead; Rampart at level high as a ratio to it;
//  3. a 2 KB query string against a short one at level high (and through the plain proxy);
//  4. HAProxy's memory for 50,000 source IPs tracked by the rate limiter.
// HAProxy is configured by renderHaproxyConfig directly (no control plane, no agent process; the
// agent's country map is built for block_country rules as the agent does it). nginx runs with its
// own configuration, prefix, temp paths and logs in the temporary directory, as a non-daemon master
// on a free loopback port. Every process started here is stopped, and the temporary directory
// removed, before the bench exits.
import { randomBytes, randomUUID } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureCountrySubset, parseEventLine } from '@rampart/agent';
import { AI_BOTS, RATE_LIMIT_MAX, rateLimitOf, type ServerSnapshot, type SnapshotDomain, type SnapshotRule } from '@rampart/protocol';
import { parseChallengePage, renderHaproxyConfig } from '@rampart/proxy';
import { viaProxy } from '../test/support/cluster.js';
import { freePort, startProcess, waitFor, type Proc } from '../test/support/processes.js';
import { bareOriginConfig, passCookie, benchProcesses, modsecNginxInstalled, plainHaproxyConfig, runWrk as runWrkOn, startModsecNginx, type WrkResult } from './support.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const TRACKED_IPS = Number(process.env.BENCH_IPS ?? 50_000);
const HAPROXY = process.env.HAPROXY ?? 'haproxy';
const HOST = 'bench.example.com';
// The exact User-Agent wrk sends: the bot cookie is bound to it. Matches no bad-bot, crawler or AI list.
const UA = 'Mozilla/5.0 (X11; Linux x86_64) rampart-bench/1.0';
const SHORT_PATH = '/?q=rampart';
// A 2 KB query string of harmless parameters (no OWASP pattern matches; checked before measuring).
const LONG_PATH = (() => {
  const params: string[] = [];
  let q = '';
  for (let i = 0; q.length < 2048; i++) {
    params.push(`p${i}=${randomBytes(12).toString('hex')}`);
    q = params.join('&');
  }
  return `/?${q.slice(0, 2048)}`;
})();

const tmp = mkdtempSync(join(tmpdir(), 'rampart-bench-waf-'));
const procs = benchProcesses(tmp);

// ------------------------------------------------------------------------------------------------
// HAProxy instances
// ------------------------------------------------------------------------------------------------

/** The origin of every proxy here: one frontend answering every request itself. */
async function startBare(): Promise<{ port: number; proc: Proc }> {
  const port = await freePort();
  const dir = join(tmp, 'bare');
  mkdirSync(dir);
  writeFileSync(join(dir, 'haproxy.cfg'), bareOriginConfig(port));
  const proc = launch(join(dir, 'haproxy.cfg'));
  await ready(proc, port, 'origin HAProxy');
  return { port, proc };
}

function launch(cfg: string): Proc {
  const proc = startProcess(HAPROXY, ['-f', cfg]);
  procs.add(proc);
  return proc;
}

async function ready(proc: Proc, port: number, what: string, headers: Record<string, string> = {}): Promise<void> {
  await waitFor(async () => {
    if (proc.child.exitCode !== null) throw new Error(`${what} exited: ${proc.output()}`);
    const r = await viaProxy(port, HOST, SHORT_PATH, headers);
    return r.status === 200 && r.text === 'ok';
  }, `${what} to answer`, 15_000, 50);
}

/** The baseline, as in bench:tls: the export's plain HAProxy reverse proxy in front of the origin. */
async function startPlain(originPort: number): Promise<{ port: number; proc: Proc }> {
  const port = await freePort();
  const dir = join(tmp, 'plain');
  mkdirSync(dir);
  writeFileSync(join(dir, 'haproxy.cfg'), plainHaproxyConfig({ host: HOST, originPort, bind: `127.0.0.1:${port}` }));
  const proc = launch(join(dir, 'haproxy.cfg'));
  await ready(proc, port, 'plain HAProxy proxy');
  return { port, proc };
}

/** nginx + ModSecurity + CRS PL1 (bench/support.ts), started and checked to answer. */
async function startNginx(originPort: number): Promise<{ port: number; proc: Proc; dir: string }> {
  const port = await freePort();
  const dir = join(tmp, 'nginx');
  const proc = startModsecNginx({ dir, port, originPort, host: HOST, keepalive: CONNECTIONS, http: ['keepalive_requests 100000;'] });
  // SIGQUIT: the master's graceful stop; SIGTERM on Ctrl+C still stops its workers
  procs.add(proc, 'SIGQUIT', 'SIGTERM');
  await ready(proc, port, 'nginx + ModSecurity');
  return { port, proc, dir };
}

/** Rampart's rendered configuration, written into its own directory and run as `haproxy -f`. */
async function startRampart(name: string, snapshot: ServerSnapshot, eventsPort: number, countryMap: string): Promise<{ port: number; proc: Proc }> {
  const port = await freePort();
  const configDir = join(tmp, name);
  const runDir = join(tmp, `${name}-run`);
  mkdirSync(configDir);
  mkdirSync(runDir);
  const { files } = renderHaproxyConfig(withApiLimit(snapshot), { httpBind: { address: '127.0.0.1', port }, runDir, eventsPort, countryMap }, { configDir });
  // The renderer refuses a limit the API would refuse: the unreached one goes into its data file.
  const rpm = rateLimitOf(snapshot.rules.find((r) => r.type === 'rate_limit')?.value ?? '{}');
  files['haproxy.cfg'] = files['haproxy.cfg']!.replace(`{ sc_get_gpc0(0) gt ${Math.min(rpm, RATE_LIMIT_MAX)} }`, `{ sc_get_gpc0(0) gt ${rpm} }`);
  for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
  const proc = launch(join(configDir, 'haproxy.cfg'));
  await ready(proc, port, `Rampart HAProxy (${name})`, clientHeaders('127.0.0.1'));
  return { port, proc };
}

/** The snapshot with its rate limit capped at the API's ceiling (what the renderer accepts). */
function withApiLimit(snapshot: ServerSnapshot): ServerSnapshot {
  const cap = (r: ServerSnapshot['rules'][number]) =>
    r.type === 'rate_limit' ? { ...r, value: JSON.stringify({ requests_per_minute: Math.min(rateLimitOf(r.value), RATE_LIMIT_MAX) }) } : r;
  return { ...snapshot, rules: snapshot.rules.map(cap) };
}

// ------------------------------------------------------------------------------------------------
// The shield server's state
// ------------------------------------------------------------------------------------------------

const BOT_KEY = { id: randomBytes(4).toString('hex'), secret: randomBytes(32).toString('hex') }; // as the service issues
const DOMAIN_ID = randomUUID();
const BLOCKED_LOOPBACK = '127.0.0.2'; // one blacklist entry a sanity check can hit from loopback

/** The pass cookie exactly as the Lua engine issues it: "<key id>.<expiry>.<HMAC-SHA256(key, ip|ua|expiry)>". */
function botCookie(ip: string, ua = UA): string {
  return passCookie(BOT_KEY, ip, ua);
}

const COUNTRIES = 'US NL DE FR GB FI AU CA BR IN SE RU ES HK IT JP CH CN PL AT SG IE ID BE CO UA AR CZ TR RO MX ZA KR DK NO IR MU BD TW VN BG AE PT NZ LT MY CL SC PH TH IL RS HU EE LU PE EC SA KZ GR'.split(' ');

const clientHeaders = (ip: string) => ({ 'user-agent': UA, cookie: botCookie(ip) });

/**
 * 10,000 block_ip entries (/32s in 10.0.0.0/8 plus 127.0.0.2; 8,000 server-wide and 2,000 on the
 * domain, so both map lookups run) and 100 other rules: the rate limit, bot protection, every AI
 * crawler (half server-wide, half on the domain), allow_ip entries for documentation addresses and
 * block_country rules for the rest (so the agent's country map of those countries is looked up).
 */
function wafSnapshot(domain: Omit<SnapshotDomain, 'id' | 'domain' | 'sslEnabled' | 'serverAddresses'>, rpm: number): ServerSnapshot {
  const rules: SnapshotRule[] = [];
  let priority = 0;
  const add = (type: SnapshotRule['type'], value: string, domainId: string | null) =>
    rules.push({ id: randomUUID(), type, value, domainId, priority: priority++ });
  add('block_ip', `${BLOCKED_LOOPBACK}/32`, null);
  for (let i = 1; i < 10_000; i++) add('block_ip', `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}/32`, i < 8_000 ? null : DOMAIN_ID);
  const others = rules.length;
  add('rate_limit', JSON.stringify({ requests_per_minute: rpm }), null);
  add('block_bot', JSON.stringify({ enabled: true }), null);
  AI_BOTS.forEach((b, i) => add('block_ai_bot', b.name, i % 2 === 0 ? null : DOMAIN_ID));
  for (let i = 0; i < 20; i++) add('allow_ip', `192.0.2.${i + 1}/32`, i % 2 === 0 ? null : DOMAIN_ID);
  for (let i = 0; rules.length - others < 100; i++) add('block_country', COUNTRIES[i % COUNTRIES.length]!, i % 2 === 0 ? null : DOMAIN_ID);
  return {
    serverId: 'bench',
    revision: 1,
    domains: [{ id: DOMAIN_ID, domain: HOST, sslEnabled: false, serverAddresses: ['127.0.0.1'], ...domain }],
    rules,
    botKeys: [BOT_KEY],
  };
}

// ------------------------------------------------------------------------------------------------
// Measurement
// ------------------------------------------------------------------------------------------------

function runWrk(port: number, path: string, seconds: number): Promise<WrkResult> {
  return runWrkOn({ port, path, seconds, connections: CONNECTIONS, headers: { Host: HOST, 'User-Agent': UA, Cookie: botCookie('127.0.0.1') } });
}

async function measure(port: number, path = SHORT_PATH): Promise<WrkResult> {
  await runWrk(port, path, 1); // warm-up: connections, pools and Lua state settled first
  return runWrk(port, path, DURATION);
}

/** Resident memory of a process in KB (the HAProxy process is the worker: it runs in foreground, not master-worker). */
const rssKb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);

/** One request from each source address (own connection each), at most `concurrency` at a time. */
async function fromEach(port: number, ips: readonly string[], concurrency = 64): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < ips.length) {
        const ip = ips[next++]!;
        let status = 0;
        try {
          status = (await viaProxy(port, HOST, SHORT_PATH, clientHeaders(ip), ip)).status;
        } catch {
          status = -1;
        }
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }),
  );
  return statuses;
}

// ------------------------------------------------------------------------------------------------
// The run
// ------------------------------------------------------------------------------------------------

interface Row { name: string; r: WrkResult }
const ORIGIN_ROW = 'origin alone (reference)';
const PLAIN_ROW = 'plain HAProxy proxy (baseline)';
const PLAIN_LONG_ROW = 'plain HAProxy proxy, 2 KB query string';
const NGINX_ROW = 'nginx + ModSecurity + CRS PL1';
const rows: Row[] = [];
let memory: { beforeKb: number; afterKb: number; statuses: Map<number, number>; seconds: number } | undefined;
const sanity: string[] = [];

// WAF events (denials and challenges) arrive here as syslog datagrams, as they would at the agent.
// A measured request is never denied, so any event during a measurement is reported. Lines without
// a reason (a request wrk abandons when a run ends is logged too) are not WAF events: the agent
// drops them as well.
const events = createSocket('udp4');
let eventCount = 0;
events.on('message', (m) => {
  if (parseEventLine(m.toString())) eventCount++;
});
events.bind(0, '127.0.0.1');
await once(events, 'listening');
const eventsPort = events.address().port;

// The rate limit. The API's ceiling is 10,000 requests per minute per source IP, and wrk sends every
// request from 127.0.0.1 at well over 10,000 a second: with that limit, all but the first 10,000
// requests of a run would be answered 429 by the engine, and the run would measure the denial path,
// not the WAF in front of traffic it lets through. Spreading wrk over many source addresses is not
// possible, and allow-listing 127.0.0.1 would skip every check. So the throughput cases render the
// rate_limit rule with a limit no run reaches: HAProxy still counts every request in its stick
// table (the lookup, window check and increment do not depend on the limit), and any 429
// would show in the non-2xx column. The memory case uses the real ceiling, 10,000 per minute.
const UNREACHED_RPM = 1_000_000_000;

try {
  // The agent's CIDR -> country map for the countries the rules name, built as the agent builds it
  // (BENCH_COUNTRY_MAP reuses one).
  const countryMap = process.env.BENCH_COUNTRY_MAP ?? (await ensureCountrySubset(join(tmp, 'geo'), COUNTRIES));
  const bare = await startBare();
  const origin = (): SnapshotDomain['origins'] => [{ ip: '127.0.0.1', port: bare.port }];

  rows.push({ name: ORIGIN_ROW, r: await measure(bare.port) });

  const plain = await startPlain(bare.port);
  try {
    const other = await viaProxy(plain.port, 'other.example.com', SHORT_PATH);
    const long = await viaProxy(plain.port, HOST, LONG_PATH);
    if (other.status !== 404 || long.status !== 200) throw new Error(`plain HAProxy proxy: another host answered ${other.status}, the 2 KB query ${long.status}`);
    sanity.push(`${PLAIN_ROW}: ${HOST} 200, another host ${other.status}, 2 KB query ${long.status}`);
    rows.push({ name: PLAIN_ROW, r: await measure(plain.port) });
    rows.push({ name: PLAIN_LONG_ROW, r: await measure(plain.port, LONG_PATH) });
  } finally {
    await procs.stop(plain.proc);
  }

  if (modsecNginxInstalled()) {
    const ngx = await startNginx(bare.port);
    try {
      // ModSecurity is live with the CRS (an SQL injection is refused; its error log names the CRS
      // rule), and what wrk sends (short query, its headers and cookie) passes.
      const sqli = await viaProxy(ngx.port, HOST, `/?id=${encodeURIComponent("1' or '1'='1")}`, clientHeaders('127.0.0.1'));
      const ordinary = await viaProxy(ngx.port, HOST, SHORT_PATH, clientHeaders('127.0.0.1'));
      const other = await viaProxy(ngx.port, 'other.example.com', SHORT_PATH);
      if (sqli.status !== 403 || ordinary.status !== 200 || ordinary.text !== 'ok' || other.status !== 404) {
        throw new Error(`${NGINX_ROW}: sqli ${sqli.status} (expected 403), ordinary ${ordinary.status} (expected 200), another host ${other.status} (expected 404)`);
      }
      const log = readFileSync(join(ngx.dir, 'error.log'), 'utf8');
      const crsRules = [...new Set([...log.matchAll(/\[id "(9\d{5})"\]/g)].map((m) => m[1]))];
      const loaded = /rules loaded inline\/local\/remote: (\d+)\/(\d+)\/(\d+)/.exec(log);
      sanity.push(
        `${NGINX_ROW}: ordinary ${ordinary.status}, sqli ${sqli.status} (CRS rules ${crsRules.join(', ') || 'none logged'}), another host ${other.status}` +
          `${loaded ? `; ${loaded[2]} rules loaded` : ''}`,
      );
      rows.push({ name: NGINX_ROW, r: await measure(ngx.port) });
    } finally {
      await procs.stop(ngx.proc);
    }
  } else {
    sanity.push(`${NGINX_ROW}: not installed (bash scripts/setup.sh installs nginx, libnginx-mod-http-modsecurity and modsecurity-crs): not measured`);
  }

  const cases: { name: string; enabled: boolean; level: SnapshotDomain['wafLevel']; long?: boolean }[] = [
    { name: 'Rampart, WAF off', enabled: false, level: 'high' },
    { name: 'Rampart, WAF low', enabled: true, level: 'low' },
    { name: 'Rampart, WAF medium', enabled: true, level: 'medium' },
    { name: 'Rampart, WAF high', enabled: true, level: 'high' },
    { name: 'Rampart, WAF high, 2 KB query string', enabled: true, level: 'high', long: true },
  ];
  for (const [i, c] of cases.entries()) {
    const snapshot = wafSnapshot({ origins: origin(), wafEnabled: c.enabled, wafLevel: c.level, wafMode: 'block' }, UNREACHED_RPM);
    const rp = await startRampart(`case${i}`, snapshot, eventsPort, countryMap);
    try {
      // The WAF is live (a blacklisted source is refused), the bot cookie is accepted (without it the
      // run would measure the challenge page), and the 2 KB query passes level high's patterns.
      const blocked = await viaProxy(rp.port, HOST, SHORT_PATH, clientHeaders(BLOCKED_LOOPBACK), BLOCKED_LOOPBACK);
      const noCookie = await viaProxy(rp.port, HOST, SHORT_PATH, { 'user-agent': UA });
      const long = await viaProxy(rp.port, HOST, LONG_PATH, clientHeaders('127.0.0.1'));
      const sqli = await viaProxy(rp.port, HOST, `/?id=${encodeURIComponent("1' OR '1'='1")}`, clientHeaders('127.0.0.1'));
      const expect = (what: string, got: number, want: number) => {
        if (got !== want) throw new Error(`${c.name}: ${what} answered ${got}, expected ${want}`);
      };
      expect('a blacklisted source', blocked.status, c.enabled ? 403 : 200);
      expect('a request without the bot cookie', noCookie.status, 200);
      if (c.enabled && !parseChallengePage(noCookie.text)) throw new Error(`${c.name}: no challenge without the cookie`);
      if (!c.enabled && noCookie.text !== 'ok') throw new Error(`${c.name}: challenged with the WAF off`);
      expect('the 2 KB query string', long.status, 200);
      expect('an SQL injection', sqli.status, c.enabled && c.level === 'high' ? 403 : 200);
      sanity.push(`${c.name}: blacklisted ${blocked.status}, no cookie ${noCookie.text === 'ok' ? 'passed' : 'challenged'}, sqli ${sqli.status}`);

      await new Promise((r) => setTimeout(r, 200)); // the checks' own events arrive first
      const before = eventCount;
      rows.push({ name: c.name, r: await measure(rp.port, c.long ? LONG_PATH : SHORT_PATH) });
      await new Promise((r) => setTimeout(r, 200));
      if (eventCount !== before) sanity.push(`${c.name}: ${eventCount - before} WAF events during the measurement`);
    } finally {
      await procs.stop(rp.proc);
    }
  }

  // Memory: level medium, the rate limit at the API's ceiling, one request from each of 50,000
  // loopback addresses (Linux accepts any 127.0.0.0/8 source), each with its own valid bot cookie
  // so it reaches the rate limiter. The first address also does the warm-up (64 concurrent
  // connections, as in the measured part), so exactly 50,000 addresses end up tracked, the stick
  // table's size.
  const ips = Array.from({ length: TRACKED_IPS }, (_, i) => `127.${10 + (Math.floor(i / 254) >> 8)}.${Math.floor(i / 254) & 255}.${1 + (i % 254)}`);
  const snapshot = wafSnapshot({ origins: origin(), wafEnabled: true, wafLevel: 'medium', wafMode: 'block' }, 10_000);
  const rp = await startRampart('memory', snapshot, eventsPort, countryMap);
  try {
    const pid = rp.proc.child.pid!;
    await fromEach(rp.port, Array.from({ length: 2_000 }, () => ips[0]!));
    await new Promise((r) => setTimeout(r, 1000));
    const beforeKb = rssKb(pid);
    const t0 = performance.now();
    const statuses = await fromEach(rp.port, ips);
    const seconds = (performance.now() - t0) / 1000;
    await new Promise((r) => setTimeout(r, 1000));
    memory = { beforeKb, afterKb: rssKb(pid), statuses, seconds };
  } finally {
    await procs.stop(rp.proc);
  }
} finally {
  await procs.stopAll();
  events.close();
  rmSync(tmp, { recursive: true, force: true });
}

// ------------------------------------------------------------------------------------------------
// Report
// ------------------------------------------------------------------------------------------------

const row = (name: string) => rows.find((r) => r.name === name)?.r;
const plain = row(PLAIN_ROW)!;
const plainLong = row(PLAIN_LONG_ROW)!;
const modsec = row(NGINX_ROW);
const off = row('Rampart, WAF off')!;
const high = row('Rampart, WAF high')!;
const high2k = row('Rampart, WAF high, 2 KB query string')!;
const isLong = (name: string) => name.includes('2 KB');
const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(2)}`;

console.log(`\nbench:waf — wrk -t1 -c${CONNECTIONS}, ${DURATION} s per run after a 1 s warm-up, one run after another; all proxies forward to the origin`);
console.log('(a bare HAProxy answering a fixed 200). Ratios to the plain HAProxy proxy in this run, at the same query (short, or 2 KB).');
console.log('WAF cases: 10,000 blacklist entries, 100 other rules, bot protection on (wrk sends a valid cookie)\n');
console.log(
  'case'.padEnd(40) + 'req/s'.padStart(9) + 'p50 ms'.padStart(8) + 'p99 ms'.padStart(8) + 'x plain'.padStart(9) + 'p99-plain'.padStart(11) +
    'x off'.padStart(7) + 'x modsec'.padStart(10) + 'non-2xx'.padStart(9),
);
for (const { name, r } of rows) {
  const ref = isLong(name) ? plainLong : plain;
  const self = name === PLAIN_ROW || name === PLAIN_LONG_ROW;
  console.log(
    name.padEnd(40) +
      r.rps.toFixed(0).padStart(9) +
      r.p50.toFixed(2).padStart(8) +
      r.p99.toFixed(2).padStart(8) +
      (self ? '' : (r.rps / ref.rps).toFixed(2)).padStart(9) +
      (self ? '' : signed(r.p99 - ref.p99)).padStart(11) +
      (name.startsWith('Rampart') && !isLong(name) ? (r.rps / off.rps).toFixed(2) : '').padStart(7) +
      (name === 'Rampart, WAF high' && modsec ? (r.rps / modsec.rps).toFixed(1) : '').padStart(10) +
      String(r.non2xx + r.socketErrors).padStart(9),
  );
}

const line = (name: string, value: string, aim: string, ok: boolean) =>
  console.log(`${name.padEnd(52)}${value.padStart(12)}   aim ${aim.padEnd(14)} ${ok ? 'met' : 'MISSED'}`);
console.log('');
line('level high, throughput / plain HAProxy proxy', (high.rps / plain.rps).toFixed(2), '>= 0.75', high.rps / plain.rps >= 0.75);
if (modsec) line('level high, throughput / nginx + ModSecurity + CRS', `${(high.rps / modsec.rps).toFixed(1)}x`, '>= 10x', high.rps / modsec.rps >= 10);
else line('level high, throughput / nginx + ModSecurity + CRS', 'not measured', '>= 10x', false);
line('level high, p99 - plain HAProxy proxy p99', `${signed(high.p99 - plain.p99)} ms`, '<= 1 ms', high.p99 - plain.p99 <= 1);
// Cost per request on a saturated proxy is the inverse of its throughput.
const cost2k = high.rps / high2k.rps;
line('level high, 2 KB query / short query, cost', `${cost2k.toFixed(2)}x`, '<= 2x', cost2k <= 2);
console.log(`${'  (p50 latency ratio, for reference)'.padEnd(52)}${`${(high2k.p50 / high.p50).toFixed(2)}x`.padStart(12)}`);
if (memory) {
  const deltaMb = (memory.afterKb - memory.beforeKb) / 1024;
  const ok = memory.statuses.get(200) ?? 0;
  line(`${TRACKED_IPS.toLocaleString('en')} tracked IPs, HAProxy RSS added`, `${deltaMb.toFixed(1)} MB`, '<= 20 MB', deltaMb <= 20 && ok === TRACKED_IPS);
  const other = [...memory.statuses].filter(([s]) => s !== 200).map(([s, n]) => `${n} x ${s === -1 ? 'error' : s}`);
  console.log(
    `  (RSS ${(memory.beforeKb / 1024).toFixed(1)} -> ${(memory.afterKb / 1024).toFixed(1)} MB; ${ok} of ${TRACKED_IPS} answered 200` +
      `${other.length ? `, ${other.join(', ')}` : ''}; ${memory.seconds.toFixed(1)} s)`,
  );
}
console.log('');
for (const s of sanity) console.log(`check: ${s}`);
