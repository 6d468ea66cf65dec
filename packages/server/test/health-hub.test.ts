import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PROTOCOL_VERSION } from '@rampart/protocol';
import { sql } from 'kysely';
import { waitFor } from '../../../test/support/processes.js';
import { hubFor } from './agent-hub-harness.js';
import { FakeAgent, WAIT_MS } from './fake-agent.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// What an agent tells the health cycle over the WebSocket (docs/api.md "The agent WebSocket"):
// its HTTP port in the hello, whether HAProxy serves in its heartbeats. Both are optional, so an
// older agent still connects; a connection recorded again after its row expired keeps both.

for (const backend of await backends()) {
  describe(`health reports through the hub on ${backend}`, async () => {
    const t = await makeTestApp(backend);
    // The heartbeat sweep re-records the connection below; it also drops a connection silent for
    // 3 intervals, and the embedded database (on this thread) can hold the event loop for a while
    // on a loaded machine: a second keeps the fake agent's pongs in time.
    const h = await hubFor(t.ctx, { heartbeatMs: 1000 });

    async function serverWithAgent(hello: Record<string, unknown>) {
      const { key } = await newAccount(t.app);
      const s = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
      const agent = h.track(new FakeAgent(h.url, s.body.connectionToken));
      await waitFor(() => agent.opened.then(() => true), 'the upgrade', WAIT_MS);
      agent.send({ type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: 'fake', runningRevision: null, ...hello } });
      await agent.snapshot(() => true, 'the first snapshot');
      return { id: s.body.id as string, agent };
    }
    const reported = async (id: string) =>
      (await sql<{ http_port: number | null; proxy_serving: boolean | null }>`select http_port, proxy_serving from servers where id = ${id}`.execute(t.ctx.db)).rows[0]!;

    test('hello.httpPort and heartbeat.proxyServing are stored; a connection recorded again keeps them', async () => {
      const { id, agent } = await serverWithAgent({ httpPort: 8089 });
      assert.deepEqual(await reported(id), { http_port: 8089, proxy_serving: null });
      agent.send({ type: 'agent/heartbeat', payload: { runningRevision: null, proxyServing: false } });
      await agent.barrier();
      assert.deepEqual(await reported(id), { http_port: 8089, proxy_serving: false });
      agent.send({ type: 'agent/heartbeat', payload: { runningRevision: null, proxyServing: true } });
      await agent.barrier();
      assert.equal((await reported(id)).proxy_serving, true);
      // Its row expires (the database was away longer than the timeout): the hub records it again.
      await sql`delete from agent_connections where server_id = ${id}`.execute(t.ctx.db);
      await waitFor(async () => (await sql`select 1 from agent_connections where server_id = ${id}`.execute(t.ctx.db)).rows.length === 1, 'the connection recorded again');
      assert.deepEqual(await reported(id), { http_port: 8089, proxy_serving: true });
    });

    test('an agent from before the health fields: no httpPort (the probe uses 80), no proxyServing (counts as serving)', async () => {
      const { id, agent } = await serverWithAgent({});
      agent.send({ type: 'agent/heartbeat', payload: { runningRevision: null } });
      await agent.barrier();
      assert.deepEqual(await reported(id), { http_port: null, proxy_serving: null });
      assert.equal(agent.isOpen, true);
    });
  });
}
