import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md "Shield servers" and "Domains": servers with a connection token
// shown once and stored as SHA-256, token regeneration, decommissioning; domains with strict
// hostname/address/port validation, per-account scoping (404), duplicates (409), updates, deletion,
// and the desired revision of every server a change touches.

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const SERVER_NOT_FOUND = { error: 'Server not found' };
const DOMAIN_NOT_FOUND = { error: 'Domain not found' };

describe('servers and domains', async () => {
  const t = await makeTestApp();
  const app = t.app;
  let n = 0;
  const uniqueDomain = () => `d${++n}.example.com`;

  async function newServer(key: string, name = 'edge') {
    const r = await call(app, 'POST', '/api/servers', { key, body: { name } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string; name: string; status: string; ip: null; connectionToken: string };
  }
  async function servers(key: string) {
    const r = await call(app, 'GET', '/api/servers', { key });
    assert.equal(r.status, 200);
    return r.body as { id: string; status: string; desiredRevision: number; [k: string]: unknown }[];
  }
  async function domains(key: string) {
    const r = await call(app, 'GET', '/api/domains', { key });
    assert.equal(r.status, 200);
    return r.body as { id: string; domain: string; serverIds: string[]; [k: string]: unknown }[];
  }
  async function newDomain(key: string, body: Record<string, unknown>) {
    const r = await call(app, 'POST', '/api/domains', { key, body: { origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [], sslEnabled: true, ...body } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string; domain: string; [k: string]: unknown };
  }
  async function tokenHash(id: string) {
    const row = await t.database.db.selectFrom('servers').select('token_hash').where('id', '=', id).executeTakeFirstOrThrow();
    return row.token_hash;
  }
  async function revision(key: string, id: string) {
    const s = (await servers(key)).find((x) => x.id === id);
    assert.ok(s, `server ${id} listed`);
    return s.desiredRevision;
  }

  // ---------------------------------------------------------------- servers

  test('POST /api/servers answers 201 with an offline server, ip null and its connection token', async () => {
    const { key } = await newAccount(app);
    const r = await call(app, 'POST', '/api/servers', { key, body: { name: 'edge-1' } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    for (const f of ['id', 'name', 'status', 'ip', 'connectionToken']) assert.ok(f in r.body, `field ${f}`);
    assert.equal(r.body.name, 'edge-1');
    assert.equal(r.body.status, 'offline');
    assert.equal(r.body.ip, null);
    assert.equal(typeof r.body.connectionToken, 'string');
    assert.ok(r.body.connectionToken.length >= 32, 'a token with real entropy');
    const other = await newServer(key, 'edge-2');
    assert.notEqual(other.connectionToken, r.body.connectionToken);
  });

  test('the token is shown only at creation: not listed, stored only as SHA-256', async () => {
    const { key } = await newAccount(app);
    const s = await newServer(key);
    const list = await call(app, 'GET', '/api/servers', { key });
    assert.equal(list.status, 200);
    assert.equal(list.body.length, 1);
    assert.equal(list.body[0].id, s.id);
    assert.equal(list.body[0].status, 'offline');
    assert.equal(list.body[0].ip, null);
    assert.ok(!('connectionToken' in list.body[0]));
    for (const k of Object.keys(list.body[0])) assert.doesNotMatch(k, /token/i);
    assert.ok(!JSON.stringify(list.body).includes(s.connectionToken));
    const row = await t.database.db.selectFrom('servers').selectAll().where('id', '=', s.id).executeTakeFirstOrThrow();
    assert.equal(row.token_hash, sha256(s.connectionToken));
    for (const [column, value] of Object.entries(row)) {
      assert.ok(!String(value).includes(s.connectionToken), `column ${column} holds the plaintext token`);
    }
  });

  test('invalid server names give 400 naming name', async () => {
    const { key } = await newAccount(app);
    for (const body of [{}, { name: '' }, { name: 7 }, { name: 'x'.repeat(101) }]) {
      const r = await call(app, 'POST', '/api/servers', { key, body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.body.error, /^name: /);
    }
    assert.deepEqual(await servers(key), []);
  });

  test('POST /api/servers/:id/token returns a new token; the old hash is replaced', async () => {
    const { key } = await newAccount(app);
    const s = await newServer(key);
    const r = await call(app, 'POST', `/api/servers/${s.id}/token`, { key });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.id, s.id);
    assert.equal(typeof r.body.connectionToken, 'string');
    assert.notEqual(r.body.connectionToken, s.connectionToken);
    assert.equal(await tokenHash(s.id), sha256(r.body.connectionToken));
    assert.notEqual(await tokenHash(s.id), sha256(s.connectionToken), 'the old token is dead');
    assert.ok(!JSON.stringify(await servers(key)).includes(r.body.connectionToken));
  });

  test('unknown, malformed or foreign server ids give 404 on token and decommission', async () => {
    const owner = await newAccount(app);
    const stranger = await newAccount(app);
    const s = await newServer(owner.key);
    const hash = await tokenHash(s.id);
    for (const id of [randomUUID(), 'not-a-uuid', s.id]) {
      const tok = await call(app, 'POST', `/api/servers/${id}/token`, { key: stranger.key });
      assert.equal(tok.status, 404, `token ${id}`);
      assert.deepEqual(tok.body, SERVER_NOT_FOUND);
      const del = await call(app, 'DELETE', `/api/servers/${id}`, { key: stranger.key });
      assert.equal(del.status, 404, `delete ${id}`);
      assert.deepEqual(del.body, SERVER_NOT_FOUND);
    }
    assert.equal(await tokenHash(s.id), hash, 'the foreign server kept its token');
    assert.equal((await servers(owner.key))[0]!.status, 'offline', 'and its status');
    assert.deepEqual(await servers(stranger.key), []);
  });

  test('DELETE /api/servers/:id decommissions the server and removes it from its domains', async () => {
    const { key } = await newAccount(app);
    const s1 = await newServer(key, 'one');
    const s2 = await newServer(key, 'two');
    const d = await newDomain(key, { domain: uniqueDomain(), serverIds: [s1.id, s2.id] });
    assert.deepEqual([...(d.serverIds as string[])].sort(), [s1.id, s2.id].sort());

    const r = await call(app, 'DELETE', `/api/servers/${s1.id}`, { key });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.status, 'decommissioned');
    assert.ok(!('connectionToken' in r.body));
    const list = await servers(key);
    assert.equal(list.find((x) => x.id === s1.id)!.status, 'decommissioned', 'still listed, as decommissioned');
    assert.equal(list.find((x) => x.id === s2.id)!.status, 'offline');
    assert.deepEqual((await domains(key)).find((x) => x.id === d.id)!.serverIds, [s2.id]);
    assert.notEqual(await tokenHash(s1.id), sha256(s1.connectionToken), 'its token no longer matches');

    // A decommissioned server cannot be assigned again, and its token cannot be regenerated.
    const assign = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { serverIds: [s1.id] } });
    assert.equal(assign.status, 404);
    assert.deepEqual(assign.body, SERVER_NOT_FOUND);
    const create = await call(app, 'POST', '/api/domains', {
      key,
      body: { domain: uniqueDomain(), origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [s1.id], sslEnabled: true },
    });
    assert.equal(create.status, 404);
    const tok = await call(app, 'POST', `/api/servers/${s1.id}/token`, { key });
    assert.equal(tok.status, 409);
    assert.equal(await tokenHash(s1.id), null);
  });

  // ---------------------------------------------------------------- domains

  test('POST /api/domains answers 201 with defaults wafEnabled true, wafLevel medium, wafMode block, status pending; domain lowercased', async () => {
    const { key } = await newAccount(app);
    const s = await newServer(key);
    const r = await call(app, 'POST', '/api/domains', {
      key,
      body: { domain: 'Shop.Example.COM', origins: [{ ip: '10.0.0.1', port: 8080 }], serverIds: [s.id], sslEnabled: true },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(typeof r.body.id, 'string');
    assert.equal(r.body.domain, 'shop.example.com');
    assert.deepEqual(r.body.origins, [{ ip: '10.0.0.1', port: 8080 }]);
    assert.deepEqual(r.body.serverIds, [s.id]);
    assert.equal(r.body.sslEnabled, true);
    assert.equal(r.body.wafEnabled, true);
    assert.equal(r.body.wafLevel, 'medium');
    assert.equal(r.body.wafMode, 'block');
    assert.equal(r.body.status, 'pending');
    const listed = await domains(key);
    assert.deepEqual(listed, [r.body], 'the list shows the same record');

    const plain = await newDomain(key, { domain: uniqueDomain(), sslEnabled: false });
    assert.equal(plain.sslEnabled, false);
    assert.deepEqual(plain.serverIds, []);
  });

  test('IPv6 origins are accepted (lowercased), several origins kept in order', async () => {
    const { key } = await newAccount(app);
    const origins = [
      { ip: '2001:DB8::10', port: 443 },
      { ip: '::1', port: 80 },
      { ip: '::ffff:192.0.2.1', port: 8080 },
      { ip: '192.0.2.7', port: 65535 },
      { ip: '192.0.2.8', port: 1 },
    ];
    const d = await newDomain(key, { domain: uniqueDomain(), origins });
    assert.deepEqual(
      d.origins,
      origins.map((o) => ({ ip: o.ip.toLowerCase(), port: o.port })),
    );
  });

  test('origins by name: { host, port } accepted (lowercased, trailing dot dropped) beside { ip, port }; bad names 400 naming origins[0].host', async () => {
    const { key } = await newAccount(app);
    const d = await newDomain(key, {
      domain: uniqueDomain(),
      origins: [
        { host: 'Origin.Example.COM.', port: 8080 },
        { host: 'localhost', port: 80 },
        { ip: '10.0.0.2', port: 80 },
      ],
    });
    assert.deepEqual(d.origins, [
      { host: 'origin.example.com', port: 8080 },
      { host: 'localhost', port: 80 },
      { ip: '10.0.0.2', port: 80 },
    ]);
    const dup = await call(app, 'PUT', `/api/domains/${d.id}`, {
      key,
      body: {
        origins: [
          { host: 'app', port: 80 },
          { host: 'APP', port: 80 },
        ],
      },
    });
    assert.equal(dup.status, 400, JSON.stringify(dup.body));
    assert.match(dup.body.error, /^origins\[1\]: duplicate origin app:80/);
    for (const host of ['10.0.0.1', '123', 'a..b', '-x.example.com', 'x;y', 'origin.example.com backup', 'ori gin', 'x\ny', '', 'a/b', `${'a'.repeat(64)}.com`]) {
      const r = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { origins: [{ host, port: 80 }] } });
      assert.equal(r.status, 400, `${JSON.stringify(host)}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error, /^origins\[0\]\.host: /, `${JSON.stringify(host)}: ${r.body.error}`);
    }
    assert.deepEqual((await domains(key))[0]!.origins, d.origins, 'the stored origins did not change');
  });

  test('a domain no shield server serves carries a warning in the answer and the list; with a server, none', async () => {
    const { key } = await newAccount(app);
    const d = await newDomain(key, { domain: uniqueDomain() });
    assert.equal((d.warnings as string[]).length, 1);
    assert.match((d.warnings as string[])[0]!, /^No shield server serves this domain yet/);
    assert.deepEqual((await domains(key))[0]!.warnings, d.warnings);
    const s = await newServer(key);
    const u = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { serverIds: [s.id] } });
    assert.equal(u.status, 200, JSON.stringify(u.body));
    assert.deepEqual(u.body.warnings, []);
    assert.deepEqual((await domains(key))[0]!.warnings, []);
  });

  test('bad ports give 400 naming origins[0].port; nothing is stored', async () => {
    const { key } = await newAccount(app);
    for (const port of [0, 65536, 1.5, '80', -1, null]) {
      const r = await call(app, 'POST', '/api/domains', {
        key,
        body: { domain: 'ports.example.com', origins: [{ ip: '10.0.0.1', port }], serverIds: [], sslEnabled: true },
      });
      assert.equal(r.status, 400, `port ${JSON.stringify(port)}: ${JSON.stringify(r.body)}`);
      assert.deepEqual(Object.keys(r.body), ['error']);
      assert.match(r.body.error, /^origins\[0\]\.port: /, `port ${JSON.stringify(port)}: ${r.body.error}`);
    }
    const second = await call(app, 'POST', '/api/domains', {
      key,
      body: {
        domain: 'ports.example.com',
        origins: [
          { ip: '10.0.0.1', port: 80 },
          { ip: '10.0.0.2', port: 0 },
        ],
        serverIds: [],
        sslEnabled: true,
      },
    });
    assert.equal(second.status, 400);
    assert.match(second.body.error, /^origins\[1\]\.port: /);
    assert.deepEqual(await domains(key), []);
  });

  test('bad hostnames give 400 naming domain; nothing is stored', async () => {
    const { key } = await newAccount(app);
    const bad = [
      'localhost',
      'exa mple.com',
      'a..b.com',
      '-a.com',
      'a-.com',
      'example.com#x',
      'ex\r\nample.com',
      'ex\nample.com',
      'ex"ample.com',
      "ex'ample.com",
      'ex\\ample.com',
      'ex\u0000ample.com',
      'ex;ample.com',
      'ex{ample}.com',
      '1.2.3.4',
      '*.example.com',
      'example.com:80',
      'http://example.com',
      `${'a'.repeat(64)}.com`,
      '',
    ];
    for (const domain of bad) {
      const r = await call(app, 'POST', '/api/domains', {
        key,
        body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [], sslEnabled: true },
      });
      assert.equal(r.status, 400, `${JSON.stringify(domain)}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error, /^domain: /, `${JSON.stringify(domain)}: ${r.body.error}`);
    }
    assert.deepEqual(await domains(key), []);
  });

  test('bad origin addresses give 400 naming origins[0].ip, on create and on update', async () => {
    const { key } = await newAccount(app);
    const d = await newDomain(key, { domain: uniqueDomain() });
    const bad = [
      '10.0.0.1#x',
      '"10.0.0.1"',
      "10.0.0.1'",
      '10.0.0.1\r\n',
      '10.0.0.1\n',
      '10.0.0.1\r',
      '10.0.0.1\u0000',
      'fe80::1%eth0',
      '256.1.1.1',
      '10.0.0',
      '10.0.0.1/24',
      '[::1]',
      'example.com',
      '10.0.0.1 backup',
      '',
    ];
    for (const ip of bad) {
      const c = await call(app, 'POST', '/api/domains', {
        key,
        body: { domain: uniqueDomain(), origins: [{ ip, port: 80 }], serverIds: [], sslEnabled: true },
      });
      assert.equal(c.status, 400, `create ${JSON.stringify(ip)}: ${JSON.stringify(c.body)}`);
      assert.match(c.body.error, /^origins\[0\]\.ip: /, `create ${JSON.stringify(ip)}: ${c.body.error}`);
      const u = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { origins: [{ ip, port: 80 }] } });
      assert.equal(u.status, 400, `update ${JSON.stringify(ip)}: ${JSON.stringify(u.body)}`);
      assert.match(u.body.error, /^origins\[0\]\.ip: /, `update ${JSON.stringify(ip)}: ${u.body.error}`);
    }
    const list = await domains(key);
    assert.equal(list.length, 1);
    assert.deepEqual(list[0]!.origins, [{ ip: '10.0.0.1', port: 80 }], 'the stored origins did not change');
  });

  test('origins: empty list, missing field or unknown field give 400', async () => {
    const { key } = await newAccount(app);
    const base = { domain: uniqueDomain(), serverIds: [], sslEnabled: true };
    const cases: [unknown, RegExp][] = [
      [[], /^origins: /],
      [[{ ip: '10.0.0.1' }], /^origins\[0\]\.port: /],
      [[{ port: 80 }], /^origins\[0\]: give either ip \(an address\) or host \(a DNS name\), not neither/],
      [[{ ip: '10.0.0.1', host: 'origin.example.com', port: 80 }], /^origins\[0\]: give either ip \(an address\) or host \(a DNS name\), not both/],
      [[{ ip: '10.0.0.1', port: 80, weight: 2 }], /weight/],
      ['10.0.0.1:80', /^origins: /],
    ];
    for (const [origins, re] of cases) {
      const r = await call(app, 'POST', '/api/domains', { key, body: { ...base, origins } });
      assert.equal(r.status, 400, JSON.stringify(origins));
      assert.match(r.body.error, re);
    }
    const missing = await call(app, 'POST', '/api/domains', { key, body: base });
    assert.equal(missing.status, 400);
    assert.match(missing.body.error, /^origins: /);
    const unknown = await call(app, 'POST', '/api/domains', { key, body: { ...base, origins: [{ ip: '10.0.0.1', port: 80 }], account_id: randomUUID() } });
    assert.equal(unknown.status, 400);
    assert.match(unknown.body.error, /account_id/);
    assert.deepEqual(await domains(key), []);
  });

  test('serverIds of another account, unknown or malformed give 404; nothing is stored', async () => {
    const { key } = await newAccount(app);
    const stranger = await newAccount(app);
    const foreign = await newServer(stranger.key);
    const own = await newServer(key);
    const foreignRev = await revision(stranger.key, foreign.id);
    for (const serverIds of [[foreign.id], [randomUUID()], ['not-a-uuid'], [own.id, foreign.id]]) {
      const r = await call(app, 'POST', '/api/domains', {
        key,
        body: { domain: 'assign.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds, sslEnabled: true },
      });
      assert.equal(r.status, 404, JSON.stringify(serverIds));
      assert.deepEqual(r.body, SERVER_NOT_FOUND);
    }
    assert.deepEqual(await domains(key), []);
    assert.equal(await revision(stranger.key, foreign.id), foreignRev, 'the foreign server was not touched');
    const d = await newDomain(key, { domain: uniqueDomain(), serverIds: [own.id] });
    const put = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { serverIds: [foreign.id] } });
    assert.equal(put.status, 404);
    assert.deepEqual(put.body, SERVER_NOT_FOUND);
    assert.deepEqual((await domains(key))[0]!.serverIds, [own.id]);
  });

  test('a duplicate domain in the same account gives 409, also in another letter case', async () => {
    const { key } = await newAccount(app);
    await newDomain(key, { domain: 'dup.example.com' });
    for (const domain of ['dup.example.com', 'DUP.Example.com', 'dup.example.com.']) {
      const r = await call(app, 'POST', '/api/domains', {
        key,
        body: { domain, origins: [{ ip: '10.0.0.2', port: 80 }], serverIds: [], sslEnabled: true },
      });
      assert.equal(r.status, 409, `${domain}: ${JSON.stringify(r.body)}`);
      assert.deepEqual(Object.keys(r.body), ['error']);
    }
    const list = await domains(key);
    assert.equal(list.length, 1);
    assert.deepEqual(list[0]!.origins, [{ ip: '10.0.0.1', port: 80 }]);
  });

  test('PUT /api/domains/:id changes origins, serverIds, sslEnabled, wafEnabled and wafLevel', async () => {
    const { key } = await newAccount(app);
    const s1 = await newServer(key, 'one');
    const s2 = await newServer(key, 'two');
    const d = await newDomain(key, { domain: uniqueDomain(), serverIds: [s1.id] });
    const steps: [Record<string, unknown>, (b: any) => void][] = [
      [
        {
          origins: [
            { ip: '10.1.1.1', port: 8443 },
            { ip: '2001:db8::2', port: 80 },
          ],
        },
        (b) =>
          assert.deepEqual(b.origins, [
            { ip: '10.1.1.1', port: 8443 },
            { ip: '2001:db8::2', port: 80 },
          ]),
      ],
      [{ serverIds: [s2.id] }, (b) => assert.deepEqual(b.serverIds, [s2.id])],
      [{ sslEnabled: false }, (b) => assert.equal(b.sslEnabled, false)],
      [{ wafEnabled: false }, (b) => assert.equal(b.wafEnabled, false)],
      [{ wafLevel: 'high' }, (b) => assert.equal(b.wafLevel, 'high')],
      [{ wafLevel: 'low', wafEnabled: true }, (b) => assert.ok(b.wafLevel === 'low' && b.wafEnabled === true)],
      [{ serverIds: [] }, (b) => assert.deepEqual(b.serverIds, [])],
    ];
    for (const [body, check] of steps) {
      const r = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body });
      assert.equal(r.status, 200, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.id, d.id);
      assert.equal(r.body.domain, d.domain, 'the name never changes');
      check(r.body);
      const listed = (await domains(key)).find((x) => x.id === d.id)!;
      check(listed);
    }
    const final = (await domains(key)).find((x) => x.id === d.id)!;
    assert.deepEqual(final.origins, [
      { ip: '10.1.1.1', port: 8443 },
      { ip: '2001:db8::2', port: 80 },
    ]);
    assert.equal(final.sslEnabled, false);
    assert.equal(final.wafEnabled, true);
    assert.equal(final.wafLevel, 'low');
  });

  test('PUT with an invalid wafLevel, wrong types, an unknown field or nothing gives 400; unknown ids 404', async () => {
    const { key } = await newAccount(app);
    const stranger = await newAccount(app);
    const d = await newDomain(key, { domain: uniqueDomain() });
    const before = await domains(key);
    const cases: [unknown, RegExp][] = [
      [{ wafLevel: 'extreme' }, /^wafLevel: /],
      [{ wafLevel: 'HIGH' }, /^wafLevel: /],
      [{ wafLevel: 2 }, /^wafLevel: /],
      [{ sslEnabled: 'yes' }, /^sslEnabled: /],
      [{ wafEnabled: 1 }, /^wafEnabled: /],
      [{ serverIds: 'all' }, /^serverIds: /],
      [{ foo: 1 }, /foo/],
      [{ domain: 'renamed.example.com' }, /domain/],
      [{ wafLevel: 'high', status: 'active' }, /status/],
      [{}, /./],
    ];
    for (const [body, re] of cases) {
      const r = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body });
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error, re, `${JSON.stringify(body)}: ${r.body.error}`);
    }
    assert.deepEqual(await domains(key), before, 'nothing changed');
    for (const id of [randomUUID(), 'not-a-uuid']) {
      const r = await call(app, 'PUT', `/api/domains/${id}`, { key, body: { wafLevel: 'high' } });
      assert.equal(r.status, 404);
      assert.deepEqual(r.body, DOMAIN_NOT_FOUND);
    }
    const foreign = await call(app, 'PUT', `/api/domains/${d.id}`, { key: stranger.key, body: { wafLevel: 'high' } });
    assert.equal(foreign.status, 404);
    assert.deepEqual(foreign.body, DOMAIN_NOT_FOUND);
    assert.deepEqual(await domains(key), before, 'the foreign update changed nothing');
  });

  test('wafMode: detect or block on create, changed by PUT alone or with other fields, shown by the list', async () => {
    const { key } = await newAccount(app);
    const d = await newDomain(key, { domain: uniqueDomain(), wafMode: 'detect', wafLevel: 'high' });
    assert.equal(d.wafMode, 'detect');
    assert.equal(d.wafLevel, 'high');
    const explicit = await newDomain(key, { domain: uniqueDomain(), wafMode: 'block' });
    assert.equal(explicit.wafMode, 'block');
    const steps: [Record<string, unknown>, string][] = [
      [{ wafMode: 'block' }, 'block'],
      [{ wafMode: 'detect', wafLevel: 'medium' }, 'detect'],
      [{ wafEnabled: false }, 'detect'],
      [{ wafMode: 'block' }, 'block'],
    ];
    for (const [body, mode] of steps) {
      const r = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body });
      assert.equal(r.status, 200, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.wafMode, mode, JSON.stringify(body));
      assert.equal((await domains(key)).find((x) => x.id === d.id)!.wafMode, mode, `listed after ${JSON.stringify(body)}`);
    }
    const row = await t.database.db.selectFrom('domains').select('waf_mode').where('id', '=', d.id).executeTakeFirstOrThrow();
    assert.equal(row.waf_mode, 'block', 'stored in its column');
  });

  test('an invalid wafMode is 400 naming wafMode, on create and on update, and nothing is stored', async () => {
    const { key } = await newAccount(app);
    const d = await newDomain(key, { domain: uniqueDomain() });
    const before = await domains(key);
    for (const wafMode of ['log', 'DETECT', 'Block', '', 'off', 1, true, null, ['detect'], { mode: 'detect' }]) {
      const created = await call(app, 'POST', '/api/domains', { key, body: { domain: uniqueDomain(), origins: [{ ip: '10.0.0.1', port: 80 }], wafMode } });
      assert.equal(created.status, 400, `create ${JSON.stringify(wafMode)}: ${JSON.stringify(created.body)}`);
      assert.match(created.body.error, /^wafMode: /, `create ${JSON.stringify(wafMode)}`);
      const updated = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { wafMode } });
      assert.equal(updated.status, 400, `update ${JSON.stringify(wafMode)}: ${JSON.stringify(updated.body)}`);
      assert.match(updated.body.error, /^wafMode: /, `update ${JSON.stringify(wafMode)}`);
    }
    const enumMessage = (await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { wafMode: 'log' } })).body.error;
    assert.equal(enumMessage, 'wafMode: must be one of block, detect');
    const mixed = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { wafLevel: 'high', wafMode: 'log' } });
    assert.equal(mixed.status, 400, 'one bad field refuses the whole change');
    assert.deepEqual(await domains(key), before, 'nothing stored');
  });

  test('wafCompressedBodies: refuse by default, allow by PUT or on create; anything else is 400 naming the field and stores nothing', async () => {
    const { key } = await newAccount(app);
    const d = await newDomain(key, { domain: uniqueDomain(), wafLevel: 'high' });
    assert.equal(d.wafCompressedBodies, 'refuse');
    const allowed = await newDomain(key, { domain: uniqueDomain(), wafCompressedBodies: 'allow' });
    assert.equal(allowed.wafCompressedBodies, 'allow');
    const r = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { wafCompressedBodies: 'allow' } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal((await domains(key)).find((x) => x.id === d.id)!.wafCompressedBodies, 'allow');
    const before = await domains(key);
    for (const wafCompressedBodies of ['decode', 'ALLOW', '', true, null, ['allow']]) {
      const created = await call(app, 'POST', '/api/domains', { key, body: { domain: uniqueDomain(), origins: [{ ip: '10.0.0.1', port: 80 }], wafCompressedBodies } });
      assert.equal(created.status, 400, `create ${JSON.stringify(wafCompressedBodies)}`);
      assert.match(created.body.error, /^wafCompressedBodies: /);
      const updated = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { wafLevel: 'low', wafCompressedBodies } });
      assert.equal(updated.status, 400, `update ${JSON.stringify(wafCompressedBodies)}`);
      assert.match(updated.body.error, /^wafCompressedBodies: /);
    }
    assert.deepEqual(await domains(key), before, 'nothing stored');
  });

  test('DELETE /api/domains/:id answers {success:true}, then 404; foreign and unknown ids 404', async () => {
    const { key } = await newAccount(app);
    const stranger = await newAccount(app);
    const keep = await newDomain(key, { domain: uniqueDomain() });
    const d = await newDomain(key, { domain: uniqueDomain() });
    const foreign = await call(app, 'DELETE', `/api/domains/${d.id}`, { key: stranger.key });
    assert.equal(foreign.status, 404);
    assert.deepEqual(foreign.body, DOMAIN_NOT_FOUND);
    assert.equal((await domains(key)).length, 2, 'a foreign delete removed nothing');

    const r = await call(app, 'DELETE', `/api/domains/${d.id}`, { key });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { success: true });
    assert.deepEqual(
      (await domains(key)).map((x) => x.id),
      [keep.id],
    );
    const again = await call(app, 'DELETE', `/api/domains/${d.id}`, { key });
    assert.equal(again.status, 404);
    assert.deepEqual(again.body, DOMAIN_NOT_FOUND);
    for (const id of [randomUUID(), 'not-a-uuid']) {
      const x = await call(app, 'DELETE', `/api/domains/${id}`, { key });
      assert.equal(x.status, 404);
      assert.deepEqual(x.body, DOMAIN_NOT_FOUND);
    }
    // The name is free again.
    await newDomain(key, { domain: d.domain });
  });

  test('desiredRevision of an assigned server rises on each change affecting it, and only then', async () => {
    const { key } = await newAccount(app);
    const s1 = await newServer(key, 'one');
    const s2 = await newServer(key, 'two');
    let r1 = await revision(key, s1.id);
    let r2 = await revision(key, s2.id);
    const expect = async (d1: number, d2: number, what: string) => {
      const n1 = await revision(key, s1.id);
      const n2 = await revision(key, s2.id);
      assert.equal(n1, r1 + d1, `${what}: server one`);
      assert.equal(n2, r2 + d2, `${what}: server two`);
      r1 = n1;
      r2 = n2;
    };

    const d = await newDomain(key, { domain: uniqueDomain(), serverIds: [s1.id] });
    await expect(1, 0, 'create on one');
    assert.deepEqual(t.changed.at(-1), [s1.id], 'the change is pushed to server one');
    await newDomain(key, { domain: uniqueDomain(), serverIds: [] });
    await expect(0, 0, 'create on no server');
    for (const body of [{ wafLevel: 'high' }, { wafMode: 'detect' }, { wafEnabled: false }, { sslEnabled: false }, { origins: [{ ip: '10.9.9.9', port: 81 }] }]) {
      const r = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body });
      assert.equal(r.status, 200);
      await expect(1, 0, JSON.stringify(body));
    }
    assert.equal((await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { serverIds: [s2.id] } })).status, 200);
    await expect(1, 1, 'moved from one to two: both change');
    assert.deepEqual([...t.changed.at(-1)!].sort(), [s1.id, s2.id].sort());
    assert.equal((await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { origins: [{ ip: '10.9.9.8', port: 81 }] } })).status, 200);
    await expect(0, 1, 'origins after the move');
    const bad = await call(app, 'PUT', `/api/domains/${d.id}`, { key, body: { wafLevel: 'extreme' } });
    assert.equal(bad.status, 400);
    await expect(0, 0, 'a refused change');
    assert.equal((await call(app, 'DELETE', `/api/domains/${d.id}`, { key })).status, 200);
    await expect(0, 1, 'delete');
  });
});
