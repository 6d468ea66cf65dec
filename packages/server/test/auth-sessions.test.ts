import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { ADMIN_TOKEN, call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md "Conventions", "Browser sessions" and "Operator API": one identical 401 for
// every kind of bad credential, browser sessions (register, login, logout) with a hardened cookie,
// the operator API's bearer token, what is stored (scrypt passwords, hashed session tokens), and
// the generated OpenAPI document and docs page.

const UNAUTHORIZED = { error: 'Invalid or missing API key' };
const BAD_LOGIN = { error: 'Invalid email or password' };
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

function setCookies(headers: Record<string, unknown>): string[] {
  const v = headers['set-cookie'];
  return v === undefined ? [] : Array.isArray(v) ? v.map(String) : [String(v)];
}

describe('authentication and sessions', async () => {
  const t = await makeTestApp();
  const app = t.app;
  let n = 0;
  const email = () => `person${++n}-${randomBytes(3).toString('hex')}@example.com`;

  async function register(address: string, password: string) {
    const r = await call(app, 'POST', '/api/auth/register', { body: { email: address, password } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r;
  }
  async function login(address: string, password: string) {
    const r = await call(app, 'POST', '/api/auth/login', { body: { email: address, password } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const c = r.cookies.find((x) => x.name === 'rampart_session');
    assert.ok(c, 'login sets rampart_session');
    return { cookie: `rampart_session=${c.value}`, value: c.value, reply: r };
  }

  test('every kind of bad credential gets the same 401 {error:"Invalid or missing API key"}', async () => {
    const { key } = await newAccount(app);
    const doomed = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'doomed' } });
    assert.equal(doomed.status, 201);
    assert.equal((await call(app, 'DELETE', `/api/settings/api-keys?id=${doomed.body.id}`, { key })).status, 200);

    const attempts: [string, Record<string, string>][] = [
      ['no credentials', {}],
      ['wrong key', { 'x-api-key': 'wrong' }],
      ['empty key', { 'x-api-key': '' }],
      ['well-formed unknown key', { 'x-api-key': `rmpk_${randomBytes(32).toString('hex')}` }],
      ['key with different case', { 'x-api-key': key.toUpperCase() }],
      ['key with an extra character', { 'x-api-key': `${key}x` }],
      ['key missing its last character', { 'x-api-key': key.slice(0, -1) }],
      ['deleted key', { 'x-api-key': doomed.body.key }],
      ['very long key', { 'x-api-key': 'a'.repeat(5000) }],
      ['garbage cookie', { cookie: 'rampart_session=garbage' }],
      ['empty cookie', { cookie: 'rampart_session=' }],
      ['other cookie', { cookie: 'session=abc' }],
      ['bearer token instead of a key', { authorization: `Bearer ${key}` }],
    ];
    const raws = new Set<string>();
    for (const [label, headers] of attempts) {
      for (const [method, url] of [
        ['GET', '/api/account'],
        ['GET', '/api/settings/api-keys'],
        ['POST', '/api/servers'],
        ['DELETE', '/api/domains/00000000-0000-4000-8000-000000000000'],
      ] as const) {
        const res = await app.inject({
          method,
          url,
          headers: { ...headers, ...(method === 'POST' ? { 'content-type': 'application/json' } : {}) },
          ...(method === 'POST' ? { payload: JSON.stringify({ name: 'x' }) } : {}),
        });
        assert.equal(res.statusCode, 401, `${label}: ${method} ${url}: ${res.body}`);
        assert.deepEqual(JSON.parse(res.body), UNAUTHORIZED, label);
        raws.add(res.body);
      }
    }
    assert.equal(raws.size, 1, `identical body every time: ${[...raws].join(' | ')}`);
    // Nothing was created by the refused POSTs.
    assert.deepEqual((await call(app, 'GET', '/api/servers', { key })).body, []);
  });

  test('an invalid key is refused even when a valid session cookie is also sent', async () => {
    const password = 'mixed-creds-1';
    const a = await newAccount(app, 'pro', 100, password);
    const { cookie } = await login(a.email, password);
    const r = await call(app, 'GET', '/api/account', { cookie, key: 'rmpk_wrong' });
    assert.equal(r.status, 401);
    assert.deepEqual(r.body, UNAUTHORIZED);
  });

  test('API routes reached through a percent-encoded path still require credentials', async () => {
    // The router decodes %61 to "a"; authentication must not be skipped for such a request.
    for (const url of ['/%61pi/account', '/%61pi/servers', '/%61pi/settings/export']) {
      const r = await call(app, 'GET', url);
      assert.equal(r.status, 401, `${url}: ${r.status} ${JSON.stringify(r.body)}`);
      assert.deepEqual(r.body, UNAUTHORIZED);
    }
    const post = await call(app, 'POST', '/%61pi/servers', { body: { name: 'sneaky' } });
    assert.equal(post.status, 401, `POST: ${post.status} ${JSON.stringify(post.body)}`);
  });

  test('register: 201, free plan, and an HttpOnly SameSite=Strict Path=/ session cookie that works', async () => {
    const address = email();
    const r = await register(address.toUpperCase(), 'correct horse battery');
    assert.deepEqual(Object.keys(r.body).sort(), ['accountId', 'email', 'plan']);
    assert.equal(r.body.email, address, 'the email is stored lowercased');
    assert.equal(r.body.plan, 'free');
    const cookies = setCookies(r.headers).filter((c) => c.startsWith('rampart_session='));
    assert.equal(cookies.length, 1, 'one session cookie');
    const header = cookies[0]!;
    assert.match(header, /^rampart_session=[^;\s]{20,}/, 'a long random value');
    assert.match(header, /;\s*HttpOnly(;|$)/i);
    assert.match(header, /;\s*SameSite=Strict(;|$)/i);
    assert.match(header, /;\s*Path=\/(;|$)/);
    const value = r.cookies.find((c) => c.name === 'rampart_session')!.value;
    const acct = await call(app, 'GET', '/api/account', { cookie: `rampart_session=${value}` });
    assert.equal(acct.status, 200, JSON.stringify(acct.body));
    assert.equal(acct.body.id, r.body.accountId);
    assert.equal(acct.body.plan, 'free');
    assert.equal(acct.body.state, 'active');
    assert.equal(acct.body.email, r.body.email);
  });

  test('register: a duplicate email gives 409, in any letter case', async () => {
    const address = email();
    await register(address, 'first-password');
    for (const again of [address, address.toUpperCase()]) {
      const r = await call(app, 'POST', '/api/auth/register', { body: { email: again, password: 'second-password' } });
      assert.equal(r.status, 409, again);
      assert.deepEqual(Object.keys(r.body), ['error']);
      assert.equal(setCookies(r.headers).length, 0, 'no cookie on failure');
    }
    // The original password still works, the second one does not.
    await login(address, 'first-password');
    const bad = await call(app, 'POST', '/api/auth/login', { body: { email: address, password: 'second-password' } });
    assert.equal(bad.status, 401);
    // An email taken through the operator API is taken for sign-up too.
    const op = await newAccount(app, 'pro');
    const dup = await call(app, 'POST', '/api/auth/register', { body: { email: op.email, password: 'another-password' } });
    assert.equal(dup.status, 409);
  });

  test('register: a short password gives 400 naming password; bad email or extra fields 400; nothing created', async () => {
    const address = email();
    const cases: [unknown, RegExp][] = [
      [{ email: address, password: 'short' }, /^password: /],
      [{ email: address, password: '1234567' }, /^password: /],
      [{ email: address }, /^password: /],
      [{ email: address, password: 12345678 }, /^password: /],
      [{ email: 'not-an-email', password: 'long-enough-1' }, /^email: /],
      [{ password: 'long-enough-1' }, /^email: /],
      [{ email: address, password: 'long-enough-1', plan: 'enterprise' }, /plan/],
    ];
    for (const [body, re] of cases) {
      const r = await call(app, 'POST', '/api/auth/register', { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.body.error, re, `${JSON.stringify(body)}: ${r.body.error}`);
      assert.equal(setCookies(r.headers).length, 0);
    }
    // Nothing was created: the address is still free.
    await register(address, 'long-enough-1');
  });

  test('login: wrong password and unknown email give the same 401 body', async () => {
    const address = email();
    await register(address, 'the-right-password');
    const wrong = await call(app, 'POST', '/api/auth/login', { body: { email: address, password: 'the-wrong-password' } });
    const unknown = await call(app, 'POST', '/api/auth/login', { body: { email: email(), password: 'the-right-password' } });
    assert.equal(wrong.status, 401);
    assert.equal(unknown.status, 401);
    assert.deepEqual(wrong.body, BAD_LOGIN);
    assert.deepEqual(unknown.body, wrong.body);
    assert.equal(setCookies(wrong.headers).length, 0);
    assert.equal(setCookies(unknown.headers).length, 0);
    // An operator-created account without a password cannot sign in.
    const nopass = await newAccount(app, 'pro');
    const r = await call(app, 'POST', '/api/auth/login', { body: { email: nopass.email, password: 'whatever-password' } });
    assert.equal(r.status, 401);
    assert.deepEqual(r.body, BAD_LOGIN);
    // The right password in any email letter case works.
    const ok = await login(address.toUpperCase(), 'the-right-password');
    assert.deepEqual(Object.keys(ok.reply.body).sort(), ['accountId', 'email', 'plan']);
    assert.equal(ok.reply.body.email, address);
  });

  test('logout clears the cookie; the old cookie then gets 401; other sessions live on', async () => {
    const address = email();
    await register(address, 'logout-password');
    const a = await login(address, 'logout-password');
    const b = await login(address, 'logout-password');
    assert.notEqual(a.value, b.value, 'each login is its own session');
    assert.equal((await call(app, 'GET', '/api/account', { cookie: a.cookie })).status, 200);

    const out = await call(app, 'POST', '/api/auth/logout', { cookie: a.cookie });
    assert.equal(out.status, 200);
    assert.deepEqual(out.body, { success: true });
    const cleared = setCookies(out.headers).find((c) => c.startsWith('rampart_session='));
    assert.ok(cleared, 'the answer resets the cookie');
    assert.match(cleared, /^rampart_session=;/);
    assert.ok(/Max-Age=0/i.test(cleared) || /Expires=Thu, 01 Jan 1970/i.test(cleared), `expired: ${cleared}`);
    assert.match(cleared, /;\s*Path=\/(;|$)/);

    const after = await call(app, 'GET', '/api/account', { cookie: a.cookie });
    assert.equal(after.status, 401);
    assert.deepEqual(after.body, UNAUTHORIZED);
    assert.equal((await call(app, 'GET', '/api/account', { cookie: b.cookie })).status, 200, 'the other session still works');
    // Logging out without a session is harmless.
    const anon = await call(app, 'POST', '/api/auth/logout');
    assert.equal(anon.status, 200);
  });

  test('operator API: a missing or wrong bearer token gives 401 on every endpoint and changes nothing', async () => {
    const { key } = await newAccount(app, 'pro', 100);
    const d = await call(app, 'POST', '/api/billing/deposits', { key, body: { amount: 5 } });
    assert.equal(d.status, 201);
    const address = email();
    const endpoints: [string, unknown][] = [
      ['/admin/accounts', { email: address, plan: 'pro', balance: 1000 }],
      ['/admin/billing/charge', {}],
      [`/admin/deposits/${d.body.id}/confirm`, {}],
      ['/admin/deposits/x/confirm', {}],
    ];
    const headerSets: [string, Record<string, string>][] = [
      ['none', {}],
      ['wrong token', { authorization: 'Bearer not-the-token' }],
      ['empty bearer', { authorization: 'Bearer ' }],
      ['token without scheme', { authorization: ADMIN_TOKEN }],
      ['basic scheme', { authorization: `Basic ${Buffer.from(`admin:${ADMIN_TOKEN}`).toString('base64')}` }],
      ['token prefix', { authorization: `Bearer ${ADMIN_TOKEN.slice(0, -1)}` }],
      ['token plus suffix', { authorization: `Bearer ${ADMIN_TOKEN}x` }],
      ['an API key', { 'x-api-key': key }],
    ];
    for (const [url, body] of endpoints) {
      for (const [label, headers] of headerSets) {
        const r = await call(app, 'POST', url, { body, headers });
        assert.equal(r.status, 401, `${label} on ${url}: ${JSON.stringify(r.body)}`);
        assert.deepEqual(Object.keys(r.body), ['error']);
        assert.equal(typeof r.body.error, 'string');
      }
    }
    // Nothing happened: the deposit is still pending, the balance unchanged, the email still free.
    const acct = await call(app, 'GET', '/api/account', { key });
    assert.equal(acct.body.balance, 100);
    const txs = await call(app, 'GET', '/api/billing/transactions', { key });
    assert.deepEqual(
      txs.body.map((x: { kind: string; status: string }) => [x.kind, x.status]).filter(([kind]: string[]) => kind !== 'adjustment'), // the opening balance
      [['deposit', 'pending']],
    );
    const created = await call(app, 'POST', '/admin/accounts', { admin: true, body: { email: address, plan: 'pro', balance: 0 } });
    assert.equal(created.status, 201, 'the refused creation stored nothing');
  });

  test('operator account creation: apiKey null on free, a working key on pro and enterprise', async () => {
    const free = await call(app, 'POST', '/admin/accounts', { admin: true, body: { email: email(), plan: 'free' } });
    assert.equal(free.status, 201);
    assert.deepEqual(Object.keys(free.body).sort(), ['accountId', 'apiKey']);
    assert.equal(free.body.apiKey, null);
    for (const plan of ['pro', 'enterprise']) {
      const r = await call(app, 'POST', '/admin/accounts', { admin: true, body: { email: email(), plan, balance: 10 } });
      assert.equal(r.status, 201);
      assert.deepEqual(Object.keys(r.body).sort(), ['accountId', 'apiKey']);
      assert.match(r.body.apiKey, /^rmpk_[0-9a-f]{64}$/);
      const acct = await call(app, 'GET', '/api/account', { key: r.body.apiKey });
      assert.equal(acct.status, 200);
      assert.equal(acct.body.id, r.body.accountId);
      assert.equal(acct.body.plan, plan);
    }
    const bad = await call(app, 'POST', '/admin/accounts', { admin: true, body: { email: email(), plan: 'gold' } });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /^plan: /);
  });

  test('passwords are stored as scrypt hashes, never in plaintext', async () => {
    const address = email();
    const password = 'plain-text-never-stored';
    const reg = await register(address, password);
    const opPassword = 'operator-set-password';
    const op = await newAccount(app, 'pro', 1, opPassword);
    for (const [id, plain] of [
      [reg.body.accountId, password],
      [op.accountId, opPassword],
    ] as const) {
      const row = await t.database.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
      assert.ok(row.password_hash, 'a hash is stored');
      assert.ok(row.password_hash.startsWith('scrypt$'), `scrypt format: ${row.password_hash.slice(0, 20)}`);
      for (const [column, value] of Object.entries(row)) {
        assert.ok(!String(value).includes(plain), `column ${column} holds the plaintext password`);
      }
    }
    // Two accounts with the same password get different hashes (salted).
    const again = await register(email(), password);
    const [h1, h2] = await Promise.all(
      [reg.body.accountId, again.body.accountId].map(async (id) => (await t.database.db.selectFrom('accounts').select('password_hash').where('id', '=', id).executeTakeFirstOrThrow()).password_hash),
    );
    assert.notEqual(h1, h2);
  });

  test('the sessions table stores a hash of the cookie value, not the value', async () => {
    const address = email();
    const reg = await register(address, 'session-hash-pass');
    const { value } = await login(address, 'session-hash-pass');
    const rows = await t.database.db.selectFrom('sessions').selectAll().where('account_id', '=', reg.body.accountId).execute();
    assert.equal(rows.length, 2, 'one row per session (register + login)');
    const row = rows.find((r) => r.token_hash === sha256(value));
    assert.ok(row, 'token_hash is the SHA-256 of the cookie value');
    for (const r of rows) {
      for (const [column, v] of Object.entries(r)) {
        const text = v instanceof Date ? v.toISOString() : String(v);
        assert.ok(!text.includes(value), `column ${column} holds the cookie value`);
      }
    }
    // Presenting the stored hash as a cookie does not authenticate.
    const r = await call(app, 'GET', '/api/account', { cookie: `rampart_session=${row.token_hash}` });
    assert.equal(r.status, 401);
  });

  test('/api/openapi.json is an OpenAPI 3 document covering the API', async () => {
    const r = await call(app, 'GET', '/api/openapi.json');
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /^application\/json/);
    const doc = r.body;
    assert.match(doc.openapi, /^3\.\d+\.\d+$/);
    assert.equal(typeof doc.info?.title, 'string');
    assert.equal(typeof doc.info?.version, 'string');
    assert.equal(typeof doc.paths, 'object');
    const expected: Record<string, string[]> = {
      '/api/settings/api-keys': ['get', 'post', 'delete'],
      '/api/waf': ['get', 'post'],
      '/api/waf/{id}': ['put', 'delete'],
      '/api/domains': ['get', 'post'],
      '/api/domains/{id}': ['put', 'delete'],
      '/api/servers': ['get', 'post'],
      '/api/settings/export': ['get'],
    };
    for (const [path, methods] of Object.entries(expected)) {
      assert.ok(doc.paths[path], `path ${path}`);
      for (const m of methods) {
        const op = doc.paths[path][m];
        assert.ok(op, `${m.toUpperCase()} ${path}`);
        assert.ok(op.responses && Object.keys(op.responses).length > 0, `${m.toUpperCase()} ${path} has responses`);
      }
    }
    assert.ok(!Object.keys(doc.paths).some((p) => p.includes(':')), 'path parameters use {braces}');
    // Every operation on a templated path declares its path parameters.
    for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
      const names = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
      for (const [method, op] of Object.entries<any>(item)) {
        if (!['get', 'post', 'put', 'delete', 'patch'].includes(method)) continue;
        for (const name of names) {
          assert.ok(
            (op.parameters ?? []).some((p: { in: string; name: string; required?: boolean }) => p.in === 'path' && p.name === name && p.required === true),
            `${method.toUpperCase()} ${path} declares path parameter ${name}`,
          );
        }
      }
    }
    // Every internal $ref resolves.
    const refs: string[] = [];
    const walk = (v: unknown) => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object') {
        for (const [k, x] of Object.entries(v)) {
          if (k === '$ref' && typeof x === 'string') refs.push(x);
          else walk(x);
        }
      }
    };
    walk(doc);
    for (const ref of refs) {
      assert.ok(ref.startsWith('#/'), `only internal refs: ${ref}`);
      const target = ref
        .slice(2)
        .split('/')
        .reduce<any>((o, part) => (o == null ? o : o[part.replace(/~1/g, '/').replace(/~0/g, '~')]), doc);
      assert.ok(target !== undefined, `$ref ${ref} resolves`);
    }
    // The key header is a declared security scheme.
    const schemes = Object.values<any>(doc.components?.securitySchemes ?? {});
    assert.ok(schemes.some((s) => s.type === 'apiKey' && s.in === 'header' && s.name === 'x-api-key'));
  });

  test('/docs answers 200 with an HTML page (following a redirect if any)', async () => {
    let url = '/docs';
    let res = await app.inject({ method: 'GET', url });
    for (let hops = 0; hops < 3 && res.statusCode >= 300 && res.statusCode < 400; hops++) {
      const location = String(res.headers.location);
      url = new URL(location, `http://localhost${url}`).pathname;
      res = await app.inject({ method: 'GET', url });
    }
    assert.equal(res.statusCode, 200, `${url}: ${res.statusCode}`);
    assert.match(String(res.headers['content-type']), /text\/html/);
    assert.match(res.body, /<html/i);
  });
});
