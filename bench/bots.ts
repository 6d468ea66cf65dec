// npm run bench:bots — what the proof-of-work challenge costs, in one run:
//  1. solve time in a real headless Chromium (Debian's, driven by playwright-core): the page's own
//     workers, from the challenge page's first byte to the answer it sends, at the default
//     difficulty and its neighbours, over HTTPS-like pages (Web Crypto: the origin is marked secure,
//     as an HTTPS site is) and plain-HTTP pages (the page's own SHA-256); median and 95th percentile;
//  2. the same work in native code (node's crypto, one core): what a scraper pays per pass;
//  3. requests per second through Rampart's HAProxy with bot protection on and a valid pass cookie,
//     as a ratio to the same configuration with bot protection off, measured with wrk. Both
//     forward to the same origin (a bare HAProxy answering 200).
// HAProxy is configured by renderHaproxyConfig directly (no control plane, no agent). Every process
// started here is stopped, and the temporary directory removed, before the bench exits.
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { BOT_DIFFICULTY_DEFAULT, type ServerSnapshot, type SnapshotRule } from '@rampart/protocol';
import { renderHaproxyConfig, solveChallenge } from '@rampart/proxy';
import { viaProxy } from '../test/support/cluster.js';
import { freePort, startProcess, waitFor, type Proc } from '../test/support/processes.js';
import { bareOriginConfig, benchProcesses, passCookie, runWrk } from './support.js';

const SOLVES = Number(process.env.BENCH_SOLVES ?? 25);
const DURATION = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const HAPROXY = process.env.HAPROXY ?? 'haproxy';
const CHROMIUM = process.env.CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const HOST = 'bots.bench.test';
const UA = 'Mozilla/5.0 (X11; Linux x86_64) rampart-bench/1.0';
const DIFFICULTIES = [BOT_DIFFICULTY_DEFAULT - 2, BOT_DIFFICULTY_DEFAULT, BOT_DIFFICULTY_DEFAULT + 2];
const AIM_MEDIAN_MS = 300;
const AIM_RATIO = 0.95;

const tmp = mkdtempSync(join(tmpdir(), 'rampart-bench-bots-'));
let browser: Browser | undefined;
const procs = benchProcesses(tmp, () => void browser?.close());

const KEY = { id: randomBytes(4).toString('hex'), secret: randomBytes(32).toString('hex') };
const DOMAIN_ID = randomUUID();

function snapshot(botValue: string | undefined): ServerSnapshot {
  const rules: SnapshotRule[] = botValue ? [{ id: randomUUID(), type: 'block_bot', value: botValue, domainId: null, priority: 1 }] : [];
  return {
    serverId: 'bench',
    revision: 1,
    domains: [{ id: DOMAIN_ID, domain: HOST, origins: [{ ip: '127.0.0.1', port: 0 }], sslEnabled: false, wafEnabled: true, wafLevel: 'low', wafMode: 'block', serverAddresses: ['127.0.0.1'] }],
    rules,
    botKeys: [KEY],
  };
}

function launch(cfg: string): Proc {
  const proc = startProcess(HAPROXY, ['-f', cfg]);
  procs.add(proc);
  return proc;
}

async function startOrigin(): Promise<number> {
  const port = await freePort();
  const dir = join(tmp, 'origin');
  mkdirSync(dir);
  writeFileSync(join(dir, 'haproxy.cfg'), bareOriginConfig(port));
  const proc = launch(join(dir, 'haproxy.cfg'));
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`origin exited: ${proc.output()}`);
      return (await viaProxy(port, HOST, '/')).status === 200;
    },
    'the origin to answer',
    15_000,
    50,
  );
  return port;
}

/** Rampart's rendered configuration for one domain, with or without a block_bot rule. */
async function startRampart(name: string, originPort: number, botValue: string | undefined): Promise<number> {
  const port = await freePort();
  const configDir = join(tmp, name);
  mkdirSync(configDir);
  const snap = snapshot(botValue);
  snap.domains[0]!.origins = [{ ip: '127.0.0.1', port: originPort }];
  const { files } = renderHaproxyConfig(snap, { httpBind: { address: '127.0.0.1', port }, runDir: join(tmp, `${name}-run`) }, { configDir });
  mkdirSync(join(tmp, `${name}-run`));
  for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
  const proc = launch(join(configDir, 'haproxy.cfg'));
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`${name} exited: ${proc.output()}`);
      return (await viaProxy(port, HOST, '/', { 'user-agent': UA })).status === 200;
    },
    `${name} to answer`,
    15_000,
    50,
  );
  return port;
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
};
const fmt = (ms: number) => `${ms.toFixed(0)} ms`;

/** One visit in a fresh context: the page's own account of its work (window.rampartPow), read while its answer is held. */
async function solveOnce(b: Browser, url: string): Promise<{ ms: number; hashes: number; webCrypto: boolean }> {
  const context = await b.newContext({ userAgent: UA });
  try {
    const page = await context.newPage();
    let solved: { ms: number; hashes: number; webCrypto: boolean } | undefined;
    await page.route('**/.well-known/rampart/bot?*', async (route) => {
      solved = await page.evaluate(() => (window as unknown as { rampartPow: { ms: number; hashes: number; webCrypto: boolean } }).rampartPow);
      await route.continue();
    });
    await page.goto(url);
    await page.waitForFunction(() => document.body.innerText.trim() === 'ok', undefined, { timeout: 60_000 });
    if (!solved) throw new Error('the page reached the origin without an answer');
    return solved;
  } finally {
    await context.close();
  }
}

async function main(): Promise<void> {
  if (!CHROMIUM) throw new Error('chromium is not installed (npm run setup installs it)');
  const originPort = await startOrigin();
  const off = await startRampart('bot-off', originPort, undefined);
  const on = await startRampart('bot-on', originPort, '{"enabled":true}');
  // One configuration per difficulty measured in the browser.
  const byDifficulty = new Map<number, number>();
  for (const d of DIFFICULTIES) byDifficulty.set(d, d === BOT_DIFFICULTY_DEFAULT ? on : await startRampart(`bot-d${d}`, originPort, JSON.stringify({ enabled: true, difficulty: d })));

  console.log(`bench:bots — ${SOLVES} solves per row in headless Chromium (${CHROMIUM}), default difficulty ${BOT_DIFFICULTY_DEFAULT} bits\n`);
  console.log('1. Solve time in the browser (first byte of the challenge to the answer)');
  const results = new Map<string, number[]>();
  for (const secure of [true, false]) {
    for (const [d, port] of byDifficulty) {
      const origin = `http://${HOST}:${port}`;
      const args = [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        `--host-resolver-rules=MAP ${HOST} 127.0.0.1`,
        ...(secure ? [`--unsafely-treat-insecure-origin-as-secure=${origin}`] : []),
      ];
      browser = await chromium.launch({ executablePath: CHROMIUM, args });
      const times: number[] = [];
      const hashes: number[] = [];
      for (let i = 0; i < SOLVES; i++) {
        const s = await solveOnce(browser, `${origin}/`);
        if (s.webCrypto !== secure) throw new Error(`expected ${secure ? 'Web Crypto' : 'the script'}, the page used ${s.webCrypto ? 'Web Crypto' : 'the script'}`);
        times.push(s.ms);
        hashes.push(s.hashes);
      }
      await browser.close();
      browser = undefined;
      const label = `${secure ? 'HTTPS (Web Crypto)' : 'plain HTTP (script SHA-256)'}, ${d} bits`;
      results.set(label, times);
      const rate = hashes.reduce((a, b) => a + b, 0) / (times.reduce((a, b) => a + b, 0) / 1000);
      console.log(`   ${label.padEnd(40)} median ${fmt(quantile(times, 0.5)).padStart(7)}   p95 ${fmt(quantile(times, 0.95)).padStart(7)}   ~${Math.round(rate / 1000)}k hashes/s`);
    }
  }

  console.log('\n2. The same work in native code (node crypto, one core): the price per pass');
  for (const d of DIFFICULTIES) {
    const times: number[] = [];
    let total = 0;
    for (let i = 0; i < Math.max(SOLVES, 50); i++) {
      const token = `${KEY.id}.${Math.floor(Date.now() / 1000) + 300}.${d}.${randomBytes(8).toString('hex')}.${randomBytes(32).toString('hex')}`;
      const t0 = performance.now();
      total += solveChallenge(token, d).hashes;
      times.push(performance.now() - t0);
    }
    const rate = total / (times.reduce((a, b) => a + b, 0) / 1000);
    console.log(
      `   ${String(d).padStart(2)} bits: median ${quantile(times, 0.5).toFixed(1)} ms, p95 ${quantile(times, 0.95).toFixed(1)} ms (~${Math.round(rate / 1000)}k hashes/s, ${Math.round(total / times.length)} hashes a pass on average)`,
    );
  }

  console.log(`\n3. Requests per second with a valid pass cookie (wrk, ${CONNECTIONS} connections, ${DURATION} s, after a 1 s warm-up)`);
  const headers = { Host: HOST, 'User-Agent': UA, Cookie: passCookie(KEY, HOST, '127.0.0.1', UA) };
  const check = await viaProxy(on, HOST, '/', { 'user-agent': UA, cookie: headers.Cookie });
  if (check.text !== 'ok') throw new Error(`the pass cookie did not pass: ${check.status} ${check.text.slice(0, 100)}`);
  const measure = async (port: number) => {
    await runWrk({ port, path: '/', seconds: 1, connections: CONNECTIONS, headers });
    return runWrk({ port, path: '/', seconds: DURATION, connections: CONNECTIONS, headers });
  };
  // Alternated twice so that drift on the shared cores lands on both sides alike.
  const offRuns = [];
  const onRuns = [];
  for (let i = 0; i < 2; i++) {
    offRuns.push(await measure(off));
    onRuns.push(await measure(on));
  }
  for (const r of [...offRuns, ...onRuns]) if (r.non2xx > 0 || r.socketErrors > 0) throw new Error(`wrk saw ${r.non2xx} non-2xx answers and ${r.socketErrors} socket errors`);
  const offRps = offRuns.reduce((a, r) => a + r.rps, 0) / offRuns.length;
  const onRps = onRuns.reduce((a, r) => a + r.rps, 0) / onRuns.length;
  console.log(`   bot protection off: ${Math.round(offRps)} req/s, p99 ${offRuns[1]!.p99.toFixed(2)} ms`);
  console.log(`   bot protection on:  ${Math.round(onRps)} req/s, p99 ${onRuns[1]!.p99.toFixed(2)} ms`);

  const median = quantile(results.get(`HTTPS (Web Crypto), ${BOT_DIFFICULTY_DEFAULT} bits`)!, 0.5);
  const medianPlain = quantile(results.get(`plain HTTP (script SHA-256), ${BOT_DIFFICULTY_DEFAULT} bits`)!, 0.5);
  const ratio = onRps / offRps;
  console.log('\nAims');
  console.log(`   median solve at the default difficulty, HTTPS: ${fmt(median)} (aim <= ${AIM_MEDIAN_MS} ms) ${median <= AIM_MEDIAN_MS ? 'met' : 'MISSED'}`);
  console.log(`   median solve at the default difficulty, plain HTTP: ${fmt(medianPlain)} (aim <= ${AIM_MEDIAN_MS} ms) ${medianPlain <= AIM_MEDIAN_MS ? 'met' : 'MISSED'}`);
  console.log(`   bot protection on / off with a valid cookie: ${ratio.toFixed(3)} (aim >= ${AIM_RATIO}) ${ratio >= AIM_RATIO ? 'met' : 'MISSED'}`);
}

try {
  await main();
} finally {
  await browser?.close();
  await procs.stopAll();
  rmSync(tmp, { recursive: true, force: true });
}
