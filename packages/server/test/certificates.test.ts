import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { runHealthCycle } from '../src/services/health.js';
import { waitFor } from '../../../test/support/processes.js';
import { apiFixtures, type DomainView, FakeAgent, hubServer, WAIT_MS } from './fake-agent.js';
import { ADMIN_TOKEN, call, newAccount } from './helpers.js';

// Automatic certificates, the control plane's side (the agents do ACME HTTP-01): order slots
// within the authority's cap, challenges relayed to the domain's other agents and no one else,
// and each server's cert/status turned into the domain's sslStatus, sslError, sslExpires and status.

const DAY = 86_400;
const KEY_AUTH = (token: string) => `${token}.${'k'.repeat(43)}`;

describe('certificates through the agent hub', async () => {
  // A short health cycle, so the periodic ssl_expiring check is seen running on its own.
  const { srv, agentUrl, agents } = await hubServer({ healthIntervalSeconds: 0.2 });
  const one = await newAccount(srv.app, 'pro');
  const two = await newAccount(srv.app, 'pro');

  const { newServer, newDomain, domain } = apiFixtures(srv.app);
  function domainWhere(key: string, name: string, pred: (d: DomainView) => boolean, what: string) {
    return waitFor(
      async () => {
        const d = await domain(key, name);
        return pred(d) && d;
      },
      `${name}: ${what}`,
      WAIT_MS,
      20,
    );
  }
  async function connect(token: string) {
    const a = await FakeAgent.connect(agentUrl, token);
    agents.push(a);
    return a;
  }
  const day = (unixSeconds: number) => new Date(unixSeconds * 1000).toISOString().slice(0, 10);

  test('order slots over the wire: 50 for example.co.uk across a. and b. even when asked at once, then refused; another registered domain and the other account go on', async () => {
    const s1 = await newServer(one.key, 'slots-1');
    const s2 = await newServer(one.key, 'slots-2');
    const s3 = await newServer(two.key, 'slots-other-account');
    await newDomain(one.key, 'a.example.co.uk', [s1.id]);
    await newDomain(one.key, 'b.example.co.uk', [s2.id]);
    await newDomain(one.key, 'c.example.org', [s1.id]);
    await newDomain(two.key, 'shop.example.com', [s3.id]);
    const [a1, a2, a3] = [await connect(s1.connectionToken), await connect(s2.connectionToken), await connect(s3.connectionToken)];

    // 60 requests in flight from two agents at once.
    const ids = Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? ([a1, a1.sendSlotRequest('a.example.co.uk')] as const) : ([a2, a2.sendSlotRequest('b.example.co.uk')] as const)));
    const replies = await Promise.all(ids.map(([agent, id]) => agent.slotReply(id)));
    assert.equal(replies.filter((r) => r.granted).length, 50);
    const refused = replies.filter((r) => !r.granted);
    assert.equal(refused.length, 10);
    for (const r of refused) {
      assert.match(r.message!, /example\.co\.uk/);
      assert.match(r.message!, /after \d{4}-\d\d-\d\dT/, 'says when a slot frees up');
    }
    assert.equal((await a1.requestSlot('a.example.co.uk')).granted, false, 'the 61st');
    assert.deepEqual(await a1.requestSlot('c.example.org'), { granted: true, message: null }, 'another registered domain');
    // A domain of another account is refused, even by name only; its own server gets a slot.
    const forged = await a1.requestSlot('shop.example.com');
    assert.equal(forged.granted, false);
    assert.match(forged.message!, /not a domain of this shield server/);
    assert.deepEqual(await a3.requestSlot('shop.example.com'), { granted: true, message: null });
    const orders = await srv.ctx.db.selectFrom('certificate_orders').select(['registered_domain', 'account_id']).execute();
    assert.equal(orders.filter((o) => o.registered_domain === 'example.co.uk').length, 50);
    assert.deepEqual(
      orders.filter((o) => o.registered_domain === 'example.com').map((o) => o.account_id),
      [two.accountId],
    );
  });

  test("a published challenge reaches the domain's other agents and no one else", async () => {
    const r1 = await newServer(one.key, 'relay-1');
    const r2 = await newServer(one.key, 'relay-2');
    const r3 = await newServer(one.key, 'relay-unrelated');
    const r4 = await newServer(two.key, 'relay-other-account');
    await newDomain(one.key, 'relay.example.com', [r1.id, r2.id]);
    await newDomain(one.key, 'elsewhere.example.com', [r3.id]);
    await newDomain(two.key, 'relay.example.com', [r4.id]); // the same name in another account
    const [p1, p2, p3, p4] = [await connect(r1.connectionToken), await connect(r2.connectionToken), await connect(r3.connectionToken), await connect(r4.connectionToken)];
    const challenges = (a: FakeAgent) => a.of('acme/challenge');

    const add = { domain: 'relay.example.com', token: 'tok-1', keyAuthorization: KEY_AUTH('tok-1'), action: 'add' as const };
    assert.equal(await p1.publish(add), 1);
    await waitFor(() => challenges(p2).length === 1, 'the challenge at the other agent', WAIT_MS, 10);
    assert.deepEqual(challenges(p2)[0], add);
    // Relays are sent before the publisher's reply; a round trip after it proves none was sent here.
    await Promise.all([p3.barrier(), p4.barrier(), p1.barrier()]);
    assert.deepEqual(challenges(p3), [], 'an unrelated server of the account');
    assert.deepEqual(challenges(p4), [], 'a server of another account with a domain of the same name');
    assert.deepEqual(challenges(p1), [], 'not back to the publisher');

    const remove = { ...add, action: 'remove' as const };
    assert.equal(await p1.publish(remove), 1);
    await waitFor(() => challenges(p2).length === 2, 'the removal at the other agent', WAIT_MS, 10);
    assert.deepEqual(challenges(p2)[1], remove);

    // An agent publishing for a domain that is not its own reaches no one.
    assert.equal(await p3.publish({ ...add, token: 'tok-forged', keyAuthorization: KEY_AUTH('tok-forged') }), 0);
    assert.equal(await p4.publish({ ...add, token: 'tok-4', keyAuthorization: KEY_AUTH('tok-4') }), 0, 'its own domain of that name has no other server');
    await Promise.all([p1.barrier(), p2.barrier()]);
    assert.equal(challenges(p1).length, 0);
    assert.equal(challenges(p2).length, 2);

    // Only connected agents count.
    p2.close();
    await waitFor(async () => (await call(srv.app, 'GET', '/api/servers', { key: one.key })).body.find((s: { id: string }) => s.id === r2.id).status === 'offline', 'relay-2 offline', WAIT_MS, 20);
    assert.equal(await p1.publish({ ...add, token: 'tok-2', keyAuthorization: KEY_AUTH('tok-2') }), 0);
  });

  test('cert/status drives sslStatus, sslError, sslExpires and status; a report for a domain the server does not serve changes nothing', async () => {
    const c1 = await newServer(one.key, 'cert-1');
    const c2 = await newServer(one.key, 'cert-2');
    const c3 = await newServer(one.key, 'cert-unrelated');
    const c4 = await newServer(two.key, 'cert-other-account');
    const certDomain = await newDomain(one.key, 'cert.example.com', [c1.id, c2.id]);
    await newDomain(one.key, 'plain.example.com', [c1.id], false);
    await newDomain(two.key, 'cert.example.com', [c4.id]);
    assert.equal(certDomain.sslStatus, 'pending', 'the POST answer');
    assert.equal(certDomain.sslError, null);
    const [g1, g2, g3, g4] = [await connect(c1.connectionToken), await connect(c2.connectionToken), await connect(c3.connectionToken), await connect(c4.connectionToken)];
    const name = 'cert.example.com';

    let d = await domain(one.key, name);
    assert.deepEqual([d.sslStatus, d.sslError, d.sslExpires, d.status], ['pending', null, null, 'pending']);
    const plain = await domain(one.key, 'plain.example.com');
    assert.deepEqual([plain.sslStatus, plain.status], ['off', 'pending']);

    // A configuration ack makes a domain without SSL active, but not one waiting for its certificate.
    g1.send({ type: 'config/ack', payload: { revision: g1.snapshots().at(-1)!.revision, ok: true, errors: [] } });
    await domainWhere(one.key, 'plain.example.com', (x) => x.status === 'active', 'active after the ack');
    await g1.barrier();
    assert.equal((await domain(one.key, name)).status, 'pending');

    const now = Math.floor(Date.now() / 1000);
    const later = now + 80 * DAY;
    const sooner = now + 60 * DAY;
    g1.reportCert(name, 'active', later);
    d = await domainWhere(one.key, name, (x) => x.sslStatus === 'active', 'active');
    assert.deepEqual([d.sslError, d.sslExpires, d.status], [null, day(later), 'active']);

    g2.reportCert(name, 'active', sooner);
    d = await domainWhere(one.key, name, (x) => x.sslExpires === day(sooner), 'the earliest expiry');
    assert.equal(d.sslStatus, 'active');

    const problem = 'cert.example.com resolves to 203.0.113.9, not to a shield server of this domain (198.51.100.4)';
    g2.reportCert(name, 'error', null, problem);
    d = await domainWhere(one.key, name, (x) => x.sslStatus === 'error', 'error');
    assert.deepEqual([d.sslError, d.status, d.sslExpires], [problem, 'error', day(later)], 'the message as the agent wrote it; the expiry of the certificate still served');

    // Forged reports: a server of the account that does not serve the domain, and a server of
    // another account whose own domain has the same name.
    g3.reportCert(name, 'active', now + 90 * DAY);
    g4.reportCert(name, 'active', now + 30 * DAY);
    await domainWhere(two.key, name, (x) => x.sslStatus === 'active', "the other account's own domain");
    await g3.barrier();
    d = await domain(one.key, name);
    assert.deepEqual([d.sslStatus, d.sslError, d.status, d.sslExpires], ['error', problem, 'error', day(later)]);
    const rows = await srv.ctx.db.selectFrom('domain_certificates').select('server_id').where('domain_id', '=', certDomain.id).execute();
    assert.deepEqual(rows.map((r) => r.server_id).sort(), [c1.id, c2.id].sort());

    g2.reportCert(name, 'pending', null);
    d = await domainWhere(one.key, name, (x) => x.sslStatus === 'active', 'active again');
    assert.deepEqual([d.sslError, d.status, d.sslExpires], [null, 'active', day(later)]);

    // The export reads the same expiry.
    const exported = await call(srv.app, 'GET', '/api/settings/export', { key: one.key });
    assert.equal(exported.status, 200);
    assert.equal(exported.body.domains.find((x: { domain: string }) => x.domain === name).ssl_expires, day(later));

    // A server that leaves the domain takes its report with it.
    g2.reportCert(name, 'error', null, 'rate limited');
    await domainWhere(one.key, name, (x) => x.sslStatus === 'error', 'error from cert-2');
    assert.equal((await call(srv.app, 'PUT', `/api/domains/${certDomain.id}`, { key: one.key, body: { serverIds: [c1.id] } })).status, 200);
    d = await domain(one.key, name);
    assert.deepEqual([d.sslStatus, d.sslError, d.status], ['active', null, 'active']);

    // SSL off: off, no error, no expiry; status waits for the next ack as for any plain domain.
    g1.reportCert(name, 'error', null, 'the authority is down');
    await domainWhere(one.key, name, (x) => x.status === 'error', 'error from cert-1');
    const off = await call(srv.app, 'PUT', `/api/domains/${certDomain.id}`, { key: one.key, body: { sslEnabled: false } });
    assert.equal(off.status, 200);
    assert.deepEqual([off.body.sslStatus, off.body.sslError, off.body.sslExpires, off.body.status], ['off', null, null, 'pending']);
    const offSnapshot = await g1.snapshot((s) => s.domains.some((x) => x.domain === name && !x.sslEnabled), 'the snapshot with SSL off');
    g1.send({ type: 'config/ack', payload: { revision: offSnapshot.revision, ok: true, errors: [] } });
    await domainWhere(one.key, name, (x) => x.status === 'active', 'active after the ack');
    // On again: pending until a server reports.
    const on = await call(srv.app, 'PUT', `/api/domains/${certDomain.id}`, { key: one.key, body: { sslEnabled: true } });
    assert.deepEqual([on.body.sslStatus, on.body.sslError, on.body.status], ['pending', null, 'pending']);
    g1.reportCert(name, 'active', later);
    await domainWhere(one.key, name, (x) => x.sslStatus === 'active' && x.status === 'active', 'active');
  });

  test('a certificate failure raises ssl_failed once per server and reason, naming the domain and the reason', async () => {
    const acct = await newAccount(srv.app, 'pro');
    const s1 = await newServer(acct.key, 'fail-1');
    const d = await newDomain(acct.key, 'failing.example.com', [s1.id]);
    const g = await connect(s1.connectionToken);
    const failed = async () => {
      const r = await call(srv.app, 'GET', '/api/notifications', { key: acct.key });
      assert.equal(r.status, 200);
      return (r.body as { kind: string; message: string; domainId: string | null; serverId: string | null }[]).filter((n) => n.kind === 'ssl_failed');
    };
    g.reportCert('failing.example.com', 'error', null, 'failing.example.com resolves to 203.0.113.9, not to this server');
    const [first] = await waitFor(async () => (await failed()).length === 1 && failed(), 'ssl_failed', WAIT_MS, 20);
    assert.equal(first!.domainId, d.id);
    assert.equal(first!.serverId, s1.id);
    assert.match(
      first!.message,
      /^The certificate of "failing\.example\.com" could not be obtained or renewed: failing\.example\.com resolves to 203\.0\.113\.9, not to this server\. Check that the domain's DNS records/,
    );
    // The same failure again (a retry) raises nothing; another reason does.
    g.reportCert('failing.example.com', 'error', null, 'failing.example.com resolves to 203.0.113.9, not to this server');
    await g.barrier();
    assert.equal((await failed()).length, 1);
    g.reportCert('failing.example.com', 'error', null, 'rate limited by the authority');
    await waitFor(async () => (await failed()).length === 2, 'a second ssl_failed for another reason', WAIT_MS, 20);
    // Success, then failure again: raised again.
    g.reportCert('failing.example.com', 'active', Math.floor(Date.now() / 1000) + 80 * DAY);
    await domainWhere(acct.key, 'failing.example.com', (x) => x.sslStatus === 'active', 'active');
    g.reportCert('failing.example.com', 'error', null, 'rate limited by the authority');
    await waitFor(async () => (await failed()).length === 3, 'ssl_failed after a success', WAIT_MS, 20);
  });

  test('the periodic health cycle raises ssl_expiring once per certificate', async () => {
    const s = await newServer(one.key, 'expiring');
    await newDomain(one.key, 'soon.example.com', [s.id]);
    const agent = await connect(s.connectionToken);
    const notifications = async () => {
      const r = await call(srv.app, 'GET', '/api/notifications', { key: one.key });
      return (r.body as { kind: string; message: string }[]).filter((n) => n.kind === 'ssl_expiring' && n.message.includes('soon.example.com'));
    };
    const expires = Math.floor(Date.now() / 1000) + 3 * DAY;
    agent.reportCert('soon.example.com', 'active', expires);
    const raised = await waitFor(async () => (await notifications()).length > 0 && notifications(), 'ssl_expiring from the periodic cycle', WAIT_MS, 50);
    assert.match(raised[0]!.message, new RegExp(day(expires)));
    // More cycles (the periodic one keeps running too) warn no more about this certificate.
    await runHealthCycle(srv.ctx);
    await runHealthCycle(srv.ctx);
    assert.equal((await notifications()).length, 1);
  });
});
