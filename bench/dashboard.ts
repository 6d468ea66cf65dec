// npm run bench:dashboard, first half (the second is bench/analytics.ts, which the npm script runs
// next): the first load of the dashboard's Overview in headless Chromium (Debian's, driven by
// playwright-core) against a real `rampart serve` on PostgreSQL (a schema of its own) whose account
// has a day of traffic rollups: the JavaScript and CSS transferred (compressed, as the browser
// received them) and the time from navigation to the first chart drawn, in a fresh browser context
// each time (nothing cached), median of BENCH_LOADS (default 9). Aim (issue 12): under 150 KB of
// compressed JavaScript for the first view.
import { existsSync } from 'node:fs';
import pg from 'pg';
import { chromium } from 'playwright-core';
import { freshPostgresSchema, PG_URL } from '../test/support/postgres.js';
import { freePort, startServe } from '../test/support/processes.js';

const LOADS = Number(process.env.BENCH_LOADS ?? 9);
const AIM_JS_KB = 150;
const CHROMIUM = process.env.CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
if (!CHROMIUM) throw new Error('chromium is not installed (npm run setup installs it)');

const url = await freshPostgresSchema('bench_dashboard');
if (!url) throw new Error(`bench:dashboard needs PostgreSQL at ${PG_URL} (RAMPART_TEST_DATABASE_URL)`);
// The bench signs up through the API as a visitor would: sign-up must be open (RAMPART_SIGNUP).
const serve = await startServe({ port: await freePort(), databaseUrl: url, adminToken: 'bench-admin-token', env: { RAMPART_SIGNUP: 'open' } });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
try {
  // An account, signed in (its session cookie), with one domain and a day of minute rollups.
  const reg = await fetch(`${serve.url}/api/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'bench@example.com', password: 'bench-password-1234' }),
  });
  if (reg.status !== 201) throw new Error(`register: ${reg.status} ${await reg.text()}`);
  const session = /rampart_session=([^;]+)/.exec(reg.headers.get('set-cookie') ?? '')?.[1];
  if (!session) throw new Error('no session cookie');
  const { accountId } = (await reg.json()) as { accountId: string };
  const cookie = `rampart_session=${session}`;
  const dom = await fetch(`${serve.url}/api/domains`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', cookie },
    body: JSON.stringify({ domain: 'bench.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], sslEnabled: false }),
  });
  if (dom.status !== 201) throw new Error(`domain: ${dom.status} ${await dom.text()}`);
  const { id: domainId } = (await dom.json()) as { id: string };
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(
    `insert into analytics_minute (account_id, domain_id, minute, requests, s1xx, s2xx, s3xx, s4xx, s5xx, s_other, bytes_in, bytes_out, blocked, updated_at)
     select $1, $2, date_trunc('minute', now()) - make_interval(mins => i), 1000 + i % 97, 0, 900 + i % 97, 40, 50, 10, 0, 500000 + i, 9000000 + i,
            jsonb_build_object('rate_limited', i % 13, 'sqli_detected', i % 5), now()
     from generate_series(1, 24 * 60) as i`,
    [accountId, domainId],
  );
  await client.end();

  const loads: { js: number; css: number; ms: number }[] = [];
  for (let i = 0; i < LOADS; i++) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    await context.addCookies([{ name: 'rampart_session', value: session, url: serve.url }]);
    const page = await context.newPage();
    const sizes: Promise<{ kind: string; bytes: number }>[] = [];
    page.on('requestfinished', (req) => {
      const kind = req.resourceType() === 'script' ? 'js' : req.resourceType() === 'stylesheet' ? 'css' : undefined;
      if (kind) sizes.push(req.sizes().then((s) => ({ kind, bytes: s.responseBodySize })));
    });
    await page.goto(`${serve.url}/#/overview`);
    await page.waitForSelector('.chart canvas', { timeout: 30_000 });
    const ms = await page.evaluate(() => performance.now());
    const done = await Promise.all(sizes);
    loads.push({ ms, js: done.filter((s) => s.kind === 'js').reduce((a, s) => a + s.bytes, 0), css: done.filter((s) => s.kind === 'css').reduce((a, s) => a + s.bytes, 0) });
    await context.close();
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const js = median(loads.map((l) => l.js)) / 1024;
  const css = median(loads.map((l) => l.css)) / 1024;
  console.log(`dashboard: first load of the Overview, ${LOADS} fresh contexts, median`);
  console.log(`   JavaScript transferred (compressed, the chart library included): ${js.toFixed(1)} KB (aim < ${AIM_JS_KB} KB) ${js < AIM_JS_KB ? 'met' : 'MISSED'}`);
  console.log(`   CSS transferred (compressed): ${css.toFixed(1)} KB`);
  console.log(`   navigation to the first chart drawn: ${median(loads.map((l) => l.ms)).toFixed(0)} ms`);
} finally {
  await browser.close();
  await serve.stop();
}
