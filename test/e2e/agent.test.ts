import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, startAgent, startOrigin, viaProxy, waitForOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

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
    const { execFileSync } = await import('node:child_process');
    const before = Date.now();
    execFileSync('pkill', ['-KILL', '-f', `-S ${agent.dataDir}/run/master.sock`]);
    await waitForOrigin(agent.httpPort, 'crash.example.test', 'a', 15_000);
    assert.ok(Date.now() - before < 15_000);
    await waitFor(async () => (await api.call('GET', '/api/notifications')).body.some((n: any) => n.kind === 'proxy_crash'), 'a proxy_crash notification');
  });
});
