import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { call, makeTestApp, newAccount, type CallOptions, type TestApp } from './helpers.js';

// One app for the whole file. Created at top level rather than in before(): makeTestApp registers
// after(close), which inside a before() hook would run as soon as that hook ends.
const t: TestApp = await makeTestApp();

type Auth = Pick<CallOptions, 'key' | 'cookie'>;

async function ok(method: string, url: string, auth: Auth, body?: unknown, status = method === 'POST' ? 201 : 200) {
  const r = await call(t.app, method, url, { ...auth, ...(body !== undefined ? { body } : {}) });
  assert.equal(r.status, status, `${method} ${url}: ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Everything an account can read about itself. */
async function snapshot(auth: Auth) {
  const get = async (url: string) => {
    const r = await call(t.app, 'GET', url, auth);
    assert.equal(r.status, 200, `GET ${url}`);
    return r.body;
  };
  const exported = JSON.parse(JSON.stringify(await get('/api/settings/export')));
  delete exported.exported_at;
  return {
    keys: await get('/api/settings/api-keys'),
    servers: await get('/api/servers'),
    domains: await get('/api/domains'),
    rules: await get('/api/waf'),
    events: await get('/api/waf/events'),
    notifications: await get('/api/notifications'),
    account: await get('/api/account'),
    transactions: await get('/api/billing/transactions'),
    exported,
  };
}

async function setup() {
  const password = 'correct horse battery';
  const a = await newAccount(t.app, 'pro', 100);
  const b = await newAccount(t.app, 'pro', 100, password);
  const login = await call(t.app, 'POST', '/api/auth/login', { body: { email: b.email, password } });
  assert.equal(login.status, 200);
  const cookie = `rampart_session=${login.cookies.find((c) => c.name === 'rampart_session')!.value}`;

  const A: Auth = { key: a.key };
  const aKey = await ok('POST', '/api/settings/api-keys', A, { name: 'a-second-key' });
  const aServer = await ok('POST', '/api/servers', A, { name: 'a-server-secret-name' });
  const aServer2 = await ok('POST', '/api/servers', A, { name: 'a-server-two' });
  const aDomain = await ok('POST', '/api/domains', A, { domain: 'a-tenant.example.com', origins: [{ ip: '192.0.2.1', port: 8080 }], serverIds: [aServer.id] });
  const aRule = await ok('POST', '/api/waf', A, { rule_type: 'block_ip', value: '203.0.113.66' });
  const aDomainRule = await ok('POST', '/api/waf', A, { rule_type: 'block_country', value: 'AQ', domain_id: aDomain.id });
  const aRate = await ok('POST', '/api/waf', A, { rule_type: 'rate_limit', value: '{"requests_per_minute":77}' });
  await t.ctx.db
    .insertInto('waf_events')
    .values({ account_id: a.accountId, server_id: aServer.id, domain: 'a-tenant.example.com', source_ip: '198.51.100.99', reason: 'ip_blocked', rule_id: aRule.id, occurred_at: new Date() })
    .execute();
  await t.ctx.db
    .insertInto('notifications')
    .values({ id: randomUUID(), account_id: a.accountId, kind: 'server_down', message: 'a-server-secret-name disconnected', server_id: aServer.id, created_at: new Date() })
    .execute();

  const B: Auth = { key: b.key };
  const bServer = await ok('POST', '/api/servers', B, { name: 'b-server' });
  const bDomain = await ok('POST', '/api/domains', B, { domain: 'b-tenant.example.com', origins: [{ ip: '192.0.2.2', port: 80 }], serverIds: [bServer.id] });
  const bRule = await ok('POST', '/api/waf', B, { rule_type: 'block_ip', value: '10.9.9.9' });
  return {
    a,
    b,
    A,
    B,
    Bcookie: { cookie } as Auth,
    ids: {
      aKey: aKey.id as string,
      aServer: aServer.id as string,
      aServer2: aServer2.id as string,
      aDomain: aDomain.id as string,
      aRule: aRule.id as string,
      aDomainRule: aDomainRule.id as string,
      aRate: aRate.id as string,
    },
    bServer: bServer.id as string,
    bDomain: bDomain.id as string,
    bRule: bRule.id as string,
  };
}

const world = await setup();
const A_IDS = Object.values(world.ids);
const A_MARKERS = ['a-second-key', 'a-server-secret-name', 'a-server-two', 'a-tenant.example.com', '203.0.113.66', '198.51.100.99', '"AQ"', 'requests_per_minute', world.a.accountId, world.a.email];

describe("tenancy: B cannot reach A's objects", () => {
  for (const [label, auth] of [
    ['api key', world.B],
    ['session cookie', world.Bcookie],
  ] as const) {
    test(`every attempt through B's ${label} is the same 404 as for a missing id, and A is unchanged`, async () => {
      const { ids, bDomain } = world;
      const before = await snapshot(world.A);
      const bBefore = await snapshot(auth);
      const origins = [{ ip: '192.0.2.200', port: 81 }];
      // [method, url with A's object, url with a random id, body with A's object, body with a random id]
      const attempts: [string, string, string, unknown?, unknown?][] = [
        ['DELETE', `/api/settings/api-keys?id=${ids.aKey}`, `/api/settings/api-keys?id=${randomUUID()}`],
        ['POST', `/api/servers/${ids.aServer}/token`, `/api/servers/${randomUUID()}/token`],
        ['DELETE', `/api/servers/${ids.aServer}`, `/api/servers/${randomUUID()}`],
        ['DELETE', `/api/servers/${ids.aServer2}`, `/api/servers/${randomUUID()}`],
        ['PUT', `/api/domains/${ids.aDomain}`, `/api/domains/${randomUUID()}`, { sslEnabled: false }, { sslEnabled: false }],
        ['PUT', `/api/domains/${ids.aDomain}`, `/api/domains/${randomUUID()}`, { origins }, { origins }],
        ['PUT', `/api/domains/${ids.aDomain}`, `/api/domains/${randomUUID()}`, { serverIds: [] }, { serverIds: [] }],
        ['DELETE', `/api/domains/${ids.aDomain}`, `/api/domains/${randomUUID()}`],
        // A's server assigned to B's own domain, on update and on creation.
        ['PUT', `/api/domains/${bDomain}`, `/api/domains/${bDomain}`, { serverIds: [ids.aServer] }, { serverIds: [randomUUID()] }],
        ['PUT', `/api/domains/${bDomain}`, `/api/domains/${bDomain}`, { serverIds: [world.bServer, ids.aServer2] }, { serverIds: [world.bServer, randomUUID()] }],
        ['POST', '/api/domains', '/api/domains', { domain: 'steal.example.com', origins, serverIds: [ids.aServer] }, { domain: 'steal.example.com', origins, serverIds: [randomUUID()] }],
        ['PUT', `/api/waf/${ids.aRule}`, `/api/waf/${randomUUID()}`, { enabled: false }, { enabled: false }],
        ['PUT', `/api/waf/${ids.aDomainRule}`, `/api/waf/${randomUUID()}`, { value: 'ZZ', priority: 1 }, { value: 'ZZ', priority: 1 }],
        ['PUT', `/api/waf/${ids.aRate}`, `/api/waf/${randomUUID()}`, { value: '{"requests_per_minute":1}' }, { value: '{"requests_per_minute":1}' }],
        ['DELETE', `/api/waf/${ids.aRule}`, `/api/waf/${randomUUID()}`],
        ['DELETE', `/api/waf/${ids.aDomainRule}`, `/api/waf/${randomUUID()}`],
        ['POST', '/api/waf', '/api/waf', { rule_type: 'block_ip', value: '1.2.3.4', domain_id: ids.aDomain }, { rule_type: 'block_ip', value: '1.2.3.4', domain_id: randomUUID() }],
        ['POST', '/api/waf', '/api/waf', { rule_type: 'block_ai_bot', value: 'GPTBot', domain_id: ids.aDomain }, { rule_type: 'block_ai_bot', value: 'GPTBot', domain_id: randomUUID() }],
      ];
      for (const [method, url, missingUrl, body, missingBody] of attempts) {
        const theirs = await call(t.app, method, url, { ...auth, ...(body !== undefined ? { body } : {}) });
        const missing = await call(t.app, method, missingUrl, { ...auth, ...(missingBody !== undefined ? { body: missingBody } : {}) });
        const label2 = `${method} ${url} ${JSON.stringify(body ?? '')}`;
        assert.equal(theirs.status, 404, `${label2}: ${JSON.stringify(theirs.body)}`);
        assert.equal(missing.status, 404, `${label2} (missing id): ${JSON.stringify(missing.body)}`);
        assert.deepEqual(theirs.body, missing.body, `${label2}: same body as for a missing id`);
        assert.deepEqual(Object.keys(theirs.body), ['error']);
      }
      assert.deepEqual(await snapshot(world.A), before, 'A is unchanged');
      assert.deepEqual(await snapshot(auth), bBefore, 'B is unchanged too');
    });
  }

  test('the 404 messages are the documented ones', async () => {
    const B = world.B;
    assert.deepEqual((await call(t.app, 'DELETE', `/api/settings/api-keys?id=${world.ids.aKey}`, B)).body, { error: 'API key not found' });
    assert.deepEqual((await call(t.app, 'DELETE', `/api/servers/${world.ids.aServer}`, B)).body, { error: 'Server not found' });
    assert.deepEqual((await call(t.app, 'DELETE', `/api/domains/${world.ids.aDomain}`, B)).body, { error: 'Domain not found' });
    assert.deepEqual((await call(t.app, 'DELETE', `/api/waf/${world.ids.aRule}`, B)).body, { error: 'WAF rule not found' });
  });

  test('control: a key B could not delete is deleted by its owner and then stops working', async () => {
    const extra = await ok('POST', '/api/settings/api-keys', world.A, { name: 'a-throwaway' });
    assert.equal((await call(t.app, 'DELETE', `/api/settings/api-keys?id=${extra.id}`, world.B)).status, 404);
    assert.equal((await call(t.app, 'GET', '/api/servers', { key: extra.key })).status, 200, "the key survived B's attempt");
    assert.deepEqual(await ok('DELETE', `/api/settings/api-keys?id=${extra.id}`, world.A), { success: true });
    assert.equal((await call(t.app, 'GET', '/api/servers', { key: extra.key })).status, 401);
  });
});

describe("tenancy: B's reads never show A's objects", () => {
  for (const [label, auth] of [
    ['api key', world.B],
    ['session cookie', world.Bcookie],
  ] as const) {
    test(`lists, events, notifications and export through B's ${label}`, async () => {
      const snap = await snapshot(auth);
      const text = JSON.stringify(snap);
      for (const id of A_IDS) assert.ok(!text.includes(id), `B's reads contain A's id ${id}`);
      for (const m of A_MARKERS) assert.ok(!text.includes(m), `B's reads contain A's ${m}`);
      assert.deepEqual(snap.events, []);
      assert.deepEqual(snap.notifications, []);
      assert.deepEqual(
        snap.servers.map((s: { id: string }) => s.id),
        [world.bServer],
      );
      assert.deepEqual(
        snap.domains.map((d: { id: string }) => d.id),
        [world.bDomain],
      );
      assert.deepEqual(
        snap.rules.map((r: { id: string }) => r.id),
        [world.bRule],
      );
      assert.deepEqual(
        snap.exported.servers.map((s: { name: string }) => s.name),
        ['b-server'],
      );
      assert.deepEqual(
        snap.exported.domains.map((d: { domain: string }) => d.domain),
        ['b-tenant.example.com'],
      );
      assert.deepEqual(snap.exported.waf_rules, [{ type: 'ip_blacklist', value: '10.9.9.9', enabled: true }]);
    });
  }

  test('A sees its own event and notification (the fixtures are real)', async () => {
    const snap = await snapshot(world.A);
    assert.deepEqual(
      snap.events.map((e: { source_ip: string }) => e.source_ip),
      ['198.51.100.99'],
    );
    assert.equal(snap.notifications.length, 1);
    assert.equal(snap.servers.length, 2);
    assert.equal(snap.rules.length, 3);
  });

  test('account_id / accountId in the query string of a read are ignored, never obeyed', async () => {
    const a = world.a.accountId;
    for (const path of ['/api/servers', '/api/domains', '/api/waf', '/api/waf/events', '/api/notifications', '/api/settings/api-keys']) {
      const r = await call(t.app, 'GET', `${path}?account_id=${a}&accountId=${a}`, world.B);
      assert.equal(r.status, 200, path);
      const text = JSON.stringify(r.body);
      for (const id of A_IDS) assert.ok(!text.includes(id), `${path} leaked ${id}`);
      for (const m of A_MARKERS.slice(0, 6)) assert.ok(!text.includes(m), `${path} leaked ${m}`);
    }
  });
});

describe('tenancy: an account id in a body is refused', () => {
  test('account_id / accountId / account fields are 400 unknown field, and ownership never changes', async () => {
    const a = world.a.accountId;
    const B = world.B;
    const beforeA = await snapshot(world.A);
    const beforeB = await snapshot(B);
    const origins = [{ ip: '192.0.2.9', port: 80 }];
    const attempts: [string, string, Record<string, unknown>][] = [];
    for (const field of ['account_id', 'accountId', 'account']) {
      attempts.push(
        ['POST', '/api/settings/api-keys', { name: 'k', [field]: a }],
        ['POST', '/api/servers', { name: 'srv', [field]: a }],
        ['POST', '/api/domains', { domain: 'owned.example.com', origins, [field]: a }],
        ['PUT', `/api/domains/${world.bDomain}`, { sslEnabled: false, [field]: a }],
        ['PUT', `/api/domains/${world.bDomain}`, { origins: [{ ip: '192.0.2.9', port: 80, [field]: a }] }],
        ['POST', '/api/waf', { rule_type: 'block_ip', value: '1.2.3.4', [field]: a }],
        ['PUT', `/api/waf/${world.bRule}`, { enabled: false, [field]: a }],
        ['POST', '/api/billing/deposits', { amount: 5, [field]: a }],
      );
    }
    for (const [method, url, body] of attempts) {
      const r = await call(t.app, method, url, { ...B, body });
      const field = Object.keys(body).find((k) => k.startsWith('account')) ?? 'account';
      assert.equal(r.status, 400, `${method} ${url} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error, /unknown field/, `${method} ${url}`);
      assert.ok(r.body.error.includes(field), `${method} ${url}: ${r.body.error} should name ${field}`);
    }
    const del = await call(t.app, 'DELETE', `/api/settings/api-keys?id=${world.ids.aKey}&account_id=${a}`, B);
    assert.equal(del.status, 400);
    assert.match(del.body.error, /account_id/);
    assert.deepEqual(await snapshot(world.A), beforeA, 'A is unchanged');
    assert.deepEqual(await snapshot(B), beforeB, 'B is unchanged');
  });
});

describe('tenancy: control', () => {
  test('the same ids and bodies succeed for their owner A (so the 404s above were about ownership)', async () => {
    const { ids } = world;
    const A = world.A;
    assert.equal((await ok('POST', `/api/servers/${ids.aServer}/token`, A, undefined, 200)).id, ids.aServer);
    assert.equal((await ok('PUT', `/api/domains/${ids.aDomain}`, A, { serverIds: [ids.aServer, ids.aServer2] })).serverIds.length, 2);
    assert.equal((await ok('PUT', `/api/waf/${ids.aDomainRule}`, A, { value: 'ZZ', priority: 1 })).value, 'ZZ');
    assert.equal((await ok('POST', '/api/waf', A, { rule_type: 'block_ip', value: '1.2.3.4', domain_id: ids.aDomain })).domain_id, ids.aDomain);
    assert.deepEqual(await ok('DELETE', `/api/waf/${ids.aRule}`, A), { success: true, id: ids.aRule });
    assert.equal((await ok('DELETE', `/api/servers/${ids.aServer2}`, A)).status, 'decommissioned');
    assert.deepEqual(await ok('DELETE', `/api/domains/${ids.aDomain}`, A), { success: true });
    assert.deepEqual(await ok('DELETE', `/api/settings/api-keys?id=${ids.aKey}`, A), { success: true });
    // B still sees none of it.
    const text = JSON.stringify(await snapshot(world.B));
    for (const id of A_IDS) assert.ok(!text.includes(id));
  });
});
