import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { ADMIN, settle, startAgent, startOrigin, viaProxy, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// The dashboard in a real Chromium against a real `rampart serve`, agent, HAProxy and origin:
// signing in, domains, every rule type, a blocked request arriving live in Events and turned into
// an exception, API keys, the export, a traffic chart, custom rules (builder, expression checked
// as you type, enable, reorder); screenshots of every view at 1400 and 390
// px into test-results/, and axe-core on every view in both themes.

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
const VIEWS = ['Overview', 'Domains', 'Servers', 'WAF', 'Custom rules', 'Events', 'Analytics', 'Notifications', 'Audit log', 'Settings'] as const;
const OUT = join(process.cwd(), 'test-results');
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const EMAIL = `dash-${Date.now()}@example.com`;
const PASSWORD = 'correct horse battery';
const DOMAIN = 'shop.dash.test';

describe('the dashboard in a real Chromium', { skip: !CHROMIUM && 'chromium is not installed (npm run setup installs it)' }, () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let agent: Awaited<ReturnType<typeof startAgent>> | undefined;
  let browser: Browser;
  let page: Page;
  let api: ApiClient;
  let serverName: string;

  before(async () => {
    mkdirSync(OUT, { recursive: true });
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    origin = await startOrigin('dash-origin');
    const created = await fetch(`${serve.url}/admin/accounts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ email: EMAIL, password: PASSWORD, plan: 'pro', balance: 100 }),
    });
    const key = ((await created.json()) as { apiKey: string }).apiKey;
    api = {
      url: serve.url,
      key,
      async call(method, path, body) {
        const r = await fetch(serve.url + path, {
          method,
          headers: { 'x-api-key': key, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        });
        const text = await r.text();
        return { status: r.status, body: text ? JSON.parse(text) : undefined };
      },
    };
    serverName = 'edge-dash';
    const srv = await api.call('POST', '/api/servers', { name: serverName });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, analyticsIntervalMs: 1000 });
    await waitFor(async () => (await api.call('GET', '/api/servers')).body[0].status === 'active', 'the agent to connect', 120_000);
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: FLAGS });
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, acceptDownloads: true, colorScheme: 'light' });
    page = await context.newPage();
    page.on('pageerror', (err) => console.error('page error:', err));
  });
  after(async () => {
    await browser?.close();
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  const nav = (name: (typeof VIEWS)[number]) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });
  async function go(name: (typeof VIEWS)[number]) {
    await nav(name).click();
    await page.getByRole('heading', { level: 1, name }).waitFor();
  }

  test('signing in with the Email and Password fields and the Sign in button', async () => {
    await page.goto(serve.url);
    await page.getByLabel('Password').fill('wrong password');
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').waitFor();
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    for (const name of VIEWS) await nav(name).waitFor();
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
    // A new account has served nothing: the chart says so in words.
    await page.getByText('No traffic yet', { exact: false }).waitFor();
  });

  test('adding a domain with the Add domain form, then editing it', async () => {
    await go('Domains');
    await page.getByRole('button', { name: 'Add domain' }).click();
    const dialog = page.getByRole('dialog', { name: 'Add domain' });
    await dialog.getByLabel('Domain name').fill(DOMAIN);
    await dialog.getByLabel('Origins').fill('not an origin');
    await dialog.getByText('Line 1 is not address:port').waitFor();
    await dialog.getByLabel('Origins').fill(`127.0.0.1:${origin.port}`);
    // High is preselected (the API's default stays medium); each level says what it does.
    const level = (name: string) => dialog.getByRole('group', { name: 'WAF level' }).getByRole('radio', { name: new RegExp(`^${name}\\b`) });
    assert.equal(await level('high').isChecked(), true);
    assert.equal(await level('medium').isChecked(), false);
    await dialog.getByText('Blocks only the addresses and countries on your block lists.').waitFor();
    await dialog.getByText(/^Also enforces your rate limits/).waitFor();
    await dialog.getByText(/^Also detects attacks \(SQL injection, cross-site scripting/).waitFor();
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(OUT, 'dashboard-add-domain-390.png') });
    await page.setViewportSize({ width: 1400, height: 900 });
    await level('medium').check();
    await dialog.getByLabel(serverName).check();
    await dialog.getByLabel("HTTPS with a Let's Encrypt certificate").uncheck();
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'detached' });
    const row = page.getByRole('row').filter({ hasText: DOMAIN });
    await row.getByText('medium, block').waitFor();

    await row.getByRole('button', { name: 'Edit' }).click();
    const edit = page.getByRole('dialog', { name: `Edit ${DOMAIN}` });
    assert.equal(await edit.getByLabel('Origins').inputValue(), `127.0.0.1:${origin.port}`);
    await edit.getByRole('radio', { name: /^high\b/ }).check();
    await edit.getByRole('button', { name: 'Save' }).click();
    await edit.waitFor({ state: 'detached' });
    await row.getByText('high, block').waitFor();
    const [d] = (await api.call('GET', '/api/domains')).body;
    assert.equal(d.domain, DOMAIN);
    assert.equal(d.wafLevel, 'high');
    assert.deepEqual(d.origins, [{ ip: '127.0.0.1', port: origin.port }]);
    await settle(api);
    assert.equal((await viaProxy(agent!.httpPort, DOMAIN, '/')).status, 200);
  });

  test('the audit log names who changed what: the API key that registered the server, the signed-in user who edited the domain', async () => {
    const entries = (await api.call('GET', '/api/audit?objectType=domain&action=update')).body;
    assert.equal(entries.length, 1, JSON.stringify(entries));
    assert.deepEqual(entries[0].actor, { type: 'user', name: EMAIL, keyPrefix: null });
    assert.deepEqual([entries[0].before, entries[0].after], [{ wafLevel: 'medium' }, { wafLevel: 'high' }]);
    const [server] = (await api.call('GET', '/api/audit?objectType=server&action=create')).body;
    assert.deepEqual(server.actor, { type: 'api_key', name: 'default', keyPrefix: api.key.slice(0, 12) });
    assert.equal(server.after.connectionToken, '[secret]', 'the connection token is never shown');
    await go('Audit log');
    await page.getByRole('row').filter({ hasText: EMAIL }).filter({ hasText: 'wafLevel: medium → high' }).waitFor();
  });

  test('adding a rule of each type with its own control; a duplicate is explained', async () => {
    await go('WAF');
    async function add(type: string, fill: (d: ReturnType<Page['getByRole']>) => Promise<void>) {
      await page.getByRole('button', { name: 'Add rule' }).click();
      const d = page.getByRole('dialog', { name: 'Add rule' });
      await d.getByLabel('Rule type').selectOption(type);
      await fill(d);
      await d.getByRole('button', { name: 'Save' }).click();
      await d.waitFor({ state: 'detached' });
    }
    await add('block_ip', async (d) => {
      await d.getByLabel('Address or range').fill('203.0.113.300');
      await d.getByText('Not an IPv4 or IPv6 address or range').waitFor();
      await d.getByLabel('Address or range').fill('203.0.113.0/24');
    });
    await add('allow_ip', (d) => d.getByLabel('Address or range').fill('198.51.100.7'));
    await add('block_country', (d) => d.getByLabel('Country').fill('Germany (DE)'));
    await add('rate_limit', (d) => d.getByLabel('Requests per minute').fill('1000'));
    await add('block_bot', async (d) => {
      // Off: the attack below must reach detection, not the challenge.
      await d.getByLabel('Bot protection on').uncheck();
      await d.getByLabel('Difficulty').fill('16');
    });
    await add('block_ai_bot', (d) => d.getByLabel('Crawler').selectOption('GPTBot'));
    await add('waf_exception', async (d) => {
      await d.getByLabel('Scope').selectOption({ label: DOMAIN });
      await d.getByLabel('Path', { exact: true }).fill('/comments');
      await d.getByLabel('Location (optional)').fill('body:content');
      await d.getByLabel('Detector').selectOption('xss');
    });
    const rules = (await api.call('GET', '/api/waf')).body as { rule_type: string; value: string; domain_id: string | null }[];
    const byType = Object.fromEntries(rules.map((r) => [r.rule_type, r.value]));
    assert.deepEqual(byType, {
      block_ip: '203.0.113.0/24',
      allow_ip: '198.51.100.7',
      block_country: 'DE',
      rate_limit: '{"requests_per_minute":1000}',
      block_bot: '{"enabled":false,"difficulty":16}',
      block_ai_bot: 'GPTBot',
      waf_exception: '{"path":"/comments","location":"body:content","detector":"xss"}',
    });
    await page.getByRole('cell', { name: 'Germany (DE)', exact: true }).waitFor();
    await page.getByRole('cell', { name: '1000 requests a minute per client', exact: true }).waitFor();

    // The same rule again: the API refuses it, and its message is shown as it is.
    await page.getByRole('button', { name: 'Add rule' }).click();
    const d = page.getByRole('dialog', { name: 'Add rule' });
    await d.getByLabel('Address or range').fill('203.0.113.0/24');
    await d.getByRole('button', { name: 'Save' }).click();
    const again = await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: '203.0.113.0/24' });
    assert.ok(again.status >= 400, 'the API refuses a duplicate');
    await d.getByRole('alert').getByText(again.body.error).waitFor();
    await page.keyboard.press('Escape');
    await d.waitFor({ state: 'detached' });
    // Seven changes, each a full apply on the agent (the country map makes them slower).
    await settle(api, 45_000);
  });

  test('a blocked request appears live in Events and becomes the narrowest exception', async () => {
    await go('Events');
    await page.getByText('Live', { exact: true }).waitFor({ timeout: 10_000 });
    const attack = await viaProxy(agent!.httpPort, DOMAIN, `/search?q=${encodeURIComponent("1' OR '1'='1' --")}`);
    assert.equal(attack.status, 403);
    const row = page.getByRole('row').filter({ hasText: '/search' });
    await row.waitFor({ timeout: 15_000 }); // no reload: it arrives over /api/stream
    // The request with the query as far as the detector matched, the field, and blocked or logged.
    await row.getByText(/GET shop\.dash\.test\/search\?q=\S/).waitFor();
    await row.getByRole('cell', { name: 'query:q' }).waitFor();
    await row.getByRole('cell', { name: 'Blocked' }).waitFor();
    // The request id the block page gave finds the event.
    const requestId = /Request id: ([A-Za-z0-9_-]+)/.exec(attack.text)![1]!;
    await page.getByLabel('Request id').fill(requestId);
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.getByRole('row').filter({ hasText: '/search' }).waitFor();
    await page.getByLabel('Request id').fill('no-such-request');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.getByText('No events match these filters.').waitFor();
    await page.getByRole('button', { name: 'Clear' }).click();
    await row.getByRole('button', { name: /^Details/ }).click();
    const dialog = page.getByRole('dialog', { name: 'Event' });
    await dialog.getByText('query:q').waitFor();
    await dialog.getByRole('button', { name: 'Add exception' }).click();
    await dialog.getByRole('status').getByText('Exception added').waitFor();
    await page.keyboard.press('Escape');
    const rules = (await api.call('GET', '/api/waf')).body as { rule_type: string; value: string }[];
    assert.ok(
      rules.some((r) => r.rule_type === 'waf_exception' && r.value === '{"path":"/search","location":"query:q","detector":"sqli"}'),
      JSON.stringify(rules),
    );
  });

  test('an API key is shown once with a copy button, then deleted; the export downloads', async () => {
    await go('Settings');
    await page.getByLabel('Key name').fill('dashboard test key');
    await page.getByRole('button', { name: 'Create key' }).click();
    const shown = page.getByLabel('New API key');
    await shown.waitFor();
    assert.match((await shown.textContent()) ?? '', /^rmpk_/);
    await page.getByRole('button', { name: 'Copy' }).first().waitFor();
    const row = page.getByRole('row').filter({ hasText: 'dashboard test key' });
    await row.getByRole('button', { name: /^Delete/ }).click();
    await page.getByRole('dialog', { name: 'Delete API key' }).getByRole('button', { name: 'Delete' }).click();
    await row.waitFor({ state: 'detached' });
    const keys = (await api.call('GET', '/api/settings/api-keys')).body as { name: string }[];
    assert.ok(!keys.some((k) => k.name === 'dashboard test key'));

    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download export' }).click()]);
    assert.match(download.suggestedFilename(), /^rampart-export-\d{4}-\d{2}-\d{2}\.json$/);
    const doc = JSON.parse(readFileSync((await download.path())!, 'utf8'));
    assert.ok(JSON.stringify(doc).includes(DOMAIN));
  });

  test('Analytics draws a chart of real traffic from the agent', async () => {
    for (let i = 0; i < 5; i++) await viaProxy(agent!.httpPort, DOMAIN, `/page-${i}`);
    await waitFor(
      async () => {
        const r = await api.call('GET', `/api/analytics?step=minute&from=${new Date(Date.now() - 3_600_000).toISOString()}`);
        return r.status === 200 && r.body.series.some((p: { requests: number }) => p.requests > 0);
      },
      'the agent to ship analytics',
      20_000,
    );
    await go('Analytics');
    await page.getByLabel('Period').selectOption('1h');
    await page.locator('.chart canvas').first().waitFor({ timeout: 10_000 });
    await page.getByRole('img', { name: /^Requests by status: requests [1-9]/ }).waitFor();
  });

  test('the theme toggle switches and is remembered', async () => {
    await page.getByRole('button', { name: 'Switch to dark theme' }).click();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    await page.reload();
    await page.getByRole('button', { name: 'Switch to light theme' }).waitFor();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    await page.evaluate(() => localStorage.removeItem('rampart-theme'));
    await page.reload();
    await nav('Overview').waitFor();
  });

  test('a deposit shows what to pay, where and on which network, with a QR code; one message at a time', async () => {
    await go('Settings');
    await page.getByLabel('Deposit amount (USD)').fill('5');
    await page.getByRole('button', { name: 'Deposit', exact: true }).click();
    const callout = page.locator('.callout').filter({ hasText: 'Deposit of $5.00 announced' });
    await callout.waitFor();
    // This control plane has no chain: the server's own answer, with the on-chain payment details added.
    const address = '0x52908400098527886E0F7030069857D2E4169EE7';
    await page.route('**/api/billing/deposits', async (r) => {
      const res = await r.fetch();
      await r.fulfill({ status: res.status(), json: { ...(await res.json()), address, network: 'base', token: 'USDC', tokenContract: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' } });
    });
    await page.getByLabel('Deposit amount (USD)').fill('7.5');
    await page.getByRole('button', { name: 'Deposit', exact: true }).click();
    const pay = page.locator('.callout').filter({ hasText: 'Deposit of $7.50 announced' });
    await pay.getByText('Send exactly 7.50 USDC on base').waitFor();
    await pay.getByLabel('Deposit address').getByText(address).waitFor();
    await pay
      .getByRole('img', { name: `QR code of the deposit address ${address}` })
      .locator('path')
      .waitFor();
    assert.equal(await page.locator('.callout').count(), 1, 'the earlier deposit message is replaced, not piled up');
    await page.unroute('**/api/billing/deposits');
    await page.setViewportSize({ width: 390, height: 844 });
    await pay.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(OUT, 'dashboard-deposit-390.png') });
    await page.setViewportSize({ width: 1400, height: 900 });
  });

  test('loading keeps the header and navigation; a lost connection says so in words, with a Retry', async () => {
    // The account held back: the frame and grey blocks, no blank "Loading…".
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    await page.route('**/api/account', async (r) => {
      await held;
      await r.continue();
    });
    await page.reload();
    await nav('Settings').waitFor();
    await page.locator('[aria-busy="true"]').first().waitFor();
    assert.ok(!(await page.locator('body').innerText()).includes('Loading…'));
    release();
    await page.getByRole('button', { name: 'Sign out' }).waitFor();
    await page.unroute('**/api/account');

    // A list held back: its page's heading and grey rows, never the empty list's sentence.
    let releaseList!: () => void;
    const heldList = new Promise<void>((r) => (releaseList = r));
    await page.route('**/api/domains', async (r) => {
      await heldList;
      await r.continue();
    });
    await go('Domains');
    await page.locator('main [aria-busy="true"]').first().waitFor();
    assert.ok(!(await page.locator('body').innerText()).includes('No domains yet'), 'not said empty while it loads');
    await page.screenshot({ path: join(OUT, 'dashboard-list-loading.png') });
    releaseList();
    await page.locator('main [aria-busy="true"]').first().waitFor({ state: 'detached' }); // the placeholder goes once the list is there
    await page.getByRole('button', { name: 'Add domain' }).waitFor();
    await page.unroute('**/api/domains');

    // The server unreachable on loading, then inside a view.
    const lost = page.getByRole('alert').filter({ hasText: 'The connection to the Rampart server was lost' });
    await page.route('**/api/**', (r) => r.abort());
    await page.reload();
    await lost.waitFor();
    await nav('Domains').waitFor();
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(OUT, 'dashboard-connection-lost-390.png') });
    await page.setViewportSize({ width: 1400, height: 900 });
    await page.unroute('**/api/**');
    await lost.getByRole('button', { name: 'Retry' }).click();
    await page.getByRole('button', { name: 'Sign out' }).waitFor();
    await lost.waitFor({ state: 'detached' });

    await page.route('**/api/**', (r) => r.abort());
    await go('Servers');
    await lost.waitFor();
    assert.equal(await lost.count(), 1, 'said once, not by every panel');
    assert.ok(!(await page.locator('body').innerText()).includes('Failed to fetch'));
    await page.unroute('**/api/**');
    await lost.getByRole('button', { name: 'Retry' }).click();
    await lost.waitFor({ state: 'detached' });
    await page.getByText(serverName).first().waitFor();
  });

  test("custom rules: the builder writes the expression, a typo is marked at its column, the server's refusal is shown; enable and reorder", async () => {
    await go('Custom rules');
    await page.getByRole('button', { name: 'Add custom rule' }).click();
    const d = page.getByRole('dialog', { name: 'Add custom rule' });
    const expression = d.getByLabel('Expression', { exact: true });
    const condition = (n: number) => d.getByRole('group', { name: `Condition ${n}`, exact: true });
    await d.getByLabel('Name', { exact: true }).fill('admin from the office');
    await d.getByLabel('Scope').selectOption({ label: DOMAIN });
    await condition(1).getByLabel('Operator').selectOption('starts_with');
    await condition(1).getByLabel('Value').fill('/wp-admin');
    await d.getByRole('button', { name: 'Add condition' }).click();
    await condition(2).getByLabel('Field').selectOption(':ip.src');
    await condition(2).getByLabel('Operator').selectOption('not_in');
    await condition(2).getByLabel('Value').fill('192.0.2.0/24');
    assert.equal(await expression.inputValue(), 'starts_with(http.request.uri.path, "/wp-admin") and not ip.src in {192.0.2.0/24}');

    // A typo: the parser's message with its column, and that column marked under the text.
    await expression.fill('http.request.uri.path eq');
    await d.getByText('at column 25: expected a string in double quotes, found the end of the expression').waitFor();
    assert.equal(await expression.getAttribute('aria-invalid'), 'true');
    assert.equal(await d.locator('.expr-mark').evaluate((pre) => pre.querySelector('mark')!.previousSibling?.textContent), 'http.request.uri.path eq');
    await d.getByText('fix it in the text').waitFor();
    await page.screenshot({ path: join(OUT, 'dashboard-custom-rule-error-1400.png') });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(OUT, 'dashboard-custom-rule-error-390.png') });
    await page.setViewportSize({ width: 1400, height: 900 });
    // Text the builder cannot show is kept as written and saved as it is.
    const typed = '(http.request.uri.path eq "/wp-admin" or http.request.uri.path eq "/xmlrpc.php") and not ip.src in {192.0.2.0/24}';
    await expression.fill(typed);
    await d.getByText(/The builder cannot show this expression \(parentheses around an "or"\)/).waitFor();
    await d.getByRole('button', { name: 'Save' }).click();
    await d.waitFor({ state: 'detached' });

    // A rate-limiting rule; its regular expression is refused by the server (catastrophic backtracking), with the server's message.
    await page.getByRole('button', { name: 'Add custom rule' }).click();
    await d.getByLabel('Name', { exact: true }).fill('login rate');
    await d.getByLabel('Action', { exact: true }).selectOption('rate_limit');
    await d.getByLabel('Requests', { exact: true }).fill('5');
    await d.getByLabel('Period (seconds)').fill('60');
    await condition(1).getByLabel('Operator').selectOption('matches');
    await condition(1).getByLabel('Value').fill('^/(a+)+$');
    await page.screenshot({ path: join(OUT, 'dashboard-custom-rule-editor-1400.png') });
    await d.getByRole('button', { name: 'Save' }).click();
    await d
      .getByRole('alert')
      .getByText(/can backtrack catastrophically/)
      .waitFor();
    await condition(1).getByLabel('Operator').selectOption('eq');
    await condition(1).getByLabel('Value').fill('/login');
    await d.getByRole('button', { name: 'Save' }).click();
    await d.waitFor({ state: 'detached' });

    type View = { name: string; expression: string; action: string; domainId: string | null; enabled: boolean; rateLimit: unknown };
    const listed = async () => (await api.call('GET', '/api/rules')).body as View[];
    const [admin, login] = await listed();
    const [dom] = (await api.call('GET', '/api/domains')).body;
    assert.deepEqual([admin?.name, admin?.expression, admin?.action, admin?.domainId], ['admin from the office', typed, 'block', dom.id]);
    assert.deepEqual([login?.name, login?.expression, login?.domainId], ['login rate', 'http.request.uri.path eq "/login"', null]);
    assert.deepEqual(login?.rateLimit, { requests: 5, period: 60, characteristics: ['ip'], mitigation: 'block', duration: 300 });

    const rows = page.getByRole('table', { name: 'Custom rules in run order' }).getByRole('row');
    const names = () => rows.locator('td[data-label="Rule"] strong').allTextContents();
    assert.deepEqual(await names(), ['admin from the office', 'login rate']);
    // A request the block rule refuses on the real HAProxy becomes its hit, reported by the agent, shown in its row.
    await settle(api);
    assert.equal((await viaProxy(agent!.httpPort, DOMAIN, '/xmlrpc.php')).status, 403);
    await waitFor(async () => (await api.call('GET', '/api/rules')).body[0]?.hits?.hour === 1, 'the hit to be reported', 15_000, 200);
    await page.reload();
    await rows.filter({ hasText: 'admin from the office' }).locator('td[data-label="Hits 1h / 24h / 7d"]').getByText('1 / 1 / 1').waitFor();
    // A click, not uncheck(): the switch shows the rule as saved, so it turns once the API has answered.
    await page.getByRole('switch', { name: 'Enabled: admin from the office' }).click();
    await page.locator('tr.disabled').filter({ hasText: 'admin from the office' }).waitFor();
    assert.equal((await listed())[0]?.enabled, false);
    await page.getByRole('button', { name: 'Move login rate up' }).click();
    await waitFor(async () => (await listed()).map((r) => r.name).join() === 'login rate,admin from the office', 'the rules to be reordered', 5000);
    await page.getByRole('button', { name: 'Move login rate down' }).waitFor();
    assert.deepEqual(await names(), ['login rate', 'admin from the office']);
    // One domain's rules: its own and the account-wide ones.
    await page.getByLabel('Show rules for').selectOption({ label: DOMAIN });
    await page.getByText(`The rules that run on ${DOMAIN}`).waitFor();
    assert.deepEqual(await names(), ['login rate', 'admin from the office']);
  });

  test('every view: screenshots at 1400 and 390 px, no serious or critical axe violations in either theme, no style attributes', async () => {
    const problems: string[] = [];
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      for (const view of VIEWS) {
        await page.setViewportSize({ width: 1400, height: 900 });
        await go(view);
        // The view's data has arrived (no loading placeholder left).
        await page.waitForFunction(() => !/Loading/.test(document.body.innerText));
        const styled = await page.evaluate(() => [...document.querySelectorAll('[style]')].filter((e) => !e.closest('.chart')).map((e) => e.outerHTML.slice(0, 80)));
        assert.deepEqual(styled, [], `${view}: elements with a style attribute`);
        // Evaluated through the DevTools protocol: the page's CSP (rightly) refuses an injected <script>.
        if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE);
        const violations = await page.evaluate(async () => {
          const axe = (window as unknown as { axe: { run(ctx: Document, o: object): Promise<{ violations: { id: string; impact: string; help: string; nodes: { target: string[] }[] }[] }> } }).axe;
          const r = await axe.run(document, { resultTypes: ['violations'] });
          return r.violations
            .filter((v) => v.impact === 'serious' || v.impact === 'critical')
            .map(
              (v) =>
                `${v.id} (${v.impact}): ${v.help} at ${v.nodes
                  .map((n) => n.target.join(' '))
                  .slice(0, 3)
                  .join(', ')}`,
            );
        });
        for (const v of violations) problems.push(`${view}, ${scheme}: ${v}`);
        const file = view.toLowerCase().replace(/ /g, '-');
        await page.screenshot({ path: join(OUT, `dashboard-${file}-1400-${scheme}.png`), fullPage: true });
        if (scheme === 'light') {
          await page.setViewportSize({ width: 390, height: 844 });
          await page.waitForFunction(() => document.documentElement.clientWidth <= 390);
          await page.screenshot({ path: join(OUT, `dashboard-${file}-390.png`), fullPage: true });
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  test('dialogs keep focus and close with Escape, returning focus to the opener', async () => {
    await page.setViewportSize({ width: 1400, height: 900 });
    await go('Domains');
    const opener = page.getByRole('button', { name: 'Add domain' });
    await opener.click();
    const dialog = page.getByRole('dialog', { name: 'Add domain' });
    await page.waitForFunction(() => document.activeElement?.closest('dialog') != null); // focus moved into the dialog
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.closest('dialog') != null), true, 'Tab stays in the dialog');
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Add domain');
  });
});
