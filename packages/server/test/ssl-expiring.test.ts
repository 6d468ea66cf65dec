import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { recordCertificateStatus } from '../src/services/certificates.js';
import { healthIntervalFromEnv, runHealthCycle } from '../src/services/health.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md: ssl_expiring when a certificate expires within 7 days, checked in the health cycle.
// Once per certificate: a renewed certificate (a later expiry) warns again when its time comes.

const DAY_MS = 86_400_000;

test('RAMPART_HEALTH_INTERVAL: seconds, 300 by default, nonsense refused', () => {
  assert.equal(healthIntervalFromEnv(undefined), 300);
  assert.equal(healthIntervalFromEnv(''), 300);
  assert.equal(healthIntervalFromEnv('60'), 60);
  assert.equal(healthIntervalFromEnv('0.5'), 0.5);
  for (const bad of ['0', '-5', 'soon', '1e9', 'NaN']) assert.throws(() => healthIntervalFromEnv(bad), /RAMPART_HEALTH_INTERVAL/, bad);
});

for (const backend of await backends()) {
  describe(`ssl_expiring on ${backend}`, async () => {
    const t = await makeTestApp(backend);
    const app = t.app;
    const start = new Date('2030-03-01T12:00:00Z');
    t.clock.set(start);

    async function setup(sslEnabled = true) {
      const { key, accountId } = await newAccount(app);
      const s = await call(app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
      const d = await call(app, 'POST', '/api/domains', { key, body: { domain: 'shop.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [s.body.id], sslEnabled } });
      assert.equal(d.status, 201);
      const agent = { serverId: s.body.id as string, accountId };
      const report = async (expires: Date) =>
        assert.ok(await recordCertificateStatus(t.ctx, agent, { domain: 'shop.example.com', status: 'active', expiresAt: Math.floor(expires.getTime() / 1000), message: null }));
      const warnings = async () => {
        const r = await call(app, 'GET', '/api/notifications', { key });
        return (r.body as { kind: string; message: string }[]).filter((n) => n.kind === 'ssl_expiring');
      };
      return { key, report, warnings };
    }

    test('raised once per certificate, from 7 days before its expiry; a renewed certificate warns again', async () => {
      t.clock.set(start);
      const { report, warnings } = await setup();
      const firstExpiry = new Date(start.getTime() + 30 * DAY_MS);
      await report(firstExpiry);
      await runHealthCycle(t.ctx, start);
      assert.equal((await warnings()).length, 0, '30 days ahead');
      await runHealthCycle(t.ctx, new Date(firstExpiry.getTime() - 7 * DAY_MS - 60_000));
      assert.equal((await warnings()).length, 0, 'a minute more than 7 days ahead');

      const due = new Date(firstExpiry.getTime() - 6 * DAY_MS);
      await runHealthCycle(t.ctx, due);
      const first = await warnings();
      assert.equal(first.length, 1);
      assert.match(first[0]!.message, /shop\.example\.com/);
      assert.match(first[0]!.message, /2030-03-31/);
      for (const later of [due, new Date(due.getTime() + DAY_MS), new Date(firstExpiry.getTime() + DAY_MS)]) await runHealthCycle(t.ctx, later);
      assert.equal((await warnings()).length, 1, 'the same certificate warns once, expired or not');

      // Renewed: 90 more days. Nothing until its own last week.
      const renewed = new Date(firstExpiry.getTime() + 90 * DAY_MS);
      await report(renewed);
      await runHealthCycle(t.ctx, new Date(firstExpiry.getTime() + DAY_MS));
      assert.equal((await warnings()).length, 1);
      await runHealthCycle(t.ctx, new Date(renewed.getTime() - 2 * DAY_MS));
      const second = await warnings();
      assert.equal(second.length, 2);
      assert.match(second[0]!.message, /2030-06-29/);
    });

    test('no warning once SSL is turned off, and none reaches another account', async () => {
      t.clock.set(start);
      const turnedOff = await setup(true);
      const other = await setup(true);
      await turnedOff.report(new Date(start.getTime() + 2 * DAY_MS));
      await other.report(new Date(start.getTime() + 2 * DAY_MS));
      const [d] = (await call(app, 'GET', '/api/domains', { key: turnedOff.key })).body as { id: string }[];
      assert.equal((await call(app, 'PUT', `/api/domains/${d!.id}`, { key: turnedOff.key, body: { sslEnabled: false } })).status, 200);
      await runHealthCycle(t.ctx, start);
      assert.equal((await turnedOff.warnings()).length, 0);
      assert.equal((await other.warnings()).length, 1);
    });
  });
}
