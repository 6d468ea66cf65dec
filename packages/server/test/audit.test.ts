import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { secretKeyFrom } from '../src/secret-box.js';
import { AUDIT_RETENTION_DAYS, pruneAudit } from '../src/services/audit.js';
import { backends, call, makeTestApp, newAccount, type Backend, type TestApp } from './helpers.js';

// docs/api.md "Audit log": every change records who (API key name and prefix, the signed-in
// user's e-mail, the operator), what (object, action) and the changed fields before and after,
// secrets as "[secret]" and never their values; GET /api/audit with filters and pages, scoped by
// account, kept 90 days, and no route changes or deletes an entry.

interface Entry {
  id: string;
  at: string;
  actor: { type: string; name: string | null; keyPrefix: string | null };
  objectType: string;
  objectId: string | null;
  action: string;
  changed: string[];
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

const WEBHOOK_SECRET = 'whsec-audit-0123456789abcdef';
const PDNS = { provider: 'powerdns', apiUrl: 'http://127.0.0.1:8081', apiKey: 'pdns-api-key-audit-s3cr3t', serverId: 'localhost' } as const;
const ORIGINS = [{ ip: '192.0.2.10', port: 8080 }];

const apps: [Backend, TestApp][] = [];
for (const backend of await backends()) apps.push([backend, await makeTestApp(backend)]);

for (const [backend, t] of apps) {
  describe(`audit log on ${backend}`, () => {
    const app = t.app;
    t.ctx.secretKey = secretKeyFrom('test-secret-key-for-the-audit-log');
    t.ctx.allowPrivateDnsApi = true;
    t.ctx.delivery = { allowPrivateWebhooks: false, emailEnabled: false, queued: () => undefined };

    async function audit(key: string, query = ''): Promise<Entry[]> {
      const r = await call(app, 'GET', `/api/audit${query}`, { key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body as Entry[];
    }
    async function ok(method: string, url: string, key: string, body?: unknown) {
      const r = await call(app, method, url, { key, ...(body !== undefined ? { body } : {}) });
      assert.ok(r.status === 200 || r.status === 201, `${method} ${url}: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body;
    }
    /** The one entry of this object and action. */
    async function entry(key: string, objectId: string | null, action: string, objectType?: string): Promise<Entry> {
      const all = (await audit(key, '?limit=200')).filter((e) => e.objectId === objectId && e.action === action && (!objectType || e.objectType === objectType));
      assert.equal(all.length, 1, `one ${action} of ${objectId}: ${JSON.stringify(all)}`);
      return all[0]!;
    }

    test('who: the API key by name and prefix, the signed-in user by e-mail, the operator', async () => {
      const { key, email, accountId } = await newAccount(app, 'pro', 100, 'correct horse battery');
      const created = await entry(key, accountId, 'create', 'account');
      assert.deepEqual(created.actor, { type: 'operator', name: null, keyPrefix: null });
      assert.deepEqual(created.after, { email, plan: 'pro', balance: 100, password: '[secret]' }, 'the password (its hash) is never shown');
      const server = await ok('POST', '/api/servers', key, { name: 'edge-1' });
      const byKey = await entry(key, server.id, 'create');
      assert.deepEqual(byKey.actor, { type: 'api_key', name: 'default', keyPrefix: key.slice(0, 12) });
      assert.equal(byKey.objectType, 'server');
      assert.deepEqual(byKey.after, { name: 'edge-1', publicIp: null, status: 'offline', canary: false, connectionToken: '[secret]' });
      assert.equal(byKey.before, null);
      assert.ok(!JSON.stringify(await audit(key)).includes(server.connectionToken), 'the connection token never appears');

      const login = await call(app, 'POST', '/api/auth/login', { body: { email, password: 'correct horse battery' } });
      const cookie = `rampart_session=${login.cookies.find((c) => c.name === 'rampart_session')!.value}`;
      assert.equal((await call(app, 'PUT', `/api/servers/${server.id}`, { cookie, body: { name: 'edge-renamed' } })).status, 200);
      const bySession = await entry(key, server.id, 'update');
      assert.deepEqual(bySession.actor, { type: 'user', name: email, keyPrefix: null });
      assert.deepEqual(bySession.changed, ['name']);
      assert.deepEqual(bySession.before, { name: 'edge-1' });
      assert.deepEqual(bySession.after, { name: 'edge-renamed' });

      assert.equal((await call(app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body: { amount: 5, description: 'goodwill' } })).status, 201);
      const adjusted = await audit(key, '?action=adjust');
      assert.equal(adjusted.length, 1);
      const byOperator = adjusted[0]!;
      assert.equal(byOperator.objectType, 'transaction');
      assert.deepEqual(byOperator.actor, { type: 'operator', name: null, keyPrefix: null });
      assert.deepEqual([byOperator.before, byOperator.after], [{ balance: 100 }, { balance: 105, amount: 5, description: 'goodwill' }], 'fields that stayed (state) are left out');
    });

    test('what: domains, WAF rules, custom rules, API keys, plan and deposits, before and after', async () => {
      const { key, accountId } = await newAccount(app, 'pro', 1000);
      const server = await ok('POST', '/api/servers', key, { name: 'edge' });
      const domain = await ok('POST', '/api/domains', key, { domain: 'audit.example.com', origins: ORIGINS, serverIds: [server.id] });
      assert.equal((await entry(key, domain.id, 'create')).after!.domain, 'audit.example.com');
      await ok('PUT', `/api/domains/${domain.id}`, key, { wafMode: 'detect' });
      const d = await entry(key, domain.id, 'update');
      assert.deepEqual([d.changed, d.before, d.after], [['wafMode'], { wafMode: 'block' }, { wafMode: 'detect' }]);
      await ok('DELETE', `/api/domains/${domain.id}`, key);
      assert.equal((await entry(key, domain.id, 'delete')).before!.domain, 'audit.example.com');

      const rule = await ok('POST', '/api/waf', key, { rule_type: 'block_ip', value: '198.51.100.7' });
      await ok('PUT', `/api/waf/${rule.id}`, key, { enabled: false });
      const w = await entry(key, rule.id, 'update', 'waf_rule');
      assert.deepEqual([w.before, w.after], [{ enabled: true }, { enabled: false }]);
      await ok('DELETE', `/api/waf/${rule.id}`, key);
      assert.equal((await entry(key, rule.id, 'delete')).before!.value, '198.51.100.7');

      const custom = await ok('POST', '/api/rules', key, { name: 'login', expression: 'http.request.uri.path eq "/login"', action: 'block' });
      await ok('PUT', `/api/rules/${custom.id}`, key, { action: 'log' });
      const c = await entry(key, custom.id, 'update', 'custom_rule');
      assert.deepEqual([c.changed, c.before, c.after], [['action'], { action: 'block' }, { action: 'log' }], 'hits and times are not settings');

      const rotated = await ok('POST', '/api/waf/bot-secret/rotate', key);
      const r = await entry(key, null, 'rotate_bot_key', 'waf_settings');
      assert.deepEqual([r.before, r.after], [{ botKeyId: rotated.previous_key_id }, { botKeyId: rotated.key_id }]);

      const newKey = await ok('POST', '/api/settings/api-keys', key, { name: 'ci' });
      const k = await entry(key, newKey.id, 'create', 'api_key');
      assert.deepEqual(k.after, { name: 'ci', keyPrefix: newKey.key_prefix, key: '[secret]' });
      await ok('DELETE', `/api/settings/api-keys?id=${newKey.id}`, key);
      assert.deepEqual((await entry(key, newKey.id, 'delete')).before, { name: 'ci', keyPrefix: newKey.key_prefix });

      await ok('PUT', '/api/account/plan', key, { plan: 'enterprise' });
      const p = await entry(key, accountId, 'change_plan');
      assert.equal(p.before!.plan, 'pro');
      assert.equal(p.after!.plan, 'enterprise');

      const dep = await ok('POST', '/api/billing/deposits', key, { amount: 20 });
      assert.deepEqual((await entry(key, dep.id, 'create')).after, { amount: 20, status: 'pending' });
      assert.equal((await call(app, 'POST', `/admin/deposits/${dep.id}/confirm`, { admin: true, body: { txHash: 'pay-audit-1' } })).status, 200);
      const confirmed = await entry(key, dep.id, 'confirm');
      assert.equal(confirmed.actor.type, 'operator');
      assert.deepEqual([confirmed.before!.status, confirmed.after!.status, confirmed.after!.amount], ['pending', 'confirmed', 20]);

      assert.equal((await call(app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId } })).status, 200);
      const charge = (await audit(key, '?action=charge'))[0]!;
      assert.deepEqual([charge.objectType, charge.actor.type], ['transaction', 'operator']);
    });

    test('rollouts: the settings, a server made a canary, before and after', async () => {
      const { key } = await newAccount(app, 'pro', 1000);
      const server = await ok('POST', '/api/servers', key, { name: 'canary-edge' });
      await ok('PUT', `/api/servers/${server.id}`, key, { canary: true });
      const c = await entry(key, server.id, 'update', 'server');
      assert.deepEqual([c.changed, c.before, c.after], [['canary'], { canary: false }, { canary: true }]);
      await ok('PUT', '/api/settings/rollout', key, { mode: 'staged', bakeSeconds: 30 });
      const r = await entry(key, null, 'update', 'rollout_settings');
      assert.deepEqual(
        [r.before, r.after],
        [
          { mode: 'immediate', bakeSeconds: 60 },
          { mode: 'staged', bakeSeconds: 30 },
        ],
      );
    });

    test('secrets: webhook secrets and DNS credentials show as changed, never their values', async () => {
      const { key } = await newAccount(app, 'pro', 100);
      await ok('PUT', '/api/settings/notifications', key, { webhookUrl: 'https://hooks.example.com/rampart', webhookSecret: WEBHOOK_SECRET });
      await ok('PUT', '/api/settings/notifications', key, { webhookSecret: `${WEBHOOK_SECRET}-2` });
      const n = await entry(key, null, 'update', 'notification_settings');
      assert.deepEqual([n.changed, n.before, n.after], [['webhookSecret'], { webhookSecret: '[secret]' }, { webhookSecret: '[secret]' }]);
      t.clock.advance(1000);
      await ok('PUT', '/api/settings/notifications', key, { kinds: ['server_down'] });
      assert.deepEqual((await audit(key, '?objectType=notification_settings&limit=1'))[0]!.changed, ['kinds'], 'a secret left alone is not changed');

      await ok('PUT', '/api/settings/dns', key, PDNS);
      const dns = await entry(key, null, 'create', 'dns_settings');
      assert.deepEqual(dns.after, { provider: 'powerdns', apiUrl: PDNS.apiUrl, serverId: 'localhost', credentials: '[secret]' });
      await ok('PUT', '/api/settings/dns', key, PDNS);
      assert.equal((await audit(key, '?objectType=dns_settings')).length, 1, 'the same settings again change nothing');
      await ok('PUT', '/api/settings/dns', key, { ...PDNS, apiKey: `${PDNS.apiKey}-new` });
      assert.deepEqual((await entry(key, null, 'update', 'dns_settings')).changed, ['credentials']);
      await ok('DELETE', '/api/settings/dns', key);
      assert.equal((await entry(key, null, 'delete', 'dns_settings')).before!.credentials, '[secret]');

      const text = JSON.stringify(await audit(key, '?limit=200'));
      for (const secret of [WEBHOOK_SECRET, PDNS.apiKey, 'whsec']) assert.ok(!text.includes(secret), `${secret} never appears`);
    });

    test('a change that fails records nothing; another account sees nothing', async () => {
      const { key } = await newAccount(app, 'pro', 100);
      await ok('POST', '/api/waf', key, { rule_type: 'block_ip', value: '203.0.113.9' });
      const before = await audit(key);
      assert.equal((await call(app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '203.0.113.9' } })).status, 409);
      assert.equal((await call(app, 'PUT', '/api/account/plan', { key, body: { plan: 'free' } })).status, 409, 'the plan has API keys');
      assert.deepEqual(await audit(key), before);

      const other = await newAccount(app, 'pro', 100);
      assert.deepEqual(
        (await audit(other.key)).map((e) => [e.objectType, e.objectId]),
        [['account', other.accountId]],
        'its own creation only',
      );
      assert.equal((await call(app, 'GET', `/api/audit?before=${before[0]!.id}`, { key: other.key })).status, 400, "another account's entry is no cursor");
      assert.equal((await call(app, 'GET', '/api/audit')).status, 401);
    });

    test('filters and pages', async () => {
      const { key } = await newAccount(app, 'pro', 100);
      t.clock.advance(1);
      const start = t.clock.now();
      for (let i = 0; i < 5; i++) {
        t.clock.advance(1000);
        await ok('POST', '/api/servers', key, { name: `s${i}` });
      }
      const ci = await ok('POST', '/api/settings/api-keys', key, { name: 'ci' });
      t.clock.advance(1000);
      await ok('POST', '/api/waf', ci.key, { rule_type: 'block_ip', value: '198.51.100.1' });

      assert.equal((await audit(key, '?objectType=server')).length, 5);
      assert.equal((await audit(key, '?action=create&objectType=waf_rule')).length, 1);
      assert.deepEqual(
        (await audit(key, '?actor=ci')).map((e) => e.objectType),
        ['waf_rule'],
      );
      assert.deepEqual(
        (await audit(key, `?actor=${ci.key_prefix}`)).map((e) => e.objectType),
        ['waf_rule'],
      );
      assert.equal((await audit(key, '?actor=api_key')).length, 7);
      assert.equal((await audit(key, '?actor=operator')).length, 1, 'the account, created by the operator');
      const until = new Date(start.getTime() + 2500).toISOString();
      assert.deepEqual(
        (await audit(key, `?since=${start.toISOString()}&until=${until}`)).map((e) => e.after!.name),
        ['s1', 's0'],
        'the account was created before',
      );

      const seen: string[] = [];
      let url: string | undefined = '/api/audit?objectType=server&limit=2';
      while (url) {
        const r = await call(app, 'GET', url, { key });
        assert.equal(r.status, 200);
        seen.push(...(r.body as Entry[]).map((e) => e.after!.name as string));
        url = /<([^>]+)>; rel="next"/.exec(String(r.headers.link ?? ''))?.[1];
        if (url) assert.match(url, /objectType=server/, 'the Link header keeps the filters');
      }
      assert.deepEqual(seen, ['s4', 's3', 's2', 's1', 's0']);

      for (const [q, field] of [
        ['objectType=planet', 'objectType'],
        ['action=DROP%20TABLE', 'action'],
        ['since=yesterday', 'since'],
        [`since=${until}&until=${start.toISOString()}`, 'since'],
        ['limit=0', 'limit'],
      ] as const) {
        const r = await call(app, 'GET', `/api/audit?${q}`, { key });
        assert.equal(r.status, 400, q);
        assert.match(r.body.error, new RegExp(field), q);
      }
    });

    test('entries cannot be changed or deleted through the API; kept 90 days', async () => {
      const { key } = await newAccount(app, 'pro', 100);
      await ok('POST', '/api/servers', key, { name: 'kept' });
      const [e] = await audit(key, '?objectType=server');
      for (const [method, url] of [
        ['POST', '/api/audit'],
        ['PUT', `/api/audit/${e!.id}`],
        ['PATCH', `/api/audit/${e!.id}`],
        ['DELETE', `/api/audit/${e!.id}`],
        ['DELETE', '/api/audit'],
      ] as const) {
        assert.equal((await call(app, method, url, { key, body: {} })).status, 404, `${method} ${url}`);
        assert.equal((await call(app, method, url, { admin: true, body: {} })).status, 404, `operator ${method} ${url}`);
      }
      assert.deepEqual(await audit(key, '?objectType=server'), [e]);

      t.clock.advance((AUDIT_RETENTION_DAYS - 1) * 86_400_000);
      await ok('POST', '/api/servers', key, { name: 'newer' });
      await pruneAudit(t.ctx);
      assert.equal((await audit(key, '?objectType=server')).length, 2, 'younger than 90 days: kept');
      t.clock.advance(2 * 86_400_000);
      await pruneAudit(t.ctx);
      assert.deepEqual(
        (await audit(key)).map((x) => x.after!.name),
        ['newer'],
        "older than 90 days: gone (the account's creation too)",
      );
    });
  });
}
