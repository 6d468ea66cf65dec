import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import { buildApp } from '../src/app.js';
import { notificationSettings } from '../src/data/notification-settings.js';
import { secretKeyFrom } from '../src/secret-box.js';
import { NOTIFICATION_KINDS, notify, type NotificationKind } from '../src/services/notifications.js';
import { ADMIN_TOKEN, backends, call, makeTestApp, newAccount, type TestApp } from './helpers.js';

// docs/notifications.md "Settings and delivery log", docs/api.md "Notifications": the list in
// pages with `read`, marking read, and the delivery settings, with the attempts a scripted
// attacker would make kept as tests.

const SECRET = 'whsec-0123456789abcdef-secret';
const FROZEN = { error: 'account is frozen, renew the plan to make changes' };
const HEALTHY = { state: 'ok', consecutiveFailures: 0, failingSince: null, pausedUntil: null, disabledAt: null, lastError: null };

type NotificationItem = { id: string; kind: string; message: string; serverId: string | null; domainId: string | null; count: number; read: boolean; createdAt: string };

/** The app as serve.ts sets it up: a secret key, webhooks to private addresses allowed, e-mail on. */
async function app(backend: 'pglite' | 'postgres', allowPrivateWebhooks = true): Promise<TestApp> {
  const t = await makeTestApp(backend);
  t.ctx.secretKey = secretKeyFrom('test-secret-key-for-notifications');
  t.ctx.delivery = { allowPrivateWebhooks, emailEnabled: true, queued: () => undefined };
  return t;
}

for (const backend of await backends()) {
  describe(`notifications: list, read, settings (${backend})`, async () => {
    const t = await app(backend);
    const raise = (accountId: string, kind: NotificationKind = 'server_down', message = `m-${randomUUID()}`, extra: { domainId?: string } = {}) =>
      notify(t.ctx, { accountId, kind, message, ...extra });
    const list = async (key: string, query = '') => {
      const r = await call(t.app, 'GET', `/api/notifications${query}`, { key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return { items: r.body as NotificationItem[], link: r.headers.link as string | undefined };
    };
    const settings = async (key: string) => (await call(t.app, 'GET', '/api/settings/notifications', { key })).body;
    const put = (key: string, body: unknown) => call(t.app, 'PUT', '/api/settings/notifications', { key, body });

    test('the list is newest first with read, domainId and count; pages follow the Link header to the end', async () => {
      const { key, accountId } = await newAccount(t.app);
      const domainId = randomUUID();
      for (let i = 0; i < 7; i++) {
        await raise(accountId, 'ssl_expiring', `n${i}`, i === 3 ? { domainId } : {});
        if (i !== 4) t.clock.advance(1000); // n4 and n5 share their time: the id breaks the tie
      }
      const all = (await list(key)).items;
      const tied = [all[1]!, all[2]!].sort((a, b) => (a.id > b.id ? -1 : 1)).map((n) => n.message);
      assert.deepEqual(
        all.map((n) => n.message),
        ['n6', ...tied, 'n3', 'n2', 'n1', 'n0'],
      );
      assert.deepEqual(new Set(all.map((n) => n.message)), new Set(['n0', 'n1', 'n2', 'n3', 'n4', 'n5', 'n6']));
      for (let i = 1; i < all.length; i++) {
        const [a, b] = [all[i - 1]!, all[i]!];
        assert.ok(a.createdAt > b.createdAt || (a.createdAt === b.createdAt && a.id > b.id), `newest first, then by id: ${a.message} before ${b.message}`);
      }
      assert.equal(all.find((n) => n.message === 'n3')!.domainId, domainId);
      assert.ok(all.every((n) => n.read === false && n.count === 1 && n.serverId === null));

      const seen: string[] = [];
      let page = await list(key, '?limit=3');
      const pages = [page.items.length];
      seen.push(...page.items.map((n) => n.id));
      while (page.link) {
        const m = /^<(\/api\/notifications\?limit=3&before=[0-9a-f-]{36})>; rel="next"$/.exec(page.link);
        assert.ok(m, page.link);
        page = await list(key, m[1]!.slice('/api/notifications'.length));
        pages.push(page.items.length);
        seen.push(...page.items.map((n) => n.id));
      }
      assert.deepEqual(pages, [3, 3, 1]);
      assert.deepEqual(
        seen,
        all.map((n) => n.id),
        'the pages are the list, in order, without repeats',
      );
      assert.equal((await list(key, '?limit=7')).link, undefined, 'no next page when the page holds the rest');
    });

    test("paging refuses a bad limit or cursor, naming it; another account's id is no cursor", async () => {
      const a = await newAccount(t.app);
      const b = await newAccount(t.app);
      await raise(b.accountId);
      const theirs = (await list(b.key)).items[0]!.id;
      for (const [query, field] of [
        ['?limit=0', 'limit'],
        ['?limit=201', 'limit'],
        ['?limit=abc', 'limit'],
        ['?limit=-1', 'limit'],
        ['?limit=1e2', 'limit'],
        ['?before=not-a-uuid', 'before'],
        [`?before=${theirs}`, 'before'],
        [`?before=${randomUUID()}`, 'before'],
      ] as const) {
        for (const path of ['/api/notifications', '/api/notifications/deliveries']) {
          const r = await call(t.app, 'GET', `${path}${query}`, { key: a.key });
          assert.equal(r.status, 400, `${path}${query}`);
          assert.ok(r.body.error.startsWith(field), `${path}${query}: ${r.body.error}`);
        }
      }
      assert.equal((await list(a.key, '?limit=200&other=1')).items.length, 0, 'other parameters are ignored');
    });

    test("marking read: the account's own ids only; unknown and other accounts' ids are ignored; the answer counts what was marked", async () => {
      const mine = await newAccount(t.app);
      const other = await newAccount(t.app);
      for (let i = 0; i < 3; i++) await raise(mine.accountId);
      await raise(other.accountId);
      const [n1, n2, n3] = (await list(mine.key)).items as [NotificationItem, NotificationItem, NotificationItem];
      const theirs = (await list(other.key)).items[0]!;

      const r = await call(t.app, 'POST', '/api/notifications/read', { key: mine.key, body: { ids: [n1.id, n2.id.toUpperCase(), theirs.id, randomUUID(), n1.id] } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body, { marked: 2 });
      const after = (await list(mine.key)).items;
      assert.deepEqual(
        after.map((n) => [n.id, n.read]),
        [
          [n1.id, true],
          [n2.id, true],
          [n3.id, false],
        ],
      );
      assert.equal((await list(other.key)).items[0]!.read, false, "another account's notification is not marked");
      assert.deepEqual((await call(t.app, 'POST', '/api/notifications/read', { key: mine.key, body: { ids: [n1.id] } })).body, { marked: 0 }, 'already read');
      // The other account cannot even learn that the id exists: the same answer as an unknown one.
      assert.deepEqual((await call(t.app, 'POST', '/api/notifications/read', { key: other.key, body: { ids: [n3.id] } })).body, { marked: 0 });
      assert.equal((await list(mine.key)).items[2]!.read, false);
    });

    test('marking read refuses a bad body, naming the field, and marks nothing', async () => {
      const { key, accountId } = await newAccount(t.app);
      await raise(accountId);
      const id = (await list(key)).items[0]!.id;
      const cases: [unknown, RegExp][] = [
        [{}, /^ids: is required/],
        [{ ids: [] }, /^ids: must NOT have fewer than 1 items/],
        [{ ids: Array.from({ length: 201 }, () => randomUUID()) }, /^ids: must NOT have more than 200 items/],
        [{ ids: [id, 'not-a-uuid'] }, /^ids\[1\]: must be a notification id \(a UUID\)/],
        [{ ids: [id, "' or 1=1 --"] }, /^ids\[1\]: /],
        [{ ids: [id, 'x'.repeat(101)] }, /^ids\[1\]: must NOT have more than 100 characters/],
        [{ ids: [42] }, /^ids\[0\]: must be string/],
        [{ ids: id }, /^ids: must be array/],
        [{ ids: [id], all: true }, /^unknown field: all/],
      ];
      for (const [body, error] of cases) {
        const r = await call(t.app, 'POST', '/api/notifications/read', { key, body });
        assert.equal(r.status, 400, JSON.stringify(body).slice(0, 100));
        assert.match(r.body.error, error);
      }
      assert.equal((await list(key)).items[0]!.read, false, 'nothing was marked');
    });

    test('settings: none at first; set, read back without the secret, stored encrypted; a field left out keeps its value, null clears it', async () => {
      const { key, accountId } = await newAccount(t.app);
      assert.deepEqual(await settings(key), {
        webhookUrl: null,
        webhookSecretSet: false,
        email: null,
        emailConfirmed: false,
        emailConfirmationSentAt: null,
        kinds: [],
        updatedAt: null,
        webhookStatus: null,
        emailStatus: null,
      });
      const r = await put(key, {
        webhookUrl: 'https://hooks.example.com/rampart?token=abc#frag',
        webhookSecret: SECRET,
        email: 'Ops@Example.COM',
        kinds: ['proxy_crash', 'server_down', 'server_down'],
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const expected = {
        webhookUrl: 'https://hooks.example.com/rampart?token=abc',
        webhookSecretSet: true,
        email: 'Ops@example.com',
        emailConfirmed: false, // until the link of its confirmation e-mail is opened (this app sends none: no SMTP)
        emailConfirmationSentAt: null,
        kinds: ['server_down', 'proxy_crash'],
        updatedAt: t.clock.now().toISOString(),
        webhookStatus: HEALTHY,
        emailStatus: HEALTHY,
      };
      assert.deepEqual(r.body, expected);
      assert.deepEqual(await settings(key), expected);
      const row = await notificationSettings(t.ctx.db, accountId);
      assert.ok(row?.webhook_secret_enc?.startsWith('v1.'), 'stored encrypted');
      assert.ok(!JSON.stringify(row).includes(SECRET), 'the secret is not stored in the clear');

      // Without an SMTP transport no confirmation e-mail can be sent: none is shown, and asking for one says why.
      const ask = await call(t.app, 'POST', '/api/settings/notifications/email/confirmation', { key });
      assert.equal(ask.status, 503);
      assert.match(ask.body.error, /^email: /);
      assert.equal((await settings(key)).emailConfirmationSentAt, null);

      // Only the kinds: the channels and the secret stay.
      assert.deepEqual((await put(key, { kinds: [] })).body, { ...expected, kinds: [] });
      assert.deepEqual((await put(key, { kinds: null })).body, { ...expected, kinds: [] });
      // A new URL keeps the stored secret.
      assert.equal((await put(key, { webhookUrl: 'https://other.example.com/h' })).body.webhookSecretSet, true);
      // null clears a channel; clearing the URL clears its secret.
      assert.deepEqual((await put(key, { email: null })).body.email, null);
      const cleared = (await put(key, { webhookUrl: null })).body;
      assert.deepEqual([cleared.webhookUrl, cleared.webhookSecretSet], [null, false]);
      assert.equal((await notificationSettings(t.ctx.db, accountId))?.webhook_secret_enc, null);
      // Setting a URL again needs a secret again.
      const again = await put(key, { webhookUrl: 'https://hooks.example.com/x' });
      assert.equal(again.status, 400);
      assert.match(again.body.error, /^webhookSecret: is required with webhookUrl/);
    });

    test('settings refuse bad input with a 400 naming the field, and store nothing', async () => {
      const { key } = await newAccount(t.app);
      const base = { webhookUrl: 'https://hooks.example.com/ok', webhookSecret: SECRET, email: 'ops@example.com', kinds: ['server_down'] };
      assert.equal((await put(key, base)).status, 200);
      const before = await settings(key);
      const cases: [unknown, RegExp][] = [
        [{}, /^body: must NOT have fewer than 1 properties/],
        [{ ...base, extra: 1 }, /^unknown field: extra/],
        [{ webhookUrl: 'ftp://hooks.example.com/' }, /^webhookUrl: must be an http or https URL/],
        [{ webhookUrl: 'hooks.example.com/rampart' }, /^webhookUrl: must be an http or https URL/],
        [{ webhookUrl: 'javascript:alert(1)' }, /^webhookUrl: must be an http or https URL/],
        [{ webhookUrl: 'https://user:pass@hooks.example.com/' }, /^webhookUrl: must not contain a user name or password/],
        [{ webhookUrl: `https://hooks.example.com/${'a'.repeat(2030)}` }, /^webhookUrl: must NOT have more than 2048 characters/],
        // Header injection: CR/LF (which the URL parser would silently drop), tabs, spaces.
        [{ webhookUrl: 'https://hooks.example.com/a\r\nX-Injected: 1' }, /^webhookUrl: must not contain spaces or control characters/],
        [{ webhookUrl: 'https://hooks.example.com/a\tb' }, /^webhookUrl: must not contain spaces or control characters/],
        [{ webhookUrl: 'https://hooks.example.com/a b' }, /^webhookUrl: must not contain spaces or control characters/],
        [{ webhookUrl: 42 }, /^webhookUrl: /],
        [{ webhookSecret: 'short' }, /^webhookSecret: must be 16 to 200 characters/],
        [{ webhookSecret: 'x'.repeat(201) }, /^webhookSecret: must NOT have more than 200 characters/],
        [{ webhookSecret: `${SECRET}\r\n` }, /^webhookSecret: must be 16 to 200 characters, without spaces or control characters/],
        [{ webhookSecret: null }, /^webhookSecret: is required with webhookUrl/],
        [{ webhookUrl: null, webhookSecret: SECRET }, /^webhookSecret: is only used with a webhookUrl/],
        [{ email: 'ops@localhost' }, /^email: must be one e-mail address/],
        [{ email: 'ops' }, /^email: must be one e-mail address/],
        [{ email: '@example.com' }, /^email: must be one e-mail address/],
        [{ email: 'a@b.com, victim@example.org' }, /^email: must be one e-mail address/],
        [{ email: 'a@b.com;victim@example.org' }, /^email: must be one e-mail address/],
        [{ email: 'Ops <ops@example.com>' }, /^email: must be one e-mail address/],
        [{ email: '"ops"@example.com' }, /^email: must be one e-mail address/],
        [{ email: 'ops@example.com\r\nBcc: victim@example.org' }, /^email: must be one e-mail address/],
        [{ email: 'ops@example.com\nRCPT TO:<victim@example.org>' }, /^email: must be one e-mail address/],
        [{ email: 'ops@-example.com' }, /^email: must be one e-mail address/],
        [{ email: `${'a'.repeat(65)}@example.com` }, /^email: must be one e-mail address/],
        [{ email: `a@${'b'.repeat(250)}.com` }, /^email: must NOT have more than 254 characters/],
        [{ email: 'ops..x@example.com' }, /^email: must be one e-mail address/],
        [{ kinds: ['server_down', 'nope'] }, /^kinds\[1\]: must be one of server_down, server_recovered, /],
        [{ kinds: 'server_down' }, /^kinds: /],
        [{ kinds: Array.from({ length: 21 }, () => 'server_down') }, /^kinds: must NOT have more than 20 items/],
      ];
      for (const [body, error] of cases) {
        const r = await put(key, body);
        assert.equal(r.status, 400, JSON.stringify(body).slice(0, 120));
        assert.match(r.body.error, error, JSON.stringify(body).slice(0, 120));
      }
      assert.deepEqual(await settings(key), before, 'nothing was stored');
      assert.equal(NOTIFICATION_KINDS.length, 14);
    });

    test('without RAMPART_SECRET_KEY a webhook secret cannot be set, and the answer says what the operator must do', async () => {
      const { key } = await newAccount(t.app);
      const saved = t.ctx.secretKey;
      t.ctx.secretKey = undefined;
      try {
        const r = await put(key, { webhookUrl: 'https://hooks.example.com/h', webhookSecret: SECRET });
        assert.equal(r.status, 400);
        assert.equal(r.body.error, 'webhookSecret: cannot be stored: the operator must set RAMPART_SECRET_KEY on the control plane');
        assert.equal((await settings(key)).webhookUrl, null);
        assert.equal((await put(key, { email: 'ops@example.com' })).status, 200, 'e-mail needs no key');
      } finally {
        t.ctx.secretKey = saved;
      }
    });

    test('without RAMPART_SMTP_URL an e-mail address cannot be set', async () => {
      const { key } = await newAccount(t.app);
      const saved = t.ctx.delivery;
      t.ctx.delivery = { ...saved!, emailEnabled: false };
      try {
        const r = await put(key, { email: 'ops@example.com' });
        assert.equal(r.status, 400);
        assert.equal(r.body.error, 'email: e-mail delivery is not set up on this control plane (the operator sets RAMPART_SMTP_URL)');
      } finally {
        t.ctx.delivery = saved;
      }
    });

    test('the secret never appears in an answer: not in GET or PUT, not in an error, not in the delivery log', async () => {
      const { key } = await newAccount(t.app);
      const answers: string[] = [];
      const keep = async (method: string, url: string, body?: unknown) => {
        const r = await call(t.app, method, url, { key, ...(body !== undefined ? { body } : {}) });
        answers.push(JSON.stringify(r.body), JSON.stringify(r.headers));
        return r;
      };
      await keep('PUT', '/api/settings/notifications', { webhookUrl: 'https://hooks.example.com/h', webhookSecret: SECRET });
      await keep('GET', '/api/settings/notifications');
      await keep('PUT', '/api/settings/notifications', { webhookSecret: `${SECRET}\u0000` });
      await keep('PUT', '/api/settings/notifications', { webhookSecret: SECRET.repeat(10) });
      await keep('PUT', '/api/settings/notifications', { webhookSecret: SECRET, bogus: SECRET });
      await keep('GET', '/api/notifications/deliveries');
      await keep('GET', '/api/settings/export');
      for (const a of answers) assert.ok(!a.includes(SECRET), a.slice(0, 300));
    });
  });
}

describe('private addresses, a frozen account', async () => {
  const t = await app('pglite', false);

  test('webhook URLs to private and loopback addresses are refused, in every spelling, unless the operator allows them', async () => {
    const { key } = await newAccount(t.app);
    const put = (webhookUrl: string) => call(t.app, 'PUT', '/api/settings/notifications', { key, body: { webhookUrl, webhookSecret: SECRET } });
    const refused = [
      'http://127.0.0.1/',
      'http://127.0.0.1:8080/admin/accounts',
      'http://127.1/',
      'http://2130706433/',
      'http://0x7f.0.0.1/',
      'http://0x7f000001/',
      'http://017700000001/',
      'http://0177.0.0.1/',
      'http://%31%32%37.0.0.1/',
      'http://localhost/',
      'http://LOCALHOST./',
      'http://api.localhost/',
      'http://[::1]/',
      'http://[0:0:0:0:0:0:0:1]/',
      'http://[::ffff:127.0.0.1]/',
      'http://[::ffff:7f00:1]/',
      'http://[64:ff9b::7f00:1]/',
      'http://[::]/',
      'http://0.0.0.0/',
      'http://0/',
      'http://169.254.169.254/latest/meta-data/',
      'http://[fe80::1]/',
      'http://[fd00::1]/',
      'http://10.0.0.1/',
      'http://172.16.5.4/',
      'http://192.168.1.1/',
      'http://100.64.0.1/',
      'http://[2002:7f00:1::]/',
      'https://127.0.0.1:443/',
    ];
    for (const url of refused) {
      const r = await put(url);
      assert.equal(r.status, 400, url);
      assert.match(r.body.error, /^webhookUrl: .* is a private or reserved address; webhooks are sent to public addresses only$/, url);
    }
    assert.equal((await call(t.app, 'GET', '/api/settings/notifications', { key })).body.webhookUrl, null, 'none was stored');
    assert.equal((await put('https://hooks.example.com/rampart')).status, 200, 'a public name is taken (its addresses are checked at each delivery)');

    t.ctx.delivery = { ...t.ctx.delivery!, allowPrivateWebhooks: true };
    const allowed = await put('http://127.0.0.1:9/hook');
    assert.equal(allowed.status, 200, JSON.stringify(allowed.body));
    assert.equal(allowed.body.webhookUrl, 'http://127.0.0.1:9/hook');
  });

  test('a frozen account can list notifications and mark them read (no resource changes), read the delivery log; its settings cannot change', async () => {
    const { key, accountId } = await newAccount(t.app, 'pro', 10);
    await notify(t.ctx, { accountId, kind: 'account_frozen', message: 'frozen' });
    const charged = await call(t.app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId } });
    assert.equal(charged.status, 200, JSON.stringify(charged.body));
    assert.equal((await call(t.app, 'GET', '/api/account', { key })).body.state, 'frozen');
    const items = (await call(t.app, 'GET', '/api/notifications', { key })).body as NotificationItem[];
    assert.ok(items.length >= 1);
    const r = await call(t.app, 'POST', '/api/notifications/read', { key, body: { ids: items.map((n) => n.id) } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.marked, items.length);
    assert.equal((await call(t.app, 'GET', '/api/notifications/deliveries', { key })).status, 200);
    assert.equal((await call(t.app, 'GET', '/api/settings/notifications', { key })).status, 200);
    const put = await call(t.app, 'PUT', '/api/settings/notifications', { key, body: { email: 'ops@example.com' } });
    assert.equal(put.status, 403);
    assert.deepEqual(put.body, FROZEN);
  });

  test('the request log never holds the webhook secret', async () => {
    let logged = '';
    const stream = new Writable({
      write(chunk, _enc, done) {
        logged += String(chunk);
        done();
      },
    });
    const logging = await buildApp({ ctx: t.ctx, adminToken: ADMIN_TOKEN, logger: { level: 'trace', stream } });
    await logging.ready();
    try {
      const { key } = await newAccount(logging);
      for (const body of [{ webhookUrl: 'https://hooks.example.com/h', webhookSecret: SECRET }, { webhookSecret: 'short' }, { webhookSecret: SECRET, nope: 1 }]) {
        await call(logging, 'PUT', '/api/settings/notifications', { key, body });
      }
      await call(logging, 'GET', '/api/settings/notifications', { key });
      assert.ok(logged.includes('/api/settings/notifications'), 'requests were logged');
      assert.ok(!logged.includes(SECRET));
    } finally {
      await logging.close();
    }
  });
});
