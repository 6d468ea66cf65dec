import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { BOT_COOKIE_TTL_SECONDS } from '@rampart/protocol';
import type { ServiceContext } from '../src/context.js';
import { buildSnapshots } from '../src/services/snapshot.js';
import { DEFAULT_PLANS } from '../src/plans.js';
import { BOT_KEY_MAX_AGE_DEFAULT, botKeyMaxAgeFromEnv, rotateBotSecret, runBotKeyJob } from '../src/services/bot-keys.js';
import { backends, call, makeTestApp, migrateOver, newAccount, testClock, type CallOptions, type TestApp } from './helpers.js';

// Bot protection keys (docs/bots.md, services/bot-keys.ts): a rotation makes a new current key and
// keeps the old one accepted for one pass-cookie lifetime; the scheduled job rotates old keys and
// retires previous keys whose lifetime has passed. Every change reaches the account's servers.

const TTL_MS = BOT_COOKIE_TTL_SECONDS * 1000;
const MAX_AGE = BOT_KEY_MAX_AGE_DEFAULT;
const HEX8 = /^[0-9a-f]{8}$/;

test('RAMPART_BOT_KEY_MAX_AGE: whole seconds from an hour to a year, default a week', () => {
  assert.equal(BOT_KEY_MAX_AGE_DEFAULT, 604_800);
  assert.equal(botKeyMaxAgeFromEnv(undefined), 604_800);
  assert.equal(botKeyMaxAgeFromEnv(''), 604_800);
  assert.equal(botKeyMaxAgeFromEnv('  '), 604_800);
  assert.equal(botKeyMaxAgeFromEnv('86400'), 86_400);
  assert.equal(botKeyMaxAgeFromEnv('31536000'), 31_536_000);
  for (const bad of ['0', '59', '3600', '86399', '31536001', '1.5', 'abc', '-1', '99999999999', '3600x']) {
    assert.throws(() => botKeyMaxAgeFromEnv(bad), /RAMPART_BOT_KEY_MAX_AGE/, `${JSON.stringify(bad)} should be refused`);
  }
});

type Db = TestApp['ctx']['db'];

interface KeyRow {
  bot_key_id: string;
  bot_secret: string;
  bot_key_created_at: Date;
  bot_prev_key_id: string | null;
  bot_prev_secret: string | null;
  bot_prev_until: Date | null;
}

/** A test-only read of the account's key columns. */
async function keys(db: Db, accountId: string): Promise<KeyRow> {
  return db
    .selectFrom('accounts')
    .select(['bot_key_id', 'bot_secret', 'bot_key_created_at', 'bot_prev_key_id', 'bot_prev_secret', 'bot_prev_until'])
    .where('id', '=', accountId)
    .executeTakeFirstOrThrow() as Promise<KeyRow>;
}

for (const backend of await backends()) {
  describe(`bot key rotation (${backend})`, async () => {
    const t = await makeTestApp(backend);

    async function server(auth: CallOptions, name = 'edge') {
      const r = await call(t.app, 'POST', '/api/servers', { ...auth, body: { name } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body.id as string;
    }
    async function revisions(auth: CallOptions): Promise<Record<string, number>> {
      const r = await call(t.app, 'GET', '/api/servers', auth);
      assert.equal(r.status, 200);
      return Object.fromEntries(r.body.map((s: { id: string; desiredRevision: number }) => [s.id, s.desiredRevision]));
    }
    async function botKeys(serverId: string) {
      const { snapshots } = await buildSnapshots(t.ctx.db, [serverId]);
      const snap = snapshots.get(serverId);
      assert.ok(snap, 'a live server has a snapshot');
      return { keys: snap.botKeys!, revision: snap.revision };
    }
    const rotate = (auth: CallOptions) => call(t.app, 'POST', '/api/waf/bot-secret/rotate', auth);

    describe('POST /api/waf/bot-secret/rotate', () => {
      test('answers the new key id, the time, the key it replaced and until when that stays accepted; never a secret', async () => {
        const a = await newAccount(t.app);
        const before = await keys(t.ctx.db, a.accountId);
        const r = await rotate({ key: a.key });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.deepEqual(Object.keys(r.body).sort(), ['key_id', 'previous_key_id', 'previous_valid_until', 'rotated_at']);
        assert.match(r.body.key_id, HEX8);
        assert.notEqual(r.body.key_id, before.bot_key_id);
        assert.equal(r.body.previous_key_id, before.bot_key_id);
        assert.equal(new Date(r.body.rotated_at).toISOString(), r.body.rotated_at, 'an ISO time');
        assert.equal(r.body.rotated_at, t.clock.now().toISOString(), 'rotated at the service clock');
        assert.equal(Date.parse(r.body.previous_valid_until) - Date.parse(r.body.rotated_at), 86_400_000);
        const after = await keys(t.ctx.db, a.accountId);
        assert.equal(after.bot_key_id, r.body.key_id);
        assert.notEqual(after.bot_secret, before.bot_secret);
        assert.equal(after.bot_prev_secret, before.bot_secret);
        const raw = JSON.stringify(r.body);
        for (const secret of [before.bot_secret, after.bot_secret]) assert.ok(!raw.includes(secret), 'no secret in the answer');
        assert.ok(!/secret/i.test(Object.keys(r.body).join(' ')));

        // A second rotation: the first rotation's key becomes the previous one.
        const r2 = await rotate({ key: a.key });
        assert.equal(r2.status, 200);
        assert.equal(r2.body.previous_key_id, r.body.key_id);
        assert.notEqual(r2.body.key_id, r.body.key_id);

        const doc = await call(t.app, 'GET', '/api/openapi.json');
        assert.equal(doc.status, 200);
        const text = JSON.stringify(doc.body);
        for (const secret of [before.bot_secret, after.bot_secret, (await keys(t.ctx.db, a.accountId)).bot_secret]) assert.ok(!text.includes(secret));
        const op = doc.body.paths['/api/waf/bot-secret/rotate']?.post;
        assert.ok(op, 'the route is documented');
        const schema = op.responses['200'].content['application/json'].schema;
        assert.deepEqual(Object.keys(schema.properties).sort(), ['key_id', 'previous_key_id', 'previous_valid_until', 'rotated_at']);
      });

      test('401 without credentials or with a wrong key, and nothing rotates', async () => {
        const a = await newAccount(t.app);
        const before = await keys(t.ctx.db, a.accountId);
        for (const auth of [{}, { key: 'rk_wrong' }, { cookie: 'rampart_session=nope' }] as CallOptions[]) {
          const r = await rotate(auth);
          assert.equal(r.status, 401, JSON.stringify(auth));
          assert.equal(typeof r.body.error, 'string');
        }
        assert.deepEqual(await keys(t.ctx.db, a.accountId), before);
      });

      test('works with a session cookie as with an API key', async () => {
        const password = 'correct horse battery';
        const b = await newAccount(t.app, 'pro', 100, password);
        const login = await call(t.app, 'POST', '/api/auth/login', { body: { email: b.email, password } });
        assert.equal(login.status, 200);
        const cookie = `rampart_session=${login.cookies.find((c) => c.name === 'rampart_session')!.value}`;
        const byKey = await rotate({ key: b.key });
        assert.equal(byKey.status, 200);
        const bySession = await rotate({ cookie });
        assert.equal(bySession.status, 200, JSON.stringify(bySession.body));
        assert.equal(bySession.body.previous_key_id, byKey.body.key_id);
        assert.equal((await keys(t.ctx.db, b.accountId)).bot_key_id, bySession.body.key_id);
      });

      test("one account's rotation leaves every other account's keys alone", async () => {
        const a = await newAccount(t.app);
        const b = await newAccount(t.app);
        await rotate({ key: a.key }); // a has a previous key too
        const aBefore = await keys(t.ctx.db, a.accountId);
        const r = await rotate({ key: b.key });
        assert.equal(r.status, 200);
        assert.deepEqual(await keys(t.ctx.db, a.accountId), aBefore);
        assert.notEqual(r.body.key_id, aBefore.bot_key_id);
        assert.notEqual(r.body.previous_key_id, aBefore.bot_key_id);
      });
    });

    describe('what the servers get', () => {
      test("a rotation pushes [new, previous] to each live server of the account and bumps each once; other accounts' servers untouched", async () => {
        const a = await newAccount(t.app);
        const other = await newAccount(t.app);
        const s1 = await server({ key: a.key }, 'one');
        const s2 = await server({ key: a.key }, 'two');
        const gone = await server({ key: a.key }, 'gone');
        assert.equal((await call(t.app, 'DELETE', `/api/servers/${gone}`, { key: a.key })).status < 300, true);
        const o1 = await server({ key: other.key }, 'other');

        const initial = await keys(t.ctx.db, a.accountId);
        const before = await botKeys(s1);
        assert.deepEqual(before.keys, [{ id: initial.bot_key_id, secret: initial.bot_secret }], 'one key before any rotation');
        assert.match(initial.bot_key_id, HEX8);
        const revsBefore = await revisions({ key: a.key });
        const otherBefore = await revisions({ key: other.key });
        const otherSnapBefore = await botKeys(o1);

        t.changed.length = 0;
        const r = await rotate({ key: a.key });
        assert.equal(r.status, 200);
        const current = await keys(t.ctx.db, a.accountId);
        for (const s of [s1, s2]) {
          const snap = await botKeys(s);
          assert.deepEqual(snap.keys, [
            { id: r.body.key_id, secret: current.bot_secret },
            { id: initial.bot_key_id, secret: initial.bot_secret },
          ]);
          assert.notEqual(snap.keys[0]!.secret, snap.keys[1]!.secret);
        }
        const revsAfter = await revisions({ key: a.key });
        assert.equal(revsAfter[s1], revsBefore[s1]! + 1);
        assert.equal(revsAfter[s2], revsBefore[s2]! + 1);
        assert.equal(revsAfter[gone], revsBefore[gone], 'a decommissioned server is not bumped');
        assert.equal((await botKeys(s1)).revision, revsAfter[s1], 'the snapshot carries the new revision');
        assert.deepEqual(await revisions({ key: other.key }), otherBefore);
        assert.deepEqual(await botKeys(o1), otherSnapBefore);
        assert.deepEqual(t.changed.flat().sort(), [s1, s2].sort(), 'the live servers of the account were pushed, nothing else');
      });
    });

    test('two rotations at once leave a consistent pair', async () => {
      const a = await newAccount(t.app);
      const s = await server({ key: a.key });
      const initial = await keys(t.ctx.db, a.accountId);
      const rev = (await revisions({ key: a.key }))[s]!;
      const [r1, r2] = await Promise.all([rotate({ key: a.key }), rotate({ key: a.key })]);
      assert.equal(r1.status, 200);
      assert.equal(r2.status, 200);
      const [first, second] = r1.body.previous_key_id === initial.bot_key_id ? [r1.body, r2.body] : [r2.body, r1.body];
      assert.equal(first.previous_key_id, initial.bot_key_id);
      assert.equal(second.previous_key_id, first.key_id, "the second's previous key is the first's current one");
      const stored = await keys(t.ctx.db, a.accountId);
      assert.equal(stored.bot_key_id, second.key_id);
      assert.equal(stored.bot_prev_key_id, first.key_id);
      const snap = await botKeys(s);
      assert.deepEqual(
        snap.keys.map((k) => k.id),
        [second.key_id, first.key_id],
      );
      assert.equal(snap.keys[0]!.secret, stored.bot_secret);
      assert.equal(snap.keys[1]!.secret, stored.bot_prev_secret);
      assert.equal((await revisions({ key: a.key }))[s], rev + 2);
    });

    describe('the scheduled job', () => {
      test('a new account gets a random 8-hex key id, stamped at the service clock', async () => {
        const ids = new Set<string>();
        for (let i = 0; i < 3; i++) {
          const a = await newAccount(t.app);
          const k = await keys(t.ctx.db, a.accountId);
          assert.match(k.bot_key_id, HEX8);
          assert.notEqual(k.bot_key_id, '0');
          assert.equal(k.bot_prev_key_id, null);
          assert.equal(new Date(k.bot_key_created_at).getTime(), t.clock.now().getTime());
          ids.add(k.bot_key_id);
        }
        assert.equal(ids.size, 3);
      });

      test('rotates a key once it is older than maxAge, once per due time; retires the previous key exactly at bot_prev_until', async () => {
        const a = await newAccount(t.app);
        const s = await server({ key: a.key });
        const created = t.clock.now().getTime();
        const initial = await keys(t.ctx.db, a.accountId);
        const mine = () => keys(t.ctx.db, a.accountId);

        t.clock.set(new Date(created + MAX_AGE * 1000 - 1000));
        await runBotKeyJob(t.ctx, MAX_AGE);
        assert.deepEqual(await mine(), initial, 'one second before maxAge: not rotated');

        const rotatedAt = created + MAX_AGE * 1000 + 1000;
        t.clock.set(new Date(rotatedAt));
        const rev0 = (await revisions({ key: a.key }))[s]!;
        t.changed.length = 0;
        const run = await runBotKeyJob(t.ctx, MAX_AGE);
        assert.ok(run.rotated >= 1);
        const rotated = await mine();
        assert.match(rotated.bot_key_id, HEX8);
        assert.notEqual(rotated.bot_key_id, initial.bot_key_id);
        assert.equal(rotated.bot_prev_key_id, initial.bot_key_id);
        assert.equal(rotated.bot_prev_secret, initial.bot_secret);
        assert.equal(new Date(rotated.bot_key_created_at).getTime(), rotatedAt);
        assert.equal(new Date(rotated.bot_prev_until!).getTime(), rotatedAt + TTL_MS);
        assert.equal((await revisions({ key: a.key }))[s], rev0 + 1);
        assert.ok(t.changed.flat().includes(s));
        assert.deepEqual(
          (await botKeys(s)).keys.map((k) => k.id),
          [rotated.bot_key_id, initial.bot_key_id],
        );

        await runBotKeyJob(t.ctx, MAX_AGE);
        assert.deepEqual(await mine(), rotated, 'a second run at the same time rotates nothing');
        assert.equal((await revisions({ key: a.key }))[s], rev0 + 1);

        t.clock.set(new Date(rotatedAt + TTL_MS - 1000));
        await runBotKeyJob(t.ctx, MAX_AGE);
        assert.deepEqual(await mine(), rotated, 'one second before bot_prev_until: still kept');
        assert.equal((await botKeys(s)).keys.length, 2, 'and still in the snapshot');
        assert.equal((await revisions({ key: a.key }))[s], rev0 + 1);

        t.clock.set(new Date(rotatedAt + TTL_MS));
        t.changed.length = 0;
        const retire = await runBotKeyJob(t.ctx, MAX_AGE);
        assert.ok(retire.retired >= 1);
        const retired = await mine();
        assert.equal(retired.bot_key_id, rotated.bot_key_id, 'the current key stays');
        assert.equal(retired.bot_secret, rotated.bot_secret);
        assert.equal(retired.bot_prev_key_id, null);
        assert.equal(retired.bot_prev_secret, null);
        assert.equal(retired.bot_prev_until, null);
        assert.deepEqual((await botKeys(s)).keys, [{ id: rotated.bot_key_id, secret: rotated.bot_secret }], 'gone from the snapshot');
        assert.equal((await revisions({ key: a.key }))[s], rev0 + 2, 'the servers were bumped again');
        assert.ok(t.changed.flat().includes(s), 'and pushed');

        t.clock.advance(1000);
        await runBotKeyJob(t.ctx, MAX_AGE);
        assert.equal((await revisions({ key: a.key }))[s], rev0 + 2, 'nothing more to retire');
      });

      test('two job runs at once rotate a due key once, keeping the original as the previous key', async () => {
        const a = await newAccount(t.app);
        const initial = await keys(t.ctx.db, a.accountId);
        t.clock.set(new Date(new Date(initial.bot_key_created_at).getTime() + MAX_AGE * 1000 + 1000));
        await Promise.all([runBotKeyJob(t.ctx, MAX_AGE), runBotKeyJob(t.ctx, MAX_AGE)]);
        const after = await keys(t.ctx.db, a.accountId);
        assert.notEqual(after.bot_key_id, initial.bot_key_id);
        assert.equal(after.bot_prev_key_id, initial.bot_key_id, 'the key cookies were signed with until now is still accepted');
        assert.equal(after.bot_prev_secret, initial.bot_secret);
      });

      test('a job run and a rotation by hand at once: the key the cookies were signed with stays accepted', async () => {
        const a = await newAccount(t.app);
        const initial = await keys(t.ctx.db, a.accountId);
        t.clock.set(new Date(new Date(initial.bot_key_created_at).getTime() + MAX_AGE * 1000 + 1000));
        const [, byHand] = await Promise.all([runBotKeyJob(t.ctx, MAX_AGE), rotateBotSecret(t.ctx, a.accountId)]);
        const after = await keys(t.ctx.db, a.accountId);
        assert.equal(after.bot_key_id, byHand.key_id, 'the job did not rotate the fresh key made by hand away');
        assert.equal(after.bot_prev_key_id, byHand.previous_key_id);
      });
    });

    test('an account from before 0010 has key id 0 and is rotated by the job when due', async () => {
      const account = '00000000-0000-4000-8000-000000000001';
      const serverId = '00000000-0000-4000-8000-0000000000a1';
      const oldSecret = 'ab'.repeat(32);
      await migrateOver(
        backend,
        '0009_event_folding',
        async (db) => {
          await sql`insert into accounts (id, email, plan, bot_secret, next_charge_at) values (${account}, 'old@example.com', 'pro', ${oldSecret}, now())`.execute(db);
          await sql`insert into servers (id, account_id, name, status) values (${serverId}, ${account}, 'old-edge', 'offline')`.execute(db);
        },
        async (db) => {
          const migrated = (await sql<KeyRow>`select bot_key_id, bot_secret, bot_key_created_at, bot_prev_key_id, bot_prev_secret, bot_prev_until from accounts where id = ${account}`.execute(db))
            .rows[0]!;
          assert.equal(migrated.bot_key_id, '0');
          assert.equal(migrated.bot_secret, oldSecret);
          assert.equal(migrated.bot_prev_key_id, null);

          const clock = testClock(new Date(migrated.bot_key_created_at));
          const changed: string[] = [];
          const ctx: ServiceContext = { db, plans: DEFAULT_PLANS, now: clock.now, serversChanged: (ids) => changed.push(...ids) };
          const snap = async () => (await buildSnapshots(db, [serverId])).snapshots.get(serverId)!;
          assert.deepEqual((await snap()).botKeys, [{ id: '0', secret: oldSecret }], 'the old secret keeps signing under id 0');

          clock.advance(MAX_AGE * 1000 - 1000);
          assert.deepEqual(await runBotKeyJob(ctx, MAX_AGE), { rotated: 0, retired: 0 });
          const rev = (await snap()).revision;

          clock.advance(2000);
          assert.deepEqual(await runBotKeyJob(ctx, MAX_AGE), { rotated: 1, retired: 0 });
          const after = (await sql<KeyRow>`select bot_key_id, bot_secret, bot_prev_key_id, bot_prev_secret from accounts where id = ${account}`.execute(db)).rows[0]!;
          assert.match(after.bot_key_id, HEX8);
          assert.equal(after.bot_prev_key_id, '0');
          assert.equal(after.bot_prev_secret, oldSecret);
          const s = await snap();
          assert.deepEqual(s.botKeys, [
            { id: after.bot_key_id, secret: after.bot_secret },
            { id: '0', secret: oldSecret },
          ]);
          assert.equal(s.revision, rev + 1);
          assert.deepEqual(changed, [serverId]);
        },
      );
    });
  });
}
