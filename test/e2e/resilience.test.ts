import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, startAgent, startOrigin, steadyLoad, viaProxy, waitForOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// docs/architecture.md: the agent keeps serving while the control plane is away and resyncs when it returns.
// 8 s (RAMPART_E2E_OUTAGE_MS for longer): the agent's reconnect back-off (1 s doubling, full jitter)
// has failed several times by then, so the return is found by a retry, not by the first attempt.
const OUTAGE_MS = Number(process.env.RAMPART_E2E_OUTAGE_MS ?? 8_000);

describe('resilience under steady traffic', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let serverId: string;
  let port: number;
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-resilience-'));
  const origins: Awaited<ReturnType<typeof startOrigin>>[] = [];

  before(async () => {
    port = await freePort();
    serve = await startServe({ port, dataDir, adminToken: ADMIN });
    api = await apiClient(serve.url);
    const srv = await api.call('POST', '/api/servers', { name: 'edge-steady' });
    serverId = srv.body.id;
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
    origins.push(await startOrigin('one'), await startOrigin('two'));
    await api.call('POST', '/api/domains', { domain: 'steady.example.test', origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: [serverId], sslEnabled: false });
    await waitForOrigin(agent.httpPort, 'steady.example.test', 'one');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await Promise.all(origins.map((o) => o.close()));
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('20 changes applied under steady load: zero failed requests', async () => {
    const load = steadyLoad(agent.httpPort, 'steady.example.test', { workers: 4 });
    const moving = await api.call('POST', '/api/domains', { domain: 'moving.example.test', origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: [serverId], sslEnabled: false });
    for (let i = 0; i < 20; i++) {
      const target = i % 2 === 0 ? origins[1]! : origins[0]!;
      const r = await api.call('PUT', `/api/domains/${moving.body.id}`, { origins: [{ ip: '127.0.0.1', port: target.port }] });
      assert.equal(r.status, 200);
      await waitForOrigin(agent.httpPort, 'moving.example.test', i % 2 === 0 ? 'two' : 'one');
    }
    const stats = await load.stop();
    assert.equal(stats.failed, 0, stats.errors.join(' | '));
    assert.ok(stats.ok > 100, `traffic flowed throughout (${stats.ok} requests)`);
  });

  test('the control plane stopped for a while: no request lost, and the agent resyncs when it returns', async () => {
    const load = steadyLoad(agent.httpPort, 'steady.example.test', { workers: 2, maxMs: OUTAGE_MS + 150_000 });
    assert.equal(await serve.stop(), 0);
    const okBefore = load.stats.ok;
    await waitFor(() => load.stats.ok > okBefore + 50, 'traffic while the control plane is down');
    await new Promise((r) => setTimeout(r, OUTAGE_MS)); // the outage itself: a duration, not a wait for a condition
    serve = await startServe({ port, dataDir, adminToken: ADMIN });
    await waitFor(async () => (await api.call('GET', '/api/servers')).body[0].status === 'active', 'the agent to reconnect', 90_000, 250);
    const stats = await load.stop();
    assert.equal(stats.failed, 0, stats.errors.join(' | '));
    // Resync: a change made after the return is live through the same agent.
    const dom = (await api.call('GET', '/api/domains')).body.find((d: any) => d.domain === 'steady.example.test');
    await api.call('PUT', `/api/domains/${dom.id}`, { origins: [{ ip: '127.0.0.1', port: origins[1]!.port }] });
    await waitForOrigin(agent.httpPort, 'steady.example.test', 'two');
    const s = (await api.call('GET', '/api/servers')).body[0];
    await waitFor(async () => {
      const x = (await api.call('GET', '/api/servers')).body[0];
      return x.appliedRevision === x.desiredRevision;
    }, 'applied to catch up with desired');
    assert.ok(s.lastSeenAt);
    assert.equal((await viaProxy(agent.httpPort, 'steady.example.test')).status, 200);
  });
});
