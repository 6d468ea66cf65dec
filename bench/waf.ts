// npm run bench:waf — the WAF's cost inside HAProxy, in one run, measured with wrk (Debian's):
//  1. the baseline is what a user would run instead of Rampart: a plain HAProxy reverse proxy (the
//     configuration export's backend: host routing, forwarding headers, health-checked origin; no
//     WAF), shared with bench:tls. It, Rampart and nginx + ModSecurity all forward to the same origin,
//     a bare HAProxy answering a fixed 200, which is also measured alone for reference. Rampart's
//     rendered HAProxy runs with the WAF off, and at levels low, medium and high, with 10,000
//     blacklist entries, 100 other rules and bot protection on; requests per second, p50 and p99
//     latency, as ratios to the plain proxy (the plain proxy runs all along; each run of a target follows one of its, BENCH_ROUNDS times)
//     and to nginx + ModSecurity;
//  2. two workloads at 32 connections: one repeated short request, and a mix: the ordinary requests
//     of the BlazeHTTP dev corpus (../shared/corpora, BENCH_CORPUS; skipped when absent) replayed as
//     raw keep-alive requests, every method, header and body as recorded (HEAD and Expect left out,
//     which wrk cannot frame), each with a pass cookie for its own User-Agent, so no per-value cache
//     answers a repeated request;
//  3. nginx + ModSecurity v3 + the OWASP CRS at paranoia level 1 (Debian's nginx,
//     libnginx-mod-http-modsecurity and modsecurity-crs; skipped when not installed) as the same
//     reverse proxy, the WAF most self-hosters would run instead;
//  4. bodies, one connection: an ordinary 64 KB JSON document, and adversarial bodies of about the
//     same size (JSON nested 10,000 deep, a string of 10,000 \u escapes, 5,000 form fields, a 64 KB
//     multipart upload), as latency added to the plain proxy's at level high and through nginx;
//  5. a 2 KB query string against a short one at level high (and through the plain proxy);
//  6. memory: HAProxy's resident memory holding 10,000 open keep-alive connections, Rampart at
//     level high against the plain proxy; and HAProxy's memory for 50,000 source IPs tracked by the
//     rate limiter;
//  7. custom rules: the same domain (level low, BENCH_CUSTOM_LEVEL; the blacklist, rules and bot
//     protection of the WAF cases) with 100 custom rules and 10 rate-limiting rules
//     (bench/waf-custom-rules.ts, generated from a seed; an ordinary request matches none but a few
//     log and the rate-limiting rules, whose limits no run reaches) against itself without them,
//     both running, alternated BENCH_ROUNDS times (in turn first), on the short request and the mix.
// BENCH_ONLY=custom runs case 7 alone (no plain proxy, nginx or other case). For experiments,
// BENCH_PATTERN_CACHE_SIZE sets HAProxy's tune.pattern.cache-size in every Rampart configuration;
// BENCH_DUMP=<dir> writes each Rampart configuration there (paths and ports as @DIR@, @PORT@,
// @RUN@, @TMP@); BENCH_FILTER=<command> pipes the custom rules case's configuration with the rules
// through a command (stdin to stdout) before it starts, to measure a variant of it.
// HAProxy is configured by renderHaproxyConfig directly (no control plane, no agent process; the
// country files are built for the rules as the agent builds them). nginx runs with its
// own configuration, prefix, temp paths and logs in the temporary directory, as a non-daemon master
// on a free loopback port. Every process started here is stopped, and the temporary directory
// removed, before the bench exits.
import { execSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { bindsIPv6, countryOptions, parseEventLine } from '@rampart/agent';
import { AI_BOTS, evaluateRule, parseRuleExpression, RATE_LIMIT_MAX, rateLimitOf, type ServerSnapshot, type SnapshotDomain, type SnapshotRule } from '@rampart/protocol';
import { parseChallengePage, renderHaproxyConfig } from '@rampart/proxy';
import { viaProxy } from '../test/support/cluster.js';
import { freePort, startProcess, waitFor, type Proc } from '../test/support/processes.js';
import { benchCustomRules, ruleRequestOf } from './waf-custom-rules.js';
import { bareOriginConfig, passCookie, benchProcesses, modsecNginxInstalled, plainHaproxyConfig, runWrk as runWrkOn, startModsecNginx, writeReplayFile, type WrkResult } from './support.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 4);
/** Runs of each target and workload, each right after one of the plain proxy. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const TRACKED_IPS = Number(process.env.BENCH_IPS ?? 50_000);
// HAProxy's maxconn follows the descriptor limit (two per proxied connection), and this bench holds
// the client ends in its own process: below a limit of about 21,000, fewer than 10,000 fit.
const FD_LIMIT = Number(execSync('ulimit -n', { shell: '/bin/sh', encoding: 'utf8' }).trim()) || 1024;
const OPEN_CONNECTIONS = Number(process.env.BENCH_OPEN_CONNECTIONS ?? Math.min(10_000, Math.floor(FD_LIMIT / 2) - 500));
const BODY_SECONDS = Number(process.env.BENCH_BODY_SECONDS ?? 3);
const CORPUS = process.env.BENCH_CORPUS ?? resolve(fileURLToPath(new URL('..', import.meta.url)), '../shared/corpora/blazehttp-dev/requests.jsonl.gz');
const HAPROXY = process.env.HAPROXY ?? 'haproxy';
const ONLY_CUSTOM = process.env.BENCH_ONLY === 'custom';
const ONLY_INSTRUCTIONS = process.env.BENCH_ONLY === 'instructions';
/** Requests of each workload counted by callgrind in the instructions case. */
const COUNTED = Number(process.env.BENCH_COUNTED ?? 1000);
const CUSTOM_LEVEL = (process.env.BENCH_CUSTOM_LEVEL ?? 'low') as SnapshotDomain['wafLevel'];
if (!['low', 'medium', 'high'].includes(CUSTOM_LEVEL)) throw new Error(`BENCH_CUSTOM_LEVEL: low, medium or high, not ${CUSTOM_LEVEL}`);
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
const sinks: Server[] = [];

// ------------------------------------------------------------------------------------------------
// HAProxy instances
// ------------------------------------------------------------------------------------------------

/**
 * The origin of every proxy here: one frontend answering every request itself; the body cases'
 * requests (marked X-Bench-Sink) go on to a Node server that reads the whole body before it answers,
 * as an application does (HAProxy answering at once would leave most of a 64 KB body unread, and
 * the connection unusable).
 */
async function startBare(): Promise<{ port: number; proc: Proc }> {
  const port = await freePort();
  const dir = join(tmp, 'bare');
  mkdirSync(dir);
  const sink = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.end('ok'));
  });
  sink.listen(0, '127.0.0.1');
  await once(sink, 'listening');
  sinks.push(sink);
  writeFileSync(join(dir, 'haproxy.cfg'), bareOriginConfig(port, { sink: (sink.address() as AddressInfo).port }));
  const proc = launch(join(dir, 'haproxy.cfg'));
  await ready(proc, port, 'origin HAProxy');
  return { port, proc };
}

function launch(cfg: string): Proc {
  const proc = startProcess(HAPROXY, ['-f', cfg]);
  procs.add(proc);
  return proc;
}

async function ready(proc: Proc, port: number, what: string, headers: Record<string, string> = {}, timeoutMs = 15_000): Promise<void> {
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`${what} exited: ${proc.output()}`);
      const r = await viaProxy(port, HOST, SHORT_PATH, headers).catch(() => undefined);
      return r?.status === 200 && r.text === 'ok';
    },
    `${what} to answer`,
    timeoutMs,
    50,
  );
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

/** Rampart's rendered configuration for a snapshot, written into its own directory: the file and its port. */
async function writeRampart(name: string, snapshot: ServerSnapshot, eventsPort: number, nbthread?: number): Promise<{ port: number; file: string }> {
  const port = await freePort();
  const configDir = join(tmp, name);
  const runDir = join(tmp, `${name}-run`);
  mkdirSync(configDir);
  mkdirSync(runDir);
  // The country files as the agent makes them for this snapshot and bind address (in one directory for every case).
  const httpBind = { address: '127.0.0.1', port };
  const { countryMap, countryClasses } = await countryOptions(snapshot, join(tmp, 'geo'), undefined, bindsIPv6(httpBind.address));
  const { files } = renderHaproxyConfig(withApiLimit(snapshot), { httpBind, runDir, eventsPort, countryMap, countryClasses, nbthread }, { configDir });
  // The renderer refuses a limit the API would refuse: the unreached one goes into its data file.
  const rpm = rateLimitOf(snapshot.rules.find((r) => r.type === 'rate_limit')?.value ?? '{}');
  const capped = `{ sc_inc_gpc0(0) gt ${Math.min(rpm, RATE_LIMIT_MAX)} }`;
  // (Only where the limit is enforced: level low stores the rule but renders no limiter.)
  const enforced = files['haproxy.cfg']!.includes('table rampart_rate');
  if (rpm > RATE_LIMIT_MAX && enforced && !files['haproxy.cfg']!.includes(capped)) throw new Error(`the rate limit's rule (${capped}) is not in the rendered configuration`);
  files['haproxy.cfg'] = files['haproxy.cfg']!.replace(capped, `{ sc_inc_gpc0(0) gt ${rpm} }`);
  if (process.env.BENCH_PATTERN_CACHE_SIZE) files['haproxy.cfg'] = files['haproxy.cfg']!.replace(/^global\n/m, `global\n    tune.pattern.cache-size ${Number(process.env.BENCH_PATTERN_CACHE_SIZE)}\n`);
  if (process.env.BENCH_FILTER && name === 'custom-with') files['haproxy.cfg'] = execSync(process.env.BENCH_FILTER, { input: files['haproxy.cfg'], encoding: 'utf8' });
  for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
  if (process.env.BENCH_DUMP)
    writeFileSync(
      join(process.env.BENCH_DUMP, `${name}.cfg`),
      files['haproxy.cfg']!.replaceAll(runDir, '@RUN@').replaceAll(configDir, '@DIR@').replaceAll(tmp, '@TMP@').replaceAll(`:${port}`, ':@PORT@'),
    );
  return { port, file: join(configDir, 'haproxy.cfg') };
}

/** Rampart's rendered configuration, run as `haproxy -f`. */
async function startRampart(name: string, snapshot: ServerSnapshot, eventsPort: number): Promise<{ port: number; proc: Proc; pid: number }> {
  const { port, file } = await writeRampart(name, snapshot, eventsPort);
  const proc = launch(file);
  await ready(proc, port, `Rampart HAProxy (${name})`, clientHeaders('127.0.0.1'));
  return { port, proc, pid: proc.child.pid! };
}

/** The snapshot with its rate limit capped at the API's ceiling (what the renderer accepts). */
function withApiLimit(snapshot: ServerSnapshot): ServerSnapshot {
  const cap = (r: ServerSnapshot['rules'][number]) => (r.type === 'rate_limit' ? { ...r, value: JSON.stringify({ requests_per_minute: Math.min(rateLimitOf(r.value), RATE_LIMIT_MAX) }) } : r);
  return { ...snapshot, rules: snapshot.rules.map(cap) };
}

// ------------------------------------------------------------------------------------------------
// The shield server's state
// ------------------------------------------------------------------------------------------------

const BOT_KEY = { id: randomBytes(4).toString('hex'), secret: randomBytes(32).toString('hex') }; // as the service issues
const DOMAIN_ID = randomUUID();
const BLOCKED_LOOPBACK = '127.0.0.2'; // one blacklist entry a sanity check can hit from loopback

/** The pass cookie exactly as the Lua engine issues it for the bench domain: "<key id>.<expiry>.<MAC over domain|ip|ua|expiry>". */
function botCookie(ip: string, ua = UA): string {
  return passCookie(BOT_KEY, HOST, ip, ua);
}

const COUNTRIES =
  'US NL DE FR GB FI AU CA BR IN SE RU ES HK IT JP CH CN PL AT SG IE ID BE CO UA AR CZ TR RO MX ZA KR DK NO IR MU BD TW VN BG AE PT NZ LT MY CL SC PH TH IL RS HU EE LU PE EC SA KZ GR'.split(' ');

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
  const add = (type: SnapshotRule['type'], value: string, domainId: string | null) => rules.push({ id: randomUUID(), type, value, domainId, priority: priority++ });
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
// Workloads
// ------------------------------------------------------------------------------------------------

const headersOf = (ip: string) => ({ Host: HOST, 'User-Agent': UA, Cookie: botCookie(ip) });

/**
 * The corpus's ordinary requests as keep-alive requests to the bench domain: Host replaced,
 * Connection and Expect dropped, Content-Length recomputed (chunked bodies keep their framing), and
 * a pass cookie for the request's own User-Agent added. HEAD requests are left out: wrk would wait
 * for the body a HEAD answer never has. Undefined without the corpus.
 */
function mixRequests(): Buffer[] | undefined {
  if (!existsSync(CORPUS)) return undefined;
  const out: Buffer[] = [];
  for (const line of gunzipSync(readFileSync(CORPUS)).toString('utf8').split('\n')) {
    if (!line.trim()) continue;
    const o = JSON.parse(line) as { kind: string; request: string };
    if (o.kind !== 'benign') continue;
    const raw = Buffer.from(o.request, 'latin1');
    const end = raw.indexOf('\r\n\r\n');
    const [first = '', ...headers] = (end < 0 ? raw : raw.subarray(0, end)).toString('latin1').split('\r\n');
    const body = end < 0 ? Buffer.alloc(0) : raw.subarray(end + 4);
    const parts = first.split(' ');
    if (parts.length !== 3 || parts[0] === 'HEAD' || parts[0] === 'CONNECT') continue;
    const name = (h: string) =>
      h
        .slice(0, Math.max(0, h.indexOf(':')))
        .trim()
        .toLowerCase();
    const chunked = headers.some((h) => name(h) === 'transfer-encoding' && /chunked/i.test(h));
    const kept = headers.filter((h) => !['host', 'connection', 'expect', 'keep-alive', 'proxy-connection', ...(chunked ? [] : ['content-length'])].includes(name(h)));
    const ua = [...headers].reverse().find((h) => name(h) === 'user-agent');
    const cookie = passCookie(BOT_KEY, HOST, '127.0.0.1', ua ? ua.slice(ua.indexOf(':') + 1).trim() : '');
    const head = [`${parts[0]} ${parts[1]} HTTP/1.1`, `Host: ${HOST}`, ...kept, `Cookie: ${cookie.split(';')[0]}`];
    if (!chunked && (body.length > 0 || headers.some((h) => name(h) === 'content-length'))) head.push(`Content-Length: ${body.length}`);
    out.push(Buffer.concat([Buffer.from(`${head.join('\r\n')}\r\n\r\n`, 'latin1'), body]));
  }
  return out;
}

/** The bodies of case 4, each a POST to the bench domain with its type. */
function bodies(): { name: string; ordinary: boolean; type: string; body: Buffer }[] {
  const items: string[] = [];
  for (let i = 0; items.join(',').length < 64 * 1024 - 200; i++) {
    items.push(
      JSON.stringify({
        id: i,
        sku: `SKU-${100000 + i}`,
        name: `Garden chair ${i}`,
        price: 19.9 + (i % 7),
        tags: ['outdoor', 'wood'],
        stock: { warehouse: 'north', count: i % 13 },
        description: 'Solid acacia wood, weatherproof oil finish, folds flat for storage.',
      }),
    );
  }
  const boundary = '----rampartbench7d93';
  const file = randomBytes(48 * 1024)
    .toString('base64')
    .slice(0, 64 * 1024 - 300);
  return [
    { name: 'ordinary 64 KB JSON', ordinary: true, type: 'application/json', body: Buffer.from(`{"items":[${items.join(',')}]}`) },
    { name: 'JSON nested 10,000 deep', ordinary: false, type: 'application/json', body: Buffer.from(`${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}`) },
    { name: '10,000 \\u escapes in a string', ordinary: false, type: 'application/json', body: Buffer.from(`{"s":"${'\\u0041'.repeat(10_000)}"}`) },
    { name: '5,000 form fields', ordinary: false, type: 'application/x-www-form-urlencoded', body: Buffer.from(Array.from({ length: 5000 }, (_, i) => `f${i}=v${i}x`).join('&')) },
    {
      name: '64 KB multipart upload',
      ordinary: false,
      type: `multipart/form-data; boundary=${boundary}`,
      body: Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="title"\r\n\r\nHoliday\r\n--${boundary}\r\nContent-Disposition: form-data; name="photo"; filename="beach.jpg"\r\nContent-Type: image/jpeg\r\n\r\n${file}\r\n--${boundary}--\r\n`,
      ),
    },
  ];
}

function postRequest(type: string, body: Buffer): Buffer {
  const head = [`POST /api/items HTTP/1.1`, `Host: ${HOST}`, 'X-Bench-Sink: 1', `User-Agent: ${UA}`, `Cookie: ${botCookie('127.0.0.1')}`, `Content-Type: ${type}`, `Content-Length: ${body.length}`];
  return Buffer.concat([Buffer.from(`${head.join('\r\n')}\r\n\r\n`), body]);
}

// ------------------------------------------------------------------------------------------------
// Measurement
// ------------------------------------------------------------------------------------------------

type Workload = { kind: 'path'; path: string } | { kind: 'replay'; file: string };
const SHORT: Workload = { kind: 'path', path: SHORT_PATH };
const LONG: Workload = { kind: 'path', path: LONG_PATH };

function runWrk(port: number, w: Workload, seconds: number, connections = CONNECTIONS): Promise<WrkResult> {
  return runWrkOn({ port, path: w.kind === 'path' ? w.path : '/', seconds, connections, headers: headersOf('127.0.0.1'), ...(w.kind === 'replay' ? { requests: w.file } : {}) });
}

async function measure(port: number, w: Workload = SHORT, seconds = DURATION, connections = CONNECTIONS): Promise<WrkResult> {
  await runWrk(port, w, 1, connections); // warm-up: connections, pools and Lua state settled first
  return runWrk(port, w, seconds, connections);
}

/**
 * A throughput run of an HAProxy target (`pid`, or none for another server) as a row: with the
 * process's CPU time during the measured part, the cost per request that the load of other
 * processes on the machine moves least.
 */
async function measured(name: string, workload: Row['workload'], port: number, w: Workload, pid?: number, pairedWith?: string): Promise<Row> {
  await runWrk(port, w, 1); // warm-up, as measure() does
  const cpu0 = pid === undefined ? 0 : cpuUs(pid);
  const r = await runWrk(port, w, DURATION);
  return { name, workload, r, ...(pairedWith === undefined ? {} : { pairedWith }), ...(pid === undefined ? {} : { cpuUs: cpuUs(pid) - cpu0 }) };
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

/**
 * n keep-alive connections, each having had one answered request (so HAProxy holds them as idle
 * client connections, as a busy site's browsers leave them), at most 200 opening at a time. Returns
 * the sockets (the caller closes them) and how many failed.
 */
async function openConnections(port: number, n: number): Promise<{ sockets: Socket[]; failed: number }> {
  const sockets: Socket[] = [];
  let failed = 0;
  let next = 0;
  const request = `GET ${SHORT_PATH} HTTP/1.1\r\nHost: ${HOST}\r\nUser-Agent: ${UA}\r\nCookie: ${botCookie('127.0.0.1')}\r\n\r\n`;
  await Promise.all(
    Array.from({ length: 200 }, async () => {
      while (next < n) {
        next++;
        const ok = await new Promise<Socket | undefined>((done) => {
          const s = connect(port, '127.0.0.1');
          let seen = '';
          const fail = () => (s.destroy(), done(undefined));
          s.setTimeout(10_000, fail);
          s.on('error', fail);
          s.on('connect', () => s.write(request));
          s.on('data', (d) => {
            seen += d.toString('latin1');
            if (/^HTTP\/1\.1 200[\s\S]*\r\n\r\nok$/.test(seen)) {
              s.setTimeout(0);
              s.removeAllListeners('data');
              done(s);
            }
          });
        });
        if (ok) sockets.push(ok);
        else failed++;
      }
    }),
  );
  return { sockets, failed };
}

// ------------------------------------------------------------------------------------------------
// The run
// ------------------------------------------------------------------------------------------------

/**
 * One wrk run; `pairedWith`: a plain-proxy run measured right before that target's (the ratio's
 * baseline); `cpuUs`: the HAProxy process's CPU time (user and system) during it, in microseconds.
 */
interface Row {
  name: string;
  workload: 'short' | 'long' | 'mix';
  r: WrkResult;
  pairedWith?: string;
  cpuUs?: number;
}
const ORIGIN_ROW = 'origin alone (reference)';
const PLAIN = 'plain HAProxy proxy (baseline)';
const NGINX = 'nginx + ModSecurity + CRS PL1';
const rows: Row[] = [];
const bodyRows: { target: string; body: string; ordinary: boolean; p50: number; p99: number; non2xx: number }[] = [];
const openMemory: { target: string; kb: number; idleKb: number; failed: number }[] = [];
/** The instructions case's results: per target, per workload, instructions a request and what was answered. */
const instructionRows: { target: string; workload: 'short' | 'mix'; perRequest: number; statuses: Map<number, number> }[] = [];
let memory: { beforeKb: number; afterKb: number; statuses: Map<number, number>; seconds: number } | undefined;
const sanity: string[] = [];
const CUSTOM_WITHOUT = `Rampart, WAF ${CUSTOM_LEVEL}, no custom rules`;
const CUSTOM_WITH = `Rampart, WAF ${CUSTOM_LEVEL} + 110 custom rules`;
const CUSTOM_RULES = benchCustomRules(DOMAIN_ID);
/** WAF events during case 7's measurements, by target (the rules' log rules make some). */
const customEvents = new Map<string, number>();
/** A process's CPU time so far, user and system, in microseconds. */
function cpuUs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8')
    .replace(/^.*\) /s, '')
    .split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS;
}
const CLOCK_TICKS = Number(execSync('getconf CLK_TCK', { encoding: 'utf8' }).trim()) || 100;

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

const mix = mixRequests();
const mixFile = join(tmp, 'mix.req');
if (mix) writeReplayFile(mixFile, mix);
const MIX: Workload = { kind: 'replay', file: mixFile };
const bodyCases = bodies().map((b, i) => {
  const file = join(tmp, `body${i}.req`);
  writeReplayFile(file, [postRequest(b.type, b.body)]);
  return { ...b, w: { kind: 'replay', file } as Workload };
});

/**
 * The throughput workloads of a target (the mix only with the corpus), each measured ROUNDS times
 * in alternation with the plain proxy (running all along at plainPort), so that the machine's drift
 * from minute to minute falls on both sides of every ratio.
 */
let plainPort = 0;
let plainPid = 0;
async function throughput(name: string, port: number, opts: { long?: boolean; pid?: number } = {}): Promise<void> {
  const workloads: [Row['workload'], Workload][] = [
    ['short', SHORT],
    ...(opts.long ? [['long', LONG] as [Row['workload'], Workload]] : []),
    ...(mix ? [['mix', MIX] as [Row['workload'], Workload]] : []),
  ];
  for (const [workload, w] of workloads) {
    for (let i = 0; i < ROUNDS; i++) {
      rows.push(await measured(PLAIN, workload, plainPort, w, plainPid, name));
      rows.push(await measured(name, workload, port, w, opts.pid));
    }
  }
}

/** Case 4 on one target: each body's latency at one connection. */
async function bodyLatency(target: string, port: number): Promise<void> {
  for (const b of bodyCases) {
    const r = await measure(port, b.w, BODY_SECONDS, 1);
    bodyRows.push({ target, body: b.name, ordinary: b.ordinary, p50: r.p50, p99: r.p99, non2xx: r.non2xx + r.socketErrors });
  }
}

/** Case 6 on one target: its RSS idle, then holding OPEN_CONNECTIONS keep-alive connections. */
async function holdOpen(target: string, proc: Proc, port: number): Promise<void> {
  const pid = proc.child.pid!;
  const idleKb = rssKb(pid);
  const { sockets, failed } = await openConnections(port, OPEN_CONNECTIONS);
  const kb = rssKb(pid);
  for (const s of sockets) s.destroy();
  openMemory.push({ target, kb, idleKb, failed });
}

try {
  const bare = await startBare();
  const origin = (): SnapshotDomain['origins'] => [{ ip: '127.0.0.1', port: bare.port }];
  if (ONLY_INSTRUCTIONS) await instructionsCase(bare.port, origin);
  else {
    if (!ONLY_CUSTOM) await otherCases(bare.port, origin);
    await customCase(origin);
  }
} finally {
  await procs.stopAll();
  for (const sink of sinks) sink.close();
  events.close();
  rmSync(tmp, { recursive: true, force: true });
}

/** Cases 1 to 6. */
async function otherCases(barePort: number, origin: () => SnapshotDomain['origins']): Promise<void> {
  rows.push({ name: ORIGIN_ROW, workload: 'short', r: await measure(barePort) });

  const plain = await startPlain(barePort);
  plainPort = plain.port;
  plainPid = plain.proc.child.pid!;
  const other = await viaProxy(plain.port, 'other.example.com', SHORT_PATH);
  const long = await viaProxy(plain.port, HOST, LONG_PATH);
  if (other.status !== 404 || long.status !== 200) throw new Error(`plain HAProxy proxy: another host answered ${other.status}, the 2 KB query ${long.status}`);
  sanity.push(`${PLAIN}: ${HOST} 200, another host ${other.status}, 2 KB query ${long.status}`);
  await bodyLatency(PLAIN, plain.port);
  await holdOpen(PLAIN, plain.proc, plain.port);

  if (modsecNginxInstalled()) {
    const ngx = await startNginx(barePort);
    try {
      // ModSecurity is live with the CRS (an SQL injection is refused; its error log names the CRS
      // rule), and what wrk sends (short query, its headers and cookie) passes.
      const sqli = await viaProxy(ngx.port, HOST, `/?id=${encodeURIComponent("1' or '1'='1")}`, clientHeaders('127.0.0.1'));
      const ordinary = await viaProxy(ngx.port, HOST, SHORT_PATH, clientHeaders('127.0.0.1'));
      const other = await viaProxy(ngx.port, 'other.example.com', SHORT_PATH);
      if (sqli.status !== 403 || ordinary.status !== 200 || ordinary.text !== 'ok' || other.status !== 404) {
        throw new Error(`${NGINX}: sqli ${sqli.status} (expected 403), ordinary ${ordinary.status} (expected 200), another host ${other.status} (expected 404)`);
      }
      const log = readFileSync(join(ngx.dir, 'error.log'), 'utf8');
      const crsRules = [...new Set([...log.matchAll(/\[id "(9\d{5})"\]/g)].map((m) => m[1]))];
      const loaded = /rules loaded inline\/local\/remote: (\d+)\/(\d+)\/(\d+)/.exec(log);
      sanity.push(
        `${NGINX}: ordinary ${ordinary.status}, sqli ${sqli.status} (CRS rules ${crsRules.join(', ') || 'none logged'}), another host ${other.status}` +
          `${loaded ? `; ${loaded[2]} rules loaded` : ''}`,
      );
      await throughput(NGINX, ngx.port);
      await bodyLatency(NGINX, ngx.port);
    } finally {
      await procs.stop(ngx.proc);
    }
  } else {
    sanity.push(`${NGINX}: not installed (bash scripts/setup.sh installs nginx, libnginx-mod-http-modsecurity and modsecurity-crs): not measured`);
  }

  const cases: { name: string; enabled: boolean; level: SnapshotDomain['wafLevel'] }[] = [
    { name: 'Rampart, WAF off', enabled: false, level: 'high' },
    { name: 'Rampart, WAF low', enabled: true, level: 'low' },
    { name: 'Rampart, WAF medium', enabled: true, level: 'medium' },
    { name: 'Rampart, WAF high', enabled: true, level: 'high' },
  ];
  for (const [i, c] of cases.entries()) {
    const snapshot = wafSnapshot({ origins: origin(), wafEnabled: c.enabled, wafLevel: c.level, wafMode: 'block' }, UNREACHED_RPM);
    const rp = await startRampart(`case${i}`, snapshot, eventsPort);
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
      const high = c.enabled && c.level === 'high';
      await throughput(c.name, rp.port, { long: high, pid: rp.proc.child.pid! });
      await new Promise((r) => setTimeout(r, 200));
      if (eventCount !== before) sanity.push(`${c.name}: ${eventCount - before} WAF events during the measurements (ordinary requests the WAF refused: false positives or the bad-bot and AI lists)`);
      if (high) {
        await bodyLatency(c.name, rp.port);
        await holdOpen(c.name, rp.proc, rp.port);
      }
    } finally {
      await procs.stop(rp.proc);
    }
  }
  await procs.stop(plain.proc);

  // Memory: level medium, the rate limit at the API's ceiling, one request from each of 50,000
  // loopback addresses (Linux accepts any 127.0.0.0/8 source), each with its own valid bot cookie
  // so it reaches the rate limiter. The first address also does the warm-up (64 concurrent
  // connections, as in the measured part), so exactly 50,000 addresses end up tracked, the stick
  // table's size.
  const ips = Array.from({ length: TRACKED_IPS }, (_, i) => `127.${10 + (Math.floor(i / 254) >> 8)}.${Math.floor(i / 254) & 255}.${1 + (i % 254)}`);
  const snapshot = wafSnapshot({ origins: origin(), wafEnabled: true, wafLevel: 'medium', wafMode: 'block' }, 10_000);
  const rp = await startRampart('memory', snapshot, eventsPort);
  try {
    const pid = rp.proc.child.pid!;
    await fromEach(
      rp.port,
      Array.from({ length: 2_000 }, () => ips[0]!),
    );
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
}

/**
 * Case 7: the same domain at CUSTOM_LEVEL without and with the custom rules, both running; each
 * workload measured ROUNDS times on each, alternated, the one measured first changing every round.
 */
async function customCase(origin: () => SnapshotDomain['origins']): Promise<void> {
  const base = wafSnapshot({ origins: origin(), wafEnabled: true, wafLevel: CUSTOM_LEVEL, wafMode: 'block' }, UNREACHED_RPM);
  const without = await startRampart('custom-without', base, eventsPort);
  const withRules = await startRampart('custom-with', { ...base, customRules: CUSTOM_RULES }, eventsPort);
  try {
    // Both have the WAF live (a blacklisted source is refused); a request one custom rule blocks
    // (a curl User-Agent, with a valid pass cookie for it) is refused with the rules only.
    const curl = { 'user-agent': 'curl/8.5.0', cookie: botCookie('127.0.0.1', 'curl/8.5.0') };
    for (const [name, port, rules] of [
      [CUSTOM_WITHOUT, without.port, false],
      [CUSTOM_WITH, withRules.port, true],
    ] as const) {
      const blocked = await viaProxy(port, HOST, SHORT_PATH, clientHeaders(BLOCKED_LOOPBACK), BLOCKED_LOOPBACK);
      const byRule = await viaProxy(port, HOST, SHORT_PATH, curl);
      const ordinary = await viaProxy(port, HOST, SHORT_PATH, clientHeaders('127.0.0.1'));
      if (blocked.status !== 403 || byRule.status !== (rules ? 403 : 200) || ordinary.status !== 200) {
        throw new Error(`${name}: blacklisted ${blocked.status} (expected 403), curl ${byRule.status} (expected ${rules ? 403 : 200}), ordinary ${ordinary.status} (expected 200)`);
      }
      sanity.push(`${name}: blacklisted ${blocked.status}, a curl User-Agent ${byRule.status}, ordinary ${ordinary.status}`);
    }
    const workloads: [Row['workload'], Workload][] = [['short', SHORT], ...(mix ? [['mix', MIX] as [Row['workload'], Workload]] : [])];
    for (const [workload, w] of workloads) {
      for (let i = 0; i < ROUNDS; i++) {
        const pair: [string, { port: number; pid: number }][] = [
          [CUSTOM_WITHOUT, without],
          [CUSTOM_WITH, withRules],
        ];
        for (const [name, { port, pid }] of i % 2 === 0 ? pair : pair.reverse()) {
          await new Promise((r) => setTimeout(r, 200));
          const before = eventCount;
          rows.push(await measured(name, workload, port, w, pid));
          await new Promise((r) => setTimeout(r, 200));
          customEvents.set(name, (customEvents.get(name) ?? 0) + eventCount - before);
        }
      }
    }
  } finally {
    await procs.stop(without.proc);
    await procs.stop(withRules.proc);
  }
}

/**
 * Case 8 (BENCH_ONLY=instructions): what a request costs HAProxy in CPU instructions, which, unlike
 * throughput and CPU time, a busy or shared machine does not move. Each target runs under
 * valgrind's callgrind with one thread, counting inside process_stream (the analysis of a request
 * and its answer, without the connection's reading and writing, which is the same for every
 * target); COUNTED short requests, then the first COUNTED requests of the mix, are sent one after
 * the other on kept-alive connections (a new one when HAProxy closes one). The count includes the
 * one request that checks the target answers. Targets: the plain proxy, the WAF off, levels low,
 * medium and high, and level low with the custom rules.
 */
async function instructionsCase(barePort: number, origin: () => SnapshotDomain['origins']): Promise<void> {
  const short = Buffer.from(`GET ${SHORT_PATH} HTTP/1.1\r\nHost: ${HOST}\r\nUser-Agent: ${UA}\r\nCookie: ${botCookie('127.0.0.1')}\r\nAccept: */*\r\n\r\n`, 'latin1');
  const workloads: ['short' | 'mix', Buffer[]][] = [['short', Array.from({ length: COUNTED }, () => short)], ...(mix ? [['mix', mix.slice(0, COUNTED)] as ['mix', Buffer[]]] : [])];
  const plainDir = join(tmp, 'plain-counted');
  mkdirSync(plainDir);
  const targets: { name: string; write: () => Promise<{ port: number; file: string }> }[] = [
    {
      name: PLAIN,
      write: async () => {
        const port = await freePort();
        const file = join(plainDir, 'haproxy.cfg');
        writeFileSync(file, plainHaproxyConfig({ host: HOST, originPort: barePort, bind: `127.0.0.1:${port}`, global: ['    nbthread 1'] }));
        return { port, file };
      },
    },
    ...[
      { name: 'Rampart, WAF off', enabled: false, level: 'high' as const },
      { name: 'Rampart, WAF low', enabled: true, level: 'low' as const },
      { name: 'Rampart, WAF medium', enabled: true, level: 'medium' as const },
      { name: 'Rampart, WAF high', enabled: true, level: 'high' as const },
    ].map((c, i) => ({
      name: c.name,
      write: () => writeRampart(`counted${i}`, wafSnapshot({ origins: origin(), wafEnabled: c.enabled, wafLevel: c.level, wafMode: 'block' }, UNREACHED_RPM), eventsPort, 1),
    })),
    {
      name: CUSTOM_WITH,
      write: () =>
        writeRampart('counted-custom', { ...wafSnapshot({ origins: origin(), wafEnabled: true, wafLevel: CUSTOM_LEVEL, wafMode: 'block' }, UNREACHED_RPM), customRules: CUSTOM_RULES }, eventsPort, 1),
    },
  ];
  for (const t of targets) {
    const { port, file } = await t.write();
    for (const [workload, requests] of workloads) {
      const out = join(tmp, `callgrind-${instructionRows.length}.out`);
      const proc = startProcess('valgrind', ['--tool=callgrind', '--toggle-collect=process_stream', `--callgrind-out-file=${out}`, HAPROXY, '-f', file]);
      procs.add(proc);
      try {
        // Under valgrind HAProxy starts some fifty times slower (the country map's lines, the Lua states).
        await ready(proc, port, `${t.name} under callgrind`, clientHeaders('127.0.0.1'), 300_000);
        const statuses = await replayInOrder(port, requests);
        await procs.stop(proc);
        const total = /^(?:summary|totals): (\d+)/m.exec(readFileSync(out, 'utf8'))?.[1];
        if (total === undefined) throw new Error(`${t.name}: no total in ${out}`);
        instructionRows.push({ target: t.name, workload, perRequest: Number(total) / (requests.length + 1), statuses });
        // For callgrind_annotate: BENCH_CALLGRIND_DIR keeps each count's file, named by target and workload.
        if (process.env.BENCH_CALLGRIND_DIR) copyFileSync(out, join(process.env.BENCH_CALLGRIND_DIR, `${t.name.replace(/\W+/g, '-')}-${workload}.callgrind`));
      } finally {
        await procs.stop(proc);
      }
    }
  }
}

/** Sends the raw requests one after the other, each once the answer to the one before has arrived, on kept-alive connections; the answers' statuses (0: the connection closed first). */
async function replayInOrder(port: number, requests: readonly Buffer[]): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  let socket: Socket | undefined;
  let pending = Buffer.alloc(0);
  let waiter: (() => void) | undefined;
  let closed = true;
  const open = () =>
    new Promise<void>((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => {
        closed = false;
        resolve();
      });
      s.on('data', (d) => {
        pending = Buffer.concat([pending, d]);
        waiter?.();
      });
      s.on('close', () => {
        closed = true;
        waiter?.();
      });
      s.on('error', reject);
      socket = s;
      pending = Buffer.alloc(0);
    });
  /** The status of a whole answer at the start of `pending`, removed from it; undefined until one is whole. */
  const answer = (): number | undefined => {
    const end = pending.indexOf('\r\n\r\n');
    if (end < 0) return undefined;
    const head = pending.subarray(0, end).toString('latin1');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0);
    const length = /\r\ncontent-length: *(\d+)/i.exec(head);
    let size: number;
    if (length) size = end + 4 + Number(length[1]);
    else if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
      const last = pending.indexOf('\r\n0\r\n\r\n', end);
      if (last < 0) return undefined;
      size = last + 7;
    } else if (!closed) return undefined;
    else size = pending.length;
    if (pending.length < size) return undefined;
    pending = pending.subarray(size);
    return status;
  };
  for (const r of requests) {
    if (closed) await open();
    socket!.write(r);
    const status = await new Promise<number>((resolve) => {
      const check = () => {
        const s = answer();
        if (s !== undefined) return resolve(s);
        if (closed) resolve(0);
      };
      waiter = check;
      check();
    });
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
    if (closed) socket?.destroy();
  }
  socket?.destroy();
  return statuses;
}

// ------------------------------------------------------------------------------------------------
// Report
// ------------------------------------------------------------------------------------------------

/** A target's result on a workload (the mean of its runs); for the plain proxy, of the runs paired with `pairedWith` (every run without it). */
function result(name: string, workload: Row['workload'], pairedWith?: string): WrkResult | undefined {
  const rs = rows.filter((r) => r.name === name && r.workload === workload && (pairedWith === undefined || r.pairedWith === pairedWith)).map((r) => r.r);
  if (rs.length === 0) return undefined;
  const mean = (f: (r: WrkResult) => number) => rs.reduce((a, r) => a + f(r), 0) / rs.length;
  return {
    rps: mean((r) => r.rps),
    p50: mean((r) => r.p50),
    p99: mean((r) => r.p99),
    avg: mean((r) => r.avg),
    requests: mean((r) => r.requests),
    non2xx: mean((r) => r.non2xx),
    socketErrors: mean((r) => r.socketErrors),
  };
}
/** A target against the plain proxy runs paired with it: throughput ratio and p99 difference. */
function versusPlain(name: string, workload: Row['workload']): { ratio: number; p99: number } | undefined {
  const r = result(name, workload);
  const plain = result(PLAIN, workload, name);
  return r && plain ? { ratio: r.rps / plain.rps, p99: r.p99 - plain.p99 } : undefined;
}
const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(2)}`;
const names = [ORIGIN_ROW, PLAIN, NGINX, 'Rampart, WAF off', 'Rampart, WAF low', 'Rampart, WAF medium', 'Rampart, WAF high'];
const workloads: Row['workload'][] = ['short', 'long', 'mix'];
const WORKLOAD_WORDS = { short: 'one short request, repeated', long: 'a 2 KB query string, repeated', mix: `the corpus's ${mix?.length.toLocaleString('en') ?? 0} ordinary requests, replayed` };

if (ONLY_INSTRUCTIONS) {
  console.log(`\nbench:waf, BENCH_ONLY=instructions: HAProxy's CPU instructions a request inside process_stream (callgrind, one thread),`);
  console.log(`over ${COUNTED.toLocaleString('en')} requests of each workload sent one after the other on kept-alive connections; "plain / it" is the plain`);
  console.log("proxy's count over the case's. WAF cases as below: 10,000 blacklist entries, 100 other rules, bot protection on,");
  console.log(`every request with a valid pass cookie.${mix ? '' : ` No corpus at ${CORPUS}: the mix is not measured.`}`);
  console.log('case'.padEnd(40) + 'workload'.padEnd(10) + 'instructions'.padStart(14) + 'plain / it'.padStart(12) + '   answers');
  for (const r of instructionRows) {
    const plain = instructionRows.find((x) => x.target === PLAIN && x.workload === r.workload)!;
    const answers = [...r.statuses].map(([status, n]) => `${n} x ${status || 'closed'}`).join(', ');
    console.log(
      r.target.padEnd(40) +
        r.workload.padEnd(10) +
        Math.round(r.perRequest).toLocaleString('en').padStart(14) +
        (r.target === PLAIN ? '' : (plain.perRequest / r.perRequest).toFixed(2)).padStart(12) +
        `   ${answers}`,
    );
  }
  process.exit(0);
}

console.log(`\nbench:waf — wrk -t1 -c${CONNECTIONS}, ${DURATION} s per run after a 1 s warm-up; all proxies forward to the origin (a bare HAProxy`);
if (!ONLY_CUSTOM) {
  console.log(`answering a fixed 200). Every target's run follows one of the plain HAProxy proxy, ${ROUNDS} rounds: "x plain" and "p99-plain" compare`);
  console.log('with those paired runs (the plain row shows all its runs). "x modsec": to nginx + ModSecurity on the same workload.');
} else console.log('answering a fixed 200). BENCH_ONLY=custom: the custom rules case alone.');
console.log('WAF cases: 10,000 blacklist entries, 100 other rules, bot protection on');
console.log(`(every request carries a valid cookie).${mix ? '' : ` No corpus at ${CORPUS}: the mix is not measured.`}`);
for (const w of workloads) {
  const plain = result(PLAIN, w);
  if (!plain) continue;
  const modsec = result(NGINX, w);
  console.log(`\n${WORKLOAD_WORDS[w]}`);
  console.log(
    'case'.padEnd(34) +
      'req/s'.padStart(9) +
      'p50 ms'.padStart(8) +
      'p99 ms'.padStart(8) +
      'x plain'.padStart(9) +
      'p99-plain'.padStart(11) +
      'x modsec'.padStart(10) +
      'CPU us/req'.padStart(12) +
      'non-2xx'.padStart(9),
  );
  for (const name of names) {
    const r = result(name, w);
    if (!r) continue;
    const vs = name === PLAIN ? undefined : versusPlain(name, w);
    console.log(
      name.padEnd(34) +
        r.rps.toFixed(0).padStart(9) +
        r.p50.toFixed(2).padStart(8) +
        r.p99.toFixed(2).padStart(8) +
        (vs ? vs.ratio.toFixed(2) : '').padStart(9) +
        (vs ? signed(vs.p99) : '').padStart(11) +
        (name.startsWith('Rampart') && modsec ? `${(r.rps / modsec.rps).toFixed(1)}x` : '').padStart(10) +
        (Number.isNaN(cpuPerRequest(name, w)) ? '' : cpuPerRequest(name, w).toFixed(1)).padStart(12) +
        String(Math.round(r.non2xx + r.socketErrors)).padStart(9),
    );
  }
}
if (bodyRows.length) {
  console.log(`\nbodies, one connection, ${BODY_SECONDS} s each: p50 and p99 latency, and the p50 added to the plain proxy's`);
  console.log('body'.padEnd(32) + 'target'.padEnd(34) + 'p50 ms'.padStart(8) + 'p99 ms'.padStart(8) + 'added ms'.padStart(10) + 'non-2xx'.padStart(9));
  for (const b of bodyRows) {
    const plain = bodyRows.find((x) => x.target === PLAIN && x.body === b.body)!;
    console.log(
      b.body.padEnd(32) +
        b.target.padEnd(34) +
        b.p50.toFixed(2).padStart(8) +
        b.p99.toFixed(2).padStart(8) +
        (b.target === PLAIN ? '' : signed(b.p50 - plain.p50)).padStart(10) +
        String(b.non2xx).padStart(9),
    );
  }
}
if (openMemory.length) {
  console.log(
    `\n${OPEN_CONNECTIONS.toLocaleString('en')} open keep-alive connections: HAProxy's resident memory${OPEN_CONNECTIONS < 10_000 ? ` (not 10,000: this machine's descriptor limit, ${FD_LIMIT}, caps HAProxy's connections)` : ''}`,
  );
  for (const m of openMemory)
    console.log(`${m.target.padEnd(34)}${(m.kb / 1024).toFixed(1).padStart(8)} MB  (idle ${(m.idleKb / 1024).toFixed(1)} MB${m.failed ? `, ${m.failed} connections failed` : ''})`);
}

if (rows.some((r) => r.name === CUSTOM_WITH)) {
  const counts = new Map<string, number>();
  for (const r of CUSTOM_RULES) counts.set(r.action, (counts.get(r.action) ?? 0) + 1);
  console.log(`\ncustom rules: the same domain, WAF ${CUSTOM_LEVEL}, without and with ${CUSTOM_RULES.length} custom rules (${[...counts].map(([a, n]) => `${n} ${a}`).join(', ')});`);
  console.log(`${ROUNDS} runs each, alternated. "x without" and "p99-without" compare with the domain without them.`);
  if (mix) console.log(`The mix against the rules (the reference evaluator, first match in priority order): ${mixAgainstRules(mix)}.`);
  console.log('HAProxy CPU: its CPU time (user + system) per request answered, which other load on the machine moves least.');
  console.log(
    'workload'.padEnd(9) +
      'case'.padEnd(38) +
      'req/s'.padStart(9) +
      'p50 ms'.padStart(8) +
      'p99 ms'.padStart(8) +
      'x without'.padStart(11) +
      'p99-without'.padStart(13) +
      'CPU us/req'.padStart(12) +
      'non-2xx'.padStart(9),
  );
  for (const w of ['short', 'mix'] as const) {
    const off = result(CUSTOM_WITHOUT, w);
    if (!off) continue;
    for (const name of [CUSTOM_WITHOUT, CUSTOM_WITH]) {
      const r = result(name, w)!;
      const vs = name === CUSTOM_WITH;
      console.log(
        w.padEnd(9) +
          name.padEnd(38) +
          r.rps.toFixed(0).padStart(9) +
          r.p50.toFixed(2).padStart(8) +
          r.p99.toFixed(2).padStart(8) +
          (vs ? (r.rps / off.rps).toFixed(2) : '').padStart(11) +
          (vs ? signed(r.p99 - off.p99) : '').padStart(13) +
          cpuPerRequest(name, w).toFixed(1).padStart(12) +
          String(Math.round(r.non2xx + r.socketErrors)).padStart(9),
      );
    }
  }
  for (const [name, n] of customEvents) sanity.push(`${name}: ${n} WAF events during the measurements${name === CUSTOM_WITH ? ' (log rules the mix matches)' : ''}`);
}

/** HAProxy's CPU time per request answered, over a target's runs (for the plain proxy, those paired with `pairedWith` when given). */
function cpuPerRequest(name: string, w: Row['workload'], pairedWith?: string): number {
  const rs = rows.filter((r) => r.name === name && r.workload === w && r.cpuUs !== undefined && (pairedWith === undefined || r.pairedWith === pairedWith));
  const requests = rs.reduce((a, r) => a + r.r.requests, 0);
  return requests ? rs.reduce((a, r) => a + r.cpuUs!, 0) / requests : NaN;
}

/** What the custom rules make of the mix's requests, as counts of the first decisive action (else log, rate-limited counting, none). */
function mixAgainstRules(requests: readonly Buffer[]): string {
  const parsed = CUSTOM_RULES.map((r) => ({ action: r.action, expr: (parseRuleExpression(r.expression) as { ok: true; expr: Parameters<typeof evaluateRule>[0] }).expr }));
  const tally = new Map<string, number>();
  for (const raw of requests) {
    const req = ruleRequestOf(raw);
    const seen = new Set<string>();
    for (const r of parsed) {
      if (!evaluateRule(r.expr, req)) continue;
      seen.add(r.action);
      if (r.action === 'block' || r.action === 'allow') break; // a challenge is passed with the cookie: the next rules run
    }
    const kind = ['block', 'allow', 'challenge', 'log', 'rate_limit'].find((a) => seen.has(a)) ?? 'none';
    tally.set(kind, (tally.get(kind) ?? 0) + 1);
  }
  const words: Record<string, string> = {
    none: 'no rule',
    rate_limit: 'only rate-limiting rules (counted)',
    log: 'a log rule',
    challenge: 'a challenge rule (passed with the cookie)',
    allow: 'an allow rule',
    block: 'a block rule',
  };
  return Object.keys(words)
    .map((k) => `${(tally.get(k) ?? 0).toLocaleString('en')} ${words[k]}`)
    .join(', ');
}

const line = (name: string, value: string, aim: string, ok: boolean) => console.log(`${name.padEnd(58)}${value.padStart(12)}   aim ${aim.padEnd(10)} ${ok ? 'met' : 'MISSED'}`);
console.log('\naims');
const aims: [string, number][] = [
  ['Rampart, WAF off', 0.97],
  ['Rampart, WAF low', 0.93],
  ['Rampart, WAF medium', 0.93],
  ['Rampart, WAF high', 0.85],
];
for (const w of ['short', 'mix'] as const) {
  const modsec = result(NGINX, w);
  if (!result(PLAIN, w)) continue;
  for (const [name, aim] of aims) {
    const vs = versusPlain(name, w)!;
    line(`${name.slice(9)}, ${w}: throughput / plain proxy`, vs.ratio.toFixed(2), `>= ${aim}`, vs.ratio >= aim);
  }
  // The same comparison in HAProxy's own CPU time per request, which the other processes on the
  // machine (wrk, the origin) move less than throughput.
  for (const [name] of aims) {
    const cost = cpuPerRequest(PLAIN, w, name) / cpuPerRequest(name, w);
    console.log(`${`${name.slice(9)}, ${w}: CPU per request, plain proxy / it`.padEnd(58)}${cost.toFixed(2).padStart(12)}   (for reference)`);
  }
  for (const [name] of aims) {
    const vs = versusPlain(name, w)!;
    line(`${name.slice(9)}, ${w}: p99 - plain proxy p99`, `${signed(vs.p99)} ms`, '<= 0.5 ms', vs.p99 <= 0.5);
  }
  const high = result('Rampart, WAF high', w)!;
  if (modsec) line(`WAF high, ${w}: throughput / nginx + ModSecurity + CRS`, `${(high.rps / modsec.rps).toFixed(1)}x`, '>= 20x', high.rps / modsec.rps >= 20);
  else line(`WAF high, ${w}: throughput / nginx + ModSecurity + CRS`, 'not measured', '>= 20x', false);
}
const high = result('Rampart, WAF high', 'short');
const high2k = result('Rampart, WAF high', 'long');
// Cost per request on a saturated proxy is the inverse of its throughput.
if (high && high2k) line('WAF high, 2 KB query / short query, cost', `${(high.rps / high2k.rps).toFixed(2)}x`, '<= 2x', high.rps / high2k.rps <= 2);
for (const b of bodyRows.filter((x) => x.target === 'Rampart, WAF high')) {
  const plain = bodyRows.find((x) => x.target === PLAIN && x.body === b.body)!;
  const aim = b.ordinary ? 1 : 3;
  line(`WAF high, ${b.body}: added p50`, `${signed(b.p50 - plain.p50)} ms`, `<= ${aim} ms`, b.p50 - plain.p50 <= aim);
}
const openPlain = openMemory.find((m) => m.target === PLAIN);
const openHigh = openMemory.find((m) => m.target === 'Rampart, WAF high');
if (openPlain && openHigh) {
  line(
    `WAF high, RSS with ${OPEN_CONNECTIONS.toLocaleString('en')} connections / plain proxy's`,
    `${(openHigh.kb / openPlain.kb).toFixed(2)}x`,
    '<= 1.3x',
    openHigh.kb / openPlain.kb <= 1.3 && !openHigh.failed && !openPlain.failed,
  );
  // What the connections themselves add, without the data each loads at start (Rampart: the
  // country map of the rules' countries, the Lua states, the lists): the part of the total that
  // grows with the number of connections.
  const perConnection = (openHigh.kb - openHigh.idleKb) / (openPlain.kb - openPlain.idleKb);
  console.log(`${"WAF high, RSS the connections add / plain proxy's".padEnd(58)}${`${perConnection.toFixed(2)}x`.padStart(12)}   (for reference)`);
}
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
for (const w of ['short', 'mix'] as const) {
  const off = result(CUSTOM_WITHOUT, w);
  const on = result(CUSTOM_WITH, w);
  if (!off || !on) continue;
  line(`${CUSTOM_LEVEL} + 110 custom rules, ${w}: throughput / without`, (on.rps / off.rps).toFixed(2), '>= 0.9', on.rps / off.rps >= 0.9);
  const cost = cpuPerRequest(CUSTOM_WITHOUT, w) / cpuPerRequest(CUSTOM_WITH, w);
  console.log(`${`${CUSTOM_LEVEL} + 110 custom rules, ${w}: CPU per request, without / with`.padEnd(58)}${cost.toFixed(2).padStart(12)}   (for reference)`);
}
console.log('');
for (const s of sanity) console.log(`check: ${s}`);
