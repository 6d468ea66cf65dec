import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ServiceContext } from '../src/context.js';
import { openDatabase } from '../src/db/database.js';
import { ORDER_WINDOW_MS, ORDERS_PER_REGISTERED_DOMAIN, registeredDomain, requestOrderSlot, type AgentIdentity } from '../src/services/certificates.js';
import { backends, call, makeTestApp, newAccount, postgresUrl } from './helpers.js';

// The authority's cap (docs/api.md, "HTTPS certificates": 50 orders per registered domain per week), kept by the service for each
// account: a slot is an order the agent may place; the account's 51st in 7 days for one registered
// domain is refused, whichever of its servers or whichever process asks.

test('registered domains follow the Public Suffix List', () => {
  assert.equal(registeredDomain('a.example.co.uk'), 'example.co.uk');
  assert.equal(registeredDomain('b.c.example.co.uk'), 'example.co.uk');
  assert.equal(registeredDomain('www.example.com'), 'example.com');
  assert.equal(registeredDomain('shop.example.com'), 'example.com');
  assert.equal(registeredDomain('foo.github.io'), 'foo.github.io', 'the private section counts: each project on its own');
  assert.equal(registeredDomain('localhost'), 'localhost', 'no registered domain: the host itself');
});

for (const backend of await backends()) {
  describe(`certificate order slots on ${backend}`, async () => {
    const t = await makeTestApp(backend);
    const app = t.app;
    const start = t.clock.now();

    /** A server of a new account serving these domains (SSL on unless listed in sslOff). */
    async function agentFor(domains: string[], sslOff: string[] = []): Promise<AgentIdentity & { key: string }> {
      const { key, accountId } = await newAccount(app);
      const s = await call(app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
      assert.equal(s.status, 201);
      for (const domain of domains) {
        const r = await call(app, 'POST', '/api/domains', {
          key,
          body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [s.body.id], sslEnabled: !sslOff.includes(domain) },
        });
        assert.equal(r.status, 201, JSON.stringify(r.body));
      }
      return { serverId: s.body.id, accountId, key };
    }
    const orders = async (registered: string) =>
      Number(
        (
          await t.ctx.db
            .selectFrom('certificate_orders')
            .select((eb) => eb.fn.countAll().as('n'))
            .where('registered_domain', '=', registered)
            .executeTakeFirstOrThrow()
        ).n,
      );

    test("50 orders a week per registered domain across an account's subdomains and servers; the 51st is refused until the oldest is 7 days old; another account counts on its own", async () => {
      t.clock.set(start);
      const one = await agentFor(['a.example.co.uk', 'b.example.co.uk', 'other.example.org']);
      const two = await agentFor(['c.example.co.uk']); // another account, same registered domain
      for (let i = 0; i < ORDERS_PER_REGISTERED_DOMAIN; i++) {
        const r = await requestOrderSlot(t.ctx, one, i % 2 === 0 ? 'a.example.co.uk' : 'b.example.co.uk');
        assert.deepEqual(r, { granted: true, message: null }, `order ${i + 1}`);
        t.clock.advance(60_000); // the first order is the oldest
      }
      assert.equal(await orders('example.co.uk'), 50);
      for (const domain of ['a.example.co.uk', 'b.example.co.uk']) {
        const refused = await requestOrderSlot(t.ctx, one, domain);
        assert.equal(refused.granted, false, domain);
        assert.match(refused.message!, /example\.co\.uk/);
        assert.match(refused.message!, /\b50\b/);
        // The slot frees up when the first order (at `start`) leaves the 7-day window.
        assert.ok(refused.message!.includes(new Date(start.getTime() + ORDER_WINDOW_MS).toISOString()), refused.message!);
      }
      assert.equal(await orders('example.co.uk'), 50, 'a refusal places no order');
      // Another registered domain, and another account, are counted on their own.
      assert.deepEqual(await requestOrderSlot(t.ctx, one, 'other.example.org'), { granted: true, message: null });
      assert.deepEqual(await requestOrderSlot(t.ctx, two, 'c.example.co.uk'), { granted: true, message: null });

      t.clock.set(new Date(start.getTime() + ORDER_WINDOW_MS - 1000));
      assert.equal((await requestOrderSlot(t.ctx, one, 'a.example.co.uk')).granted, false, 'still inside the window');
      t.clock.set(new Date(start.getTime() + ORDER_WINDOW_MS + 1000));
      assert.deepEqual(await requestOrderSlot(t.ctx, one, 'a.example.co.uk'), { granted: true, message: null }, 'the oldest left the window');
      assert.equal((await requestOrderSlot(t.ctx, one, 'b.example.co.uk')).granted, false, 'and that slot is taken again');
    });

    test('concurrent requests, through one pool or two processes, never pass 50', async () => {
      t.clock.set(start);
      const agent = await agentFor(['x.race-test.net', 'y.race-test.net']);
      const contexts: ServiceContext[] = [t.ctx];
      const url = backend === 'postgres' ? await postgresUrl() : undefined;
      let second: Awaited<ReturnType<typeof openDatabase>> | undefined;
      if (url) {
        // A second control-plane process on the same database: its own pool, the same tables.
        second = await openDatabase({ url, schema: t.database.schema, poolSize: 4 });
        contexts.push({ ...t.ctx, db: second.db });
      }
      try {
        const attempts = Array.from({ length: 80 }, (_, i) => {
          return requestOrderSlot(contexts[i % contexts.length]!, agent, i % 2 === 0 ? 'x.race-test.net' : 'y.race-test.net');
        });
        const results = await Promise.all(attempts);
        assert.equal(results.filter((r) => r.granted).length, 50);
        assert.equal(results.filter((r) => !r.granted).length, 30);
        assert.equal(await orders('race-test.net'), 50);
      } finally {
        await second?.close();
      }
    });

    test("a domain that is not the server's own, or has SSL off, gets no slot", async () => {
      t.clock.set(start);
      const victim = await agentFor(['shop.victim.example']);
      const attacker = await agentFor(['attacker.example', 'plain.attacker.example'], ['plain.attacker.example']);
      const { key } = attacker;
      // A domain of the attacker's own account, but on none of its servers.
      const unassigned = await call(app, 'POST', '/api/domains', { key, body: { domain: 'idle.attacker.example', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [] } });
      assert.equal(unassigned.status, 201);
      for (const domain of ['shop.victim.example', 'idle.attacker.example', 'nowhere.example', 'not a host']) {
        const r = await requestOrderSlot(t.ctx, attacker, domain);
        assert.equal(r.granted, false, domain);
        assert.match(r.message!, /not a domain of this shield server/, domain);
      }
      const off = await requestOrderSlot(t.ctx, attacker, 'plain.attacker.example');
      assert.equal(off.granted, false);
      assert.match(off.message!, /SSL is turned off/);
      assert.equal(await orders('victim.example'), 0);
      assert.equal(await orders('attacker.example'), 0);
      // The right server of the right account gets one (names are matched case-insensitively).
      assert.equal((await requestOrderSlot(t.ctx, victim, 'SHOP.victim.example.')).granted, true);
      assert.equal((await requestOrderSlot(t.ctx, attacker, 'attacker.example')).granted, true);
    });
  });
}
