import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// Staged rollout end to end (docs/api.md "Rollout"), a real control plane and two real agents with
// HAProxy, the first the canary. The p99 signal: HAProxy logs one request in 16 with its latency,
// the agents count them per domain and send them with their analytics, the control plane keeps
// them as the canary's before and sums them over the bake; a change that moves the domain to an
// origin answering in 1.2 s halts on the canary, and the other server never gets it. Then a change
// saved while another bakes supersedes it: the other server goes straight to the newest.
describe('staged rollout through real agents', () => {
  const HOST = 'slow.rollout.test';
  const SLOW_MS = 1200;
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  const agents: AgentProc[] = [];
  let fast: Awaited<ReturnType<typeof startOrigin>>;
  const more: Awaited<ReturnType<typeof startOrigin>>[] = [];
  let slow: Server;
  let slowPort: number;
  const ids: string[] = [];
  let domainId: string;

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    fast = await startOrigin('fast');
    slowPort = await freePort();
    slow = createServer((_req, res) => setTimeout(() => res.end(JSON.stringify({ origin: 'slow' })), SLOW_MS)).listen(slowPort, '127.0.0.1');
    await once(slow, 'listening');
    for (const name of ['canary', 'fleet']) {
      const srv = await api.call('POST', '/api/servers', { name });
      ids.push(srv.body.id);
      agents.push(await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, analyticsIntervalMs: 1000 }));
    }
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: fast.port }], serverIds: ids, sslEnabled: false });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    domainId = d.body.id;
    for (const a of agents) await waitFor(async () => (await viaProxy(a.httpPort, HOST).catch(() => undefined))?.status === 200, 'the domain to be served');
  });

  after(async () => {
    for (const a of agents) await a.stop();
    await serve?.stop();
    await fast?.close();
    for (const o of more) await o.close();
    slow?.closeAllConnections();
    slow?.close();
  });

  /** `n` requests to the canary, `concurrency` at a time; their statuses. */
  async function traffic(n: number, concurrency: number): Promise<number[]> {
    const statuses: number[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < n) {
          next++;
          statuses.push((await viaProxy(agents[0]!.httpPort, HOST, `/item/${next}`).catch(() => ({ status: 0 }))).status);
        }
      }),
    );
    return statuses;
  }

  test('the before from the fast origin, the bake from the slow one: halted, named, and the fleet stays fast', async () => {
    // The before: 1,600 fast requests (about 100 samples), stored once the analytics show them.
    assert.ok((await traffic(1600, 16)).every((s) => s === 200));
    await waitFor(
      async () => {
        const r = await api.call('GET', `/api/analytics?domain=${domainId}`);
        return (r.body.series as { requests: number }[]).reduce((s, p) => s + p.requests, 0) >= 1600;
      },
      'the analytics to hold the traffic before the change',
      30_000,
    );

    assert.equal((await api.call('PUT', `/api/servers/${ids[0]}`, { canary: true })).status, 200);
    assert.equal((await api.call('PUT', '/api/settings/rollout', { mode: 'staged', bakeSeconds: 20 })).status, 200);
    assert.equal((await api.call('PUT', `/api/domains/${domainId}`, { origins: [{ ip: '127.0.0.1', port: slowPort }] })).status, 200);
    type Rollout = {
      state: string;
      signal: string | null;
      detail: string | null;
      bakeUntil: string;
      endedAt: string | null;
      servers: { name: string; state: string; p99Ms: number | null; baseP99Ms: number | null }[];
    };
    const newest = async () => ((await api.call('GET', '/api/rollouts')).body as Rollout[])[0]!;
    const baking = await newest();
    assert.equal(baking.state, 'baking');
    const base = baking.servers.find((s) => s.name === 'canary')!.baseP99Ms;
    // The slow origin's p99 falls in the (1000, 2500] ms bucket: a halt needs it 3 times the
    // before, so any before up to 500 ms is fast enough (a loaded machine reaches that bucket).
    assert.ok(base !== null && base <= 500, `the canary's p99 before the change is known and fast: ${base} ms`);

    // The canary gets the slow origin; 1,600 requests (about 100 samples) take 1.2 s each.
    await waitFor(async () => (await viaProxy(agents[0]!.httpPort, HOST)).text.includes('slow'), 'the canary to serve the change', 30_000);
    await traffic(1600, 400);
    const halted = await waitFor(
      async () => {
        const r = await newest();
        return r.state === 'halted' && r;
      },
      'the rollout to halt',
      30_000,
    );
    assert.equal(halted.signal, 'the p99 latency');
    assert.ok(Date.parse(halted.endedAt!) <= Date.parse(halted.bakeUntil), 'within the bake');
    assert.match(halted.detail!, /^at most \d+ ms before the change, up to 2\.5 s during the bake \(\d+ sampled requests\)$/);
    const canary = halted.servers.find((s) => s.name === 'canary')!;
    assert.deepEqual([canary.state, canary.p99Ms], ['rolled_back', 2500]);
    assert.equal(halted.servers.find((s) => s.name === 'fleet')!.state, 'halted');
    const note = ((await api.call('GET', '/api/notifications')).body as { kind: string; message: string }[]).find((n) => n.kind === 'rollout_halted');
    assert.match(note?.message ?? '', /regressed the p99 latency on canary "canary": at most \d+ ms before the change, up to 2\.5 s during the bake/);
    // The canary is back on the fast origin; the fleet never left it.
    await waitFor(async () => (await viaProxy(agents[0]!.httpPort, HOST)).text.includes('fast'), 'the canary back on the last good revision', 30_000);
    assert.match((await viaProxy(agents[1]!.httpPort, HOST)).text, /"origin":"fast"/);
  });

  test('a change saved while another bakes supersedes it: the canary gets each, the other server only the newest, after the bake', async () => {
    more.push(await startOrigin('second'), await startOrigin('third'));
    assert.equal((await api.call('PUT', '/api/settings/rollout', { bakeSeconds: 5 })).status, 200);
    const origin = async (a: AgentProc) => {
      const r = await viaProxy(a.httpPort, HOST).catch(() => undefined);
      return r?.status === 200 ? (JSON.parse(r.text) as { origin: string }).origin : undefined;
    };
    assert.equal((await api.call('PUT', `/api/domains/${domainId}`, { origins: [{ ip: '127.0.0.1', port: more[0]!.port }] })).status, 200);
    await waitFor(async () => (await origin(agents[0]!)) === 'second', 'the canary to serve the first change', 30_000);
    assert.equal((await api.call('PUT', `/api/domains/${domainId}`, { origins: [{ ip: '127.0.0.1', port: more[1]!.port }] })).status, 200);
    const saved = Date.now();
    // The other server, watched until it serves the newest: never the superseded change.
    const seen = new Set<string>();
    await waitFor(
      async () => {
        const o = await origin(agents[1]!);
        if (o) seen.add(o);
        return o === 'third';
      },
      'the other server to serve the newest change',
      30_000,
      20,
    );
    assert.ok(Date.now() - saved >= 5_000, 'not before the bake');
    assert.deepEqual([...seen].sort(), ['fast', 'third'], 'the other server went straight from the last good origin to the newest');
    assert.equal(await origin(agents[0]!), 'third');
    const list = (await api.call('GET', '/api/rollouts')).body as { state: string; change: string }[];
    assert.deepEqual(
      list.slice(0, 3).map((r) => r.state),
      ['applied', 'superseded', 'halted'],
    );
    assert.equal((await api.call('GET', '/api/settings/rollout')).body.state, 'idle');
  });
});
