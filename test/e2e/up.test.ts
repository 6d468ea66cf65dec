import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
});
