// npm run bench:tls — HTTPS in Rampart's HAProxy against a plain HAProxy doing the same TLS, in one
// run, measured with wrk (Debian's):
//  1. new TLS handshakes per second: every request on a new TCP + TLS connection (Connection: close);
//  2. keep-alive requests per second over HTTPS, and p99 latency;
//  3. how fast a new certificate goes live: from its file being written to the first HTTPS request
//     with its SNI that is served that certificate, through the agent's own apply path (render into
//     a fresh directory, `haproxy -c`, reload through the master socket, new hash on the health socket).
// Rampart's side is renderHaproxyConfig's output for one domain (sslEnabled, WAF on at level medium,
// no rules). The baseline is what a user would run instead: the configuration export's plain
// HAProxy (host routing, forwarding headers, health-checked origin) with the same certificate file,
// TLS settings (TLS_GLOBAL, ALPN) and defaults; no WAF, Lua or maps. Both forward to one bare HAProxy answering
// a fixed 200, as in bench:waf. Rampart with the WAF off is measured too, for reference only (it
// separates the WAF's cost from the rest). Every process started here is stopped, and the temporary
// directory removed, before the bench exits.
//
// SNI: wrk sends its URL's host as SNI (and as Host), and resolves it with getaddrinfo. Instead of
// touching /etc/hosts, a one-line wrk script replaces wrk.resolve so that wrk connects to 127.0.0.1
// while the URL stays https://bench.example.com:PORT/: both sides get the SNI a browser would send.
// A probe frontend on the origin HAProxy, which answers 200 only to that SNI, checks it.
//
// Full handshakes: wrk keeps each connection's SSL object across reconnects and offers the previous
// session again, and HAProxy resumes it from its session cache even with TLS_GLOBAL's no-tls-tickets
// (under TLS 1.3 OpenSSL then issues stateful tickets): without the line below nearly every
// "new" connection was a resumption. So for parts 1 and 2 both configurations get
// `tune.ssl.cachesize 0` (the session cache off; no-tls-tickets already rules out stateless
// tickets), and each handshake run is checked on the frontends' ssl_sess / ssl_reused_sess counters.
// Part 3 runs the rendered files unchanged, as the agent does.
import { execFile } from 'node:child_process';
import { randomUUID, X509Certificate } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { promisify } from 'node:util';
import { Applier, CertificateStore, HaproxyProcess } from '@rampart/agent';
import type { ServerSnapshot } from '@rampart/protocol';
import { ALPN, renderHaproxyConfig, TLS_GLOBAL, type RenderOptions, type ServedCertificate } from '@rampart/proxy';
import { selfSignedCertificate } from '../test/support/certificates.js';
import { viaProxy } from '../test/support/cluster.js';
import { freePort, startProcess, waitFor, type Proc } from '../test/support/processes.js';
import { bareOriginConfig, benchProcesses, plainHaproxyConfig } from './support.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
// Rounds alternate which side goes first; medians over them (other work on the machine drifts).
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const TRIES = 5;
const HAPROXY = process.env.HAPROXY ?? 'haproxy';
const WRK = process.env.WRK ?? 'wrk';
const run = promisify(execFile);

const HOST = 'bench.example.com';
const UA = 'Mozilla/5.0 (X11; Linux x86_64) rampart-bench/1.0';
const NO_RESUMPTION = '    tune.ssl.cachesize 0';

const tmp = mkdtempSync(join(tmpdir(), 'rampart-bench-tls-'));
let agentProxy: HaproxyProcess | undefined;
// the agent's HAProxy master stops its worker
const haproxies = benchProcesses(tmp, () => agentProxy?.pid && process.kill(agentProxy.pid, 'SIGTERM'));

// ------------------------------------------------------------------------------------------------
// Certificates and HTTPS requests
// ------------------------------------------------------------------------------------------------

interface MadeCertificate {
  chain: string;
  key: string;
  fingerprint: string;
}

/** A self-signed ECDSA P-256 certificate for `domain`, valid two days. */
function makeCertificate(domain: string): MadeCertificate {
  const { chainPem, keyPem } = selfSignedCertificate(domain, 2);
  return { chain: chainPem, key: keyPem, fingerprint: new X509Certificate(chainPem).fingerprint256 };
}

/** One GET on a new TLS connection to 127.0.0.1 with SNI and Host `domain`; says which certificate was served. */
function httpsGet(port: number, domain: string): Promise<{ status: number; text: string; fingerprint: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, servername: domain, headers: { host: domain, 'user-agent': UA }, agent: false, rejectUnauthorized: false }, (res) => {
      const fingerprint = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, fingerprint }));
      res.on('error', reject);
    });
    req.setTimeout(5000, () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    req.end();
  });
}

const servesOk = async (port: number, domain: string, fingerprint: string) => {
  const r = await httpsGet(port, domain);
  return r.status === 200 && r.text === 'ok' && r.fingerprint === fingerprint;
};

// ------------------------------------------------------------------------------------------------
// HAProxy instances
// ------------------------------------------------------------------------------------------------

interface Side {
  name: string;
  port: number;
  proc: Proc;
  statsSocket: string;
}

function launch(name: string, cfg: string): { proc: Proc; dir: string } {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'haproxy.cfg'), cfg);
  const proc = startProcess(HAPROXY, ['-f', join(dir, 'haproxy.cfg')]);
  haproxies.add(proc);
  return { proc, dir };
}

const exited = (proc: Proc, what: string) => {
  if (proc.child.exitCode !== null) throw new Error(`${what} exited: ${proc.output()}`);
};

/**
 * The origin of both sides, as in bench:waf: one frontend answering every request itself. A second
 * frontend, never used by the proxies, is the SNI probe for wrk: 200 only to SNI bench.example.com.
 */
async function startOrigin(certFile: string): Promise<{ port: number; probePort: number }> {
  const [port, probePort] = [await freePort(), await freePort()];
  const { proc } = launch(
    'origin',
    bareOriginConfig(port, {
      global: TLS_GLOBAL,
      more: [
        'frontend sni_probe',
        `    bind 127.0.0.1:${probePort} ssl crt ${certFile}`,
        `    http-request return status 200 content-type text/plain string ok if { ssl_fc_sni -m str ${HOST} }`,
        '    http-request return status 421 content-type text/plain string "wrong SNI"',
        '',
      ],
    }),
  );
  await waitFor(
    async () => {
      exited(proc, 'origin HAProxy');
      const r = await viaProxy(port, HOST);
      return r.status === 200 && r.text === 'ok';
    },
    'origin HAProxy to answer',
    15_000,
  );
  return { port, probePort };
}

/**
 * The baseline: what a user would run instead of Rampart, the configuration export's plain HAProxy
 * (host routing, the health-checked backend with X-Forwarded-Proto, X-Real-IP and Host, and the
 * X-Forwarded-For every reverse proxy in front of a website sets), terminating the same TLS.
 */
async function startPlain(certFile: string, originPort: number): Promise<Side> {
  const port = await freePort();
  const dir = join(tmp, 'plain');
  const { proc } = launch(
    'plain',
    plainHaproxyConfig({
      host: HOST,
      originPort,
      bind: `127.0.0.1:${port} ssl crt ${certFile} alpn ${ALPN}`,
      global: [`    stats socket ${dir}/admin.sock mode 600 level admin`, ...TLS_GLOBAL, NO_RESUMPTION],
    }),
  );
  return ready({ name: 'plain HAProxy', port, proc, statsSocket: join(dir, 'admin.sock') });
}

const DOMAIN_IDS = new Map<string, string>();

/** The shield server's state: these domains, sslEnabled, WAF on at the default level, no rules. */
function snapshot(domains: string[], originPort: number, wafEnabled = true): ServerSnapshot {
  return {
    serverId: 'bench',
    revision: 1,
    domains: domains.map((domain) => {
      if (!DOMAIN_IDS.has(domain)) DOMAIN_IDS.set(domain, randomUUID());
      return {
        id: DOMAIN_IDS.get(domain)!,
        domain,
        origins: [{ ip: '127.0.0.1', port: originPort }],
        sslEnabled: true,
        wafEnabled,
        wafLevel: 'medium' as const,
        wafMode: 'block' as const,
        serverAddresses: ['127.0.0.1'],
      };
    }),
    rules: [],
  };
}

/** Rendering options as the agent sets them (an ACME responder port included, never reached here). */
async function agentOptions(runDir: string, certificates: ServedCertificate[]): Promise<RenderOptions & { httpsPort: number }> {
  return { httpBind: { address: '127.0.0.1', port: await freePort() }, httpsPort: await freePort(), acmePort: await freePort(), runDir, certificates };
}

/** Rampart's rendered configuration, plus only NO_RESUMPTION, run as `haproxy -f`. */
async function startRampart(cert: ServedCertificate, originPort: number, wafEnabled: boolean): Promise<Side> {
  const name = wafEnabled ? 'rampart' : 'rampart-waf-off';
  const configDir = join(tmp, name);
  const runDir = join(tmp, `${name}-run`);
  mkdirSync(configDir);
  mkdirSync(runDir);
  const options = await agentOptions(runDir, [cert]);
  const { files } = renderHaproxyConfig(snapshot([HOST], originPort, wafEnabled), options, { configDir });
  for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
  const cfg = files['haproxy.cfg']!.replace(/^global\n/m, `global\n${NO_RESUMPTION}\n`);
  const { proc } = launch(name, cfg);
  return ready({ name: wafEnabled ? 'Rampart' : 'Rampart, WAF off', port: options.httpsPort, proc, statsSocket: join(runDir, 'admin.sock') });
}

async function ready(side: Side): Promise<Side> {
  await waitFor(
    async () => {
      exited(side.proc, side.name);
      const r = await httpsGet(side.port, HOST);
      return r.status === 200 && r.text === 'ok';
    },
    `${side.name} to answer over HTTPS`,
    15_000,
  );
  return side;
}

/** A command on an HAProxy stats socket; its whole answer. */
function adminCommand(socket: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(socket);
    let out = '';
    sock.setEncoding('utf8');
    sock.on('connect', () => sock.end(`${command}\n`));
    sock.on('data', (d: string) => (out += d));
    sock.on('error', reject);
    sock.on('close', () => resolve(out));
  });
}

/** TLS sessions all frontends established so far: full handshakes and resumptions (the "ssl" stats module). */
async function tlsSessions(socket: string): Promise<{ full: number; resumed: number }> {
  const out = await adminCommand(socket, 'show stat typed');
  const sum = (name: string) => [...out.matchAll(new RegExp(`^F\\.[\\d.]+\\.${name}\\.\\d+:\\w+:\\w+:(\\d+)$`, 'gm'))].reduce((a, m) => a + Number(m[1]), 0);
  return { full: sum('ssl_sess'), resumed: sum('ssl_reused_sess') };
}

/** User + system CPU time of a process, in ms (/proc/<pid>/stat counts 10 ms clock ticks). */
const cpuMs = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
};

// ------------------------------------------------------------------------------------------------
// Measurement
// ------------------------------------------------------------------------------------------------

// wrk connects to 127.0.0.1 whatever the URL's host, which it still sends as SNI and Host.
const WRK_SCRIPT = join(tmp, 'loopback.lua');
writeFileSync(WRK_SCRIPT, 'function wrk.resolve(host, service) wrk.addrs = wrk.lookup("127.0.0.1", service) end\n');

interface WrkResult {
  rps: number;
  p99: number;
  requests: number;
  errors: number;
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000 };

async function runWrk(port: number, seconds: number, newConnections: boolean, connections = CONNECTIONS): Promise<WrkResult> {
  const args = [
    `-t${THREADS}`,
    `-c${connections}`,
    `-d${seconds}s`,
    '--latency',
    '-s',
    WRK_SCRIPT,
    '-H',
    `User-Agent: ${UA}`,
    ...(newConnections ? ['-H', 'Connection: close'] : []),
    `https://${HOST}:${port}/`,
  ];
  const { stdout: out } = await run(WRK, args, { timeout: (seconds + 30) * 1000 });
  const field = (re: RegExp) => re.exec(out)?.[1];
  const p99 = /\s99%\s+([\d.]+)(us|ms|s|m)/.exec(out);
  const rps = Number(field(/Requests\/sec:\s+([\d.]+)/));
  if (!p99 || !(rps > 0)) throw new Error(`unreadable wrk output:\n${out}`);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps,
    p99: Number(p99[1]) * UNIT_MS[p99[2]!]!,
    requests: Number(field(/(\d+) requests in/)),
    errors: Number(field(/Non-2xx or 3xx responses:\s+(\d+)/) ?? 0) + (sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0),
  };
}

interface Sample extends WrkResult {
  cpuUsPerRequest: number;
  full: number;
  resumed: number;
}

async function measure(side: Side, newConnections: boolean): Promise<Sample> {
  await runWrk(side.port, 1, newConnections); // warm-up
  const [before, cpu0] = [await tlsSessions(side.statsSocket), cpuMs(side.proc.child.pid!)];
  const r = await runWrk(side.port, DURATION, newConnections);
  const [after, cpu1] = [await tlsSessions(side.statsSocket), cpuMs(side.proc.child.pid!)];
  return { ...r, cpuUsPerRequest: ((cpu1 - cpu0) * 1000) / r.requests, full: after.full - before.full, resumed: after.resumed - before.resumed };
}

/**
 * Part 3, through the agent's own classes: HaproxyProcess (master-worker, `-S` master socket) and
 * Applier (render into a fresh directory, `haproxy -c`, swap `current`, `reload`, wait for the new
 * hash on the health socket), with certificate files written by its CertificateStore. Each try
 * starts from the one-domain configuration and adds a second domain with a certificate made on the
 * spot (untimed); the clock starts once that file is written. Meanwhile HTTPS requests with the new
 * SNI poll the proxy until one is answered 200 with that certificate's fingerprint.
 */
async function certificateGoesLive(originPort: number, store: CertificateStore, bench: ServedCertificate): Promise<{ live: number[]; applied: number[] }> {
  const root = join(tmp, 'agent');
  const runDir = join(root, 'run');
  const configRoot = join(root, 'haproxy');
  const options = await agentOptions(runDir, [bench]);
  const proxy = (agentProxy = new HaproxyProcess(HAPROXY, join(configRoot, 'current', 'haproxy.cfg'), runDir));
  const applier = new Applier(HAPROXY, proxy, { configRoot, runDir, stateFile: join(root, 'state.json') }, options);
  const apply = async (domains: string[]) => {
    const r = await applier.apply(snapshot(domains, originPort));
    if (!r.ok) throw new Error(`apply failed at ${r.stage}: ${JSON.stringify(r.errors)}`);
  };
  await applier.ensureBootConfig('bench');
  proxy.start();
  if (!(await proxy.waitForHash(applier.state.hash!, 15_000))) throw new Error('the agent-style HAProxy did not start');
  await apply([HOST]);
  const benchFingerprint = new X509Certificate(readFileSync(bench.file)).fingerprint256;
  await waitFor(() => servesOk(options.httpsPort, HOST, benchFingerprint), `${HOST} over HTTPS`, 15_000);

  const live: number[] = [];
  const applied: number[] = [];
  for (let i = 1; i <= TRIES; i++) {
    const domain = `new${i}.example.com`;
    const cert = makeCertificate(domain);
    const file = (await store.save(domain, cert.chain, cert.key)).file;
    const t0 = performance.now();
    options.certificates = [bench, { domain, file }]; // as the agent does before applying
    const applying = apply([HOST, domain]).then(() => applied.push(performance.now() - t0));
    await waitFor(() => servesOk(options.httpsPort, domain, cert.fingerprint), `${domain}'s certificate to be served`, 15_000, 10);
    live.push(performance.now() - t0);
    await applying;
    options.certificates = [bench];
    await apply([HOST]); // back to one domain, untimed
  }
  await proxy.stop();
  agentProxy = undefined;
  return { live, applied };
}

// ------------------------------------------------------------------------------------------------
// The run
// ------------------------------------------------------------------------------------------------

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const MODES = [
  { name: 'new TLS handshakes', newConnections: true },
  { name: 'keep-alive', newConnections: false },
] as const;
const samples = new Map<string, Sample[]>(); // `${side} ${mode}` -> one per round
let probe: WrkResult | undefined;
let certs: { live: number[]; applied: number[] } | undefined;

try {
  const store = new CertificateStore(join(tmp, 'certs'));
  await store.load();
  const made = makeCertificate(HOST);
  const bench: ServedCertificate = { domain: HOST, file: (await store.save(HOST, made.chain, made.key)).file };

  const origin = await startOrigin(bench.file);
  probe = await runWrk(origin.probePort, 1, true, 2);
  if (probe.errors > 0 || probe.requests === 0) throw new Error(`wrk did not send SNI ${HOST}: ${probe.errors} of ${probe.requests} requests refused by the probe`);

  // Rampart with the WAF off is a reference only: it tells the WAF's share from the rest of the difference.
  const sides = [await startPlain(bench.file, origin.port), await startRampart(bench, origin.port, true), await startRampart(bench, origin.port, false)];
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of MODES) {
      for (const side of round % 2 ? [...sides].reverse() : sides) {
        const key = `${side.name} ${mode.name}`;
        samples.set(key, [...(samples.get(key) ?? []), await measure(side, mode.newConnections)]);
      }
    }
  }
  for (const side of sides) await haproxies.stop(side.proc); // idle, but out of part 3's way

  certs = await certificateGoesLive(origin.port, store, bench);
} finally {
  await agentProxy?.stop();
  await haproxies.stopAll();
  rmSync(tmp, { recursive: true, force: true });
}

// ------------------------------------------------------------------------------------------------
// Report
// ------------------------------------------------------------------------------------------------

const summary = (side: string, mode: string) => {
  const s = samples.get(`${side} ${mode}`)!;
  const sum = (f: (x: Sample) => number) => s.reduce((a, x) => a + f(x), 0);
  return {
    rps: median(s.map((x) => x.rps)),
    p99: median(s.map((x) => x.p99)),
    cpu: median(s.map((x) => x.cpuUsPerRequest)),
    errors: sum((x) => x.errors),
    requests: sum((x) => x.requests),
    full: sum((x) => x.full),
    resumed: sum((x) => x.resumed),
  };
};

console.log(`\nbench:tls — wrk -t${THREADS} -c${CONNECTIONS} to https://${HOST}/ (SNI ${HOST}), ${DURATION} s per run after a 1 s warm-up;`);
console.log(`medians of ${ROUNDS} rounds alternating which side goes first; ratios to plain HAProxy in this run`);
console.log('Rampart: one domain, sslEnabled, WAF medium (or off), no rules. Plain: TLS termination only, same certificate, TLS settings and defaults.');
console.log('Both: session cache off (tune.ssl.cachesize 0), so every new connection is a full handshake.\n');
console.log('case'.padEnd(40) + 'req/s'.padStart(9) + 'p99 ms'.padStart(9) + 'x plain'.padStart(9) + 'proxy CPU us/req'.padStart(18) + 'errors'.padStart(8));
const SIDES = ['plain HAProxy', 'Rampart', 'Rampart, WAF off'];
const ratio: Record<string, number> = {};
for (const mode of MODES) {
  const plain = summary('plain HAProxy', mode.name);
  for (const side of SIDES) {
    const s = summary(side, mode.name);
    if (side === 'Rampart') ratio[mode.name] = s.rps / plain.rps;
    console.log(
      `${side}, ${mode.name}`.padEnd(40) +
        s.rps.toFixed(0).padStart(9) +
        s.p99.toFixed(2).padStart(9) +
        (side === 'plain HAProxy' ? '' : (s.rps / plain.rps).toFixed(2)).padStart(9) +
        s.cpu.toFixed(0).padStart(18) +
        String(s.errors).padStart(8),
    );
  }
}
console.log('(proxy CPU: user + system time of the proxy measured, per request; wrk shares the CPUs, so this is its own cost)');
console.log("(with Connection: close, wrk's latency starts after the handshake: its p99 leaves the handshake out)");

const line = (name: string, value: string, aim: string, ok: boolean) => console.log(`${name.padEnd(52)}${value.padStart(12)}   aim ${aim.padEnd(10)} ${ok ? 'met' : 'MISSED'}`);
console.log('');
line('new TLS handshakes/s, Rampart / plain', ratio['new TLS handshakes']!.toFixed(2), '>= 0.90', ratio['new TLS handshakes']! >= 0.9);
line('keep-alive req/s over HTTPS, Rampart / plain', ratio['keep-alive']!.toFixed(2), '>= 0.90', ratio['keep-alive']! >= 0.9);
const p99 = summary('Rampart', 'keep-alive').p99 - summary('plain HAProxy', 'keep-alive').p99;
console.log(`${'keep-alive p99, Rampart - plain'.padEnd(52)}${`${p99 >= 0 ? '+' : ''}${p99.toFixed(2)} ms`.padStart(12)}`);
if (certs) {
  const live = median(certs.live);
  line(`new certificate live, median of ${TRIES}`, `${live.toFixed(0)} ms`, '<= 2 s', live <= 2000);
  console.log(`  (tries ${certs.live.map((x) => x.toFixed(0)).join(', ')} ms; new hash on the health socket after ${certs.applied.map((x) => x.toFixed(0)).join(', ')} ms)`);
}
console.log('');
if (probe) console.log(`check: wrk sends SNI ${HOST}: the probe answered ${probe.requests} of ${probe.requests} requests 200`);
for (const side of SIDES) {
  const s = summary(side, 'new TLS handshakes');
  const note = s.resumed > 0 || s.full < s.requests ? '  NOT all full handshakes' : '';
  console.log(`check: ${side}, measured handshake runs: ${s.requests} requests, ${s.full} full TLS handshakes, ${s.resumed} resumed${note}`);
}
