import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, describe, mock, test } from 'node:test';
import pg from 'pg';
import { waitFor } from '../../../test/support/processes.js';
import { credentialStore } from '../src/services/credentials.js';
import { InProcessBus, PostgresBus, type BusMessage } from '../src/bus.js';
import { credentialCache, CredentialCache, type CachedCredential } from '../src/credential-cache.js';
import { credentialMessages, encodeCredentialMessage, parseCredentialMessage, type CredentialMessage } from '../src/credential-messages.js';
import { dropSchema } from '../src/db/database.js';
import { startServer, type RunningServer } from '../src/serve.js';
import { ADMIN_TOKEN, call, makeTestApp, newAccount, postgresUrl } from './helpers.js';

// docs/architecture.md "Several control-plane processes" and docs/api.md "Conventions": API keys
// and sessions are resolved from an in-process cache, so the management API does not ask the
// database on every request; a deleted key, an ended session and a frozen or unfrozen account
// still take effect at once on every process, through credential messages on the change bus.

const PASSWORD = 'the right password';
const sessionCookie = (r: { cookies: { name: string; value: string }[] }) => `rampart_session=${r.cookies.find((c) => c.name === 'rampart_session')!.value}`;

describe('credential cache, one process', async () => {
  const t = await makeTestApp();
  const app = t.app;

  test('the second request with the same key or session does not ask the database', async (tc) => {
    const findKey = tc.mock.method(credentialStore, 'findKey');
    const findSession = tc.mock.method(credentialStore, 'findSession');
    const touchKey = tc.mock.method(credentialStore, 'touchKey');
    const { key, email } = await newAccount(app, 'pro', 100, PASSWORD);
    findKey.mock.resetCalls();
    for (let i = 0; i < 5; i++) assert.equal((await call(app, 'GET', '/api/settings/api-keys', { key })).status, 200);
    assert.equal(findKey.mock.callCount(), 1, 'one lookup for five requests');
    assert.equal(touchKey.mock.callCount(), 1, 'lastUsedAt written once, not on every request');

    const login = await call(app, 'POST', '/api/auth/login', { body: { email, password: PASSWORD } });
    assert.equal(login.status, 200);
    const cookie = sessionCookie(login);
    for (let i = 0; i < 5; i++) assert.equal((await call(app, 'GET', '/api/account', { cookie })).status, 200);
    assert.equal(findSession.mock.callCount(), 1, 'one lookup for five requests');

    // An unknown key is never cached: each attempt is looked up (and refused).
    const unknown = `rmpk_${randomBytes(32).toString('hex')}`;
    findKey.mock.resetCalls();
    for (let i = 0; i < 3; i++) assert.equal((await call(app, 'GET', '/api/account', { key: unknown })).status, 401);
    assert.equal(findKey.mock.callCount(), 3);
  });

  test('a cached key that is deleted fails on the very next request', async () => {
    const { key } = await newAccount(app, 'pro');
    const created = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'doomed' } });
    assert.equal(created.status, 201);
    const doomed = created.body.key as string;
    assert.equal((await call(app, 'GET', '/api/account', { key: doomed })).status, 200);
    assert.equal((await call(app, 'GET', '/api/account', { key: doomed })).status, 200, 'now cached');
    assert.equal((await call(app, 'DELETE', `/api/settings/api-keys?id=${created.body.id}`, { key })).status, 200);
    assert.deepEqual((await call(app, 'GET', '/api/account', { key: doomed })).body, { error: 'Invalid or missing API key' });
    assert.equal((await call(app, 'GET', '/api/account', { key })).status, 200, 'the other key of the account is untouched');
  });

  test('a cached session that logs out fails on the very next request; other sessions of the account are untouched', async () => {
    const { email } = await newAccount(app, 'pro', 100, PASSWORD);
    const one = sessionCookie(await call(app, 'POST', '/api/auth/login', { body: { email, password: PASSWORD } }));
    const two = sessionCookie(await call(app, 'POST', '/api/auth/login', { body: { email, password: PASSWORD } }));
    for (const cookie of [one, two, one, two]) assert.equal((await call(app, 'GET', '/api/account', { cookie })).status, 200);
    assert.equal((await call(app, 'POST', '/api/auth/logout', { cookie: one })).status, 200);
    assert.equal((await call(app, 'GET', '/api/account', { cookie: one })).status, 401);
    assert.equal((await call(app, 'GET', '/api/account', { cookie: two })).status, 200);
  });

  test('freezing and unfreezing a cached account take effect on the very next request', async () => {
    const { key, accountId } = await newAccount(app, 'pro', 0);
    assert.equal((await call(app, 'POST', '/api/servers', { key, body: { name: 'before' } })).status, 201);
    const charged = await call(app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId } });
    assert.equal(charged.body.results[0].state, 'frozen');
    const refused = await call(app, 'POST', '/api/servers', { key, body: { name: 'while frozen' } });
    assert.equal(refused.status, 403, JSON.stringify(refused.body));

    const dep = await call(app, 'POST', '/api/billing/deposits', { key, body: { amount: 29 } });
    assert.equal(dep.status, 201);
    const confirmed = await call(app, 'POST', `/admin/deposits/${dep.body.id}/confirm`, { admin: true, body: {} });
    assert.equal(confirmed.body.account.state, 'active');
    assert.equal((await call(app, 'POST', '/api/servers', { key, body: { name: 'after' } })).status, 201);
  });

  test('the cache is a safety net of 60 s at most; a session expiring meanwhile is refused', async (tc) => {
    const findKey = tc.mock.method(credentialStore, 'findKey');
    const { key, email } = await newAccount(app, 'pro', 100, PASSWORD);
    await call(app, 'GET', '/api/account', { key });
    findKey.mock.resetCalls();
    t.clock.advance(59_000);
    await call(app, 'GET', '/api/account', { key });
    assert.equal(findKey.mock.callCount(), 0, 'within 60 s: cached');
    t.clock.advance(1_000);
    await call(app, 'GET', '/api/account', { key });
    assert.equal(findKey.mock.callCount(), 1, 'after 60 s: read again');

    const cookie = sessionCookie(await call(app, 'POST', '/api/auth/login', { body: { email, password: PASSWORD } }));
    t.clock.advance(30 * 86_400_000 - 10_000); // 10 s before the session's end
    assert.equal((await call(app, 'GET', '/api/account', { cookie })).status, 200);
    t.clock.advance(20_000); // cached 20 s ago, expired 10 s ago
    assert.equal((await call(app, 'GET', '/api/account', { cookie })).status, 401);
  });

  test('GET /api/waf still shows a rule change at once with a cached key', async () => {
    const { key } = await newAccount(app, 'pro');
    assert.deepEqual((await call(app, 'GET', '/api/waf', { key })).body, []);
    const rule = await call(app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '192.0.2.50' } });
    assert.equal(rule.status, 201);
    assert.deepEqual(
      (await call(app, 'GET', '/api/waf', { key })).body.map((r: { id: string }) => r.id),
      [rule.body.id],
    );
    assert.equal((await call(app, 'DELETE', `/api/waf/${rule.body.id}`, { key })).status, 200);
    assert.deepEqual((await call(app, 'GET', '/api/waf', { key })).body, []);
  });

  test('while the bus is not listening nothing is cached: every request reads the database', async (tc) => {
    let live = true;
    const published: CredentialMessage[] = [];
    // A bus of this one process: what is published is delivered here, acknowledgements included.
    const cache = credentialCache(t.ctx);
    const deliver = (m: CredentialMessage) => cache.receive(m, deliver);
    t.ctx.credentialBus = {
      publish: async (m) => {
        published.push(m);
        deliver(m);
      },
      live: () => live,
    };
    try {
      const { key } = await newAccount(app, 'pro');
      const created = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'gap' } });
      const other = created.body.key as string;
      const findKey = tc.mock.method(credentialStore, 'findKey');
      await call(app, 'GET', '/api/account', { key: other });
      await call(app, 'GET', '/api/account', { key: other });
      assert.equal(findKey.mock.callCount(), 1, 'cached while live');

      live = false;
      await call(app, 'GET', '/api/account', { key: other });
      await call(app, 'GET', '/api/account', { key: other });
      assert.equal(findKey.mock.callCount(), 3, 'read every time while not live');
      // A deletion whose message could not reach this process (here: straight in the database).
      await t.ctx.db.deleteFrom('api_keys').where('id', '=', created.body.id).execute();
      assert.equal((await call(app, 'GET', '/api/account', { key: other })).status, 401);

      live = true;
      await call(app, 'GET', '/api/account', { key });
      await call(app, 'GET', '/api/account', { key });
      assert.equal(findKey.mock.callCount(), 5, 'nothing from before the gap: read once, then cached again');

      // A deletion through the API publishes key-revoked (and is dropped here at once).
      const third = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'third' } });
      assert.equal((await call(app, 'DELETE', `/api/settings/api-keys?id=${third.body.id}`, { key })).status, 200);
      assert.deepEqual(
        published.map((m) => ({ ...m, nonce: undefined })),
        [{ kind: 'key-revoked', keyIds: [third.body.id], nonce: undefined }],
      );
    } finally {
      delete t.ctx.credentialBus;
    }
  });

  test('lastUsedAt is still refreshed once a minute while the key is cached', async () => {
    const { key } = await newAccount(app, 'pro');
    await call(app, 'GET', '/api/account', { key });
    const first = (await call(app, 'GET', '/api/settings/api-keys', { key })).body[0].lastUsedAt;
    t.clock.advance(61_000);
    await call(app, 'GET', '/api/account', { key });
    const second = (await call(app, 'GET', '/api/settings/api-keys', { key })).body[0].lastUsedAt;
    assert.equal(second, t.clock.now().toISOString());
    assert.notEqual(first, second);
  });
});

describe('CredentialCache', () => {
  const entry = (over: Partial<CachedCredential> = {}): CachedCredential => ({ kind: 'key', accountId: randomUUID(), plan: 'pro', state: 'active', keyId: randomUUID(), ...over });
  const msg = (change: Parameters<typeof credentialMessages>[0]) => credentialMessages(change)[0]!;

  test('bounded: the least recently used entries go first', () => {
    const cache = new CredentialCache({ maxEntries: 3 });
    for (const k of ['a', 'b', 'c']) cache.set(k, entry(), 0, cache.generation);
    assert.ok(cache.get('a', 1)); // a is now the most recently used
    cache.set('d', entry(), 1, cache.generation);
    assert.equal(cache.size, 3);
    assert.equal(cache.get('b', 1), undefined, 'b, least recently used, went');
    for (const k of ['a', 'c', 'd']) assert.ok(cache.get(k, 1), k);
    const big = new CredentialCache();
    assert.equal(big.maxEntries, 10_000);
    assert.equal(big.ttlMs, 60_000);
    for (let i = 0; i < 12_000; i++) big.set(`k${i}`, entry(), 0, big.generation);
    assert.equal(big.size, 10_000);
  });

  test('a lookup that began before an invalidation does not store what it read', () => {
    const cache = new CredentialCache();
    const e = entry();
    const generation = cache.generation; // the lookup begins
    cache.apply(msg({ kind: 'key-revoked', keyIds: [e.keyId!] })); // the key is revoked meanwhile
    cache.set('k', e, 0, generation); // the lookup ends with what it read before
    assert.equal(cache.get('k', 0), undefined);
  });

  test('each message drops exactly what it names', () => {
    const cache = new CredentialCache();
    const account = randomUUID();
    const tokenHash = randomBytes(32).toString('hex');
    const key = entry({ accountId: account });
    const session = entry({ kind: 'session', accountId: account, keyId: undefined, tokenHash, expiresMs: 1e15 });
    const otherSession = entry({ kind: 'session', accountId: account, keyId: undefined, tokenHash: randomBytes(32).toString('hex'), expiresMs: 1e15 });
    const stranger = entry();
    const fill = () => {
      for (const [k, v] of [
        ['key', key],
        ['session', session],
        ['other', otherSession],
        ['stranger', stranger],
      ] as const)
        cache.set(k, v, 0, cache.generation);
    };
    const present = () => ['key', 'session', 'other', 'stranger'].filter((k) => cache.get(k, 0));

    fill();
    cache.apply(msg({ kind: 'key-revoked', keyIds: [key.keyId!] }));
    assert.deepEqual(present(), ['session', 'other', 'stranger']);
    fill();
    cache.apply(msg({ kind: 'session-ended', tokenHashes: [tokenHash] }));
    assert.deepEqual(present(), ['key', 'other', 'stranger']);
    fill();
    cache.apply(msg({ kind: 'session-ended', accountIds: [account] }));
    assert.deepEqual(present(), ['key', 'stranger']);
    fill();
    cache.apply(msg({ kind: 'account-changed', accountIds: [account] }));
    assert.deepEqual(present(), ['stranger']);
  });

  test('credential messages: long lists are split, every payload is checked on receipt', () => {
    const many = Array.from({ length: 250 }, () => randomUUID());
    const parts = credentialMessages({ kind: 'account-changed', accountIds: many });
    assert.equal(parts.length, 3);
    assert.deepEqual(
      parts.flatMap((p) => ('accountIds' in p ? p.accountIds : [])),
      many,
    );
    assert.equal(new Set(parts.map((p) => p.nonce)).size, 3, 'each its own nonce');
    for (const p of parts) {
      const text = encodeCredentialMessage(p);
      assert.ok(Buffer.byteLength(text) < 8000);
      assert.deepEqual(parseCredentialMessage(text), p);
    }
    assert.deepEqual(credentialMessages({ kind: 'key-revoked', keyIds: [] }), []);

    const nonce = '0123456789abcdef';
    const id = randomUUID();
    const hash = 'a'.repeat(64);
    for (const good of [
      { kind: 'key-revoked', keyIds: [id], nonce },
      { kind: 'session-ended', tokenHashes: [hash], nonce },
      { kind: 'session-ended', accountIds: [id], nonce },
      { kind: 'account-changed', accountIds: [id], nonce },
    ]) {
      assert.deepEqual(parseCredentialMessage(JSON.stringify(good)), good);
    }
    for (const bad of [
      'not json',
      '[]',
      'null',
      { kind: 'servers-changed', ids: [id] },
      { kind: 'key-revoked', keyIds: [id] },
      { kind: 'key-revoked', keyIds: [id], nonce: 'xyz' },
      { kind: 'key-revoked', keyIds: [], nonce },
      { kind: 'key-revoked', keyIds: ['not-a-uuid'], nonce },
      { kind: 'key-revoked', keyIds: [id], nonce, extra: 1 },
      { kind: 'key-revoked', accountIds: [id], nonce },
      { kind: 'session-ended', tokenHashes: ['A'.repeat(64)], nonce },
      { kind: 'session-ended', tokenHashes: [hash], accountIds: [id], nonce },
      { kind: 'account-changed', accountIds: Array.from({ length: 101 }, () => id), nonce },
      { kind: 'account-frozen', accountIds: [id], nonce },
    ]) {
      assert.equal(parseCredentialMessage(typeof bad === 'string' ? bad : JSON.stringify(bad)), null, JSON.stringify(bad));
    }
  });

  test('the in-process bus hands credential messages to the credentials handler, not the hub', async () => {
    const bus = new InProcessBus();
    const hub: BusMessage[] = [];
    const creds: CredentialMessage[] = [];
    bus.subscribe({ message: (m) => hub.push(m), credentials: (m) => creds.push(m), resync: () => undefined });
    const m = msg({ kind: 'key-revoked', keyIds: [randomUUID()] });
    await bus.publish(m);
    assert.deepEqual(creds, [m]);
    assert.notEqual(creds[0], m, 'a copy');
    assert.deepEqual(hub, []);
  });
});

const url = await postgresUrl();

describe('credential cache across two processes', { skip: url ? false : 'no PostgreSQL answers (set RAMPART_TEST_DATABASE_URL)' }, async () => {
  const schema = `t_cred_${randomBytes(5).toString('hex')}`;
  // Two control-plane processes on one database (one schema), one after the other (migrations).
  const a = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false });
  const b = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false });
  after(async () => {
    await Promise.all([a.close(), b.close()]);
    await dropSchema(url!, schema);
  });

  /** A real HTTP request, over a socket. */
  async function http(srv: RunningServer, method: string, path: string, opts: { key?: string; cookie?: string; admin?: boolean; body?: unknown } = {}) {
    const headers: Record<string, string> = {};
    if (opts.key) headers['x-api-key'] = opts.key;
    if (opts.cookie) headers.cookie = opts.cookie;
    if (opts.admin) headers.authorization = `Bearer ${ADMIN_TOKEN}`;
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${srv.url}${path}`, { method, headers, ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, setCookie: res.headers.get('set-cookie') };
  }

  test('a key deleted through A is refused by B on the very next request; B had it cached', async (tc) => {
    const { key } = await newAccount(a.app, 'pro');
    const created = await http(a, 'POST', '/api/settings/api-keys', { key, body: { name: 'doomed' } });
    assert.equal(created.status, 201);
    const doomed = created.body.key as string;
    const findKey = tc.mock.method(credentialStore, 'findKey');
    assert.equal((await http(b, 'GET', '/api/settings/api-keys', { key: doomed })).status, 200);
    assert.equal((await http(b, 'GET', '/api/settings/api-keys', { key: doomed })).status, 200);
    assert.equal((await http(a, 'GET', '/api/settings/api-keys', { key: doomed })).status, 200);
    assert.equal((await http(a, 'GET', '/api/settings/api-keys', { key: doomed })).status, 200);
    assert.equal(findKey.mock.callCount(), 2, 'one lookup per process for four requests');

    assert.equal((await http(a, 'DELETE', `/api/settings/api-keys?id=${created.body.id}`, { key })).status, 200);
    assert.deepEqual(await http(b, 'GET', '/api/settings/api-keys', { key: doomed }), { status: 401, body: { error: 'Invalid or missing API key' }, setCookie: null });
    assert.equal((await http(a, 'GET', '/api/settings/api-keys', { key: doomed })).status, 401);
    assert.equal((await http(b, 'GET', '/api/settings/api-keys', { key })).status, 200, 'the account keeps its other key');
  });

  test("A answers the deletion only once B has dropped the key (B's acknowledgement)", async () => {
    const { key } = await newAccount(a.app, 'pro');
    const created = await http(a, 'POST', '/api/settings/api-keys', { key, body: { name: 'held' } });
    const doomed = created.body.key as string;
    assert.equal((await http(b, 'GET', '/api/account', { key: doomed })).status, 200, 'cached on B');

    // B receives the message but holds it back.
    const cache = credentialCache(b.ctx);
    const held: (() => void)[] = [];
    const receive = cache.receive.bind(cache);
    cache.receive = (m, ack) => (m.kind === 'key-revoked' ? void held.push(() => receive(m, ack)) : receive(m, ack));
    try {
      let answered = false;
      const deletion = http(a, 'DELETE', `/api/settings/api-keys?id=${created.body.id}`, { key }).then((r) => {
        answered = true;
        return r;
      });
      await waitFor(() => held.length === 1, 'the message at B', 10_000, 1);
      assert.equal(answered, false, 'A waits for B');
      assert.equal((await http(b, 'GET', '/api/account', { key: doomed })).status, 200, 'B has not applied it yet');
      held[0]!();
      assert.equal((await deletion).status, 200);
      assert.equal((await http(b, 'GET', '/api/account', { key: doomed })).status, 401);
    } finally {
      delete (cache as { receive?: unknown }).receive;
    }
  });

  test('a session logged out through A is refused by B on the very next request', async () => {
    const { email } = await newAccount(a.app, 'pro', 100, PASSWORD);
    const login = await http(a, 'POST', '/api/auth/login', { body: { email, password: PASSWORD } });
    assert.equal(login.status, 200);
    const cookie = login.setCookie!.split(';')[0]!;
    assert.match(cookie, /^rampart_session=/);
    assert.equal((await http(b, 'GET', '/api/account', { cookie })).status, 200);
    assert.equal((await http(b, 'GET', '/api/account', { cookie })).status, 200);
    assert.equal((await http(a, 'POST', '/api/auth/logout', { cookie })).status, 200);
    assert.equal((await http(b, 'GET', '/api/account', { cookie })).status, 401);
  });

  test('an account frozen through A is frozen on B at once, and active again at once', async () => {
    const { key, accountId } = await newAccount(a.app, 'pro', 0);
    assert.equal((await http(b, 'POST', '/api/servers', { key, body: { name: 'before' } })).status, 201);
    const charged = await http(a, 'POST', '/admin/billing/charge', { admin: true, body: { accountId } });
    assert.equal(charged.body.results[0].state, 'frozen');
    assert.equal((await http(b, 'POST', '/api/servers', { key, body: { name: 'frozen' } })).status, 403);

    const dep = await http(b, 'POST', '/api/billing/deposits', { key, body: { amount: 29 } });
    assert.equal(dep.status, 201);
    assert.equal((await http(a, 'POST', `/admin/deposits/${dep.body.id}/confirm`, { admin: true, body: {} })).body.account.state, 'active');
    assert.equal((await http(b, 'POST', '/api/servers', { key, body: { name: 'after' } })).status, 201);
  });

  test("after B's listening connection was lost and reopened, B reads every credential again", async (tc) => {
    const { key } = await newAccount(a.app, 'pro');
    assert.equal((await http(b, 'GET', '/api/account', { key })).status, 200, 'cached on B');
    const bus = b.bus as PostgresBus;
    assert.ok(bus instanceof PostgresBus);
    const pid = bus.listenerPid;
    assert.ok(pid);
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await admin.query('select pg_terminate_backend($1)', [pid]);
    } finally {
      await admin.end();
    }
    await waitFor(() => bus.listenerPid !== undefined && bus.listenerPid !== pid, 'B listening again', 10_000, 5);
    const findKey = tc.mock.method(credentialStore, 'findKey');
    assert.equal((await http(b, 'GET', '/api/account', { key })).status, 200);
    assert.equal(findKey.mock.callCount(), 1, 'read again: messages may have been lost meanwhile');
    assert.equal((await http(b, 'GET', '/api/account', { key })).status, 200);
    assert.equal(findKey.mock.callCount(), 1, 'and cached again');
  });
});

mock.restoreAll();
