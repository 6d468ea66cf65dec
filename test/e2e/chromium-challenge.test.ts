import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, test } from 'node:test';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy } from '../support/cluster.js';
import { freePort, startServe } from '../support/processes.js';

const run = promisify(execFile);
const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));

test('a real headless Chromium passes the JavaScript challenge and reaches the origin', { skip: !CHROMIUM && 'chromium is not installed (npm run setup installs it)' }, async () => {
  const serve = await startServe({ port: await freePort(), adminToken: ADMIN });
  const origin = await startOrigin('behind-the-challenge');
  const profile = mkdtempSync(join(tmpdir(), 'rampart-chromium-'));
  let agent: Awaited<ReturnType<typeof startAgent>> | undefined;
  after(async () => {
    await agent?.stop();
    await serve.stop();
    await origin.close();
    rmSync(profile, { recursive: true, force: true });
  });
  const api = await apiClient(serve.url);
  const srv = await api.call('POST', '/api/servers', { name: 'edge-browser' });
  agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
  await api.call('POST', '/api/domains', { domain: 'browser.waf.test', origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false });
  await api.call('POST', '/api/waf', { rule_type: 'block_bot', value: '{"enabled":true}' });
  await settle(api);
  const plain = await viaProxy(agent.httpPort, 'browser.waf.test', '/', { 'user-agent': 'curl/8.0' });
  assert.match(plain.text, /Checking your browser/, 'a client without JavaScript is challenged');

  const { stdout } = await run(
    CHROMIUM!,
    [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', `--user-data-dir=${profile}`,
      `--host-resolver-rules=MAP browser.waf.test 127.0.0.1`, '--virtual-time-budget=10000', '--dump-dom',
      `http://browser.waf.test:${agent.httpPort}/`,
    ],
    { timeout: 60_000, maxBuffer: 10 * 1024 * 1024 },
  );
  assert.match(stdout, /behind-the-challenge/, `Chromium ends on the origin's answer, got: ${stdout.slice(0, 300)}`);
});
