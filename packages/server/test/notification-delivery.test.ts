import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import dns, { type LookupAddress } from 'node:dns';
import { after, describe, mock, test } from 'node:test';
import { createHash } from 'node:crypto';
import { deliverEmail, emailTransport } from '../src/delivery/email.js';
import { CIRCUIT_THRESHOLD, circuitPauseMs, ENDPOINT_DISABLE_AFTER_MS } from '../src/delivery/circuit.js';
import { DELIVERY_GIVE_UP_MS } from '../src/delivery/retry.js';
import { verifyWebhook, webhookBody } from '../src/delivery/webhook.js';
import { notificationSettings } from '../src/data/notification-settings.js';
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

type ChannelStatus = { state: string; consecutiveFailures: number; failingSince: string | null; pausedUntil: string | null; disabledAt: string | null; lastError: string | null };
type NotificationSettings = { email: string | null; emailConfirmed: boolean; webhookStatus: ChannelStatus | null; emailStatus: ChannelStatus | null };

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
    t.ctx.delivery.sendEmail = (mail) => deliverEmail(transport, { ...mail, from: FROM });
    const options: DeliveryOptions = { allowPrivateWebhooks: true, smtp: { transport, from: FROM }, random: () => 0.5 };
    const run = (o: Partial<DeliveryOptions> = {}) => runDeliveries(t.ctx, { ...options, ...o });

    /** Opens the confirmation e-mail last sent to this address: the token it carries confirms it. */
    const confirmAddress = async (email: string) => {
      const mail = smtp.messages.findLast((m) => m.to.includes(email) && /Confirm the address/.test(m.raw));
      assert.ok(mail, `a confirmation e-mail reached ${email}`);
      const token = /^([A-Za-z0-9_-]{43})$/m.exec(mailText(mail.raw))![1]!;
      const r = await call(t.app, 'POST', '/api/settings/notifications/email/confirm', { body: { token } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    };

    /** The notification e-mails (not the confirmation) that reached this address. */
    const mailsTo = (email: string) => smtp.messages.filter((m) => m.to.includes(email) && !/Confirm the address/.test(m.raw));

    /** A new account whose channels are set as given (the receivers', by default), its e-mail address confirmed. */
    const account = async (channels: Record<string, unknown> = {}) => {
      const a = await newAccount(t.app);
      const path = `/hook/${a.accountId}`;
      const body: Record<string, unknown> = { webhookUrl: `${hook.url}${path}?token=t0ken`, webhookSecret: SECRET, email: `ops-${a.accountId.slice(0, 8)}@example.com`, ...channels };
      if (body.webhookUrl === null) delete body.webhookSecret;
      const r = await call(t.app, 'PUT', '/api/settings/notifications', { key: a.key, body });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      if (body.email) await confirmAddress(body.email as string);
      return { ...a, path, email: body.email as string | null };
    };
    const log = async (key: string, query = '') => {
      const r = await call(t.app, 'GET', `/api/notifications/deliveries${query}`, { key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body as Delivery[];
    };
    const raise = (accountId: string, kind: NotificationKind = 'ssl_expiring', message = `m-${randomUUID()}`, domainId: string | null = null) => notify(t.ctx, { accountId, kind, message, domainId });
    const settings = async (key: string) => (await call(t.app, 'GET', '/api/settings/notifications', { key })).body as NotificationSettings;
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

      const mail = mailsTo(a.email!)[0];
      assert.ok(mail, 'the e-mail arrived');
      assert.equal(mail.from, FROM);
      const headers = mail.raw.slice(0, mail.raw.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' '); // unfolded
      assert.match(headers, new RegExp(`^Subject: \\[Rampart\\] Certificate expiring \\(domain ${domainId}\\)$`, 'm'), 'our words and the id: the message is in the body');
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
      assert.deepEqual(
        (await log(a.key)).map((d) => [d.kind, d.channel]),
        [['account_frozen', 'webhook']],
      );
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
      assert.match(report.message, /^Shield server "edge-fold": Reload to revision 4 failed\. The server serves its previous configuration.*save it again\.$/);
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
          assert.equal((await run()).attempted, 1);
          d = (await log(a.key))[0]!;
          if (d.status !== 'pending') break;
          // The next attempt waits for its own retry time and for the endpoint's circuit (paused after 5 failures).
          const paused = (await settings(a.key)).webhookStatus?.pausedUntil;
          t.clock.set(new Date(Math.max(Date.parse(d.nextAttemptAt!), paused ? Date.parse(paused) : 0)));
        }
        assert.equal(d!.status, 'given_up');
        assert.equal(d!.nextAttemptAt, null);
        assert.equal(d!.lastStatus, 503);
        assert.equal(d!.lastError, 'the receiver answered HTTP 503');
        assert.equal(d!.attempts, times.length);
        assert.ok(times.at(-1)! - start >= DELIVERY_GIVE_UP_MS, 'the last attempt came a day after');
        assert.ok(times.at(-2)! - start < DELIVERY_GIVE_UP_MS, 'and the one before within the day');
        // Five attempts on the retry schedule, then the circuit's pauses (1, 2, 4 ... 60 minutes): about 30 in a day.
        assert.ok(d!.attempts > 20 && d!.attempts < 40, `about 30 attempts: ${d!.attempts}`);
        for (let i = CIRCUIT_THRESHOLD; i < times.length; i++) assert.ok(times[i]! - times[i - 1]! >= circuitPauseMs(i), `attempt ${i + 1} waited for the circuit`);
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
      assert.deepEqual((await log(a.key)).map((d) => [d.channel, d.status, d.lastError]).sort(), [
        ['email', 'pending', 'e-mail is not configured on the control plane (RAMPART_SMTP_URL)'],
        ['webhook', 'pending', 'the receiver answered HTTP 500'],
      ]);
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
      const lookup = mock.method(dns.promises, 'lookup', (host: string) => Promise.resolve(host === 'rebind.test' ? ([{ address: '127.0.0.1', family: 4 }] as LookupAddress[]) : []));
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
      assert.deepEqual(
        second.map((d) => d.id),
        [all[2]!.id, all[3]!.id],
      );
      const theirs = (await log(other.key))[0]!.id;
      assert.equal((await call(t.app, 'GET', `/api/notifications/deliveries?before=${theirs}`, { key: a.key })).status, 400);
      assert.ok(!all.some((d) => d.id === theirs));
      await run();
    });

    test('runs at the same time share the due deliveries out: each is attempted once', async () => {
      const a = await account({ email: null });
      for (let i = 0; i < 30; i++) await raise(a.accountId, 'server_down', `parallel ${i}`);
      const results = await Promise.all([run(), run(), run()]);
      assert.equal(
        results.reduce((sum, r) => sum + r.attempted, 0),
        30,
      );
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
        await waitFor(() => hooksTo(a.path).length === 1 && mailsTo(a.email!).length === 1, 'the kicked delivery', 3000, 10);
        assert.ok(Date.now() - started < 2000);
        await waitFor(async () => (await log(a.key)).every((d) => d.status === 'delivered'), 'the log to say delivered', 3000, 10);
      } finally {
        t.ctx.delivery = saved;
        await runner.stop();
      }
    });

    // Issue 20, point 3: one account cannot delay another's notifications.

    test("a backlog towards a webhook that never answers does not delay another account's server_down: that endpoint holds one attempt, the other account goes next", async () => {
      const held: import('node:http').ServerResponse[] = [];
      let answering = false; // the receiver answers nothing until the test ends
      const dead = await webhookReceiver((_req, res) => void (answering ? res.writeHead(204).end() : held.push(res)));
      const a = await account({ email: null, webhookUrl: `${dead.url}/hook/a` });
      const b = await account({ email: null });
      const runner = deliveryRunner(t.ctx, { allowPrivateWebhooks: true, smtpFrom: FROM, intervalMs: 60_000 }, (msg, err) => assert.fail(`${msg}: ${String(err)}`));
      const saved = t.ctx.delivery;
      t.ctx.delivery = { ...saved!, queued: () => runner.kick() };
      try {
        // The burst is queued first, B's server_down after it: B's is the newest due delivery.
        for (let i = 0; i < 40; i++) await raise(a.accountId, 'server_down', `burst ${i}`);
        await raise(b.accountId, 'server_down', 'b first');
        await waitFor(() => hooksTo(b.path).length === 1, "B's server_down", 5000, 10);
        assert.equal(dead.requests.length, 1, "A's endpoint has one attempt under way, never more");

        // While A's attempt still hangs (10 s timeout), a new notification of B goes out at once.
        await raise(b.accountId, 'server_down', 'b second');
        await waitFor(() => hooksTo(b.path).length === 2, "B's second server_down", 5000, 10);
        assert.equal(dead.requests.length, 1);
        assert.deepEqual(
          hooksTo(b.path).map((r) => (JSON.parse(r.body) as { message: string }).message),
          ['b first', 'b second'],
        );
        const aLog = await log(a.key);
        assert.equal(aLog.filter((d) => d.attempts > 0).length, 0, 'no attempt of A has finished');
      } finally {
        t.ctx.delivery = saved;
        answering = true;
        for (const res of held.splice(0)) res.writeHead(204).end();
        await runner.stop();
        await run(); // A's backlog, so that later tests do not wait for it
      }
    });

    test('endpoints take turns: two backlogs and a single delivery are interleaved, oldest first within each endpoint', async () => {
      await run(); // what earlier tests left due
      const a = await account({ email: null });
      const c = await account({ email: null });
      const b = await account({ email: null });
      for (let i = 0; i < 6; i++) await raise(a.accountId, 'server_error', `a${i}`);
      for (let i = 0; i < 6; i++) await raise(c.accountId, 'server_error', `c${i}`);
      await raise(b.accountId, 'server_down', 'b0');
      const before = hook.requests.length;
      // One worker makes the order plain: each endpoint's turn comes after every other endpoint with due work.
      await runDeliveries(t.ctx, { ...options, concurrency: 1 });
      const ours = [a.path, b.path, c.path];
      const order = hook.requests
        .slice(before)
        .filter((r) => ours.some((p) => r.url.startsWith(p)))
        .map((r) => (JSON.parse(r.body) as { message: string }).message);
      assert.equal(order.length, 13);
      assert.ok(order.indexOf('b0') <= 2, `B is served within the first round: ${order.join(' ')}`);
      assert.deepEqual(
        order.filter((m) => m.startsWith('a')),
        ['a0', 'a1', 'a2', 'a3', 'a4', 'a5'],
        'oldest first within an endpoint',
      );
      for (let i = 1; i < order.length; i++) assert.notEqual(order[i]![0], order[i - 1]![0], `no endpoint twice in a row while another waits: ${order.join(' ')}`);
    });

    test('an endpoint that keeps failing opens its circuit: 5 failures, then one attempt per pause (1 min, 2 min ...), and a success closes it', async () => {
      let status = 503;
      const flaky = await webhookReceiver((_req, res) => void res.writeHead(status).end());
      const a = await account({ email: null, webhookUrl: `${flaky.url}/hook/flaky` });
      for (let i = 0; i < 20; i++) await raise(a.accountId, 'server_error', `e${i}`);
      await run();
      assert.equal(flaky.requests.length, CIRCUIT_THRESHOLD, 'five attempts, then the circuit opens');
      const paused = (await settings(a.key)).webhookStatus!;
      assert.deepEqual([paused.state, paused.consecutiveFailures, paused.lastError], ['paused', 5, 'the receiver answered HTTP 503']);
      assert.equal(paused.pausedUntil, new Date(t.clock.now().getTime() + circuitPauseMs(5)).toISOString());
      assert.equal(paused.failingSince, t.clock.now().toISOString());
      t.clock.advance(circuitPauseMs(5) - 1000);
      await run();
      assert.equal(flaky.requests.length, CIRCUIT_THRESHOLD, 'nothing is sent while the circuit is open');
      t.clock.advance(1000);
      await run();
      assert.equal(flaky.requests.length, CIRCUIT_THRESHOLD + 1, 'one attempt when the pause is over');
      const reopened = (await settings(a.key)).webhookStatus!;
      assert.deepEqual([reopened.state, reopened.consecutiveFailures], ['paused', 6]);
      assert.equal(reopened.pausedUntil, new Date(t.clock.now().getTime() + circuitPauseMs(6)).toISOString());
      assert.equal(circuitPauseMs(6), 2 * circuitPauseMs(5));

      status = 204;
      t.clock.advance(circuitPauseMs(6));
      await run();
      assert.equal(flaky.requests.length, 26, 'a success closes the circuit and the backlog goes out');
      assert.ok((await log(a.key)).every((d) => d.status === 'delivered'));
      const ok = (await settings(a.key)).webhookStatus!;
      assert.deepEqual(ok, { state: 'ok', consecutiveFailures: 0, failingSince: null, pausedUntil: null, disabledAt: null, lastError: null });
    });

    test('an endpoint failing for 3 days is disabled: its deliveries are given up, nothing more is queued for it, the account is told by its other channel, and saving the webhook turns it back on', async () => {
      const down = await webhookReceiver((_req, res) => void res.writeHead(500).end());
      const a = await account({ webhookUrl: `${down.url}/hook/down`, kinds: ['server_error', 'delivery_disabled'] });
      const start = t.clock.now().getTime();
      let lastRaise = -Infinity;
      let status = (await settings(a.key)).webhookStatus!;
      for (let i = 0; i < 500 && status.state !== 'disabled'; i++) {
        // A notification every 6 hours keeps deliveries coming while the endpoint fails.
        if (t.clock.now().getTime() - lastRaise >= 6 * 3600_000) {
          await raise(a.accountId, 'server_error', `down ${i}`);
          lastRaise = t.clock.now().getTime();
        }
        await run();
        status = (await settings(a.key)).webhookStatus!;
        const due = (await log(a.key)).filter((d) => d.channel === 'webhook' && d.status === 'pending').map((d) => Date.parse(d.nextAttemptAt!));
        const next = Math.max(Math.min(...due, lastRaise + 6 * 3600_000), status.pausedUntil ? Date.parse(status.pausedUntil) : 0);
        t.clock.set(new Date(Math.max(next, t.clock.now().getTime() + 1000)));
      }
      assert.equal(status.state, 'disabled');
      const disabledAt = Date.parse(status.disabledAt!);
      assert.ok(disabledAt - Date.parse(status.failingSince!) >= ENDPOINT_DISABLE_AFTER_MS, 'after 3 days of failures');
      assert.ok(disabledAt - start < ENDPOINT_DISABLE_AFTER_MS + 2 * 3600_000, 'and not much later');
      const webhookLog = (await log(a.key, '?limit=200')).filter((d) => d.channel === 'webhook');
      assert.ok(
        webhookLog.every((d) => d.status !== 'pending'),
        'nothing is left pending for it',
      );
      assert.ok(webhookLog.some((d) => d.lastError === 'not delivered: the webhook was disabled after failing for 3 days'));
      assert.ok(down.requests.length < 120, `the circuit spaced the attempts: ${down.requests.length} in 3 days`);

      const told = (await notifications(a.key)).find((n) => n.kind === 'delivery_disabled');
      assert.ok(told, 'a delivery_disabled notification');
      assert.match(told.message, /^Notifications are no longer sent to the webhook of this account: every attempt failed for 3 days \(the last: the receiver answered HTTP 500\)/);
      await run();
      const mail = mailsTo(a.email!).find((m) => /Subject: \[Rampart\] Notification channel disabled/.test(m.raw));
      assert.ok(mail, 'the account is told by e-mail');
      assert.ok(mailText(mail.raw).includes('save the channel again'));

      const requestsBefore = down.requests.length;
      await raise(a.accountId, 'server_error', 'after disabling');
      assert.equal((await log(a.key)).filter((d) => d.channel === 'webhook' && d.status === 'pending').length, 0, 'nothing is queued for a disabled webhook');
      await run();
      assert.equal(down.requests.length, requestsBefore);

      const r = await call(t.app, 'PUT', '/api/settings/notifications', { key: a.key, body: { webhookUrl: `${hook.url}${a.path}` } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal((r.body as NotificationSettings).webhookStatus!.state, 'ok', 'saving the webhook turns it back on');
      await raise(a.accountId, 'server_error', 'back on');
      await run();
      assert.ok(hooksTo(a.path).some((req) => (JSON.parse(req.body) as { message: string }).message === 'back on'));
    });

    test("the control plane's own failures (an unreadable secret) do not count against the endpoint", async () => {
      const a = await account({ email: null });
      for (let i = 0; i < 8; i++) await raise(a.accountId);
      const key = t.ctx.secretKey;
      t.ctx.secretKey = secretKeyFrom('another-key-than-the-one-it-was-stored-with');
      try {
        assert.equal((await run()).failed, 8);
      } finally {
        t.ctx.secretKey = key;
      }
      assert.equal((await settings(a.key)).webhookStatus!.state, 'ok');
    });

    test('an e-mail address is confirmed before anything is sent to it: a single-use link, stored hashed, spaced out, expiring', async () => {
      const a = await newAccount(t.app);
      const email = `confirm-${a.accountId.slice(0, 8)}@example.com`;
      const put = await call(t.app, 'PUT', '/api/settings/notifications', { key: a.key, body: { email } });
      assert.equal(put.status, 200, JSON.stringify(put.body));
      const view = put.body as NotificationSettings & { emailConfirmationSentAt: string | null };
      assert.deepEqual([view.email, view.emailConfirmed, view.emailConfirmationSentAt], [email, false, t.clock.now().toISOString()]);

      // The confirmation e-mail: our words and the token, nothing the account wrote.
      const confirmations = () => smtp.messages.filter((m) => m.to.includes(email) && /Confirm the address/.test(m.raw));
      assert.equal(confirmations().length, 1);
      const text = mailText(confirmations()[0]!.raw);
      const token = /^([A-Za-z0-9_-]{43})$/m.exec(text)![1]!;
      assert.match(confirmations()[0]!.raw, /^Subject: \[Rampart\] Confirm the address for notifications\r$/m);
      const row = await notificationSettings(t.ctx.db, a.accountId);
      assert.equal(row!.email_token_hash, createHash('sha256').update(token).digest('hex'), 'stored as its SHA-256');
      assert.ok(!JSON.stringify(row).includes(token), 'the token itself is not stored');

      // Unconfirmed: a notification queues no e-mail, and nothing but the confirmation reached the address.
      await raise(a.accountId, 'server_down', 'before confirming');
      assert.deepEqual(await log(a.key), []);
      await run();
      assert.deepEqual(mailsTo(email), []);

      // At most one confirmation e-mail a minute.
      const again = await call(t.app, 'POST', '/api/settings/notifications/email/confirmation', { key: a.key });
      assert.equal(again.status, 429);
      assert.match((again.body as { error: string }).error, /^email: a confirmation e-mail was sent less than a minute ago/);
      assert.ok(Number(again.headers['retry-after']) > 0);
      assert.equal(confirmations().length, 1);

      const confirm = (body: unknown) => call(t.app, 'POST', '/api/settings/notifications/email/confirm', { body });
      const wrong = await confirm({ token: `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}` });
      assert.equal(wrong.status, 400);
      assert.match((wrong.body as { error: string }).error, /^token: /);
      assert.equal((await confirm({})).status, 400);
      const ok = await confirm({ token });
      assert.deepEqual([ok.status, ok.body], [200, { email }]);
      assert.equal((await confirm({ token })).status, 400, 'single use');
      assert.equal((await call(t.app, 'GET', '/api/settings/notifications', { key: a.key })).body.emailConfirmed, true);

      // Confirmed: notifications are delivered to it.
      await raise(a.accountId, 'server_down', 'after confirming');
      await run();
      assert.equal(mailsTo(email).length, 1);
      assert.ok(mailText(mailsTo(email)[0]!.raw).includes('after confirming'));

      // A new address starts unconfirmed; a link expires after 24 hours; a new one replaces it.
      const other = `other-${a.accountId.slice(0, 8)}@example.com`;
      t.clock.advance(60_000);
      assert.equal((await call(t.app, 'PUT', '/api/settings/notifications', { key: a.key, body: { email: other } })).body.emailConfirmed, false);
      const first = /^([A-Za-z0-9_-]{43})$/m.exec(mailText(smtp.messages.findLast((m) => m.to.includes(other))!.raw))![1]!;
      await raise(a.accountId, 'server_down', 'to the new address');
      await run();
      assert.equal(smtp.messages.filter((m) => m.to.includes(other)).length, 1, 'only its confirmation');
      t.clock.advance(24 * 3600_000);
      assert.equal((await confirm({ token: first })).status, 400, 'expired');
      const resent = await call(t.app, 'POST', '/api/settings/notifications/email/confirmation', { key: a.key });
      assert.equal(resent.status, 200, JSON.stringify(resent.body));
      await confirmAddress(other);
      assert.equal((await call(t.app, 'POST', '/api/settings/notifications/email/confirmation', { key: a.key })).status, 400, 'already confirmed');
    });

    test("e-mail subjects carry our words and ids only; a server's name goes in the body, quoted, escaped and shortened", async () => {
      const a = await account({ webhookUrl: null });
      const name = 'Buy pills https://p.example \u202e!lave now 50% off, call us today';
      const server = (await call(t.app, 'POST', '/api/servers', { key: a.key, body: { name } })).body as { id: string };
      await notifyFromServer(t.ctx, { accountId: a.accountId, serverId: server.id, kind: 'server_down', message: notificationMessages.serverDown(name) });
      await run();
      const [mail] = mailsTo(a.email!);
      assert.ok(mail);
      const headers = mail.raw.slice(0, mail.raw.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' ');
      const subject = /^Subject: (.*)$/m.exec(headers)![1]!;
      assert.equal(subject, `[Rampart] Server down (server ${server.id})`);
      const body = Buffer.from(mailText(mail.raw), 'latin1').toString('utf8'); // mailText gives the bytes; the mail is UTF-8
      assert.ok(body.includes('Shield server "Buy pills https://p.example \\u{202e}!lave now …" disconnected'), body);
      assert.ok(!body.includes('\u202e'), 'the override character itself is not sent');
      assert.ok(!body.includes('call now'), 'the name is cut');
    });
  });
}
