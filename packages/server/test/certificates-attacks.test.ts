import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CLOSE } from '@rampart/protocol';
import { waitFor } from '../../../test/support/processes.js';
import { apiFixtures, type DomainView, FakeAgent, hubServer, WAIT_MS } from './fake-agent.js';
import { ADMIN_TOKEN, call, newAccount } from './helpers.js';

// An attacker holding one valid connection token, speaking the agent protocol over a raw
// WebSocket: certificate messages for domains that are not its server's, names that differ only
// by case or a trailing dot, malformed fields, replays and forged reports. docs/api.md: "The
// service acts on certificate messages only for domains assigned to the sending server."

const DAY = 86_400;
const KEY_AUTH = (token: string) => `${token}.${'k'.repeat(43)}`;

describe('certificate messages from a hostile agent', async () => {
  const { srv, agentUrl, agents } = await hubServer();
  const victim = await newAccount(srv.app, 'pro');
  const evil = await newAccount(srv.app, 'pro');

  const { newServer, newDomain, domain } = apiFixtures(srv.app);
  async function connect(token: string) {
    const a = await FakeAgent.connect(agentUrl, token);
    agents.push(a);
    return a;
  }
  const orders = async (domainName: string) => await srv.ctx.db.selectFrom('certificate_orders').select(['server_id', 'account_id']).where('domain', '=', domainName).execute();
  /** How the hub answers what was just sent: the close code, or 'open' when it went on answering. */
  const closeCode = (a: FakeAgent) => Promise.race([new Promise<number>((resolve) => a.ws.once('close', (code) => resolve(code))), a.barrier().then(() => 'open' as const)]);
  const certRows = async (domainId: string) => srv.ctx.db.selectFrom('domain_certificates').select(['server_id', 'status', 'expires_at']).where('domain_id', '=', domainId).execute();

  // The victim: two servers of shop.victim.test. The attacker: a server of the victim's account
  // that serves another domain only, and a server of another account with its own shop.victim.test.
  const v1 = await newServer(victim.key, 'victim-1');
  const v2 = await newServer(victim.key, 'victim-2');
  const inside = await newServer(victim.key, 'victim-unrelated');
  const outside = await newServer(evil.key, 'evil');
  const shop = await newDomain(victim.key, 'shop.victim.test', [v1.id, v2.id]);
  const blog = await newDomain(victim.key, 'blog.victim.test', [inside.id]);
  await newDomain(evil.key, 'shop.victim.test', [outside.id]);
  await newDomain(evil.key, 'evil.victim.test', [outside.id]);
  const [p1, p2, pi, po] = [await connect(v1.connectionToken), await connect(v2.connectionToken), await connect(inside.connectionToken), await connect(outside.connectionToken)];

  test('slot requests for a domain of another server or account, in any spelling, are refused and never counted', async () => {
    for (const name of ['shop.victim.test', 'SHOP.victim.TEST', 'shop.victim.test.', 'Shop.Victim.Test.']) {
      const r = await pi.requestSlot(name);
      assert.equal(r.granted, false, `${name} from a server of the account that does not serve it`);
      assert.match(r.message!, /is not a domain of this shield server/);
    }
    // The other account's agent names the victim's domain: it gets a slot for its own domain of that name only.
    assert.deepEqual(await po.requestSlot('SHOP.VICTIM.TEST.'), { granted: true, message: null });
    for (const name of ['shop.victim.test..', '.shop.victim.test', 'shop .victim.test', 'shop.victim.test\n', 'xn--', 'a'.repeat(253), '*.victim.test']) {
      const r = await pi.requestSlot(name);
      assert.equal(r.granted, false, JSON.stringify(name));
    }
    const rows = await orders('shop.victim.test');
    assert.deepEqual(
      rows.map((o) => [o.server_id, o.account_id]),
      [[outside.id, evil.accountId]],
      "only the other account's own order",
    );
    // The refusal names what was asked, but never more than a hostname's length.
    const long = await pi.requestSlot('x'.repeat(253));
    assert.ok(long.message!.length < 253 + 60, long.message!);
  });

  test('a replayed requestId is a new order each time: every grant is counted', async () => {
    const requestId = 'replayed-id';
    for (let i = 0; i < 3; i++) p1.send({ type: 'acme/slot-request', payload: { requestId, domain: 'shop.victim.test' } });
    await waitFor(() => p1.of('acme/slot-reply').filter((r) => r.requestId === requestId).length === 3, 'three replies', WAIT_MS, 10);
    const granted = p1.of('acme/slot-reply').filter((r) => r.requestId === requestId && r.granted).length;
    assert.equal(granted, 3);
    assert.equal((await orders('shop.victim.test')).filter((o) => o.server_id === v1.id).length, granted, 'no grant without a counted order');
  });

  test("challenges for a domain that is not the publisher's, in any spelling, reach no agent; its own domain in any spelling reaches only its peers, by the stored name", async () => {
    const challenges = (a: FakeAgent) => a.of('acme/challenge');
    for (const name of ['shop.victim.test', 'SHOP.VICTIM.TEST', 'shop.victim.test.']) {
      assert.equal(await pi.publish({ domain: name, token: `in-${name.length}`, keyAuthorization: KEY_AUTH(`in-${name.length}`), action: 'add' }), 0, `inside: ${name}`);
      assert.equal(await po.publish({ domain: name, token: `out-${name.length}`, keyAuthorization: KEY_AUTH(`out-${name.length}`), action: 'add' }), 0, `other account: ${name}`);
    }
    await Promise.all([p1.barrier(), p2.barrier(), pi.barrier(), po.barrier()]);
    for (const a of [p1, p2, pi, po]) assert.deepEqual(challenges(a), []);

    assert.equal(await p1.publish({ domain: 'Shop.Victim.Test.', token: 'own-1', keyAuthorization: KEY_AUTH('own-1'), action: 'add' }), 1);
    await waitFor(() => challenges(p2).length === 1, 'the relay to the other server', WAIT_MS, 10);
    assert.equal(challenges(p2)[0]!.domain, 'shop.victim.test', 'relayed under the stored name, never the spelling the publisher sent');
  });

  test('malformed or oversized tokens and key authorizations close the connection (4003) and are relayed to no one', async () => {
    const bad: Record<string, unknown>[] = [
      { token: '../../etc/passwd', keyAuthorization: KEY_AUTH('x') },
      { token: 'a/b', keyAuthorization: KEY_AUTH('x') },
      { token: 'a'.repeat(129), keyAuthorization: KEY_AUTH('x') },
      { token: '', keyAuthorization: KEY_AUTH('x') },
      { token: 'tok\r\nX-Injected: 1', keyAuthorization: KEY_AUTH('x') },
      { token: 'tok', keyAuthorization: `${KEY_AUTH('tok')}\n` },
      { token: 'tok', keyAuthorization: `tok.${'k'.repeat(44)}` },
      { token: 'tok', keyAuthorization: `<script>alert(1)</script>.${'k'.repeat(43)}` },
      { token: 'tok', keyAuthorization: 'x'.repeat(2_000_000) },
      { token: 'tok', keyAuthorization: KEY_AUTH('tok'), action: 'replace' },
      { token: 'tok', keyAuthorization: KEY_AUTH('tok'), domain: 's'.repeat(254) },
      { token: 'tok', keyAuthorization: KEY_AUTH('tok'), extra: true },
      { token: 'tok', keyAuthorization: KEY_AUTH('tok'), requestId: 'id with spaces' },
    ];
    for (const fields of bad) {
      const a = await connect(v1.connectionToken);
      a.send({ type: 'acme/challenge-publish', payload: { requestId: 'r1', domain: 'shop.victim.test', action: 'add', ...fields } });
      const code = await closeCode(a);
      assert.ok(code === CLOSE.invalidMessage || code === 1009, `closed (${code}) for ${JSON.stringify(fields).slice(0, 80)}`);
      assert.deepEqual(a.of('acme/challenge-reply'), []);
    }
    // The connections were replaced and closed: the real one reconnects and still relays fine.
    const again = await connect(v1.connectionToken);
    await p2.barrier();
    const before = p2.of('acme/challenge').length;
    assert.equal(await again.publish({ domain: 'shop.victim.test', token: 'after', keyAuthorization: KEY_AUTH('after'), action: 'add' }), 1);
    await waitFor(() => p2.of('acme/challenge').length === before + 1, 'only the well-formed challenge relayed', WAIT_MS, 10);
    assert.equal(p2.of('acme/challenge').at(-1)!.token, 'after');
  });

  test('cert/status for a domain of another server or account, in any spelling, changes nothing; "active" for a domain never ordered counts only for the sender\'s own domain', async () => {
    const now = Math.floor(Date.now() / 1000);
    for (const name of ['shop.victim.test', 'SHOP.VICTIM.TEST.']) {
      pi.reportCert(name, 'error', null, 'forged by a server of the account');
      po.reportCert(name, 'active', now + 90 * DAY);
    }
    pi.reportCert('blog.victim.test', 'active', now + 60 * DAY); // its own: believed
    await Promise.all([pi.barrier(), po.barrier()]);
    const d = await domain(victim.key, 'shop.victim.test');
    assert.deepEqual([d.sslStatus, d.sslError, d.sslExpires], ['pending', null, null], "the victim's domain is untouched");
    assert.deepEqual(await certRows(shop.id), []);
    assert.equal((await domain(victim.key, 'blog.victim.test')).sslStatus, 'active');
    assert.equal((await domain(evil.key, 'shop.victim.test')).sslStatus, 'active', "the other account's own domain of that name");
    void blog;
  });

  test("a forged expiry: within X.509's range (up to 9999-12-31) it is the sender's own business and never breaks the list or the export; past it the message is invalid (4003) and changes nothing", async () => {
    const name = 'evil.victim.test';
    const id = (await domain(evil.key, name)).id;
    for (const [expiresAt, day] of [
      [0, '1970-01-01'],
      [1, '1970-01-01'],
      [32_503_680_000, '3000-01-01'],
      [253_402_300_799, '9999-12-31'],
    ] as const) {
      po.reportCert(name, 'active', expiresAt);
      await po.barrier();
      const list = await call(srv.app, 'GET', '/api/domains', { key: evil.key });
      assert.equal(list.status, 200, `the domain list after expiresAt ${expiresAt}: ${JSON.stringify(list.body)}`);
      assert.equal((list.body as DomainView[]).find((x) => x.domain === name)!.sslExpires, day, `expiresAt ${expiresAt}`);
      assert.equal((await call(srv.app, 'GET', '/api/settings/export', { key: evil.key })).status, 200, `the export after expiresAt ${expiresAt}`);
    }
    // Past what a certificate can say (RFC 5280's 99991231235959Z), up to what JSON and JavaScript
    // dates can hold: refused as any malformed message, before it reaches the database.
    const stored = await certRows(id);
    for (const expiresAt of [253_402_300_800, 8_640_000_000_000, 8_640_000_000_001, Number.MAX_SAFE_INTEGER, 1e21, -1]) {
      const a = await connect(outside.connectionToken);
      a.reportCert(name, 'active', expiresAt);
      assert.equal(await closeCode(a), CLOSE.invalidMessage, `expiresAt ${expiresAt}`);
    }
    assert.deepEqual(await certRows(id), stored, 'the last valid report stands');
    assert.equal(stored.length, 1);
    assert.equal((await domain(evil.key, name)).sslExpires, '9999-12-31');
  });

  test('another account cannot use up the weekly order cap of a registered domain it does not serve', async () => {
    // Connections of the tests above were replaced: fresh ones.
    const [attacker, own] = [await connect(outside.connectionToken), await connect(v1.connectionToken)];
    for (let i = 0; i < 50; i++) await attacker.requestSlot('evil.victim.test');
    assert.equal((await own.requestSlot('shop.victim.test')).granted, true, "the victim's server still gets its order slot");
  });
});
