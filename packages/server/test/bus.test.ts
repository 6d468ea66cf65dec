import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import pg from 'pg';
import { BUS_APPLICATION_NAME, busChannel, encodeBusMessage, InProcessBus, MAX_PAYLOAD_BYTES, parseBusMessage, PostgresBus, type BusMessage, type PostgresBus as PgBus } from '../src/bus.js';
import { dropSchema } from '../src/db/database.js';
import { startServer, type RunningServer } from '../src/serve.js';
import { waitFor } from '../../../test/support/processes.js';
import { FakeAgent, WAIT_MS } from './fake-agent.js';
import { ADMIN_TOKEN, call, newAccount, postgresUrl } from './helpers.js';

// docs/architecture.md, "Several control-plane processes": a change made through one process
// reaches the agents connected to another one sharing the database (PostgreSQL LISTEN/NOTIFY).

const url = await postgresUrl();
const KEY_AUTH = (token: string) => `${token}.${'k'.repeat(43)}`;

describe('bus messages', () => {
  const id = randomUUID();
  const challenge = { domain: 'shop.example.com', token: 'tok-1', keyAuthorization: KEY_AUTH('tok-1'), action: 'add' as const };

  test('well-formed messages are read back as sent', () => {
    assert.deepEqual(parseBusMessage(JSON.stringify({ kind: 'servers-changed', ids: [id] })), { kind: 'servers-changed', ids: [id] });
    assert.deepEqual(parseBusMessage(JSON.stringify({ kind: 'acme-challenge', serverIds: [id], challenge })), { kind: 'acme-challenge', serverIds: [id], challenge });
    const replaced = { kind: 'connection-replaced', serverId: id, connectionId: randomUUID() };
    assert.deepEqual(parseBusMessage(JSON.stringify(replaced)), replaced);
    assert.deepEqual(encodeBusMessage(replaced as BusMessage).map(parseBusMessage), [replaced]);
  });

  test('anything else is refused', () => {
    const bad: unknown[] = [
      'not json',
      null,
      [],
      { kind: 'servers-changed' },
      { kind: 'servers-changed', ids: [] },
      { kind: 'servers-changed', ids: ['not-a-uuid'] },
      { kind: 'servers-changed', ids: [id, 42] },
      { kind: 'servers-changed', ids: [id], extra: 1 },
      { kind: 'other', ids: [id] },
      { kind: 'acme-challenge', serverIds: [id] },
      { kind: 'acme-challenge', serverIds: [id], challenge: { ...challenge, token: '../x' } },
      { kind: 'acme-challenge', serverIds: [id], challenge: { ...challenge, action: 'replace' } },
      { kind: 'acme-challenge', serverIds: [id], challenge: { ...challenge, extra: true } },
      { kind: 'acme-challenge', serverIds: ['x'], challenge },
      { kind: 'connection-replaced', serverId: id },
      { kind: 'connection-replaced', serverId: id, connectionId: 'not-a-uuid' },
      { kind: 'connection-replaced', serverId: 'x', connectionId: id },
      { kind: 'connection-replaced', serverId: id, connectionId: id, extra: 1 },
    ];
    for (const b of bad) assert.equal(parseBusMessage(typeof b === 'string' ? b : JSON.stringify(b)), null, JSON.stringify(b));
  });

  test('a long id list is split into payloads under the NOTIFY limit, none lost', () => {
    const ids = Array.from({ length: 1000 }, () => randomUUID());
    for (const m of [
      { kind: 'servers-changed', ids },
      { kind: 'acme-challenge', serverIds: ids, challenge },
    ] as BusMessage[]) {
      const payloads = encodeBusMessage(m);
      assert.ok(payloads.length > 1);
      const back = payloads.map((p) => {
        assert.ok(Buffer.byteLength(p) <= MAX_PAYLOAD_BYTES && Buffer.byteLength(p) < 8000, `${Buffer.byteLength(p)} bytes`);
        const parsed = parseBusMessage(p);
        assert.ok(parsed);
        return parsed;
      });
      assert.deepEqual(
        back.flatMap((b) => (b.kind === 'servers-changed' ? b.ids : b.serverIds)),
        ids,
      );
      if (m.kind === 'acme-challenge') for (const b of back) assert.deepEqual(b.kind === 'acme-challenge' && b.challenge, challenge);
    }
  });

  test('the in-process bus delivers to its subscriber at once', async () => {
    const bus = new InProcessBus();
    const got: BusMessage[] = [];
    bus.subscribe({ message: (m) => got.push(m), resync: () => undefined });
    const sent = bus.publish({ kind: 'servers-changed', ids: [id] });
    assert.deepEqual(got, [{ kind: 'servers-changed', ids: [id] }], 'before publish returns');
    await sent;
    await bus.close();
  });
});

describe('the change bus across two processes', { skip: url ? false : 'no PostgreSQL answers (set RAMPART_TEST_DATABASE_URL)' }, async () => {
  const schema = `t_bus_${randomBytes(5).toString('hex')}`;
  // Two control-plane processes on one database (one schema), one after the other (migrations).
  const a = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false });
  const b = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false });
  const agents: FakeAgent[] = [];
  after(async () => {
    for (const x of agents) x.close();
    const started = Date.now();
    await Promise.all([a.close(), b.close()]);
    assert.ok(Date.now() - started < 5000, `shutdown took ${Date.now() - started} ms`);
    await dropSchema(url!, schema);
  });
  const account = await newAccount(a.app, 'pro');
  const key = account.key;
  const agentUrl = (srv: RunningServer) => `${srv.url.replace(/^http/, 'ws')}/agent`;

  async function newServer(name: string) {
    const r = await call(a.app, 'POST', '/api/servers', { key, body: { name } });
    assert.equal(r.status, 201);
    return r.body as { id: string; connectionToken: string };
  }
  async function newDomain(domain: string, serverIds: string[]) {
    const r = await call(a.app, 'POST', '/api/domains', { key, body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds, sslEnabled: true } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string };
  }
  async function setOrigin(domainId: string, port: number) {
    const r = await call(a.app, 'PUT', `/api/domains/${domainId}`, { key, body: { origins: [{ ip: '10.0.0.1', port }] } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  async function connect(srv: RunningServer, token: string) {
    const agent = await FakeAgent.connect(agentUrl(srv), token);
    agents.push(agent);
    return agent;
  }
  const hasPort = (agent: FakeAgent, domain: string, port: number, what: string) => agent.snapshot((s) => s.domains.some((d) => d.domain === domain && d.origins.some((o) => o.port === port)), what);

  test("a change through A's API reaches an agent connected to B", async () => {
    const s = await newServer('bus-1');
    const d = await newDomain('bus1.example.com', [s.id]);
    const agent = await connect(b, s.connectionToken);
    await hasPort(agent, 'bus1.example.com', 80, 'the first snapshot');
    await setOrigin(d.id, 8081);
    await hasPort(agent, 'bus1.example.com', 8081, "the change made through A, at B's agent");
  });

  test("a challenge published by an agent on A reaches the domain's other agent on B, and no one else", async () => {
    const s1 = await newServer('relay-a');
    const s2 = await newServer('relay-b');
    const s3 = await newServer('relay-unrelated');
    await newDomain('relay.example.com', [s1.id, s2.id]);
    await newDomain('other.example.com', [s3.id]);
    const p1 = await connect(a, s1.connectionToken);
    const p2 = await connect(b, s2.connectionToken);
    const p3 = await connect(b, s3.connectionToken);
    const add = { domain: 'relay.example.com', token: 'tok-1', keyAuthorization: KEY_AUTH('tok-1'), action: 'add' as const };
    assert.equal(await p1.publish(add), 1, "relayedTo: the domain's other live server");
    await waitFor(() => p2.of('acme/challenge').length === 1, 'the challenge at the agent on B', WAIT_MS, 10);
    assert.deepEqual(p2.of('acme/challenge')[0], add);
    // A second publish, from B's side, reaches A's agent: once it arrived, the first one had
    // long been delivered everywhere it was going to be (one channel, in order).
    const back = { ...add, token: 'tok-2', keyAuthorization: KEY_AUTH('tok-2') };
    assert.equal(await p2.publish(back), 1);
    await waitFor(() => p1.of('acme/challenge').length === 1, 'the challenge at the agent on A', WAIT_MS, 10);
    assert.deepEqual(p1.of('acme/challenge'), [back], 'the publisher never gets its own');
    await Promise.all([p3.barrier(), p1.barrier(), p2.barrier()]);
    assert.deepEqual(p3.of('acme/challenge'), [], 'an unrelated server');
    assert.deepEqual(p2.of('acme/challenge'), [add]);
  });

  test('after its listening connection is killed, B reconnects, pushes full snapshots, and hears later changes again', async () => {
    const s = await newServer('bus-resync');
    const d = await newDomain('resync.example.com', [s.id]);
    const agent = await connect(b, s.connectionToken);
    await hasPort(agent, 'resync.example.com', 80, 'the first snapshot');
    await agent.barrier();
    const before = agent.snapshots().length;

    const bus = b.bus as PgBus;
    assert.ok(bus instanceof PostgresBus);
    const pid = bus.listenerPid;
    assert.ok(pid, 'B listens');
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      const row = await admin.query<{ application_name: string; query: string }>('select application_name, query from pg_stat_activity where pid = $1', [pid]);
      assert.equal(row.rows[0]?.application_name, BUS_APPLICATION_NAME, "B's listener is found by its application name");
      assert.match(row.rows[0]!.query, new RegExp(busChannel(schema)));
      const killed = await admin.query<{ ok: boolean }>('select pg_terminate_backend($1) as ok', [pid]);
      assert.equal(killed.rows[0]?.ok, true);
    } finally {
      await admin.end();
    }
    // A change made while B's listener is away is not lost: the resync after the reconnect carries it.
    await setOrigin(d.id, 9091);
    await waitFor(() => bus.listenerPid !== undefined && bus.listenerPid !== pid, 'B listening again on a new connection', WAIT_MS, 10);
    await waitFor(() => agent.snapshots().length > before, 'the full snapshot pushed after the reconnect', WAIT_MS, 10);
    await hasPort(agent, 'resync.example.com', 9091, 'the change made while B was not listening');
    await setOrigin(d.id, 9092);
    await hasPort(agent, 'resync.example.com', 9092, 'a later change through A, at B again');
  });
});
