import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { CLOSE } from '@rampart/protocol';
import { dropSchema } from '../src/db/database.js';
import { checkServers } from '../src/services/health.js';
import { startServer, type RunningServer } from '../src/serve.js';
import { AGENT_CONNECTION_TIMEOUT_MS, expireAgentConnections, recordAgentConnected, recordAgentDisconnected, releaseAgentConnections, touchAgentConnections } from '../src/services/servers.js';
import { waitFor } from '../../../test/support/processes.js';
import { hubFor } from './agent-hub-harness.js';
import { apiFixtures, FakeAgent, WAIT_MS } from './fake-agent.js';
import { startProbeTarget } from './probe-target.js';
import { ADMIN_TOKEN, backends, call, makeTestApp, newAccount, postgresUrl } from './helpers.js';
import type { App } from '../src/routes/types.js';

// docs/architecture.md "The agent connection" and "Several control-plane processes": a server's
// status comes from the database, whichever control-plane process holds its agent's connection.
// One row per server records the live connection (process, connection, heartbeat); active while
// its heartbeat is recent, offline otherwise; server_down once per disconnect; a newer connection
// with the same token wins, across processes too.

type Notification = { kind: string; serverId: string | null; count: number };

async function statusOf(app: App, key: string, id: string): Promise<string> {
  const r = await call(app, 'GET', '/api/servers', { key });
  assert.equal(r.status, 200);
  const s = (r.body as { id: string; status: string }[]).find((x) => x.id === id);
  assert.ok(s, `server ${id} listed`);
  return s.status;
}
async function downs(app: App, key: string, id: string): Promise<number> {
  const r = await call(app, 'GET', '/api/notifications', { key });
  return (r.body as Notification[]).filter((n) => n.kind === 'server_down' && n.serverId === id).reduce((sum, n) => sum + n.count, 0);
}

for (const backend of await backends()) {
  describe(`agent connections in the database (${backend})`, async () => {
    const t = await makeTestApp(backend);
    const { newServer } = apiFixtures(t.app);
    const { key } = await newAccount(t.app, 'pro');
    const P1 = 'process-one';
    const P2 = 'process-two';
    const conn = (serverId: string, processId = P1) => ({ serverId, connectionId: randomUUID(), processId, ip: '198.51.100.20' });

    test('a server is active while its connection has a recent heartbeat, offline once the heartbeat is older than the timeout', async () => {
      const s = await newServer(key, 'heartbeat');
      assert.equal(await statusOf(t.app, key, s.id), 'offline', 'no connection');
      const c = conn(s.id);
      assert.equal((await recordAgentConnected(t.ctx, c)).recorded, true);
      assert.equal(await statusOf(t.app, key, s.id), 'active');
      t.clock.advance(AGENT_CONNECTION_TIMEOUT_MS - 1000);
      assert.equal(await statusOf(t.app, key, s.id), 'active', 'within the timeout');
      t.clock.advance(2000);
      assert.equal(await statusOf(t.app, key, s.id), 'offline', 'past the timeout, before anything is written');
      assert.deepEqual(await touchAgentConnections(t.ctx, [c]), [], 'still its connection');
      assert.equal(await statusOf(t.app, key, s.id), 'active', 'a heartbeat makes it active again');
    });

    test('an expired connection is cleared with one server_down, however many processes sweep at once', async () => {
      const s = await newServer(key, 'expiring');
      await recordAgentConnected(t.ctx, conn(s.id));
      t.clock.advance(AGENT_CONNECTION_TIMEOUT_MS + 1);
      const runs = await Promise.all([expireAgentConnections(t.ctx), expireAgentConnections(t.ctx), expireAgentConnections(t.ctx)]);
      assert.equal(runs.flat().filter((id) => id === s.id).length, 1);
      assert.equal(await downs(t.app, key, s.id), 1);
      assert.deepEqual(await expireAgentConnections(t.ctx), []);
      assert.equal(await statusOf(t.app, key, s.id), 'offline');
      const row = await t.ctx.db.selectFrom('servers').select('status').where('id', '=', s.id).executeTakeFirstOrThrow();
      assert.equal(row.status, 'offline');
    });

    test('a disconnect clears its own connection and raises server_down once, however often it is seen', async () => {
      const s = await newServer(key, 'dropping');
      const c = conn(s.id);
      await recordAgentConnected(t.ctx, c);
      const seen = await Promise.all([recordAgentDisconnected(t.ctx, c, true), recordAgentDisconnected(t.ctx, c, true)]);
      assert.deepEqual(seen.sort(), [false, true]);
      assert.equal(await downs(t.app, key, s.id), 1);
      assert.equal(await statusOf(t.app, key, s.id), 'offline');
    });

    test('a newer connection replaces the older, on another process too; the older one ending changes nothing', async () => {
      const s = await newServer(key, 'moving');
      const old = conn(s.id, P1);
      const fresh = conn(s.id, P2);
      assert.equal((await recordAgentConnected(t.ctx, old)).replaced, null);
      assert.deepEqual((await recordAgentConnected(t.ctx, fresh)).replaced, { connectionId: old.connectionId, processId: P1 });
      assert.deepEqual(await touchAgentConnections(t.ctx, [old]), [old.connectionId], 'P1 learns its connection was replaced');
      assert.equal(await recordAgentDisconnected(t.ctx, old, true), false);
      assert.equal(await statusOf(t.app, key, s.id), 'active');
      assert.equal(await downs(t.app, key, s.id), 0);
      assert.equal(await recordAgentDisconnected(t.ctx, fresh, true), true);
      assert.equal(await statusOf(t.app, key, s.id), 'offline');
      assert.equal(await downs(t.app, key, s.id), 1);
    });

    test('a process shutting down releases its connections without server_down, and only its own', async () => {
      const mine = await newServer(key, 'released');
      const theirs = await newServer(key, 'kept');
      await recordAgentConnected(t.ctx, conn(mine.id, 'shutting-down'));
      await recordAgentConnected(t.ctx, conn(theirs.id, 'staying'));
      await releaseAgentConnections(t.ctx, 'shutting-down');
      assert.equal(await statusOf(t.app, key, mine.id), 'offline');
      assert.equal(await statusOf(t.app, key, theirs.id), 'active');
      assert.equal(await downs(t.app, key, mine.id), 0);
    });

    test('a decommissioned server records no connection', async () => {
      const s = await newServer(key, 'retired');
      assert.equal((await call(t.app, 'DELETE', `/api/servers/${s.id}`, { key })).status, 200);
      assert.equal((await recordAgentConnected(t.ctx, conn(s.id))).recorded, false);
      assert.equal(await statusOf(t.app, key, s.id), 'decommissioned');
    });
  });
}

describe('two connections with one token on one process', async () => {
  const t = await makeTestApp();
  const h = await hubFor(t.ctx);
  const { newServer } = apiFixtures(t.app);
  const { key } = await newAccount(t.app, 'pro');

  test('the newer connection wins: the older is closed with 4004, the server stays active, and only a real drop raises server_down', async () => {
    const s = await newServer(key, 'twice');
    const first = await h.connect(s.connectionToken);
    assert.equal(await statusOf(t.app, key, s.id), 'active');
    const second = await h.connect(s.connectionToken);
    const closed = await first.closedWithin('the replaced close');
    assert.equal(closed.code, CLOSE.replaced);
    assert.equal(closed.code, 4004);
    await waitFor(() => h.hub.connectionCount === 1, "the first connection's close handled", WAIT_MS, 10);
    assert.equal(await statusOf(t.app, key, s.id), 'active');
    assert.equal(await downs(t.app, key, s.id), 0);
    assert.ok(second.isOpen);
    second.close();
    await waitFor(async () => (await statusOf(t.app, key, s.id)) === 'offline', 'offline', WAIT_MS, 25);
    await waitFor(() => h.hub.connectionCount === 0, 'the close handled', WAIT_MS, 10);
    assert.equal(await downs(t.app, key, s.id), 1);
  });
});

describe('a process shutting down', async () => {
  const t = await makeTestApp();
  const h = await hubFor(t.ctx);
  const { newServer } = apiFixtures(t.app);
  const { key } = await newAccount(t.app, 'pro');

  test('tells its agents it restarts (1012, so they spread their reconnects), raises no server_down and leaves them offline', async () => {
    const s = await newServer(key, 'restarting');
    const agent = await h.connect(s.connectionToken);
    assert.equal(await statusOf(t.app, key, s.id), 'active');
    await h.hub.close();
    const closed = await agent.closedWithin('the shutdown close');
    assert.equal(closed.code, CLOSE.restarting);
    assert.equal(closed.code, 1012);
    assert.equal(h.hub.connectionCount, 0);
    assert.equal(await statusOf(t.app, key, s.id), 'offline', 'its connection row released');
    assert.equal(await downs(t.app, key, s.id), 0);
  });
});

const url = await postgresUrl();

describe('an agent moving between two control-plane processes', { skip: url ? false : 'no PostgreSQL answers (set RAMPART_TEST_DATABASE_URL)' }, async () => {
  const schema = `t_conn_${randomBytes(5).toString('hex')}`;
  // Two processes on one database (one schema), started one after the other (migrations).
  const a = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false, agentHeartbeatMs: 200 });
  const b = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false, agentHeartbeatMs: 200 });
  const agents: FakeAgent[] = [];
  after(async () => {
    for (const x of agents) x.close();
    await Promise.all([a.close(), b.close()]);
    await dropSchema(url!, schema);
  });
  const { key } = await newAccount(a.app, 'pro');
  const agentUrl = (srv: RunningServer) => `${srv.url.replace(/^http/, 'ws')}/agent`;
  // Its HAProxy answers the health probe: a health cycle (each process runs one as it starts,
  // late on a loaded machine) finds the server healthy, so every server_down counted is the move's.
  const haproxy = await startProbeTarget();
  const connect = async (srv: RunningServer, token: string) => {
    const agent = await FakeAgent.connect(agentUrl(srv), token, { httpPort: haproxy.port });
    agents.push(agent);
    return agent;
  };
  /** The same answer from both processes. */
  const status = async (id: string) => {
    const [sa, sb] = await Promise.all([statusOf(a.app, key, id), statusOf(b.app, key, id)]);
    assert.equal(sa, sb, 'both processes give the same status');
    return sa;
  };

  test('the newer connection on B closes the older on A (4004); the status stays active throughout; one server_down when it finally drops', async () => {
    const s = await apiFixtures(a.app).newServer(key, 'mover');
    const onA = await connect(a, s.connectionToken);
    assert.equal(await status(s.id), 'active', 'connected to A');
    const onB = await connect(b, s.connectionToken);
    assert.equal(await status(s.id), 'active', 'connected to B');
    const closed = await onA.closedWithin("A's connection closed as replaced");
    assert.equal(closed.code, CLOSE.replaced);
    await waitFor(() => a.hub.connectionCount === 0, "A's close handled", WAIT_MS, 10);
    assert.equal(await status(s.id), 'active', "after A's connection closed: the agent is on B");
    // A health cycle now (as one may run during a move) finds it healthy on B.
    assert.deepEqual((await checkServers(b.ctx, b.ctx.now())).down, []);
    assert.equal(await downs(a.app, key, s.id), 0, 'moving is not going down');
    // Heartbeats keep it active on both (several sweeps of both processes).
    const row = () => a.ctx.db.selectFrom('agent_connections').select(['last_heartbeat_at', 'process_id']).where('server_id', '=', s.id).executeTakeFirstOrThrow();
    const before = await row();
    assert.equal(before.process_id, b.hub.processId);
    await waitFor(async () => (await row()).last_heartbeat_at.getTime() > before.last_heartbeat_at.getTime(), "B's heartbeat written", WAIT_MS, 25);
    assert.equal(await status(s.id), 'active');
    assert.ok(onB.isOpen);

    onB.close();
    await waitFor(async () => (await status(s.id)) === 'offline', 'offline on both', WAIT_MS, 25);
    await waitFor(() => b.hub.connectionCount === 0, "B's close handled", WAIT_MS, 10);
    assert.equal(await downs(a.app, key, s.id), 1, 'server_down once');
    assert.equal(await downs(b.app, key, s.id), 1);
  });

  test('a connection left by a process that stopped heartbeating expires once, on whichever process sweeps', async () => {
    const s = await apiFixtures(a.app).newServer(key, 'orphan');
    // What a process that died leaves behind: its row, with a heartbeat that no longer moves.
    await a.ctx.db
      .insertInto('agent_connections')
      .values({
        server_id: s.id,
        connection_id: randomUUID(),
        process_id: 'dead-process',
        ip: '198.51.100.30',
        connected_at: new Date(Date.now() - 120_000),
        last_heartbeat_at: new Date(Date.now() - AGENT_CONNECTION_TIMEOUT_MS - 1000),
      })
      .execute();
    await a.ctx.db.updateTable('servers').set({ status: 'active' }).where('id', '=', s.id).execute();
    assert.equal(await status(s.id), 'offline', 'its heartbeat is too old already');
    await waitFor(async () => (await downs(a.app, key, s.id)) === 1, 'server_down from the sweep', WAIT_MS, 25);
    const left = await a.ctx.db.selectFrom('agent_connections').select('server_id').where('server_id', '=', s.id).execute();
    assert.deepEqual(left, []);
    // The row and its server_down go in one transaction: with the row gone, no other sweep can raise another.
    assert.equal(await downs(b.app, key, s.id), 1);
    assert.equal(await status(s.id), 'offline');
  });
});
