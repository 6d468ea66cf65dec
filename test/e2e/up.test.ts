import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { viaProxy } from '../support/cluster.js';
import { CLI, freePort, startProcess, waitFor } from '../support/processes.js';

test('rampart up: control plane, local shield server and demo domain, with working printed commands', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-up-'));
  const [port, httpPort, originPort] = [await freePort(), await freePort(), await freePort()];
  const up = startProcess(process.execPath, [CLI, 'up', '--data-dir', dataDir, '--port', String(port), '--http-port', String(httpPort), '--origin-port', String(originPort)]);
  after(async () => {
    await up.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  await waitFor(() => up.output().includes('Press Ctrl+C to stop.'), 'rampart up to print its summary', 60_000);
  const out = up.output();
  const key = /API key\s+(rmpk_[0-9a-f]{64})/.exec(out)?.[1];
  assert.ok(key, out);
  assert.match(out, /Login\s+demo@rampart\.local \/ \S+/);
  assert.match(out, new RegExp(`Dashboard & API\\s+http://127\\.0\\.0\\.1:${port}`));
  const curlHost = /curl -s -H 'Host: ([^']+)' http:\/\/127\.0\.0\.1:(\d+)\//.exec(out);
  assert.ok(curlHost, 'a curl line through the proxy is printed');
  assert.equal(Number(curlHost[2]), httpPort);

  // The printed curl line goes through HAProxy to the demo origin.
  await waitFor(async () => (await viaProxy(httpPort, curlHost[1]!)).status === 200, 'the demo domain to be served', 30_000);
  assert.match((await viaProxy(httpPort, curlHost[1]!)).text, /demo origin behind Rampart/);
  const servers = (await (await fetch(`http://127.0.0.1:${port}/api/servers`, { headers: { 'x-api-key': key } })).json()) as any[];
  assert.equal(servers[0].status, 'active');
  // The demo lets visitors register (RAMPART_SIGNUP defaults to open here, closed for serve).
  assert.deepEqual(await (await fetch(`http://127.0.0.1:${port}/api/auth/signup`)).json(), { signup: 'open' });
});

// A port that is already taken stops `rampart up` at once, before it starts or writes anything,
// with a message naming the flag to change (it used to hang when only the origin port was taken).
for (const flag of ['--port', '--http-port', '--origin-port'] as const) {
  test(`rampart up exits at once, naming ${flag}, when that port is taken`, async () => {
    const dataDir = join(mkdtempSync(join(tmpdir(), 'rampart-up-busy-')), 'data');
    const ports = { '--port': await freePort(), '--http-port': await freePort(), '--origin-port': await freePort() };
    const occupant = createServer().listen(ports[flag], '127.0.0.1');
    await once(occupant, 'listening');
    const args = Object.entries(ports).flatMap(([f, p]) => [f, String(p)]);
    const up = startProcess(process.execPath, [CLI, 'up', '--data-dir', dataDir, ...args]);
    after(async () => {
      await up.stop();
      occupant.close();
      rmSync(dirname(dataDir), { recursive: true, force: true });
    });
    await waitFor(() => up.child.exitCode !== null, 'rampart up to exit', 15_000);
    const out = up.output();
    assert.notEqual(up.child.exitCode, 0, out);
    assert.match(out, new RegExp(`port ${ports[flag]} is in use; choose another with ${flag}\\b`));
    for (const other of Object.keys(ports).filter((f) => f !== flag)) assert.doesNotMatch(out, new RegExp(`with ${other}\\b`), out);
    assert.doesNotMatch(out, /Rampart is up/);
    assert.equal(existsSync(dataDir), false, 'nothing was started or written');
  });
}
