import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, startAgent, startOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { startPdns, type Pdns } from '../support/pdns.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// DNS failover end to end (docs/dns-failover.md): a real pdns_server, `rampart serve` with a
// one-second health cycle, and two real agents, each with its own HAProxy bound to its own
// loopback address (127.0.0.21 and .22, set as each server's publicIp), so the service's probes
// go to different HAProxies. Checked with real DNS queries: a server that goes away leaves the
// domain's A records, comes back into them, and the last address is never removed.

const NAME = 'www.failover.test';

/** One GET to a HAProxy at its own address, with a Host header. */
function get(address: string, port: number, host: string, path = '/'): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: address, port, path, headers: { host }, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.setTimeout(5_000, () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}
const ADDRESSES = ['127.0.0.21', '127.0.0.22'] as const;

describe('DNS failover with PowerDNS and two shield servers', () => {
  let pdns: Pdns;
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const servers: { id: string; token: string; address: string; httpPort: number; dataDir?: string; agent?: AgentProc }[] = [];

  const records = () => pdns.query(NAME, 'A');
  const serverView = async (id: string) => ((await api.call('GET', '/api/servers')).body as any[]).find((s) => s.id === id);
  const notes = async (kind: string, serverId: string) =>
    ((await api.call('GET', '/api/notifications?limit=200')).body as { kind: string; serverId: string }[]).filter((n) => n.kind === kind && n.serverId === serverId);

  async function start(s: (typeof servers)[number]) {
    s.agent = await startAgent({ serverUrl: serve.url, token: s.token, bind: s.address, httpPort: s.httpPort, ...(s.dataDir ? { dataDir: s.dataDir } : {}) });
    s.dataDir = s.agent.dataDir;
  }

  before(async () => {
    pdns = await startPdns({ zones: ['failover.test'] });
    serve = await startServe({
      port: await freePort(),
      adminToken: ADMIN,
      env: { RAMPART_HEALTH_INTERVAL: '1', RAMPART_SECRET_KEY: 'e2e-dns-failover-secret-key', RAMPART_ALLOW_PRIVATE_DNS_API: '1' },
    });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const put = await api.call('PUT', '/api/settings/dns', { provider: 'powerdns', apiUrl: pdns.apiUrl, apiKey: pdns.apiKey, serverId: pdns.serverId });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    for (const [i, address] of ADDRESSES.entries()) {
      const srv = await api.call('POST', '/api/servers', { name: `edge-${i + 1}` });
      assert.equal((await api.call('PUT', `/api/servers/${srv.body.id}`, { publicIp: address })).status, 200);
      servers.push({ id: srv.body.id, token: srv.body.connectionToken, address, httpPort: await freePort(address) });
    }
    await Promise.all(servers.map(start));
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.agent?.stop()));
    await serve?.stop();
    await origin?.close();
    await pdns?.stop();
  });

  test('each HAProxy answers the health path on its own address, and the service finds both healthy', async () => {
    for (const s of servers) {
      await waitFor(async () => (await get(s.address, s.httpPort, 'anything.example', '/.well-known/rampart/health').catch(() => undefined))?.text === 'ok', `HAProxy at ${s.address}`);
    }
    await waitFor(async () => (await Promise.all(servers.map((s) => serverView(s.id)))).every((v) => v.healthy === true), 'both servers healthy', 20_000);
  });

  test('a domain on both with dnsFailover: DNS answers both addresses', async () => {
    const d = await api.call('POST', '/api/domains', {
      domain: NAME,
      origins: [{ ip: '127.0.0.1', port: origin.port }],
      serverIds: servers.map((s) => s.id),
      sslEnabled: false,
    });
    assert.equal(d.status, 201);
    const on = await api.call('PUT', `/api/domains/${d.body.id}`, { dnsFailover: true });
    assert.equal(on.status, 200, JSON.stringify(on.body));
    await waitFor(async () => (await records()).join() === ADDRESSES.join(), 'both addresses in DNS', 20_000, 200);
    const dom = ((await api.call('GET', '/api/domains')).body as any[]).find((x) => x.domain === NAME);
    assert.deepEqual(dom.dnsAddresses, [...ADDRESSES]);
    assert.equal(dom.dnsError, null);
    assert.deepEqual(await pdns.query(NAME, 'AAAA'), []);
    for (const s of servers) await waitFor(async () => JSON.parse((await get(s.address, s.httpPort, NAME)).text).origin === 'origin', `${NAME} served at ${s.address}`);
  });

  test('a server that goes away leaves DNS; back, it returns; one server_down and one server_recovered', async () => {
    const [first] = servers;
    await first!.agent!.stop();
    await waitFor(async () => (await records()).join() === ADDRESSES[1], 'its address to leave DNS', 20_000, 200);
    const down = await serverView(first!.id);
    assert.equal(down.healthy, false);
    await start(first!);
    await waitFor(async () => (await records()).join() === ADDRESSES.join(), 'its address back in DNS', 30_000, 200);
    assert.equal((await serverView(first!.id)).healthy, true);
    await waitFor(async () => (await notes('server_recovered', first!.id)).length === 1, 'server_recovered');
    assert.equal((await notes('server_down', first!.id)).length, 1, 'one outage, one server_down');
  });

  test('the last address is never removed: with every server gone, DNS keeps the last one published; they come back', async () => {
    await servers[0]!.agent!.stop();
    await waitFor(async () => (await records()).join() === ADDRESSES[1], 'down to one address', 20_000, 200);
    await servers[1]!.agent!.stop();
    await waitFor(async () => (await serverView(servers[1]!.id)).healthy === false, 'the second server down');
    await waitFor(
      async () => ((await api.call('GET', '/api/domains')).body as any[]).find((x) => x.domain === NAME).dnsError?.includes('the addresses last published stay in place'),
      'a cycle with no healthy server',
    );
    assert.deepEqual(await records(), [ADDRESSES[1]], 'still resolves');
    await Promise.all(servers.map(start));
    await waitFor(async () => (await records()).join() === ADDRESSES.join(), 'both back in DNS', 30_000, 200);
  });
});
