import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy } from '../support/cluster.js';
import { CHROMIUM, freePort, skipUnless, startServe } from '../support/processes.js';

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];

// The proof-of-work challenge in a real headless Chromium: the page's Web Workers find the
// counter with Web Crypto, the answer earns the cookie, the reload reaches the origin. Without
// JavaScript the visitor stays on the challenge, which says what to do.
describe('the bot challenge in a real Chromium', { skip: skipUnless(CHROMIUM, 'chromium is not installed (npm run setup installs it)') }, () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let agent: Awaited<ReturnType<typeof startAgent>> | undefined;
  let browser: Browser;
  let url: string;

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    origin = await startOrigin('behind-the-challenge');
    const api = await apiClient(serve.url);
    const srv = await api.call('POST', '/api/servers', { name: 'edge-browser' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
    await api.call('POST', '/api/domains', { domain: 'browser.waf.test', origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false });
    await api.call('POST', '/api/waf', { rule_type: 'block_bot', value: '{"enabled":true}' });
    await settle(api);
    url = `http://browser.waf.test:${agent.httpPort}/`;
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: [...FLAGS, `--host-resolver-rules=MAP browser.waf.test 127.0.0.1`] });
  });
  after(async () => {
    await browser?.close();
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('a client without JavaScript gets the challenge page, not a cookie', async () => {
    const plain = await viaProxy(agent!.httpPort, 'browser.waf.test', '/', { 'user-agent': 'curl/8.0' });
    assert.match(plain.text, /Checking your browser/);
    assert.doesNotMatch(plain.text, /rampart_bot=/);
  });

  // On a plain-HTTP site (no secure context) the page's own SHA-256 does the work; on HTTPS (here:
  // the origin marked secure) Web Crypto does.
  for (const secure of [false, true]) {
    test(`Chromium solves the proof of work in its workers (${secure ? 'Web Crypto' : 'script SHA-256, plain HTTP'}), and ends on the origin with the pass cookie`, async () => {
      const b = secure
        ? await chromium.launch({
            executablePath: CHROMIUM!,
            args: [...FLAGS, `--host-resolver-rules=MAP browser.waf.test 127.0.0.1`, `--unsafely-treat-insecure-origin-as-secure=${url.slice(0, -1)}`],
          })
        : browser;
      const context = await b.newContext();
      try {
        const page = await context.newPage();
        const answers: string[] = [];
        let solved: { ms: number; hashes: number; webCrypto: boolean } | undefined;
        // Hold the answer until the page's own account of the work is read (it reloads after).
        await page.route('**/.well-known/rampart/bot?*', async (route) => {
          answers.push(route.request().url());
          solved = await page.evaluate(() => (window as unknown as { rampartPow: typeof solved }).rampartPow);
          await route.continue();
        });
        await page.goto(url);
        await page.waitForFunction(() => document.body.innerText.includes('behind-the-challenge'), undefined, { timeout: 30_000 });
        assert.equal(answers.length, 1, 'one answer was sent');
        assert.match(answers[0]!, /\?c=[0-9a-z]+\.\d+\.14\.[0-9a-f]+\.[0-9a-f]{64}&n=\d+$/);
        assert.equal(solved?.webCrypto, secure, `solved with ${secure ? 'Web Crypto' : 'the script'}: ${JSON.stringify(solved)}`);
        const pass = (await context.cookies()).find((c) => c.name === 'rampart_bot');
        assert.ok(pass, 'the pass cookie is stored');
        assert.equal(pass.httpOnly, true, 'out of reach of scripts');
        // The cookie keeps passing: the next visit goes straight to the origin.
        await page.goto(url);
        assert.match(await page.innerText('body'), /behind-the-challenge/);
        assert.equal(answers.length, 1, 'no second challenge');
      } finally {
        await context.close();
        if (secure) await b.close();
      }
    });
  }

  test('with JavaScript off the visitor stays on the challenge, and the noscript text says what to do', async () => {
    const context = await browser.newContext({ javaScriptEnabled: false });
    try {
      const page = await context.newPage();
      await page.goto(url);
      const text = await page.innerText('body');
      assert.match(text, /Checking your browser/);
      assert.match(text, /Please turn on JavaScript/);
      assert.doesNotMatch(text, /behind-the-challenge/);
      assert.equal((await context.cookies()).length, 0, 'no cookie');
    } finally {
      await context.close();
    }
  });
});
