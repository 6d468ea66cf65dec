import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import { ADMIN } from '../support/cluster.js';
import { CHROMIUM, CLI, freePort, skipUnless, startProcess, startServe, type Proc, waitFor } from '../support/processes.js';

// The dashboard's "Connect" dialog of a new server, in a real Chromium against a real `rampart
// serve`: its commands download the package this control plane serves, and the last one, run as
// written (sudo aside), writes agent.env with the server's token, from which a real agent connects.
// The token is never on a command line: it goes through standard input.

const EMAIL = `install-${Date.now()}@example.com`;
const PASSWORD = 'correct horse battery';

describe('the dashboard hands out the install and connect commands', { skip: skipUnless(CHROMIUM, 'chromium is not installed (npm run setup installs it)') }, () => {
  const downloads = mkdtempSync(join(tmpdir(), 'rampart-downloads-'));
  const configDir = mkdtempSync(join(tmpdir(), 'rampart-etc-'));
  const agentDir = mkdtempSync(join(tmpdir(), 'rampart-agent-'));
  const pkg = randomBytes(4096);
  let serve: Awaited<ReturnType<typeof startServe>>;
  let browser: Browser;
  let agent: Proc | undefined;
  let apiKey: string;

  before(async () => {
    writeFileSync(join(downloads, 'rampart_0.1.0_all.deb'), pkg);
    serve = await startServe({ port: await freePort(), adminToken: ADMIN, env: { RAMPART_DOWNLOADS_DIR: downloads } });
    const created = await fetch(`${serve.url}/admin/accounts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ email: EMAIL, password: PASSWORD, plan: 'pro', balance: 100 }),
    });
    apiKey = ((await created.json()) as { apiKey: string }).apiKey;
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
  });
  after(async () => {
    await agent?.stop();
    await browser?.close();
    await serve?.stop();
    for (const d of [downloads, configDir, agentDir]) rmSync(d, { recursive: true, force: true });
  });

  test('Add server shows the commands; they fetch the package and connect the server', async () => {
    const page = await browser.newPage();
    await page.goto(serve.url);
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Servers', exact: true }).click();
    await page.getByRole('button', { name: 'Add server' }).click();
    await page.getByRole('dialog', { name: 'Add server' }).getByLabel('Server name').fill('edge-install');
    await page.getByRole('button', { name: 'Save' }).click();
    const dialog = page.getByRole('dialog', { name: 'Connect edge-install' });
    const code = dialog.getByLabel('Install and connect commands');
    const commands = (await code.getAttribute('data-copy'))!;
    assert.equal(await code.innerText(), commands, 'what is shown is what is copied');
    await dialog.getByRole('button', { name: 'Copy' }).waitFor();
    const [download, install, connect] = commands.split('\n');
    assert.equal(download, `curl -fsSLo /tmp/rampart_all.deb ${serve.url}/downloads/rampart_all.deb`);
    assert.equal(install, 'sudo apt-get install -y /tmp/rampart_all.deb');
    assert.match(connect!, new RegExp(`^ echo '[^']+' \\| sudo rampart init agent --server ws://127\\.0\\.0\\.1:${new URL(serve.url).port}/agent$`));

    const served = await fetch(download!.split(' ').at(-1)!);
    assert.equal(served.status, 200);
    assert.deepEqual(Buffer.from(await served.arrayBuffer()), pkg);

    // The last line as the operator runs it; `rampart` is the built CLI, /etc/rampart a temporary directory.
    const ran = spawnSync('sh', ['-c', connect!.replace('sudo rampart', `"${process.execPath}" "${CLI}"`)], { encoding: 'utf8', env: { ...process.env, RAMPART_CONFIG_DIR: configDir } });
    assert.equal(ran.status, 0, ran.stderr);
    const token = /echo '([^']+)'/.exec(connect!)![1]!;
    assert.ok(!ran.stdout.includes(token) && !ran.stderr.includes(token), 'the token is not echoed');
    const envFile = join(configDir, 'agent.env');
    assert.equal(statSync(envFile).mode & 0o777, 0o600);
    const env = Object.fromEntries(
      readFileSync(envFile, 'utf8')
        .split('\n')
        .filter((l) => /^[A-Z_]+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    assert.equal(env.RAMPART_AGENT_TOKEN, token);
    assert.equal(env.RAMPART_SERVER_URL, `ws://127.0.0.1:${new URL(serve.url).port}/agent`);

    agent = startProcess(
      process.execPath,
      [CLI, 'agent', '--server', env.RAMPART_SERVER_URL!, '--data-dir', agentDir, '--http-port', String(await freePort()), '--bind', '127.0.0.1', '--metrics-port', '0'],
      { RAMPART_AGENT_TOKEN: env.RAMPART_AGENT_TOKEN },
    );
    await waitFor(
      async () => {
        const servers = (await (await fetch(`${serve.url}/api/servers`, { headers: { 'x-api-key': apiKey } })).json()) as { name: string; status: string }[];
        return servers.find((s) => s.name === 'edge-install')?.status === 'active';
      },
      "the agent configured by the dashboard's command to connect",
      30_000,
    );
  });
});
