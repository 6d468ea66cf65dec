import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { apiClient, ADMIN, startAgent, startOrigin, steadyLoad, viaProxy, waitForOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// A real HAProxy behind a wrapper that refuses to reload any configuration routing
// reject.example.test while `haproxy -c` accepts it: the fault comes from outside the agent.
const REFUSING_HAPROXY = fileURLToPath(new URL('../fixtures/haproxy-refuses-reject-domain', import.meta.url));

describe('shield agent with real HAProxy', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let serverId: string;
  const origins: Awaited<ReturnType<typeof startOrigin>>[] = [];

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    const srv = await api.call('POST', '/api/servers', { name: 'edge-e2e' });
    serverId = srv.body.id;
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
    origins.push(await startOrigin('a'), await startOrigin('b'));
    await waitFor(async () => (await api.call('GET', '/api/servers')).body[0].status === 'active', 'the agent to connect');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await Promise.all(origins.map((o) => o.close()));
  });

  test('a new domain serves traffic, with the forwarding headers set', async () => {
    const d = await api.call('POST', '/api/domains', { domain: 'new.example.test', origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: [serverId], sslEnabled: false });
    assert.equal(d.status, 201);
    await waitForOrigin(agent.httpPort, 'new.example.test', 'a');
    const r = JSON.parse((await viaProxy(agent.httpPort, 'NEW.example.test:80', '/x?y=1')).text);
    assert.equal(r.url, '/x?y=1');
    assert.equal(r.headers['x-real-ip'], '127.0.0.1');
    assert.equal(r.headers['x-forwarded-proto'], 'http');
    assert.equal(r.headers.host, 'new.example.test');
    await waitFor(async () => {
      const s = (await api.call('GET', '/api/servers')).body[0];
      return s.appliedRevision === s.desiredRevision;
    }, 'the applied revision to catch up');
    const dom = (await api.call('GET', '/api/domains')).body.find((x: any) => x.domain === 'new.example.test');
    assert.equal(dom.status, 'active');
  });

  test('an origin change moves traffic; a deleted domain answers 404; unknown hosts 404', async () => {
    const d = await api.call('POST', '/api/domains', { domain: 'move.example.test', origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: [serverId], sslEnabled: false });
    await waitForOrigin(agent.httpPort, 'move.example.test', 'a');
    await api.call('PUT', `/api/domains/${d.body.id}`, { origins: [{ ip: '127.0.0.1', port: origins[1]!.port }] });
    await waitForOrigin(agent.httpPort, 'move.example.test', 'b');
    await api.call('DELETE', `/api/domains/${d.body.id}`);
    await waitFor(async () => (await viaProxy(agent.httpPort, 'move.example.test')).status === 404, 'the deleted domain to answer 404');
    assert.equal((await viaProxy(agent.httpPort, 'unknown.example.test')).status, 404);
  });

  test('a killed HAProxy comes back within 15 s and proxy_crash is reported', async () => {
    await api.call('POST', '/api/domains', { domain: 'crash.example.test', origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: [serverId], sslEnabled: false });
    await waitForOrigin(agent.httpPort, 'crash.example.test', 'a');
    const before = Date.now();
    execFileSync('pkill', ['-KILL', '-f', `${agent.dataDir}/run/master.sock`]);
    await waitForOrigin(agent.httpPort, 'crash.example.test', 'a', 15_000);
    assert.ok(Date.now() - before < 15_000);
    await waitFor(async () => (await api.call('GET', '/api/notifications')).body.some((n: any) => n.kind === 'proxy_crash'), 'a proxy_crash notification');
    // docs/notifications.md: one cause, one notification (no server_error besides)
    const kinds = (await api.call('GET', '/api/notifications')).body.map((n: any) => n.kind);
    assert.deepEqual(
      kinds.filter((k: string) => k === 'proxy_crash' || k === 'server_error'),
      ['proxy_crash'],
      `notifications: ${kinds.join(', ')}`,
    );
  });

  test('a second agent on a port this HAProxy serves refuses to start, naming the port and the holder', async () => {
    // noreuseport: without it the second HAProxy would bind too and the kernel split the traffic.
    const srv = await api.call('POST', '/api/servers', { name: 'edge-second' });
    const second = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, httpPort: agent.httpPort });
    const code = await waitFor(async () => second.child.exitCode ?? undefined, 'the second agent to exit', 20_000);
    assert.equal(code, 1, second.output());
    const pids = execFileSync('pgrep', ['-f', `${agent.dataDir}/run/master.sock`])
      .toString()
      .trim()
      .split('\n')
      .map(Number);
    const m = /HAProxy cannot listen on port (\d+) on 127\.0\.0\.1: it is already in use by haproxy \(pid (\d+)\)\. Stop that process or give this agent another --http-port/.exec(second.output());
    assert.ok(m, second.output());
    assert.equal(Number(m[1]), agent.httpPort);
    // The holder is the first agent's HAProxy: its master or a worker (a child of the master).
    const holder = Number(m[2]);
    const parent = Number(
      execFileSync('ps', ['-o', 'ppid=', '-p', String(holder)])
        .toString()
        .trim(),
    );
    assert.ok(pids.includes(holder) || pids.includes(parent), `holder ${holder} (parent ${parent}) is not the first agent's HAProxy (${pids.join(', ')})`);
    // The first agent still serves every request: nothing was shared.
    for (let i = 0; i < 10; i++) assert.equal((await viaProxy(agent.httpPort, 'crash.example.test')).status, 200);
  });
});

describe('a reload HAProxy refuses', () => {
  test("is rolled back with traffic unaffected, and reported once, with HAProxy's message", async () => {
    const serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    const origin = await startOrigin('steady');
    let agent: AgentProc | undefined;
    after(async () => {
      await agent?.stop();
      await serve.stop();
      await origin.close();
    });
    const api = await apiClient(serve.url);
    const srv = await api.call('POST', '/api/servers', { name: 'edge-fault' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, haproxy: REFUSING_HAPROXY });
    const ok = await api.call('POST', '/api/domains', { domain: 'steady.example.test', origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false });
    assert.equal(ok.status, 201);
    await waitForOrigin(agent.httpPort, 'steady.example.test', 'steady');
    const load = steadyLoad(agent.httpPort, 'steady.example.test', { workers: 4 });
    const bad = await api.call('POST', '/api/domains', { domain: 'reject.example.test', origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false });
    assert.equal(bad.status, 201);
    const n = await waitFor(async () => (await api.call('GET', '/api/notifications')).body.find((x: any) => x.kind === 'server_error'), 'server_error', 40_000);
    assert.match(n.message, /injected-fault\.cfg/, "the notification carries HAProxy's own message");
    assert.equal((await api.call('GET', '/api/notifications')).body.length, 1, 'one failure, one notification');
    const stats = await load.stop();
    assert.equal(stats.failed, 0, `failed requests during the refused reload: ${stats.errors.join(' | ')}`);
    assert.ok(stats.ok > 20, `traffic flowed during the reload (${stats.ok} requests)`);
    assert.equal((await viaProxy(agent.httpPort, 'steady.example.test')).status, 200, 'the last-known-good configuration still serves');
    assert.equal((await viaProxy(agent.httpPort, 'reject.example.test')).status, 404, 'the refused configuration is not live');
    const server = (await api.call('GET', '/api/servers')).body[0];
    assert.ok(server.appliedRevision < server.desiredRevision, 'drift is visible: applied < desired');
  });
});
