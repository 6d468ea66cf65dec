import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md "Sign-up": RAMPART_SIGNUP decides who may register. closed (the default): only the
// operator creates accounts; invite: a single-use invitation the operator issued (stored as
// SHA-256) is needed; open: anyone. GET /api/auth/signup tells the dashboard which.

const PASSWORD = 'a good password';
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const register = (app: Parameters<typeof call>[0], body: Record<string, unknown>) => call(app, 'POST', '/api/auth/register', { body: { password: PASSWORD, ...body } });

describe('sign-up', () => {
  test('closed (the default): register is a 403 that says so, nothing is created; the operator still creates accounts', async () => {
    const t = await makeTestApp('pglite', { signup: undefined });
    assert.deepEqual((await call(t.app, 'GET', '/api/auth/signup')).body, { signup: 'closed' });
    const r = await register(t.app, { email: 'walk-in@example.com' });
    assert.equal(r.status, 403);
    assert.deepEqual(r.body, { error: 'Sign-up is closed on this server: its operator creates accounts' });
    assert.equal(r.cookies.length, 0, 'no session');
    assert.equal((await t.ctx.db.selectFrom('accounts').select('id').where('email', '=', 'walk-in@example.com').execute()).length, 0);
    // An invitation does not open a closed server.
    const inv = await call(t.app, 'POST', '/admin/invitations', { admin: true, body: {} });
    assert.equal((await register(t.app, { email: 'walk-in@example.com', invitation: inv.body.invitation })).status, 403);

    const { email } = await newAccount(t.app, 'free', 0, PASSWORD);
    assert.equal((await call(t.app, 'POST', '/api/auth/login', { body: { email, password: PASSWORD } })).status, 200);
  });

  test('invite: an invitation from the operator registers one account, once; stored hashed', async () => {
    const t = await makeTestApp('pglite', { signup: 'invite' });
    assert.deepEqual((await call(t.app, 'GET', '/api/auth/signup')).body, { signup: 'invite' });
    const none = await register(t.app, { email: 'a@example.com' });
    assert.deepEqual([none.status, none.body], [403, { error: 'invitation: required, sign-up on this server is by invitation only' }]);
    const bogus = await register(t.app, { email: 'a@example.com', invitation: 'rmpi_not-an-invitation' });
    assert.deepEqual([bogus.status, bogus.body], [403, { error: 'invitation: unknown, already used, expired or for another email' }]);

    assert.equal((await call(t.app, 'POST', '/admin/invitations', { body: {} })).status, 401, 'the operator token is needed');
    const inv = await call(t.app, 'POST', '/admin/invitations', { admin: true, body: {} });
    assert.equal(inv.status, 201, JSON.stringify(inv.body));
    assert.match(inv.body.invitation, /^rmpi_[0-9a-f]{64}$/);
    assert.equal(inv.body.email, null);
    const row = await t.ctx.db.selectFrom('invitations').selectAll().where('id', '=', inv.body.id).executeTakeFirstOrThrow();
    assert.equal(row.token_hash, sha256(inv.body.invitation), 'stored as SHA-256');
    assert.ok(!JSON.stringify(row).includes(inv.body.invitation), 'the token itself is not stored');

    // A registration that fails (the email is taken) does not use the invitation up.
    const taken = await newAccount(t.app, 'free', 0, PASSWORD);
    assert.equal((await register(t.app, { email: taken.email, invitation: inv.body.invitation })).status, 409);
    // Two registrations race for it: exactly one gets the account.
    const both = await Promise.all(['b@example.com', 'c@example.com'].map((email) => register(t.app, { email, invitation: inv.body.invitation })));
    assert.deepEqual(both.map((r) => r.status).sort(), [201, 403], JSON.stringify(both.map((r) => r.body)));
    const winner = both.find((r) => r.status === 201)!;
    assert.ok(
      winner.cookies.some((c) => c.name === 'rampart_session'),
      'signed in',
    );
    assert.equal((await t.ctx.db.selectFrom('accounts').select('id').where('email', 'in', ['b@example.com', 'c@example.com']).execute()).length, 1);
    const used = await t.ctx.db.selectFrom('invitations').selectAll().where('id', '=', inv.body.id).executeTakeFirstOrThrow();
    assert.equal(used.account_id, winner.body.accountId);
    assert.equal((await register(t.app, { email: 'd@example.com', invitation: inv.body.invitation })).status, 403, 'used once only');
  });

  test('invite: an invitation for one email registers that email only, and expires', async () => {
    const t = await makeTestApp('pglite', { signup: 'invite' });
    const forAnn = await call(t.app, 'POST', '/admin/invitations', { admin: true, body: { email: 'Ann@Example.com', expiresInDays: 2 } });
    assert.equal(forAnn.body.email, 'ann@example.com');
    assert.equal(new Date(forAnn.body.expiresAt).getTime() - t.clock.now().getTime(), 2 * 86_400_000);
    assert.equal((await register(t.app, { email: 'bob@example.com', invitation: forAnn.body.invitation })).status, 403);
    assert.equal((await register(t.app, { email: 'ANN@example.com', invitation: forAnn.body.invitation })).status, 201);

    const later = await call(t.app, 'POST', '/admin/invitations', { admin: true });
    assert.equal(later.status, 201, 'no body: the defaults (7 days, any email)');
    t.clock.advance(7 * 86_400_000 + 1);
    assert.equal((await register(t.app, { email: 'late@example.com', invitation: later.body.invitation })).status, 403, 'expired after 7 days');

    const bad = await call(t.app, 'POST', '/admin/invitations', { admin: true, body: { expiresInDays: 91 } });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /expiresInDays/);
  });

  test('open: anyone registers a free account', async () => {
    const t = await makeTestApp('pglite', { signup: 'open' });
    assert.deepEqual((await call(t.app, 'GET', '/api/auth/signup')).body, { signup: 'open' });
    const r = await register(t.app, { email: 'anyone@example.com' });
    assert.equal(r.status, 201);
    assert.equal(r.body.plan, 'free');
  });
});
