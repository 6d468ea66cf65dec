import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { FakeAgent, hubServer } from './fake-agent.js';
import { ADMIN_TOKEN, call, makeTestApp, newAccount } from './helpers.js';

// PUT /api/servers/{id} {name?, publicIp?}: the public address is what DNS points at, so every
// domain's serverAddresses (in the snapshots of all the servers of that domain) follows it.

type ServerView = { id: string; name: string; status: string; ip: string | null; publicIp: string | null; desiredRevision: number };

describe('PUT /api/servers/{id}', async () => {
  const t = await makeTestApp();
  const app = t.app;

  async function newServer(key: string, name = 'edge') {
    const r = await call(app, 'POST', '/api/servers', { key, body: { name } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as ServerView & { connectionToken: string };
  }
  async function listed(key: string, id: string): Promise<ServerView> {
    const r = await call(app, 'GET', '/api/servers', { key });
    assert.equal(r.status, 200);
    const s = (r.body as ServerView[]).find((x) => x.id === id);
    assert.ok(s, `server ${id} listed`);
    return s;
  }
  async function newDomain(key: string, domain: string, serverIds: string[]) {
    const r = await call(app, 'POST', '/api/domains', { key, body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string };
  }

  test('sets and clears publicIp; GET and the creation answer show it', async () => {
    const { key } = await newAccount(app);
    const s = await newServer(key);
    assert.equal(s.publicIp, null, 'the POST answer has publicIp');
    assert.equal((await listed(key, s.id)).publicIp, null);

    const set = await call(app, 'PUT', `/api/servers/${s.id}`, { key, body: { publicIp: '203.0.113.10' } });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.publicIp, '203.0.113.10');
    assert.equal(set.body.name, 'edge');
    assert.equal((await listed(key, s.id)).publicIp, '203.0.113.10');

    const v6 = await call(app, 'PUT', `/api/servers/${s.id}`, { key, body: { publicIp: '2001:DB8::A' } });
    assert.equal(v6.status, 200, JSON.stringify(v6.body));
    assert.equal(v6.body.publicIp, '2001:db8::a', 'stored lowercased');

    const renamed = await call(app, 'PUT', `/api/servers/${s.id}`, { key, body: { name: 'edge-renamed' } });
    assert.equal(renamed.status, 200);
    assert.equal(renamed.body.name, 'edge-renamed');
    assert.equal(renamed.body.publicIp, '2001:db8::a', 'a field left out stays');

    const cleared = await call(app, 'PUT', `/api/servers/${s.id}`, { key, body: { publicIp: null } });
    assert.equal(cleared.status, 200);
    assert.equal(cleared.body.publicIp, null);
    assert.equal((await listed(key, s.id)).publicIp, null);
    assert.equal((await listed(key, s.id)).name, 'edge-renamed');
  });

  test('a bad body is a 400 naming the field', async () => {
    const { key } = await newAccount(app);
    const s = await newServer(key);
    const cases: [unknown, RegExp][] = [
      [{ publicIp: '1.2.3.999' }, /^publicIp: /],
      [{ publicIp: 'x; bind' }, /^publicIp: /],
      [{ publicIp: '' }, /^publicIp: /],
      [{ publicIp: '10.0.0.1/24' }, /^publicIp: /],
      [{ publicIp: '[2001:db8::1]' }, /^publicIp: /],
      [{ publicIp: 42 }, /publicIp/],
      [{ name: '' }, /^name: /],
      [{ name: 'a'.repeat(101) }, /^name: /],
      [{ name: 'tab\there' }, /^name: /],
      [{ name: 'ok', token_hash: 'x' }, /unknown field: token_hash/],
      [{}, /body/],
    ];
    for (const [body, error] of cases) {
      const r = await call(app, 'PUT', `/api/servers/${s.id}`, { key, body });
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error, error, JSON.stringify(body));
    }
    const after = await listed(key, s.id);
    assert.equal(after.publicIp, null, 'nothing was stored');
    assert.equal(after.name, 'edge');
  });

  test("another account's server, a missing one and a malformed id are 404; a decommissioned one is 409", async () => {
    const a = await newAccount(app);
    const b = await newAccount(app);
    const theirs = await newServer(b.key, 'theirs');
    for (const id of [theirs.id, randomUUID(), 'not-a-uuid']) {
      const r = await call(app, 'PUT', `/api/servers/${id}`, { key: a.key, body: { publicIp: '198.51.100.1' } });
      assert.equal(r.status, 404, id);
      assert.deepEqual(r.body, { error: 'Server not found' });
    }
    assert.equal((await listed(b.key, theirs.id)).publicIp, null);
    const mine = await newServer(a.key, 'retired');
    assert.equal((await call(app, 'DELETE', `/api/servers/${mine.id}`, { key: a.key })).status, 200);
    const r = await call(app, 'PUT', `/api/servers/${mine.id}`, { key: a.key, body: { publicIp: '198.51.100.1' } });
    assert.equal(r.status, 409);
    assert.deepEqual(r.body, { error: 'Server is decommissioned' });
  });

  test('a frozen account cannot change a server', async () => {
    const { key, accountId } = await newAccount(app, 'pro', 10);
    const s = await newServer(key);
    const charge = await call(app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId } });
    assert.equal(charge.status, 200, JSON.stringify(charge.body));
    const r = await call(app, 'PUT', `/api/servers/${s.id}`, { key, body: { publicIp: '198.51.100.2' } });
    assert.equal(r.status, 403);
    assert.deepEqual(r.body, { error: 'account is frozen, renew the plan to make changes' });
    assert.equal((await listed(key, s.id)).publicIp, null);
  });

  test('a new address bumps every server sharing a domain with this one, and only those; a rename bumps none', async () => {
    const { key } = await newAccount(app);
    const [s1, s2, s3, lone] = [await newServer(key, 's1'), await newServer(key, 's2'), await newServer(key, 's3'), await newServer(key, 'lone')];
    await newDomain(key, `shared-${randomUUID().slice(0, 8)}.example.com`, [s1.id, s2.id]);
    await newDomain(key, `other-${randomUUID().slice(0, 8)}.example.com`, [s3.id, lone.id]);
    const before = new Map(await Promise.all([s1, s2, s3, lone].map(async (s) => [s.id, (await listed(key, s.id)).desiredRevision] as const)));

    t.changed.length = 0;
    assert.equal((await call(app, 'PUT', `/api/servers/${s1.id}`, { key, body: { publicIp: '192.0.2.77' } })).status, 200);
    assert.equal((await listed(key, s1.id)).desiredRevision, before.get(s1.id)! + 1);
    assert.equal((await listed(key, s2.id)).desiredRevision, before.get(s2.id)! + 1);
    assert.equal((await listed(key, s3.id)).desiredRevision, before.get(s3.id)!, 'a server on other domains only');
    assert.equal((await listed(key, lone.id)).desiredRevision, before.get(lone.id)!);
    assert.deepEqual(t.changed.flat().sort(), [s1.id, s2.id].sort(), 'pushed to the bumped servers');

    t.changed.length = 0;
    assert.equal((await call(app, 'PUT', `/api/servers/${s1.id}`, { key, body: { name: 'renamed' } })).status, 200);
    assert.equal((await call(app, 'PUT', `/api/servers/${s1.id}`, { key, body: { publicIp: '192.0.2.77' } })).status, 200, 'the same address again');
    assert.equal((await listed(key, s1.id)).desiredRevision, before.get(s1.id)! + 1, 'nothing in any snapshot changed');
    assert.equal((await listed(key, s2.id)).desiredRevision, before.get(s2.id)! + 1);
    assert.deepEqual(t.changed.flat(), []);
  });

  test('the OpenAPI document has PUT /api/servers/{id} and publicIp', async () => {
    const doc = (await call(app, 'GET', '/api/openapi.json')).body;
    const put = doc.paths['/api/servers/{id}'].put;
    assert.ok(put, 'PUT documented');
    assert.ok(put.requestBody.content['application/json'].schema.properties.publicIp);
    assert.ok(doc.paths['/api/servers'].get.responses['200'].content['application/json'].schema.items.properties.publicIp);
  });
});

describe('serverAddresses in the pushed snapshots', async () => {
  const { srv, agentUrl, agents } = await hubServer();
  const { key } = await newAccount(srv.app, 'pro');
  const newServer = async (name: string) => {
    const r = await call(srv.app, 'POST', '/api/servers', { key, body: { name } });
    assert.equal(r.status, 201);
    return r.body as { id: string; connectionToken: string };
  };
  const put = async (id: string, body: unknown) => {
    const r = await call(srv.app, 'PUT', `/api/servers/${id}`, { key, body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  };
  const connect = async (token: string) => {
    const a = await FakeAgent.connect(agentUrl, token);
    agents.push(a);
    return a;
  };

  test('each domain lists the publicIp, else the connection address, of every live server of the domain, sorted and deduplicated', async () => {
    const a = await newServer('a');
    const b = await newServer('b');
    const c = await newServer('c');
    const d = await call(srv.app, 'POST', '/api/domains', { key, body: { domain: 'addr.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [a.id, b.id, c.id] } });
    assert.equal(d.status, 201);
    const solo = await call(srv.app, 'POST', '/api/domains', { key, body: { domain: 'solo.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [a.id] } });
    assert.equal(solo.status, 201);
    const addressesIn = (s: { domains: { domain: string; serverAddresses: string[] }[] }, domain: string) => s.domains.find((x) => x.domain === domain)?.serverAddresses;
    const latest = (agent: FakeAgent) => agent.snapshots().at(-1)!;
    const expect = (agent: FakeAgent, domain: string, addresses: string[]) =>
      agent.snapshot((s) => s === latest(agent) && JSON.stringify(addressesIn(s, domain)) === JSON.stringify(addresses), `${domain} at ${addresses.join(',')}`);

    // Only A has connected: B and C have no address yet.
    const agentA = await connect(a.connectionToken);
    assert.deepEqual(addressesIn(latest(agentA), 'addr.example.com'), ['127.0.0.1']);
    assert.deepEqual(addressesIn(latest(agentA), 'solo.example.com'), ['127.0.0.1']);

    await put(b.id, { publicIp: '203.0.113.7' });
    const next = await expect(agentA, 'addr.example.com', ['127.0.0.1', '203.0.113.7']);
    assert.equal(next.revision, (await call(srv.app, 'GET', '/api/servers', { key })).body.find((s: { id: string }) => s.id === a.id).desiredRevision);

    await put(a.id, { publicIp: '198.51.100.4' });
    await expect(agentA, 'addr.example.com', ['198.51.100.4', '203.0.113.7']);
    assert.deepEqual(addressesIn(latest(agentA), 'solo.example.com'), ['198.51.100.4']);

    // C's agent connects from 127.0.0.1: A learns it.
    const agentC = await connect(c.connectionToken);
    await expect(agentA, 'addr.example.com', ['127.0.0.1', '198.51.100.4', '203.0.113.7']);
    assert.deepEqual(addressesIn(latest(agentC), 'addr.example.com'), ['127.0.0.1', '198.51.100.4', '203.0.113.7']);
    assert.equal(addressesIn(latest(agentC), 'solo.example.com'), undefined, 'not a domain of C');

    // Two servers at one address are listed once; a cleared publicIp falls back to the connection address.
    await put(b.id, { publicIp: '127.0.0.1' });
    await expect(agentA, 'addr.example.com', ['127.0.0.1', '198.51.100.4']);
    await put(b.id, { publicIp: null });
    await put(a.id, { publicIp: null });
    await expect(agentA, 'addr.example.com', ['127.0.0.1']);
    await expect(agentC, 'addr.example.com', ['127.0.0.1']);

    // A decommissioned server leaves the list.
    await put(b.id, { publicIp: '203.0.113.8' });
    await expect(agentC, 'addr.example.com', ['127.0.0.1', '203.0.113.8']);
    assert.equal((await call(srv.app, 'DELETE', `/api/servers/${b.id}`, { key })).status, 200);
    await expect(agentC, 'addr.example.com', ['127.0.0.1']);
    assert.deepEqual(agentA.invalid, []);
  });
});
