import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { buildSnapshots } from '../src/services/snapshot.js';
import { call, makeTestApp, newAccount, type TestApp } from './helpers.js';

// Custom rules through the API (/api/rules, docs/rules.md): create, list, get, update, delete;
// the expression checked at the edge (a parse error names its column and what was expected, an
// unsupported field is named, a regular expression that backtracks catastrophically is refused);
// the plan's limit; every query scoped by account; the rules reach the snapshots of their scope.

const t: TestApp = await makeTestApp();
const ORIGINS = [{ ip: '192.0.2.10', port: 80 }];

async function server(key: string) {
  const r = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id as string;
}
async function domain(key: string, name: string, serverIds: string[]) {
  const r = await call(t.app, 'POST', '/api/domains', { key, body: { domain: name, origins: ORIGINS, serverIds } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id as string;
}
const create = (key: string, body: Record<string, unknown>) => call(t.app, 'POST', '/api/rules', { key, body });
const LOGIN = { name: 'login', expression: 'http.request.uri.path eq "/login" and http.request.method eq "POST"', action: 'block' };

describe('/api/rules', () => {
  test('create, list, get, update and delete; defaults and the order rules run in', async () => {
    const { key } = await newAccount(t.app);
    const a = await create(key, LOGIN);
    assert.equal(a.status, 201, JSON.stringify(a.body));
    assert.deepEqual(
      { ...a.body, id: undefined, createdAt: undefined, updatedAt: undefined },
      { ...LOGIN, rateLimit: null, domainId: null, priority: 100, enabled: true, hits: { hour: 0, day: 0, week: 0 }, id: undefined, createdAt: undefined, updatedAt: undefined },
    );
    const b = await create(key, { name: 'office', expression: 'ip.src in {192.0.2.0/24}', action: 'allow', priority: 5 });
    assert.equal(b.status, 201);
    const list = await call(t.app, 'GET', '/api/rules', { key });
    assert.deepEqual(
      list.body.map((r: { name: string }) => r.name),
      ['office', 'login'],
      'priority order',
    );
    assert.deepEqual((await call(t.app, 'GET', `/api/rules/${a.body.id}`, { key })).body, a.body);
    const u = await call(t.app, 'PUT', `/api/rules/${a.body.id}`, { key, body: { action: 'log', enabled: false } });
    assert.equal(u.status, 200);
    assert.equal(u.body.action, 'log');
    assert.equal(u.body.enabled, false);
    assert.equal(u.body.expression, LOGIN.expression, 'fields left out stay');
    assert.deepEqual((await call(t.app, 'DELETE', `/api/rules/${a.body.id}`, { key })).body, { success: true, id: a.body.id });
    assert.equal((await call(t.app, 'GET', `/api/rules/${a.body.id}`, { key })).status, 404);
  });

  test('a parse error answers 400 with the column and what was expected; an unsupported field is named', async () => {
    const { key } = await newAccount(t.app);
    const r = await create(key, { ...LOGIN, expression: 'http.request.uri.path eq' });
    assert.equal(r.status, 400);
    assert.match(r.body.error, /^expression: at column 25: expected a string in double quotes, found the end of the expression$/);
    const f = await create(key, { ...LOGIN, expression: 'http.request.body.raw contains "x"' });
    assert.equal(f.status, 400);
    assert.match(f.body.error, /expression: at column 1: expected a supported field, found "http\.request\.body\.raw", which is not a field Rampart supports/);
    const op = await create(key, { ...LOGIN, expression: 'ip.src contains "1"' });
    assert.match(op.body.error, /at column 8: expected an operator for a value of type ip \(eq, ne, in\)/);
    const upd = await create(key, LOGIN);
    const bad = await call(t.app, 'PUT', `/api/rules/${upd.body.id}`, { key, body: { expression: '(ssl' } });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /expression: at column 5: expected "\)"/);
  });

  test('a regular expression that backtracks catastrophically is refused; a safe one is taken', async () => {
    const { key } = await newAccount(t.app);
    for (const re of ['^(a+)+$', '(a|a)*b', '^(\\\\w+\\\\s?)*$']) {
      const r = await create(key, { ...LOGIN, expression: `http.request.uri.path matches "${re}"` });
      assert.equal(r.status, 400, re);
      assert.match(r.body.error, /^expression: the regular expression .* can backtrack catastrophically \((exponential|polynomial) time/, re);
    }
    const ok = await create(key, { ...LOGIN, expression: 'http.user_agent matches "^(curl|wget)/[0-9.]+$"' });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    // HAProxy's PCRE2 reads \z as the end; the evaluator that classes countries would read a z
    const pcreOnly = await create(key, { ...LOGIN, expression: 'ip.src.country matches "^(CN|RU)\\\\z"' });
    assert.equal(pcreOnly.status, 400);
    assert.match(pcreOnly.body.error, /^expression: at column 24: expected a regular expression, found "\^\(CN\|RU\)\\\\z": \\z is not supported/);
  });

  test('the schema refuses unknown fields, actions and names out of bounds, naming the field', async () => {
    const { key } = await newAccount(t.app);
    for (const [body, field] of [
      [{ ...LOGIN, action: 'drop' }, 'action'],
      [{ ...LOGIN, name: '' }, 'name'],
      [{ ...LOGIN, extra: 1 }, 'extra'],
      [{ ...LOGIN, expression: 'x'.repeat(4097) }, 'expression'],
    ] as const) {
      const r = await create(key, body);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.ok(r.body.error.includes(field), `${r.body.error} names ${field}`);
    }
  });

  test("plans limit the number of rules: pro 25, enterprise 250; another account's rules and domains answer 404", async () => {
    const pro = await newAccount(t.app, 'pro');
    for (let i = 0; i < 25; i++) assert.equal((await create(pro.key, { ...LOGIN, name: `r${i}` })).status, 201);
    const over = await create(pro.key, LOGIN);
    assert.equal(over.status, 403);
    assert.equal(over.body.error, 'Maximum 25 custom rules allowed on the Pro plan');
    const ent = await newAccount(t.app, 'enterprise');
    assert.equal((await create(ent.key, LOGIN)).status, 201);
    const mine = (await call(t.app, 'GET', '/api/rules', { key: pro.key })).body[0].id as string;
    assert.equal((await call(t.app, 'GET', `/api/rules/${mine}`, { key: ent.key })).status, 404);
    assert.equal((await call(t.app, 'PUT', `/api/rules/${mine}`, { key: ent.key, body: { enabled: false } })).status, 404);
    assert.equal((await call(t.app, 'DELETE', `/api/rules/${mine}`, { key: ent.key })).status, 404);
    const theirDomain = await domain(pro.key, 'limits.example.com', []);
    assert.equal((await create(ent.key, { ...LOGIN, domainId: theirDomain })).status, 404);
  });

  test('the free plan allows 5', async () => {
    const free = await newAccount(t.app, 'free', 0, 'correct horse battery staple');
    const login = await call(t.app, 'POST', '/api/auth/login', { body: { email: free.email, password: 'correct horse battery staple' } });
    assert.equal(login.status, 200, JSON.stringify(login.body));
    const cookie = login.cookies.map((c) => `${c.name}=${c.value}`).join('; ');
    const post = () => call(t.app, 'POST', '/api/rules', { cookie, body: LOGIN });
    for (let i = 0; i < 5; i++) assert.equal((await post()).status, 201);
    const over = await post();
    assert.equal(over.status, 403);
    assert.equal(over.body.error, 'Maximum 5 custom rules allowed on the Free plan');
  });

  test('enabled rules reach the snapshots of their scope, by priority; none: no field at all', async () => {
    const { key } = await newAccount(t.app);
    const s1 = await server(key);
    const s2 = await server(key);
    const d1 = await domain(key, 'one.example.com', [s1]);
    await domain(key, 'two.example.com', [s2]);
    const before = await buildSnapshots(t.ctx.db, [s1, s2]);
    assert.equal('customRules' in before.snapshots.get(s1)!, false);
    const own = await create(key, { ...LOGIN, domainId: d1, priority: 7 });
    const all = await create(key, { name: 'all', expression: 'ssl', action: 'log', priority: 3 });
    await create(key, { name: 'off', expression: 'ssl', action: 'block', enabled: false });
    const { snapshots } = await buildSnapshots(t.ctx.db, [s1, s2]);
    assert.deepEqual(snapshots.get(s1)!.customRules, [
      { id: all.body.id, expression: 'ssl', action: 'log', domainId: null, priority: 3 },
      { id: own.body.id, expression: LOGIN.expression, action: 'block', domainId: d1, priority: 7 },
    ]);
    assert.deepEqual(snapshots.get(s2)!.customRules, [{ id: all.body.id, expression: 'ssl', action: 'log', domainId: null, priority: 3 }]);
  });

  test('rate-limiting rules: rateLimit required with the action rate_limit and refused with others, each setting checked; it reaches the snapshot', async () => {
    const { key } = await newAccount(t.app);
    const s1 = await server(key);
    await domain(key, 'rate.example.com', [s1]);
    const settings = { requests: 5, period: 60, characteristics: ['ip', 'path'], mitigation: 'block', duration: 300 };
    const base = { name: 'login', expression: 'http.request.uri.path eq "/login"', action: 'rate_limit' };
    const missing = await create(key, base);
    assert.equal(missing.status, 400);
    assert.equal(missing.body.error, 'rateLimit: is required with the action rate_limit');
    const other = await create(key, { ...LOGIN, rateLimit: settings });
    assert.equal(other.body.error, 'rateLimit: only a rule with the action rate_limit takes it');
    for (const [bad, field] of [
      [{ ...settings, period: 5 }, 'period'],
      [{ ...settings, characteristics: ['path'] }, 'characteristics'],
      [{ ...settings, characteristics: ['header:X Bad'] }, 'characteristics'],
      [{ ...settings, mitigation: 'drop' }, 'mitigation'],
      [{ ...settings, duration: 0 }, 'duration'],
    ] as const) {
      const r = await create(key, { ...base, rateLimit: bad });
      assert.equal(r.status, 400, JSON.stringify(bad));
      assert.ok(r.body.error.includes(field), `${r.body.error} names ${field}`);
    }
    const ok = await create(key, { ...base, rateLimit: settings });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    assert.deepEqual(ok.body.rateLimit, settings);
    const { snapshots } = await buildSnapshots(t.ctx.db, [s1]);
    assert.deepEqual(snapshots.get(s1)!.customRules, [{ id: ok.body.id, expression: base.expression, action: 'rate_limit', domainId: null, priority: 100, rateLimit: settings }]);
    const changed = await call(t.app, 'PUT', `/api/rules/${ok.body.id}`, { key, body: { action: 'block' } });
    assert.equal(changed.status, 200);
    assert.equal(changed.body.rateLimit, null, 'a rule turned into another action drops its settings');
  });
});
