import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { DEFAULT_PLANS } from '../src/plans.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md "Plans and limits": shield servers per plan. Every server can raise notifications
// and hold an agent connection, so a plan bounds what one account costs the others (issue 20).

const PASSWORD = 'a-long-password-for-limits';

for (const backend of await backends()) {
  describe(`servers per plan (${backend})`, async () => {
    const t = await makeTestApp(backend);

    /** A browser session of a new account on this plan (a free account has no API key). */
    const session = async (plan: 'free' | 'pro') => {
      const a = await newAccount(t.app, plan, 100, PASSWORD);
      const r = await call(t.app, 'POST', '/api/auth/login', { body: { email: a.email, password: PASSWORD } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const c = r.cookies[0]!;
      return { ...a, cookie: `${c.name}=${c.value}` };
    };
    const create = (cookie: string, name: string) => call(t.app, 'POST', '/api/servers', { cookie, body: { name } });

    test("a free account has at most 3 servers: the next one is a 403 naming the plan's limit; a decommissioned one makes room", async () => {
      assert.equal(DEFAULT_PLANS.free.maxServers, 3);
      const a = await session('free');
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await create(a.cookie, `edge-${i}`);
        assert.equal(r.status, 201, JSON.stringify(r.body));
        ids.push((r.body as { id: string }).id);
      }
      const refused = await create(a.cookie, 'edge-3');
      assert.equal(refused.status, 403);
      assert.deepEqual(refused.body, { error: 'Maximum 3 servers allowed on the Free plan' });
      assert.equal(((await call(t.app, 'GET', '/api/servers', { cookie: a.cookie })).body as unknown[]).length, 3);

      assert.equal((await call(t.app, 'DELETE', `/api/servers/${ids[0]}`, { cookie: a.cookie })).status, 200);
      assert.equal((await create(a.cookie, 'edge-3')).status, 201);
      assert.equal((await create(a.cookie, 'edge-4')).status, 403);
    });

    test('creations at the same time cannot pass the limit', async () => {
      const a = await session('free');
      const results = await Promise.all(Array.from({ length: 8 }, (_, i) => create(a.cookie, `race-${i}`)));
      assert.deepEqual(results.map((r) => r.status).sort(), [201, 201, 201, 403, 403, 403, 403, 403]);
    });

    test('a Pro account has at most 25', async () => {
      assert.equal(DEFAULT_PLANS.pro.maxServers, 25);
      const a = await newAccount(t.app, 'pro');
      for (let i = 0; i < 25; i++) assert.equal((await call(t.app, 'POST', '/api/servers', { key: a.key, body: { name: `pro-${i}` } })).status, 201);
      const refused = await call(t.app, 'POST', '/api/servers', { key: a.key, body: { name: 'pro-25' } });
      assert.deepEqual([refused.status, refused.body], [403, { error: 'Maximum 25 servers allowed on the Pro plan' }]);
    });
  });
}
