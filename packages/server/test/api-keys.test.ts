import assert from 'node:assert/strict';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { backends, call, makeTestApp, newAccount, type Backend, type TestApp } from './helpers.js';

// docs/api.md "API keys": creation (snake_case answer), listing (camelCase, never the key), the
// 10-key limit, deletion (404 for unknown/foreign, 401 at once afterwards), names of 1 to 100
// characters, plan gating, and SHA-256-only storage. Storage matters here, so both backends.

const KEY_RE = /^rmpk_[0-9a-f]{64}$/;
const CREATED_FIELDS = ['created_at', 'id', 'key', 'key_prefix', 'name'];
const LIST_FIELDS = ['createdAt', 'id', 'keyPrefix', 'lastUsedAt', 'name'];
const UNAUTHORIZED = { error: 'Invalid or missing API key' };
const NOT_FOUND = { error: 'API key not found' };
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const isIso = (v: unknown) => typeof v === 'string' && new Date(v).toISOString() === v;

/** Every string found anywhere inside a JSON value. */
function strings(v: unknown): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(strings);
  if (v && typeof v === 'object') return Object.values(v).flatMap(strings);
  return [];
}

// One app per backend, built one after the other: two PGlite/Fastify start-ups at once can starve
// each other's plugin start-up timers.
const apps: [Backend, TestApp][] = [];
for (const backend of await backends()) apps.push([backend, await makeTestApp(backend)]);

for (const [backend, t] of apps) {
  describe(`API keys on ${backend}`, () => {
    const app = t.app;

    async function createKey(key: string, name = 'ci') {
      const r = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body as { id: string; name: string; key: string; key_prefix: string; created_at: string };
    }
    async function list(key: string) {
      const r = await call(app, 'GET', '/api/settings/api-keys', { key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body as { id: string; name: string; keyPrefix: string; lastUsedAt: string | null; createdAt: string }[];
    }
    async function login(email: string, password: string) {
      const r = await call(app, 'POST', '/api/auth/login', { body: { email, password } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const c = r.cookies.find((x) => x.name === 'rampart_session');
      assert.ok(c, 'login sets the session cookie');
      return `rampart_session=${c.value}`;
    }

    test('POST answers 201 with exactly id, name, key, key_prefix, created_at', async () => {
      const { key, accountId } = await newAccount(app);
      const r = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'deploy bot' } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      assert.deepEqual(Object.keys(r.body).sort(), CREATED_FIELDS);
      assert.equal(typeof r.body.id, 'string');
      assert.ok(r.body.id.length > 0);
      assert.equal(r.body.name, 'deploy bot');
      assert.match(r.body.key, KEY_RE);
      assert.equal(r.body.key.length, 69);
      assert.equal(r.body.key_prefix, r.body.key.slice(0, 12));
      assert.ok(isIso(r.body.created_at), `created_at is ISO 8601: ${r.body.created_at}`);
      // The new key authenticates as the same account.
      const acct = await call(app, 'GET', '/api/account', { key: r.body.key });
      assert.equal(acct.status, 200);
      assert.equal(acct.body.id, accountId);
    });

    test('keys are random: two creations give different keys and ids', async () => {
      const { key } = await newAccount(app);
      const a = await createKey(key, 'a');
      const b = await createKey(key, 'b');
      assert.notEqual(a.key, b.key);
      assert.notEqual(a.id, b.id);
      assert.notEqual(a.key, key);
    });

    test('GET lists camelCase fields, never the full key; lastUsedAt is null until the key is used', async () => {
      const { key } = await newAccount(app);
      const created = await createKey(key, 'unused');
      const items = await list(key);
      assert.equal(items.length, 2);
      for (const item of items) assert.deepEqual(Object.keys(item).sort(), LIST_FIELDS);
      // Keys made within the same instant have no defined order; find them by id.
      const first = items.find((i) => i.id !== created.id);
      const second = items.find((i) => i.id === created.id);
      // The admin-created key was just used for this request; the new one never was.
      assert.equal(first!.name, 'default');
      assert.equal(first!.keyPrefix, key.slice(0, 12));
      assert.ok(isIso(first!.lastUsedAt), 'a used key has lastUsedAt');
      assert.ok(isIso(first!.createdAt));
      assert.equal(second!.id, created.id);
      assert.equal(second!.name, 'unused');
      assert.equal(second!.keyPrefix, created.key_prefix);
      assert.equal(second!.lastUsedAt, null);
      assert.equal(second!.createdAt, created.created_at);
      // No field contains a full key, in any form.
      for (const s of strings(items)) {
        assert.ok(!s.includes(created.key), 'the new key is never listed');
        assert.ok(!s.includes(key), 'the first key is never listed');
      }
      const raw = JSON.stringify(items);
      assert.ok(!raw.includes(created.key.slice(12)) && !raw.includes(key.slice(12)), 'not even the secret part of a key');

      // After one use lastUsedAt is set.
      assert.equal((await call(app, 'GET', '/api/servers', { key: created.key })).status, 200);
      const after = (await list(key)).find((i) => i.id === created.id)!;
      assert.ok(isIso(after.lastUsedAt), `lastUsedAt set after use: ${after.lastUsedAt}`);
      assert.equal(after.lastUsedAt, t.clock.now().toISOString());
    });

    test('an account holds at most 10 keys: the 11th gives 403 "Maximum 10 API keys allowed"', async () => {
      const { key } = await newAccount(app);
      assert.equal((await list(key)).length, 1, 'the admin-created account starts with one key');
      for (let i = 2; i <= 10; i++) await createKey(key, `key ${i}`);
      assert.equal((await list(key)).length, 10);
      const r = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'eleventh' } });
      assert.equal(r.status, 403);
      assert.deepEqual(r.body, { error: 'Maximum 10 API keys allowed' });
      const items = await list(key);
      assert.equal(items.length, 10, 'the refused key was not stored');
      assert.ok(!items.some((i) => i.name === 'eleventh'));
      // Deleting one frees a slot.
      const victim = items.find((i) => i.name === 'key 5')!;
      const del = await call(app, 'DELETE', `/api/settings/api-keys?id=${victim.id}`, { key });
      assert.equal(del.status, 200);
      await createKey(key, 'replacement');
      const again = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'eleventh' } });
      assert.equal(again.status, 403);
      assert.deepEqual(again.body, { error: 'Maximum 10 API keys allowed' });
    });

    test('the limit holds under concurrent creations', async () => {
      const { key } = await newAccount(app);
      for (let i = 2; i <= 9; i++) await createKey(key, `key ${i}`);
      const results = await Promise.all(Array.from({ length: 5 }, (_, i) => call(app, 'POST', '/api/settings/api-keys', { key, body: { name: `race ${i}` } })));
      assert.deepEqual(results.map((r) => r.status).sort(), [201, 403, 403, 403, 403]);
      for (const r of results.filter((x) => x.status === 403)) assert.deepEqual(r.body, { error: 'Maximum 10 API keys allowed' });
      assert.equal((await list(key)).length, 10);
    });

    test('DELETE of an unknown, malformed or foreign key id gives 404 "API key not found"', async () => {
      const a = await newAccount(app);
      const b = await newAccount(app);
      const aKeyId = (await list(a.key))[0]!.id;
      for (const id of [randomUUID(), 'not-a-uuid', aKeyId]) {
        const r = await call(app, 'DELETE', `/api/settings/api-keys?id=${encodeURIComponent(id)}`, { key: b.key });
        assert.equal(r.status, 404, `id ${id}: ${JSON.stringify(r.body)}`);
        assert.deepEqual(r.body, NOT_FOUND);
      }
      // The foreign key survived and still works; b's own key is untouched too.
      assert.equal((await list(a.key)).length, 1);
      assert.equal((await call(app, 'GET', '/api/account', { key: a.key })).status, 200);
      assert.equal((await list(b.key)).length, 1);
    });

    test('DELETE answers {success:true}; the deleted key is refused at once; servers and domains stay', async () => {
      const { key } = await newAccount(app);
      const doomed = await createKey(key, 'doomed');
      // Resources created through the key that will be deleted.
      const srv = await call(app, 'POST', '/api/servers', { key: doomed.key, body: { name: 'edge' } });
      assert.equal(srv.status, 201);
      const dom = await call(app, 'POST', '/api/domains', {
        key: doomed.key,
        body: { domain: 'keys.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [srv.body.id], sslEnabled: true },
      });
      assert.equal(dom.status, 201, JSON.stringify(dom.body));
      assert.equal((await call(app, 'GET', '/api/account', { key: doomed.key })).status, 200);
      const serversBefore = (await call(app, 'GET', '/api/servers', { key })).body;
      const domainsBefore = (await call(app, 'GET', '/api/domains', { key })).body;
      const changesBefore = t.changed.length;

      const del = await call(app, 'DELETE', `/api/settings/api-keys?id=${doomed.id}`, { key });
      assert.equal(del.status, 200);
      assert.deepEqual(del.body, { success: true });

      for (const [method, url] of [
        ['GET', '/api/account'],
        ['GET', '/api/settings/api-keys'],
        ['POST', '/api/servers'],
      ] as const) {
        const r = await call(app, method, url, { key: doomed.key, ...(method === 'POST' ? { body: { name: 'x' } } : {}) });
        assert.equal(r.status, 401, `${method} ${url}`);
        assert.deepEqual(r.body, UNAUTHORIZED);
      }
      assert.deepEqual((await list(key)).map((i) => i.id).includes(doomed.id), false);
      assert.deepEqual((await call(app, 'GET', '/api/servers', { key })).body, serversBefore, 'servers untouched, revisions included');
      assert.deepEqual((await call(app, 'GET', '/api/domains', { key })).body, domainsBefore, 'domains untouched');
      assert.equal(t.changed.length, changesBefore, 'no configuration push');
      // Deleting it again: it no longer exists.
      const again = await call(app, 'DELETE', `/api/settings/api-keys?id=${doomed.id}`, { key });
      assert.equal(again.status, 404);
      assert.deepEqual(again.body, NOT_FOUND);
    });

    test('a key can create further keys, which work in turn', async () => {
      const { key, accountId } = await newAccount(app);
      const second = await createKey(key, 'second');
      const third = await createKey(second.key, 'third');
      assert.match(third.key, KEY_RE);
      const acct = await call(app, 'GET', '/api/account', { key: third.key });
      assert.equal(acct.status, 200);
      assert.equal(acct.body.id, accountId);
      assert.deepEqual((await list(third.key)).map((i) => i.name).sort(), ['default', 'second', 'third']);
    });

    test('a free-plan account gets 403 on key creation and has no keys', async () => {
      const password = 'free-plan-pass-1';
      const { email, key } = await newAccount(app, 'free', 0, password);
      assert.equal(key, null, 'no key for a free account');
      const cookie = await login(email, password);
      const r = await call(app, 'POST', '/api/settings/api-keys', { cookie, body: { name: 'nope' } });
      assert.equal(r.status, 403, JSON.stringify(r.body));
      assert.deepEqual(Object.keys(r.body), ['error']);
      assert.equal(typeof r.body.error, 'string');
      const items = await call(app, 'GET', '/api/settings/api-keys', { cookie });
      assert.equal(items.status, 200);
      assert.deepEqual(items.body, []);
    });

    test('a pro account signed in with a session cookie can create keys', async () => {
      const password = 'pro-plan-pass-1';
      const { email } = await newAccount(app, 'pro', 100, password);
      const cookie = await login(email, password);
      const r = await call(app, 'POST', '/api/settings/api-keys', { cookie, body: { name: 'from browser' } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      assert.deepEqual(Object.keys(r.body).sort(), CREATED_FIELDS);
    });

    test('invalid names give 400 naming the field name, and nothing is stored', async () => {
      const { key } = await newAccount(app);
      const before = await list(key);
      const bodies: [string, unknown][] = [
        ['empty name', { name: '' }],
        ['101 characters', { name: 'x'.repeat(101) }],
        ['missing name', {}],
        ['number', { name: 5 }],
        ['null', { name: null }],
        ['array', { name: ['a'] }],
        ['object', { name: { first: 'a' } }],
        ['boolean', { name: true }],
      ];
      for (const [label, body] of bodies) {
        const r = await call(app, 'POST', '/api/settings/api-keys', { key, body });
        assert.equal(r.status, 400, `${label}: ${JSON.stringify(r.body)}`);
        assert.deepEqual(Object.keys(r.body), ['error'], label);
        assert.match(r.body.error, /^name: /, `${label}: the message names the field: ${r.body.error}`);
      }
      const unknown = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'ok', account_id: randomUUID() } });
      assert.equal(unknown.status, 400);
      assert.match(unknown.body.error, /account_id/);
      assert.deepEqual(await list(key), before, 'nothing stored on 400');
      // Boundaries: 1 and 100 characters are fine.
      assert.equal((await createKey(key, 'x')).name, 'x');
      assert.equal((await createKey(key, 'y'.repeat(100))).name, 'y'.repeat(100));
    });

    test('the database stores only the SHA-256 of each key', async () => {
      const { key, accountId } = await newAccount(app);
      const created = await createKey(key, 'hashed');
      const rows = await t.database.db.selectFrom('api_keys').selectAll().where('account_id', '=', accountId).execute();
      assert.equal(rows.length, 2);
      for (const plaintext of [key, created.key]) {
        const row = rows.find((r) => r.key_hash === sha256(plaintext));
        assert.ok(row, 'key_hash is the SHA-256 hex of the key');
        assert.match(row.key_hash, /^[0-9a-f]{64}$/);
        assert.equal(row.key_prefix, plaintext.slice(0, 12));
        for (const [column, value] of Object.entries(row)) {
          const text = value instanceof Date ? value.toISOString() : String(value);
          assert.notEqual(text, plaintext, `column ${column} holds the plaintext`);
          assert.ok(!text.includes(plaintext.slice(12)), `column ${column} holds the secret part of the key`);
        }
      }
      // Presenting the stored hash itself as a key does not authenticate.
      const r = await call(app, 'GET', '/api/account', { key: sha256(created.key) });
      assert.equal(r.status, 401);
      assert.deepEqual(r.body, UNAUTHORIZED);
      // A well-formed key that was never issued is refused the same way.
      const forged = await call(app, 'GET', '/api/account', { key: `rmpk_${randomBytes(32).toString('hex')}` });
      assert.equal(forged.status, 401);
      assert.deepEqual(forged.body, UNAUTHORIZED);
    });
  });
}
