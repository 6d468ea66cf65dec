import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import dns, { type LookupAddress } from 'node:dns';
import { after, describe, mock, test } from 'node:test';
import { emailTransport } from '../src/delivery/email.js';
import { DELIVERY_GIVE_UP_MS } from '../src/delivery/retry.js';
import { verifyWebhook, webhookBody } from '../src/delivery/webhook.js';
import { secretKeyFrom } from '../src/secret-box.js';
import { deliveryRunner, runDeliveries, type DeliveryOptions } from '../src/services/notification-delivery.js';
import { notificationMessages, notify, notifyFromServer, recordStatusReport, type NotificationKind } from '../src/services/notifications.js';
import { mailText, smtpReceiver, webhookReceiver } from '../../../test/support/receivers.js';
import { waitFor } from '../../../test/support/processes.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// docs/notifications.md "Settings and delivery log": a delivery per channel queued with each new
// notification, delivery runs against a real HTTP receiver and a real SMTP server, retries on the
// test clock, giving up after a day, and the delivery log.

const SECRET = 'whsec-0123456789abcdef-secret';
const FROM = 'rampart@test.example';

type Delivery = {
  id: string;
  notificationId: string;
  kind: string;
  channel: 'webhook' | 'email';
  target: string;
  status: 'pending' | 'delivered' | 'given_up';
  attempts: number;
  lastStatus: number | null;
  lastError: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
  updatedAt: string;
};

for (const backend of await backends()) {
  describe(`notification delivery (${backend})`, async () => {
    const t = await makeTestApp(backend);
    t.ctx.secretKey = secretKeyFrom('test-secret-key-for-notifications');
    let queued = 0;
    t.ctx.delivery = { allowPrivateWebhooks: true, emailEnabled: true, queued: () => void queued++ };
    const hook = await webhookReceiver();
    const smtp = await smtpReceiver();
    const transport = emailTransport(smtp.url);
    after(() => transport.close());
    const options: DeliveryOptions = { allowPrivateWebhooks: true, smtp: { transport, from: FROM }, random: () => 0.5 };
    const run = (o: Partial<DeliveryOptions> = {}) => runDeliveries(t.ctx, { ...options, ...o });

    /** A new account whose channels are set as given (the receivers', by default). */
    const account = async (channels: Record<string, unknown> = {}) => {
      const a = await newAccount(t.app);
      const path = `/hook/${a.accountId}`;
      const body: Record<string, unknown> = { webhookUrl: `${hook.url}${path}?token=t0ken`, webhookSecret: SECRET, email: `ops-${a.accountId.slice(0, 8)}@example.com`, ...channels };
      if (body.webhookUrl === null) delete body.webhookSecret;
      const r = await call(t.app, 'PUT', '/api/settings/notifications', { key: a.key, body });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return { ...a, path, email: body.email as string | null };
    };
    const log = async (key: string, query = '') => {
      const r = await call(t.app, 'GET', `/api/notifications/deliveries${query}`, { key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body as Delivery[];
    };
    const raise = (accountId: string, kind: NotificationKind = 'ssl_expiring', message = `m-${randomUUID()}`, domainId: string | null = null) =>
      notify(t.ctx, { accountId, kind, message, domainId });
    const notifications = async (key: string) => (await call(t.app, 'GET', '/api/notifications', { key })).body as { id: string; kind: string; message: string; createdAt: string }[];
    const hooksTo = (path: string) => hook.requests.filter((r) => r.url.startsWith(path));

    test('a notification is queued once per channel and delivered: the webhook with the exact body and a valid signature, the e-mail to the address', async () => {
      const a = await account();
      const domainId = randomUUID();
      const before = queued;
      await raise(a.accountId, 'ssl_expiring', 'The certificate of shop.example.com expires soon', domainId);
      assert.ok(queued > before, 'delivery was kicked');
      const n = (await notifications(a.key))[0]!;
      const pending = await log(a.key);
      assert.deepEqual(pending.map((d) => [d.channel, d.status, d.attempts, d.nextAttemptAt]).sort(), [
        ['email', 'pending', 0, n.createdAt],
        ['webhook', 'pending', 0, n.createdAt],
      ]);

      assert.deepEqual(await run(), { attempted: 2, delivered: 2, failed: 0, givenUp: 0 });
      const [req, ...more] = hooksTo(a.path);
      assert.equal(more.length, 0);
      assert.equal(req!.method, 'POST');
      assert.equal(req!.url, `${a.path}?token=t0ken`);
      assert.equal(req!.headers['content-type'], 'application/json');
      const body = `{"id":"${n.id}","kind":"ssl_expiring","message":"The certificate of shop.example.com expires soon","serverId":null,"domainId":"${domainId}","createdAt":"${n.createdAt}"}`;
      assert.equal(req!.body, body);
      assert.equal(webhookBody({ ...n, serverId: null, domainId }), body);
      const nowSeconds = Math.floor(t.clock.now().getTime() / 1000);
      assert.equal(req!.headers['x-rampart-timestamp'], String(nowSeconds));
      assert.ok(verifyWebhook(SECRET, req!.headers, req!.body, nowSeconds, 0), 'signed with the account secret');
      assert.ok(!verifyWebhook('another-secret-entirely', req!.headers, req!.body, nowSeconds), 'and only with it');

      const mail = smtp.messages.find((m) => m.to.includes(a.email!));
      assert.ok(mail, 'the e-mail arrived');
      assert.equal(mail.from, FROM);
      const headers = mail.raw.slice(0, mail.raw.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' '); // unfolded
      assert.match(headers, /^Subject: \[Rampart\] Certificate expiring: The certificate of shop\.example\.com expires soon$/m);
      assert.ok(mailText(mail.raw).includes(`notification ${n.id}, kind ssl_expiring`));

      const done = await log(a.key);
      const webhook = done.find((d) => d.channel === 'webhook')!;
      const email = done.find((d) => d.channel === 'email')!;
      const now = t.clock.now().toISOString();
      assert.deepEqual(webhook, {
        id: webhook.id,
        notificationId: n.id,
        kind: 'ssl_expiring',
        channel: 'webhook',
        target: `${hook.url}${a.path}`, // without the query: it may hold a token
        status: 'delivered',
        attempts: 1,
        lastStatus: 204,
        lastError: null,
        nextAttemptAt: null,
        createdAt: n.createdAt,
        updatedAt: now,
      });
      assert.deepEqual({ ...email, id: '' }, { ...webhook, id: '', channel: 'email', target: a.email, lastStatus: null });
      assert.ok(!JSON.stringify(done).includes('t0ken'));
      assert.deepEqual(await run(), { attempted: 0, delivered: 0, failed: 0, givenUp: 0 }, 'delivered once');
    });

    test('only the kinds chosen are queued; an account without channels queues nothing', async () => {
      const a = await account({ kinds: ['server_down', 'account_frozen'], email: null });
      await raise(a.accountId, 'ssl_expiring');
      await raise(a.accountId, 'account_frozen', notificationMessages.accountFrozen('pro', 2900, 1000));
      assert.deepEqual((await log(a.key)).map((d) => [d.kind, d.channel]), [['account_frozen', 'webhook']]);
      const bare = await newAccount(t.app);
      await raise(bare.accountId, 'server_down');
      assert.deepEqual(await log(bare.key), []);
      await run();
    });

    test('a folded duplicate is not delivered again; the notice of dropped ones is; an agent report is delivered with the server name and what to do', async () => {
      const a = await account({ email: null });
      const server = (await call(t.app, 'POST', '/api/servers', { key: a.key, body: { name: 'edge-fold' } })).body as { id: string };
      const from = (message: string) => notifyFromServer(t.ctx, { accountId: a.accountId, serverId: server.id, kind: 'server_error', message });
      assert.equal(await from('same'), 'created');
      assert.equal(await from('same'), 'folded');
      assert.equal((await log(a.key)).length, 1);
      await recordStatusReport(t.ctx, { accountId: a.accountId, serverId: server.id }, { kind: 'proxy_reload_failed', message: 'Reload to revision 4 failed.' });
      await run();
      const report = hooksTo(a.path)
        .map((r) => JSON.parse(r.body) as { kind: string; message: string; serverId: string })
        .find((b) => b.kind === 'proxy_reload_failed')!;
      assert.equal(report.serverId, server.id);
      assert.equal(report.message, notificationMessages.fromAgent('proxy_reload_failed', 'edge-fold', 'Reload to revision 4 failed.'));
      assert.match(report.message, /^Shield server edge-fold: Reload to revision 4 failed\. The server serves its previous configuration.*save it again\.$/);
    });

    test('a failed attempt is retried after the backoff, then succeeds; the log shows each step', async () => {
      const a = await account({ email: null });
      hook.statuses.push(500);
      await raise(a.accountId);
      const createdAt = t.clock.now().getTime();
      assert.deepEqual(await run(), { attempted: 1, delivered: 0, failed: 1, givenUp: 0 });
      const [failed] = await log(a.key);
      assert.equal(failed!.status, 'pending');
      assert.equal(failed!.attempts, 1);
      assert.equal(failed!.lastStatus, 500);
      assert.equal(failed!.lastError, 'the receiver answered HTTP 500');
      assert.equal(failed!.nextAttemptAt, new Date(createdAt + 15_000).toISOString(), 'half of the first ceiling (30 s) with the pinned jitter');
      assert.equal((await run()).attempted, 0, 'not due yet');
      t.clock.advance(15_000);
      assert.deepEqual(await run(), { attempted: 1, delivered: 1, failed: 0, givenUp: 0 });
      const [ok] = await log(a.key);
      assert.deepEqual([ok!.status, ok!.attempts, ok!.lastStatus, ok!.lastError, ok!.nextAttemptAt], ['delivered', 2, 204, null, null]);
      const attempts = hooksTo(a.path);
      assert.equal(attempts.length, 2);
      assert.equal(attempts[0]!.body, attempts[1]!.body, 'a retry carries the same body');
      assert.notEqual(attempts[0]!.headers['x-rampart-timestamp'], attempts[1]!.headers['x-rampart-timestamp'], 'with a new timestamp');
    });

    test('a delivery still failing a day after it was queued is given up; the notification stays', async () => {
      const a = await account({ email: null });
      hook.statuses.push(...Array<number>(200).fill(503));
      try {
        await raise(a.accountId);
        const start = t.clock.now().getTime();
        let d: Delivery | undefined;
        const times: number[] = [];
        for (let i = 0; i < 200; i++) {
          times.push(t.clock.now().getTime());
          await run();
          d = (await log(a.key))[0]!;
          if (d.status !== 'pending') break;
          t.clock.set(new Date(d.nextAttemptAt!));
        }
        assert.equal(d!.status, 'given_up');
        assert.equal(d!.nextAttemptAt, null);
        assert.equal(d!.lastStatus, 503);
        assert.equal(d!.lastError, 'the receiver answered HTTP 503');
        assert.equal(d!.attempts, times.length);
        assert.ok(times.at(-1)! - start >= DELIVERY_GIVE_UP_MS, 'the last attempt came a day after');
        assert.ok(times.at(-2)! - start < DELIVERY_GIVE_UP_MS, 'and the one before within the day');
        assert.ok(d!.attempts > 40 && d!.attempts < 70, `about 55 attempts: ${d!.attempts}`);
        assert.equal(hooksTo(a.path).length, d!.attempts);
        assert.equal((await notifications(a.key)).length, 1);
        assert.equal((await run()).attempted, 0);
      } finally {
        hook.statuses.length = 0;
      }
    });

    test('a channel removed from the settings gives its pending deliveries up; a changed URL is where the next attempt goes', async () => {
      const a = await account();
      hook.statuses.push(500);
      await raise(a.accountId);
      await run({ smtp: undefined });
      assert.deepEqual(
        (await log(a.key)).map((d) => [d.channel, d.status, d.lastError]).sort(),
        [
          ['email', 'pending', 'e-mail is not configured on the control plane (RAMPART_SMTP_URL)'],
          ['webhook', 'pending', 'the receiver answered HTTP 500'],
        ],
      );
      assert.equal((await call(t.app, 'PUT', '/api/settings/notifications', { key: a.key, body: { email: null, webhookUrl: `${hook.url}${a.path}/moved` } })).status, 200);
      t.clock.advance(60_000);
      await run();
      const byChannel = Object.fromEntries((await log(a.key)).map((d) => [d.channel, d]));
      assert.deepEqual([byChannel.email!.status, byChannel.email!.lastError], ['given_up', 'the e-mail address was removed from the notification settings']);
      assert.deepEqual([byChannel.webhook!.status, byChannel.webhook!.attempts, byChannel.webhook!.target], ['delivered', 2, `${hook.url}${a.path}/moved`]);

      hook.statuses.push(500);
      await raise(a.accountId);
      await run();
      await call(t.app, 'PUT', '/api/settings/notifications', { key: a.key, body: { webhookUrl: null } });
      t.clock.advance(60_000);
      await run();
      const [last] = await log(a.key);
      assert.deepEqual([last!.status, last!.attempts, last!.lastError], ['given_up', 1, 'the webhook was removed from the notification settings']);
    });

    test('an e-mail the SMTP server refuses is retried, with its reply code in the log', async () => {
      let refusals = 1;
      const picky = await smtpReceiver({
        onRcptTo(_address, _session, callback) {
          if (refusals-- > 0) callback(Object.assign(new Error('Mailbox busy, try later'), { responseCode: 450 }));
          else callback();
        },
      });
      const pickyTransport = emailTransport(picky.url);
      after(() => pickyTransport.close());
      const smtpOptions = { smtp: { transport: pickyTransport, from: FROM } };
      const a = await account({ webhookUrl: null });
      await raise(a.accountId, 'deposit_confirmed', notificationMessages.depositConfirmed(5000, 6250));
      await run(smtpOptions);
      const [failed] = await log(a.key);
      assert.deepEqual([failed!.status, failed!.lastStatus, failed!.lastError], ['pending', 450, '450 Mailbox busy, try later']);
      t.clock.advance(15_000);
      await run(smtpOptions);
      const [ok] = await log(a.key);
      assert.deepEqual([ok!.status, ok!.attempts], ['delivered', 2]);
      assert.equal(picky.messages.length, 1);
      assert.match(mailText(picky.messages[0]!.raw), /Deposit of \$50\.00 confirmed\. Balance: \$62\.50\. Nothing to do\./);
    });

    test('private addresses are checked again at every attempt: a stored loopback URL, or a name resolving to one, is refused once the operator no longer allows them', async () => {
      const a = await account({ email: null });
      await raise(a.accountId);
      await run({ allowPrivateWebhooks: false });
      const [refused] = await log(a.key);
      assert.equal(refused!.status, 'pending');
      assert.match(refused!.lastError!, /^webhookUrl: 127\.0\.0\.1 is a private or reserved address/);

      // A public-looking name whose DNS answer is loopback (the settings cannot know at save time).
      const lookup = mock.method(dns.promises, 'lookup', (host: string) =>
        Promise.resolve(host === 'rebind.test' ? ([{ address: '127.0.0.1', family: 4 }] as LookupAddress[]) : []),
      );
      try {
        const b = await account({ email: null, webhookUrl: `http://rebind.test:${hook.port}/hook/rebind` });
        await raise(b.accountId);
        await run({ allowPrivateWebhooks: false });
        const [d] = await log(b.key);
        assert.equal(d!.lastError, 'refused: rebind.test resolves to 127.0.0.1, a private or reserved address');
      } finally {
        lookup.mock.restore();
      }
      assert.equal(hook.requests.filter((r) => r.url === '/hook/rebind').length, 0, 'nothing reached the receiver');
    });

    test('a secret that cannot be decrypted (RAMPART_SECRET_KEY changed) fails the attempt and says why', async () => {
      const a = await account({ email: null });
      await raise(a.accountId);
      const key = t.ctx.secretKey;
      t.ctx.secretKey = secretKeyFrom('another-key-than-the-one-it-was-stored-with');
      try {
        await run();
      } finally {
        t.ctx.secretKey = key;
      }
      const [d] = await log(a.key);
      assert.deepEqual([d!.status, d!.lastError], ['pending', 'the webhook secret cannot be read: RAMPART_SECRET_KEY is not set on the control plane, or has changed']);
      assert.equal(hooksTo(a.path).length, 0);
    });

    test("the delivery log is the account's own, newest first, in pages", async () => {
      const a = await account({ email: null });
      const other = await account();
      for (let i = 0; i < 5; i++) {
        await raise(a.accountId);
        t.clock.advance(1000);
      }
      await raise(other.accountId);
      const all = await log(a.key);
      assert.equal(all.length, 5);
      assert.ok(all.every((d) => d.target === `${hook.url}${a.path}`));
      for (let i = 1; i < all.length; i++) assert.ok(all[i - 1]!.createdAt > all[i]!.createdAt);
      const first = await call(t.app, 'GET', '/api/notifications/deliveries?limit=2', { key: a.key });
      assert.equal(first.headers.link, `</api/notifications/deliveries?limit=2&before=${all[1]!.id}>; rel="next"`);
      const second = await log(a.key, `?limit=2&before=${all[1]!.id}`);
      assert.deepEqual(second.map((d) => d.id), [all[2]!.id, all[3]!.id]);
      const theirs = (await log(other.key))[0]!.id;
      assert.equal((await call(t.app, 'GET', `/api/notifications/deliveries?before=${theirs}`, { key: a.key })).status, 400);
      assert.ok(!all.some((d) => d.id === theirs));
      await run();
    });

    test('runs at the same time share the due deliveries out: each is attempted once', async () => {
      const a = await account({ email: null });
      for (let i = 0; i < 30; i++) await raise(a.accountId, 'server_down', `parallel ${i}`);
      const results = await Promise.all([run(), run(), run()]);
      assert.equal(results.reduce((sum, r) => sum + r.attempted, 0), 30);
      const bodies = hooksTo(a.path).map((r) => (JSON.parse(r.body) as { id: string }).id);
      assert.equal(bodies.length, 30);
      assert.equal(new Set(bodies).size, 30);
    });

    test('the delivery runner delivers a new notification within a second, without waiting for the job', async () => {
      const a = await account();
      const runner = deliveryRunner(t.ctx, { allowPrivateWebhooks: true, smtpUrl: smtp.url, smtpFrom: FROM, intervalMs: 60_000 }, (msg, err) => assert.fail(`${msg}: ${String(err)}`));
      const saved = t.ctx.delivery;
      t.ctx.delivery = { ...saved!, queued: () => runner.kick() };
      try {
        const started = Date.now();
        await raise(a.accountId, 'server_down', 'kicked');
        await waitFor(() => hooksTo(a.path).length === 1 && smtp.messages.some((m) => m.to.includes(a.email!)), 'the kicked delivery', 3000, 10);
        assert.ok(Date.now() - started < 2000);
        await waitFor(async () => (await log(a.key)).every((d) => d.status === 'delivered'), 'the log to say delivered', 3000, 10);
      } finally {
        t.ctx.delivery = saved;
        await runner.stop();
      }
    });
  });
}
