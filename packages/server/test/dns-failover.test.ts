import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { DnsProviderError, dnsProvider, type DnsProvider, type DnsProviderSettings } from '../src/dns/provider.js';
import { secretKeyFrom } from '../src/secret-box.js';
import { guardedFetch } from '../src/services/dns-failover.js';
import { runHealthCycle, type HealthCycleOptions } from '../src/services/health.js';
import { recordAgentConnected, touchAgentConnections, type AgentConnection } from '../src/services/servers.js';
import { backends, call, makeTestApp, newAccount, type TestApp } from './helpers.js';
import { startProbeTarget, type ProbeTarget } from './probe-target.js';

// DNS failover (docs/dns-failover.md): the provider settings (PUT/GET/DELETE /api/settings/dns),
// the domain switch and its checks, and the health cycle's DNS step against a fake provider. The
// real providers are tested in dns-powerdns.test.ts and dns-cloudflare.test.ts, and end to end in
// test/e2e/dns-failover.test.ts.

const SECRET = 'dns-failover-test-secret-key-0123456789';
const PDNS = { provider: 'powerdns', apiUrl: 'http://127.0.0.1:8081', apiKey: 'pdns-api-key-s3cr3t-value', serverId: 'localhost' } as const;
const CF = { provider: 'cloudflare', apiToken: 'cf-token-0123456789abcdefghijklmnopqrstuv' } as const;
const PROCESS = randomUUID();

/** A provider that records what it is asked and can be made to fail. */
class FakeProvider implements DnsProvider {
  calls: { name: string; addresses: string[] }[] = [];
  records = new Map<string, string[]>();
  failWith: string | undefined;
  constructor(readonly settings: DnsProviderSettings) {}
  async setAddresses(name: string, addresses: readonly string[]): Promise<void> {
    this.calls.push({ name, addresses: [...addresses] });
    if (this.failWith) throw new DnsProviderError(this.failWith);
    assert.ok(addresses.length > 0, 'never an empty list');
    this.records.set(name, [...addresses].sort());
  }
  async getAddresses(name: string): Promise<string[]> {
    return this.records.get(name) ?? [];
  }
}

function withDns(t: TestApp, allowPrivate = true) {
  t.ctx.secretKey = secretKeyFrom(SECRET);
  t.ctx.allowPrivateDnsApi = allowPrivate;
}

for (const backend of await backends()) {
  describe(`DNS failover on ${backend}`, async () => {
    const t = await makeTestApp(backend);
    const app = t.app;
    withDns(t);
    t.clock.set(new Date('2031-02-01T10:00:00Z'));
    let fake: FakeProvider | undefined;
    const options = (): HealthCycleOptions => ({ dns: { providerFor: (s) => (fake = fake ?? new FakeProvider(s)) } });
    const cycle = () => runHealthCycle(t.ctx, t.clock.now(), options());

    async function server(key: string, target: ProbeTarget, name: string) {
      const s = await call(app, 'POST', '/api/servers', { key, body: { name } });
      assert.equal((await call(app, 'PUT', `/api/servers/${s.body.id}`, { key, body: { publicIp: target.address } })).status, 200);
      const conn: AgentConnection = { serverId: s.body.id, connectionId: randomUUID(), processId: PROCESS, ip: '127.0.0.1', httpPort: target.port };
      await recordAgentConnected(t.ctx, conn);
      return { id: s.body.id as string, conn, target };
    }

    /** A Pro account with a provider connected and a domain on two (or more) servers with failover on. */
    async function failoverDomain(addresses: string[], name = 'www.example.com') {
      fake = undefined;
      const { key, accountId } = await newAccount(app);
      assert.equal((await call(app, 'PUT', '/api/settings/dns', { key, body: PDNS })).status, 200);
      const servers = [];
      for (const [i, a] of addresses.entries()) servers.push(await server(key, await startProbeTarget(a), `edge-${i}`));
      const d = await call(app, 'POST', '/api/domains', { key, body: { domain: name, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: servers.map((s) => s.id) } });
      assert.equal(d.status, 201);
      const on = await call(app, 'PUT', `/api/domains/${d.body.id}`, { key, body: { dnsFailover: true } });
      assert.equal(on.status, 200, JSON.stringify(on.body));
      assert.equal(on.body.dnsFailover, true);
      return { key, accountId, servers, domainId: d.body.id as string };
    }
    const domain = async (key: string, id: string) => ((await call(app, 'GET', '/api/domains', { key })).body as any[]).find((d) => d.id === id);
    const tick = async (servers: { conn: AgentConnection }[]) => {
      t.clock.advance(10_000);
      await touchAgentConnections(
        t.ctx,
        servers.map((s) => s.conn),
      );
    };

    test('the records follow health: both published; one down, removed; back, restored; only on change', async () => {
      const { key, servers, domainId } = await failoverDomain(['127.0.1.1', '127.0.1.2']);
      await cycle();
      assert.deepEqual(fake!.calls, [{ name: 'www.example.com', addresses: ['127.0.1.1', '127.0.1.2'] }]);
      let d = await domain(key, domainId);
      assert.deepEqual(d.dnsAddresses, ['127.0.1.1', '127.0.1.2']);
      assert.equal(d.dnsError, null);

      await tick(servers);
      await cycle();
      assert.equal(fake!.calls.length, 1, 'nothing changed: no call');

      servers[0]!.target.mode = '503';
      await tick(servers);
      await cycle();
      assert.deepEqual(fake!.calls.at(-1), { name: 'www.example.com', addresses: ['127.0.1.2'] });
      assert.deepEqual((await domain(key, domainId)).dnsAddresses, ['127.0.1.2']);

      servers[0]!.target.mode = 'ok';
      await tick(servers);
      await cycle();
      assert.deepEqual(fake!.calls.at(-1), { name: 'www.example.com', addresses: ['127.0.1.1', '127.0.1.2'] });
      d = await domain(key, domainId);
      assert.deepEqual(d.dnsAddresses, ['127.0.1.1', '127.0.1.2']);
      assert.equal(fake!.calls.length, 3);
    });

    test('never empty: every server down keeps the last addresses published, and says so', async () => {
      const { key, servers, domainId } = await failoverDomain(['127.0.2.1', '127.0.2.2']);
      await cycle();
      servers[0]!.target.mode = '503';
      await tick(servers);
      await cycle();
      servers[1]!.target.mode = '503';
      await tick(servers);
      await cycle();
      assert.equal(fake!.calls.length, 2, 'no call to remove the last address');
      assert.ok(fake!.calls.every((c) => c.addresses.length > 0));
      const d = await domain(key, domainId);
      assert.deepEqual(d.dnsAddresses, ['127.0.2.2']);
      assert.match(d.dnsError, /No server of this domain is healthy: the addresses last published stay in place/);
      servers[0]!.target.mode = 'ok';
      await tick(servers);
      await cycle();
      assert.deepEqual(fake!.calls.at(-1)!.addresses, ['127.0.2.1']);
      assert.equal((await domain(key, domainId)).dnsError, null);
    });

    test('a provider error is recorded on the domain and the cycle goes on; the next cycle tries again', async () => {
      const { key, domainId } = await failoverDomain(['127.0.3.1', '127.0.3.2'], 'shop.example.com');
      fake = new FakeProvider(PDNS);
      fake.failWith = 'PowerDNS answered PATCH /api/v1/servers/localhost/zones/example.com. with 422: RRset shop.example.com. IN A: Conflicts with pre-existing RRset';
      const result = await cycle();
      assert.ok(result.dns.failed >= 1);
      let d = await domain(key, domainId);
      assert.equal(d.dnsAddresses, null, 'nothing published');
      assert.match(d.dnsError, /The DNS provider refused the update to 127\.0\.3\.1, 127\.0\.3\.2: PowerDNS answered PATCH .* 422/);
      fake.failWith = undefined;
      await cycle();
      d = await domain(key, domainId);
      assert.deepEqual(d.dnsAddresses, ['127.0.3.1', '127.0.3.2']);
      assert.equal(d.dnsError, null);
    });

    test('turned off: no more calls, the view forgets what was published; a domain without failover is never touched', async () => {
      const { key, servers, domainId } = await failoverDomain(['127.0.4.1', '127.0.4.2'], 'off.example.com');
      await cycle();
      const off = await call(app, 'PUT', `/api/domains/${domainId}`, { key, body: { dnsFailover: false } });
      assert.equal(off.status, 200);
      assert.deepEqual([off.body.dnsFailover, off.body.dnsAddresses, off.body.dnsError], [false, null, null]);
      servers[0]!.target.mode = '503';
      await tick(servers);
      const calls = fake!.calls.length;
      await cycle();
      assert.equal(fake!.calls.length, calls);
    });

    test('stored credentials that cannot be decrypted (the key changed): the domain says so, GET says so, nothing is called', async () => {
      const { key, domainId } = await failoverDomain(['127.0.5.1', '127.0.5.2'], 'rekeyed.example.com');
      t.ctx.secretKey = secretKeyFrom('another-secret-key-for-this-test');
      try {
        fake = undefined;
        await cycle();
        assert.equal(fake, undefined, 'no provider built');
        assert.match((await domain(key, domainId)).dnsError, /cannot be decrypted \(RAMPART_SECRET_KEY is missing or was changed\)/);
        const g = await call(app, 'GET', '/api/settings/dns', { key });
        assert.equal(g.body.connected, false);
        assert.match(g.body.error, /cannot be decrypted/);
      } finally {
        withDns(t);
      }
    });
  });

  describe(`DNS settings and the domain switch on ${backend}`, async () => {
    const t = await makeTestApp(backend);
    const app = t.app;
    withDns(t, false);

    async function twoServers(key: string) {
      const ids: string[] = [];
      for (const name of ['a', 'b']) ids.push((await call(app, 'POST', '/api/servers', { key, body: { name } })).body.id);
      return ids;
    }
    async function domainOn(key: string, serverIds: string[], name = `d${randomUUID().slice(0, 8)}.example.com`) {
      const d = await call(app, 'POST', '/api/domains', { key, body: { domain: name, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds } });
      assert.equal(d.status, 201);
      return d.body.id as string;
    }
    async function sessionOf(email: string, password: string) {
      const r = await call(app, 'POST', '/api/auth/login', { body: { email, password } });
      assert.equal(r.status, 200);
      return `rampart_session=${r.cookies.find((c) => c.name === 'rampart_session')!.value}`;
    }

    test('GET before anything is connected: provider null, not connected', async () => {
      const { key } = await newAccount(app);
      const r = await call(app, 'GET', '/api/settings/dns', { key });
      assert.equal(r.status, 200);
      assert.deepEqual(r.body, { provider: null, apiUrl: null, serverId: null, connected: false, error: null, updatedAt: null });
    });

    test('PUT connects PowerDNS or Cloudflare; answers and GET never carry a credential; the row holds none in the clear', async () => {
      const { key, accountId } = await newAccount(app);
      const pdns = { ...PDNS, apiUrl: 'https://dns.example.net:8081/' };
      const put = await call(app, 'PUT', '/api/settings/dns', { key, body: pdns });
      assert.equal(put.status, 200, JSON.stringify(put.body));
      assert.deepEqual(
        { ...put.body, updatedAt: undefined },
        { provider: 'powerdns', apiUrl: 'https://dns.example.net:8081', serverId: 'localhost', connected: true, error: null, updatedAt: undefined },
      );
      const get = await call(app, 'GET', '/api/settings/dns', { key });
      assert.deepEqual(get.body, put.body);
      for (const body of [put.body, get.body]) assert.ok(!JSON.stringify(body).includes(PDNS.apiKey));
      const row = (await sql<{ provider: string; credentials_enc: string }>`select provider, credentials_enc from dns_settings where account_id = ${accountId}`.execute(t.ctx.db)).rows[0]!;
      assert.equal(row.provider, 'powerdns');
      assert.match(row.credentials_enc, /^v1\./);
      for (const clear of [PDNS.apiKey, 'dns.example.net', 'localhost']) assert.ok(!row.credentials_enc.includes(clear), `${clear} is not in the row`);

      const cf = await call(app, 'PUT', '/api/settings/dns', { key, body: CF });
      assert.equal(cf.status, 200);
      assert.deepEqual([cf.body.provider, cf.body.apiUrl, cf.body.serverId, cf.body.connected], ['cloudflare', null, null, true]);
      assert.ok(!JSON.stringify(cf.body).includes(CF.apiToken));
      const cfRow = (await sql<{ credentials_enc: string }>`select credentials_enc from dns_settings where account_id = ${accountId}`.execute(t.ctx.db)).rows[0]!;
      assert.ok(!cfRow.credentials_enc.includes(CF.apiToken));
    });

    test('bad settings: 400 naming the field, nothing stored', async () => {
      const { key } = await newAccount(app);
      const PUBLIC = { ...PDNS, apiUrl: 'https://dns.example.net' };
      const cases: [Record<string, unknown>, RegExp][] = [
        [{ ...PUBLIC, apiUrl: 'ftp://dns.example.net' }, /^apiUrl: must be an http or https URL/],
        [{ ...PUBLIC, apiUrl: 'not a url' }, /^apiUrl: must be an http or https URL/],
        [{ ...PUBLIC, apiUrl: 'https://admin:pw@dns.example.net' }, /^apiUrl: must not contain a user name or password/],
        [{ ...PUBLIC, apiUrl: 'https://dns.example.net/?x=1' }, /^apiUrl: must not have a query or fragment/],
        [{ ...PUBLIC, apiUrl: 'https://dns.example.net/#top' }, /^apiUrl: must not have a query or fragment/],
        [{ ...PUBLIC, apiUrl: `https://dns.example.net/${'a'.repeat(2100)}` }, /apiUrl/],
        [{ ...PUBLIC, serverId: '..' }, /^serverId: must be 1 to 64 letters/],
        [{ ...PUBLIC, serverId: 'a/b' }, /^serverId: /],
        [{ ...PUBLIC, serverId: '' }, /^serverId: /],
        [{ ...PUBLIC, apiKey: 'has space' }, /^apiKey: must be visible ASCII/],
        [{ ...PUBLIC, apiKey: 'line\r\nX-Injected: 1' }, /^apiKey: must be visible ASCII/],
        [{ ...PUBLIC, apiKey: '' }, /^apiKey: must be 1 to 512/],
        [{ provider: 'powerdns', apiUrl: PUBLIC.apiUrl, apiKey: PDNS.apiKey }, /^serverId: is required for the powerdns provider/],
        [{ ...PUBLIC, apiToken: CF.apiToken }, /^apiToken: is not a setting of the powerdns provider/],
        [{ provider: 'cloudflare' }, /^apiToken: is required for the cloudflare provider/],
        [{ ...CF, apiUrl: 'https://evil.example' }, /^apiUrl: is not a setting of the cloudflare provider/],
        [{ ...CF, apiToken: 'short' }, /^apiToken: must be 20 to 512/],
        [{ provider: 'route53', apiToken: CF.apiToken }, /provider/],
        [{ ...CF, apiBase: 'http://127.0.0.1:1' }, /apiBase/],
        [{ ...PUBLIC, accountId: randomUUID() }, /accountId/],
      ];
      for (const [body, message] of cases) {
        const r = await call(app, 'PUT', '/api/settings/dns', { key, body });
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.match(r.body.error, message, JSON.stringify(body));
      }
      assert.equal((await call(app, 'GET', '/api/settings/dns', { key })).body.connected, false, 'nothing stored');
    });

    test('an API URL naming a private, loopback or link-local address (metadata service included) is refused unless the operator allows it', async () => {
      const { key } = await newAccount(app);
      for (const host of ['127.0.0.1', 'localhost', 'api.localhost', '10.1.2.3', '192.168.1.1', '169.254.169.254', '[::1]', '[fd00::1]', '[::ffff:127.0.0.1]', '2130706433', '0x7f.0.0.1', '0.0.0.0']) {
        const r = await call(app, 'PUT', '/api/settings/dns', { key, body: { ...PDNS, apiUrl: `http://${host}:8081` } });
        assert.equal(r.status, 400, host);
        assert.match(r.body.error, /^apiUrl: .* is a private or reserved address; the operator allows those with RAMPART_ALLOW_PRIVATE_DNS_API=1/, host);
      }
      t.ctx.allowPrivateDnsApi = true;
      try {
        assert.equal((await call(app, 'PUT', '/api/settings/dns', { key, body: { ...PDNS, apiUrl: 'http://10.1.2.3:8081' } })).status, 200);
      } finally {
        t.ctx.allowPrivateDnsApi = false;
      }
    });

    test('without RAMPART_SECRET_KEY: 400 telling the operator to set it, nothing stored', async () => {
      const { key } = await newAccount(app);
      t.ctx.secretKey = undefined;
      try {
        const r = await call(app, 'PUT', '/api/settings/dns', { key, body: CF });
        assert.equal(r.status, 400);
        assert.match(r.body.error, /the operator must set RAMPART_SECRET_KEY/);
      } finally {
        withDns(t, false);
      }
      assert.equal((await call(app, 'GET', '/api/settings/dns', { key })).body.connected, false);
    });

    test('the Free plan: 403 for the settings and the switch, saying which plans have it', async () => {
      const { email } = await newAccount(app, 'free', 0, 'free-plan-password');
      const cookie = await sessionOf(email, 'free-plan-password');
      const put = await call(app, 'PUT', '/api/settings/dns', { cookie, body: CF });
      assert.equal(put.status, 403);
      assert.equal(put.body.error, 'DNS failover requires the Pro or Enterprise plan');
      const ids: string[] = [];
      for (const name of ['a', 'b']) ids.push((await call(app, 'POST', '/api/servers', { cookie, body: { name } })).body.id);
      const d = await call(app, 'POST', '/api/domains', { cookie, body: { domain: 'free.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [ids[0]] } });
      // The plan is checked first: one server only, no provider, still the 403.
      const on = await call(app, 'PUT', `/api/domains/${d.body.id}`, { cookie, body: { dnsFailover: true } });
      assert.equal(on.status, 403);
      assert.equal(on.body.error, 'DNS failover requires the Pro or Enterprise plan');
    });

    test('the switch: fewer than 2 servers 400 before no provider 400; then on; the domain keeps 2 servers while on', async () => {
      const { key } = await newAccount(app, 'enterprise');
      const [a, b] = await twoServers(key);
      const id = await domainOn(key, [a!]);
      let r = await call(app, 'PUT', `/api/domains/${id}`, { key, body: { dnsFailover: true } });
      assert.equal(r.status, 400);
      assert.match(r.body.error, /^dnsFailover: needs at least 2 shield servers on the domain/);
      r = await call(app, 'PUT', `/api/domains/${id}`, { key, body: { dnsFailover: true, serverIds: [a, b] } });
      assert.equal(r.status, 400);
      assert.match(r.body.error, /^dnsFailover: needs a DNS provider: connect one first with PUT \/api\/settings\/dns/);
      assert.deepEqual((await call(app, 'GET', '/api/domains', { key })).body[0].serverIds, [a], 'nothing stored by the refused request');
      assert.equal((await call(app, 'PUT', '/api/settings/dns', { key, body: CF })).status, 200);
      r = await call(app, 'PUT', `/api/domains/${id}`, { key, body: { dnsFailover: true, serverIds: [a, b] } });
      assert.equal(r.status, 200);
      assert.deepEqual([r.body.dnsFailover, r.body.dnsAddresses, r.body.dnsError], [true, null, null]);
      r = await call(app, 'PUT', `/api/domains/${id}`, { key, body: { serverIds: [a] } });
      assert.equal(r.status, 400);
      assert.match(r.body.error, /^serverIds: a domain with DNS failover keeps at least 2 shield servers; turn dnsFailover off first/);
      r = await call(app, 'PUT', `/api/domains/${id}`, { key, body: { serverIds: [a], dnsFailover: false } });
      assert.equal(r.status, 200);
      assert.equal(r.body.dnsFailover, false);
    });

    test('DELETE is refused (409) while a domain has failover on, naming it; then allowed', async () => {
      const { key } = await newAccount(app);
      const ids = await twoServers(key);
      assert.equal((await call(app, 'PUT', '/api/settings/dns', { key, body: CF })).status, 200);
      const id = await domainOn(key, ids, 'guarded.example.com');
      assert.equal((await call(app, 'PUT', `/api/domains/${id}`, { key, body: { dnsFailover: true } })).status, 200);
      const refused = await call(app, 'DELETE', '/api/settings/dns', { key });
      assert.equal(refused.status, 409);
      assert.match(refused.body.error, /DNS failover is on for 1 domain\(s\) \(guarded\.example\.com\); turn dnsFailover off on them first/);
      assert.equal((await call(app, 'GET', '/api/settings/dns', { key })).body.connected, true, 'still connected');
      assert.equal((await call(app, 'PUT', `/api/domains/${id}`, { key, body: { dnsFailover: false } })).status, 200);
      assert.equal((await call(app, 'DELETE', '/api/settings/dns', { key })).status, 200);
      assert.equal((await call(app, 'GET', '/api/settings/dns', { key })).body.connected, false);
      assert.equal((await call(app, 'DELETE', '/api/settings/dns', { key })).status, 200, 'idempotent');
    });

    test("another account's domain: 404 like a missing one; its settings are its own", async () => {
      const owner = await newAccount(app);
      const attacker = await newAccount(app);
      const ids = await twoServers(owner.key);
      assert.equal((await call(app, 'PUT', '/api/settings/dns', { key: owner.key, body: CF })).status, 200);
      const id = await domainOn(owner.key, ids);
      assert.equal((await call(app, 'PUT', '/api/settings/dns', { key: attacker.key, body: CF })).status, 200);
      const r = await call(app, 'PUT', `/api/domains/${id}`, { key: attacker.key, body: { dnsFailover: true } });
      assert.equal(r.status, 404);
      assert.equal((await call(app, 'GET', '/api/domains', { key: owner.key })).body[0].dnsFailover, false);
      assert.equal((await call(app, 'DELETE', '/api/settings/dns', { key: attacker.key })).status, 200);
      assert.equal((await call(app, 'GET', '/api/settings/dns', { key: owner.key })).body.connected, true, "the attacker's DELETE is its own");
      const created = await call(app, 'POST', '/api/domains', { key: owner.key, body: { domain: 'x.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], dnsFailover: true } });
      assert.equal(created.status, 400, 'only PUT takes the switch');
    });
  });
}

describe("the providers' fetch (guardedFetch)", () => {
  test('a name resolving to a private address is refused before connecting, unless allowed', async () => {
    const server = createServer((_req, res) => res.end('{}'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    try {
      await assert.rejects(guardedFetch(false)(`http://localhost:${port}/api/v1/servers`), /refused: localhost resolves to (127\.0\.0\.1|::1), a private or reserved address/);
      const ok = await guardedFetch(true)(`http://localhost:${port}/api/v1/servers`);
      assert.equal(ok.status, 200);
    } finally {
      server.close();
    }
  });

  test('redirects are not followed: a PowerDNS answering 302 towards another address is an error naming the status', async () => {
    let redirectedHits = 0;
    const elsewhere = createServer((_req, res) => {
      redirectedHits++;
      res.end('[]');
    });
    elsewhere.listen(0, '127.0.0.1');
    await once(elsewhere, 'listening');
    const other = (elsewhere.address() as { port: number }).port;
    const redirecting = createServer((_req, res) => {
      res.statusCode = 302;
      res.setHeader('location', `http://127.0.0.1:${other}/latest/meta-data/`);
      res.end();
    });
    redirecting.listen(0, '127.0.0.1');
    await once(redirecting, 'listening');
    const port = (redirecting.address() as { port: number }).port;
    try {
      const provider = dnsProvider({ provider: 'powerdns', apiUrl: `http://127.0.0.1:${port}`, apiKey: 'k', serverId: 'localhost' }, guardedFetch(true));
      await assert.rejects(provider.setAddresses('www.example.com', ['192.0.2.1']), /answered GET .* with 302/);
      assert.equal(redirectedHits, 0);
    } finally {
      redirecting.close();
      elsewhere.close();
    }
  });
});
