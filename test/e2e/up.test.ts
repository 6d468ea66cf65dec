import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { request } from 'node:http';
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

/** GET / of `name` through a proxy listening on address:port. */
function through(address: string, port: number, name: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: address, port, path: '/', headers: { host: name }, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out')));
    req.on('error', reject).end();
  });
}

// Another machine is another loopback address here (127.0.0.0/8 is all this machine's): the
// demo listens on 127.0.0.2 only, and a second agent, bound to 127.0.0.3, joins it with the
// command `rampart up` prints.
test('rampart up --host: the demo answers on that address, and another agent joins with the printed command', async () => {
  const host = '127.0.0.2';
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-up-host-'));
  const [port, httpPort, originPort, otherPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const up = startProcess(process.execPath, [
    CLI,
    'up',
    '--host',
    host,
    '--data-dir',
    join(dataDir, 'up'),
    '--port',
    String(port),
    '--http-port',
    String(httpPort),
    '--origin-port',
    String(originPort),
  ]);
  let other: ReturnType<typeof startProcess> | undefined;
  after(async () => {
    await other?.stop();
    await up.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  await waitFor(() => up.output().includes('Press Ctrl+C to stop.'), 'rampart up to print its summary', 60_000);
  const out = up.output();
  const key = /API key\s+(rmpk_[0-9a-f]{64})/.exec(out)?.[1];
  assert.ok(key, out);
  assert.match(out, new RegExp(`Dashboard & API\\s+http://127\\.0\\.0\\.2:${port}`));
  assert.match(out, new RegExp(`Proxy \\(HTTP\\)\\s+127\\.0\\.0\\.2:${httpPort}\\s`), 'the proxy is shown where it listens');
  const curl = /curl -s -H 'Host: ([^']+)' http:\/\/([\d.]+):(\d+)\//.exec(out);
  assert.ok(curl, out);
  assert.deepEqual([curl[2], Number(curl[3])], [host, httpPort]);
  await waitFor(async () => (await through(host, httpPort, curl[1]!)).status === 200, 'the demo domain to be served on --host', 30_000);
  assert.match((await through(host, httpPort, curl[1]!)).text, /demo origin behind Rampart/);
  await assert.rejects(through('127.0.0.1', httpPort, curl[1]!), 'nothing listens on another address');
  const api = `http://${host}:${port}`;
  // Not loopback: visitors on the network cannot register unless the operator opens sign-up.
  assert.deepEqual(await (await fetch(`${api}/api/auth/signup`)).json(), { signup: 'closed' });

  const command = /Other agents\s+rampart agent --server (\S+) --insecure/.exec(out);
  assert.ok(command, 'the command for another agent is printed');
  assert.equal(command[1], `ws://${host}:${port}/agent`);
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${api}${path}`, { method, headers: { 'x-api-key': key, ...(body ? { 'content-type': 'application/json' } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}) });
    return { status: r.status, body: (await r.json()) as any };
  };
  const created = await call('POST', '/api/servers', { name: 'second' });
  assert.equal(created.status, 201);
  other = startProcess(
    process.execPath,
    [CLI, 'agent', '--server', command[1], '--insecure', '--data-dir', join(dataDir, 'agent'), '--http-port', String(otherPort), '--bind', '127.0.0.3', '--metrics-port', '0'],
    { RAMPART_AGENT_TOKEN: created.body.connectionToken },
  );
  await waitFor(async () => (await call('GET', '/api/servers')).body.find((s: any) => s.id === created.body.id)?.status === 'active', 'the second agent to connect', 30_000);
  // The demo domain on both servers: the second agent serves it too.
  const demo = (await call('GET', '/api/domains')).body.find((d: any) => d.domain === curl[1]);
  const servers = (await call('GET', '/api/servers')).body.map((s: any) => s.id);
  assert.equal((await call('PUT', `/api/domains/${demo.id}`, { serverIds: servers })).status, 200);
  await waitFor(async () => (await through('127.0.0.3', otherPort, curl[1]!).catch(() => ({ status: 0, text: '' }))).status === 200, 'the second agent to serve the demo', 30_000);
  assert.match((await through('127.0.0.3', otherPort, curl[1]!)).text, /demo origin behind Rampart/);
});
