import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decryptSecret, encryptSecret, secretKeyFrom } from '../src/secret-box.js';
import { reencryptSecrets, RekeyError } from '../src/services/secret-rotation.js';
import { backends, makeTestApp, newAccount } from './helpers.js';

// A new RAMPART_SECRET_KEY: every stored secret (webhook signing secrets, DNS provider
// credentials) is encrypted again under it in one transaction; twice is harmless; a secret neither
// key opens changes nothing and names its row.

const OLD = secretKeyFrom('the old secret key, long enough')!;
const NEW = secretKeyFrom('the new secret key, long enough')!;
const OTHER = secretKeyFrom('a key nobody configured here')!;

for (const backend of await backends()) {
  describe(`rotating the secret key (${backend})`, async () => {
    const { app, ctx } = await makeTestApp(backend);
    const a = await newAccount(app);
    const b = await newAccount(app);
    await ctx.db
      .insertInto('notification_settings')
      .values({ account_id: a.accountId, webhook_url: 'https://hooks.example.com/a', webhook_secret_enc: encryptSecret(OLD, 'whsec-a'), email: null, updated_at: new Date() })
      .execute();
    await ctx.db.insertInto('notification_settings').values({ account_id: b.accountId, webhook_url: null, webhook_secret_enc: null, email: null, updated_at: new Date() }).execute();
    await ctx.db
      .insertInto('dns_settings')
      .values({ account_id: b.accountId, provider: 'cloudflare', credentials_enc: encryptSecret(OLD, '{"apiToken":"cf-b"}'), updated_at: new Date() })
      .execute();
    const stored = async () => ({
      webhook: (await ctx.db.selectFrom('notification_settings').select('webhook_secret_enc').where('account_id', '=', a.accountId).executeTakeFirstOrThrow()).webhook_secret_enc!,
      dns: (await ctx.db.selectFrom('dns_settings').select('credentials_enc').where('account_id', '=', b.accountId).executeTakeFirstOrThrow()).credentials_enc,
    });

    test('every stored secret opens with the new key afterwards, and no longer with the old one', async () => {
      const summary = await reencryptSecrets(ctx.db, OLD, NEW);
      assert.deepEqual(summary, { reencrypted: { notification_settings: 1, dns_settings: 1 }, alreadyNew: 0 });
      const s = await stored();
      assert.equal(decryptSecret(NEW, s.webhook), 'whsec-a');
      assert.equal(decryptSecret(NEW, s.dns), '{"apiToken":"cf-b"}');
      assert.throws(() => decryptSecret(OLD, s.webhook));
    });

    test('a second run changes nothing', async () => {
      const before = await stored();
      assert.deepEqual(await reencryptSecrets(ctx.db, OLD, NEW), { reencrypted: { notification_settings: 0, dns_settings: 0 }, alreadyNew: 2 });
      assert.deepEqual(await stored(), before);
    });

    test('a secret neither key opens stops it all, naming the row', async () => {
      const before = await stored();
      await assert.rejects(
        reencryptSecrets(ctx.db, NEW, OTHER).then(() => reencryptSecrets(ctx.db, OLD, NEW)),
        (err: Error) => err instanceof RekeyError && /notification_settings of account/.test(err.message),
      );
      // The first call moved everything to OTHER; put a lone row under an unknown key and try again.
      const moved = await stored();
      assert.notDeepEqual(moved, before);
      await ctx.db
        .updateTable('dns_settings')
        .set({ credentials_enc: encryptSecret(OLD, 'x') })
        .where('account_id', '=', b.accountId)
        .execute();
      const mixed = await stored();
      await assert.rejects(reencryptSecrets(ctx.db, OTHER, NEW), (err: Error) => err instanceof RekeyError && new RegExp(`dns_settings of account ${b.accountId}`).test(err.message));
      assert.deepEqual(await stored(), mixed, 'the webhook secret re-encrypted before the failure was rolled back');
    });
  });
}
