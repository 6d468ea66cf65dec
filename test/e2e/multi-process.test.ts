import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { apiClient, ADMIN, startAgent, startOrigin, viaProxy, waitForOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freshPostgresSchema } from '../support/postgres.js';
import { freePort, startProcess, startServe, waitFor, type Proc } from '../support/processes.js';

// docs/architecture.md "Several control-plane processes": two `rampart serve` processes on one
// PostgreSQL, real agents and HAProxy. A change made through either process reaches the agents of
// both; a revoked key fails on both at once; when a process dies, the agents it held reconnect
// through the load balancer to the other one and resync; the monthly charge, run by both every
// second, charges each due account once. Staged rollout (docs/architecture.md "Staged rollout")
// with the canary's agent on one process and the other server's on the other: an ordinary change
// reaches the canary, then both; a rule blocking every request halts on the canary and never
// reaches the other server, and rollout_halted says why.

/** Both processes try the monthly charge every second. */
const JOBS_EVERY_SECOND = { RAMPART_BILLING_INTERVAL: '1' };

describe('two control-plane processes on one PostgreSQL', () => {
  let databaseUrl: string | undefined;
  const serves: (Awaited<ReturnType<typeof startServe>> | undefined)[] = [];
  let lb: Proc;
  let lbUrl: string;
  let lbDir: string;
  let apis: ApiClient[];
  const agents: AgentProc[] = [];
  /** The servers of the first test: edge-0 (agent on process 0) and edge-1 (on process 1). */
  const edges: { id: string; agent: AgentProc }[] = [];
  let multiDomain: string | undefined;
  let a: Awaited<ReturnType<typeof startOrigin>>;
  let b: Awaited<ReturnType<typeof startOrigin>>;

  before(async () => {
    databaseUrl = await freshPostgresSchema('multiproc');
    if (!databaseUrl) return;
    for (let i = 0; i < 2; i++) serves.push(await startServe({ port: await freePort(), adminToken: ADMIN, databaseUrl, env: JOBS_EVERY_SECOND }));
    // A load balancer in front of both, as a customer would run one: health-checked, WebSockets
    // passed through, a dead process's connections sent to the other.
    const port = await freePort();
    lbDir = mkdtempSync(join(tmpdir(), 'rampart-lb-'));
    writeFileSync(
      join(lbDir, 'lb.cfg'),
      [
        'defaults',
        '    mode http',
        '    timeout connect 2s',
        '    timeout client 60s',
        '    timeout server 60s',
        '    timeout tunnel 1h',
        '    option redispatch',
        '    retries 3',
        'frontend in',
        `    bind 127.0.0.1:${port}`,
        '    default_backend cp',
        'backend cp',
        '    balance roundrobin',
        '    option httpchk GET /healthz',
        ...serves.map((s, i) => `    server p${i} 127.0.0.1:${new URL(s!.url).port} check inter 200 fall 1 rise 1`),
        '',
      ].join('\n'),
    );
    lb = startProcess('haproxy', ['-f', join(lbDir, 'lb.cfg'), '-db']);
    lbUrl = `http://127.0.0.1:${port}`;
    await waitFor(async () => (await fetch(`${lbUrl}/healthz`).catch(() => undefined))?.ok === true, 'the load balancer');
    apis = [await apiClient(serves[0]!.url)];
    apis.push({ ...apis[0]!, url: serves[1]!.url, call: (m, p, body) => callWith(serves[1]!.url, apis[0]!.key, m, p, body) });
    a = await startOrigin('a');
    b = await startOrigin('b');
  });
  after(async () => {
    for (const agent of agents) await agent.stop();
    await lb?.stop();
    for (const s of serves) await s?.stop();
    await a?.close();
    await b?.close();
    if (lbDir) rmSync(lbDir, { recursive: true, force: true });
  });

  /** A server whose agent connects through the load balancer, serving a domain on origin a. */
  async function agentBehindLb(name: string, domain: string) {
    const srv = await apis[0]!.call('POST', '/api/servers', { name });
    const agent = await startAgent({ serverUrl: lbUrl, token: srv.body.connectionToken });
    agents.push(agent);
    const d = await apis[0]!.call('POST', '/api/domains', { domain, origins: [{ ip: '127.0.0.1', port: a.port }], serverIds: [srv.body.id], sslEnabled: false });
    assert.equal(d.status, 201);
    await waitForOrigin(agent.httpPort, domain, 'a', 60_000);
    return { srv, agent, d };
  }

  async function callWith(url: string, key: string, method: string, path: string, body?: unknown) {
    const res = await fetch(url + path, {
      method,
      headers: { 'x-api-key': key, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  }

  test('a change made through either process reaches the agents of both', async (t) => {
    if (!databaseUrl) return t.skip('PostgreSQL is not reachable');
    const ids: string[] = [];
    // one agent held by each process (connected to it directly)
    for (let i = 0; i < 2; i++) {
      const srv = await apis[0]!.call('POST', '/api/servers', { name: `edge-${i}` });
      assert.equal(srv.status, 201);
      ids.push(srv.body.id);
      agents.push(await startAgent({ serverUrl: serves[i]!.url, token: srv.body.connectionToken }));
      edges.push({ id: srv.body.id, agent: agents.at(-1)! });
    }
    const d = await apis[0]!.call('POST', '/api/domains', { domain: 'multi.example.test', origins: [{ ip: '127.0.0.1', port: a.port }], serverIds: ids, sslEnabled: false });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    multiDomain = d.body.id;
    for (const agent of agents) await waitForOrigin(agent.httpPort, 'multi.example.test', 'a', 30_000);
    // through process 1 this time
    assert.equal((await apis[1]!.call('PUT', `/api/domains/${d.body.id}`, { origins: [{ ip: '127.0.0.1', port: b.port }] })).status, 200);
    for (const agent of agents) await waitForOrigin(agent.httpPort, 'multi.example.test', 'b', 30_000);
    // both processes show both servers active
    for (const api of apis) {
      await waitFor(async () => ((await api.call('GET', '/api/servers')).body as { status: string }[]).every((s) => s.status === 'active'), 'both servers active on every process', 20_000);
    }
  });

  test('staged rollout: an ordinary change reaches the canary, then the other server; a rule blocking every request halts on the canary and never reaches the other', async (t) => {
    if (!databaseUrl) return t.skip('PostgreSQL is not reachable');
    assert.equal(edges.length, 2, 'the first test made both servers');
    const [canary, fleet] = edges as [{ id: string; agent: AgentProc }, { id: string; agent: AgentProc }];
    const host = 'multi.example.test';
    assert.equal((await apis[1]!.call('PUT', `/api/servers/${canary.id}`, { canary: true })).body.canary, true);
    const set = await apis[0]!.call('PUT', '/api/settings/rollout', { mode: 'staged', bakeSeconds: 5 });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.deepEqual([set.body.mode, set.body.bakeSeconds, set.body.canaries, set.body.warning], ['staged', 5, 1, null]);
    type Rollout = { id: string; state: string; bakeUntil: string; endedAt: string | null; change: string; servers: { serverId: string; state: string }[] };
    const newest = async () => ((await apis[1]!.call('GET', '/api/rollouts')).body as Rollout[])[0]!;

    // An ordinary change (the origin moves to the other one): the canary first, the other after the bake.
    const servedBy = async (port: number) => {
      const r = await viaProxy(port, host).catch(() => undefined);
      return r?.status === 200 ? (JSON.parse(r.text) as { origin: string }).origin : undefined;
    };
    const was = await waitFor(
      async () => {
        const [x, y] = [await servedBy(canary.agent.httpPort), await servedBy(fleet.agent.httpPort)];
        return x !== undefined && x === y && x;
      },
      'both servers serving the same origin',
      60_000,
    );
    const next = was === 'a' ? b : a;
    const nextName = was === 'a' ? 'b' : 'a';
    assert.equal((await apis[0]!.call('PUT', `/api/domains/${multiDomain}`, { origins: [{ ip: '127.0.0.1', port: next.port }] })).status, 200);
    const saved = Date.now();
    await waitForOrigin(canary.agent.httpPort, host, nextName, 30_000);
    const canaryAt = Date.now();
    assert.equal(await servedBy(fleet.agent.httpPort), was, 'the other server waits for the bake');
    await waitForOrigin(fleet.agent.httpPort, host, nextName, 30_000);
    const fleetAt = Date.now();
    const passed = await newest();
    assert.equal(passed.state, 'applied');
    assert.ok(fleetAt - saved >= 5_000, 'not before the bake time');
    t.diagnostic(`propagation: canary ${canaryAt - saved} ms, fleet ${fleetAt - saved} ms (bakeSeconds 5)`);

    // A rule blocking every request: the canary blocks, reports, and the rollout halts.
    const rule = await apis[0]!.call('POST', '/api/rules', { name: 'block everything', expression: 'starts_with(http.request.uri.path, "/")', action: 'block' });
    assert.equal(rule.status, 201, JSON.stringify(rule.body));
    await waitFor(async () => (await viaProxy(canary.agent.httpPort, host)).status === 403, 'the canary to block', 30_000);
    const blocked = await Promise.all(Array.from({ length: 30 }, () => viaProxy(canary.agent.httpPort, host)));
    assert.ok(blocked.filter((r) => r.status === 403).length >= 25, 'the canary blocks (before it is rolled back)');
    const halted = await waitFor(
      async () => {
        const r = await newest();
        return r.state === 'halted' && r;
      },
      'the rollout to halt',
      30_000,
    );
    assert.ok(Date.parse(halted.endedAt!) <= Date.parse(halted.bakeUntil), `halted within the bake time (${halted.endedAt} <= ${halted.bakeUntil})`);
    assert.deepEqual(Object.fromEntries(halted.servers.map((s) => [s.serverId, s.state])), { [canary.id]: 'rolled_back', [fleet.id]: 'halted' });
    // The canary is back on the last good revision; the other server never blocked.
    await waitForOrigin(canary.agent.httpPort, host, nextName, 30_000);
    assert.equal((await viaProxy(fleet.agent.httpPort, host)).status, 200);
    const notes = (await apis[1]!.call('GET', '/api/notifications')).body as { kind: string; message: string }[];
    const note = notes.find((n) => n.kind === 'rollout_halted');
    assert.ok(note, 'a rollout_halted notification');
    assert.match(note.message, /custom rule "starts_with\(http\.request\.uri\.path, "\/"\)" \(block\) added/, 'it names the change');
    // Nearly every request of the bake is blocked: a request that an old HAProxy worker or the
    // previous configuration still answered just after the canary reported may count in it.
    const signal = /regressed the share of requests blocked by the WAF on canary "edge-0": ([\d.]+)% before the change, ([\d.]+)% during the bake/.exec(note.message);
    assert.ok(signal, `the signal and its values: ${note.message}`);
    assert.ok(Number(signal[1]) < 10 && Number(signal[2]) >= 90, `the share before and during the bake: ${note.message}`);
    assert.equal((await apis[0]!.call('GET', '/api/settings/rollout')).body.state, 'halted');

    // Undo and go back to immediate for the tests after this one; the other server never blocked.
    assert.equal((await apis[0]!.call('DELETE', `/api/rules/${rule.body.id}`)).status, 200);
    assert.equal((await apis[0]!.call('PUT', '/api/settings/rollout', { mode: 'immediate' })).status, 200);
    assert.equal((await viaProxy(fleet.agent.httpPort, host)).status, 200);
  });

  test('a key deleted through one process fails on the other at once', async (t) => {
    if (!databaseUrl) return t.skip('PostgreSQL is not reachable');
    const created = await apis[0]!.call('POST', '/api/settings/api-keys', { name: 'short-lived' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const key = created.body.key as string;
    assert.equal((await callWith(serves[1]!.url, key, 'GET', '/api/servers')).status, 200, 'the new key works on the other process');
    assert.equal((await apis[0]!.call('DELETE', `/api/settings/api-keys?id=${created.body.id}`)).status, 200);
    assert.equal((await callWith(serves[1]!.url, key, 'GET', '/api/servers')).status, 401, 'the very next request on the other process');
    assert.equal((await callWith(serves[0]!.url, key, 'GET', '/api/servers')).status, 401);
  });

  test('the monthly charge, tried by both processes every second, charges each due account once', async (t) => {
    if (!databaseUrl) return t.skip('PostgreSQL is not reachable');
    const admin = (body: unknown) =>
      fetch(`${serves[0]!.url}/admin/accounts`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }).then(
        (r) => r.json() as Promise<{ accountId: string }>,
      );
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await admin({ email: `due-${i}-${Date.now()}@example.com`, plan: 'pro', balance: 100 })).accountId);
    const db = new pg.Client({ connectionString: databaseUrl });
    await db.connect();
    try {
      // Due now: what a month's wait would do (the test's own write, not a product path).
      await db.query(`update accounts set next_charge_at = now() - interval '1 minute' where id = any($1)`, [ids]);
      const charges = async () =>
        (await db.query(`select account_id, count(*)::int as n from transactions where kind = 'charge' and status = 'confirmed' and account_id = any($1) group by account_id`, [ids])).rows as {
          account_id: string;
          n: number;
        }[];
      await waitFor(async () => (await charges()).length === ids.length, 'every due account charged', 30_000);
      // More runs of the job after those charges: each sentinel account made due later is charged
      // by a later run, which would have charged the first ones again if it could.
      for (let k = 0; k < 3; k++) {
        const sentinel = (await admin({ email: `sentinel-${k}-${Date.now()}@example.com`, plan: 'pro', balance: 100 })).accountId;
        await db.query(`update accounts set next_charge_at = now() - interval '1 minute' where id = $1`, [sentinel]);
        await waitFor(async () => (await db.query(`select 1 from transactions where kind = 'charge' and account_id = $1`, [sentinel])).rowCount === 1, 'a later run of the job', 30_000);
      }
      assert.ok(
        (await charges()).every((c) => c.n === 1),
        'one charge per account',
      );
      const rows = (
        await db.query(`select a.balance_cents::int as balance, t.amount_cents::int as price from accounts a join transactions t on t.account_id = a.id and t.kind = 'charge' where a.id = any($1)`, [
          ids,
        ])
      ).rows as { balance: number; price: number }[];
      assert.equal(rows.length, ids.length);
      assert.ok(
        rows.every((r) => r.price > 0 && r.balance === 10_000 - r.price),
        `each balance is $100 less one price: ${JSON.stringify(rows.slice(0, 3))}`,
      );
    } finally {
      await db.end();
    }
  });

  test('a process stopped for a restart tells its agents (1012); they come back through the load balancer within the spread window and resync', async (t) => {
    if (!databaseUrl) return t.skip('PostgreSQL is not reachable');
    const { srv, agent, d } = await agentBehindLb('edge-restart', 'restart.example.test');
    // Both processes restart one after the other, as a rolling deploy does: whichever held the
    // agent told it so, and it ends up on one of them with the change made meanwhile.
    for (const i of [0, 1]) {
      const port = Number(new URL(serves[i]!.url).port);
      assert.equal(await serves[i]!.stop('SIGTERM'), 0, 'a clean shutdown');
      serves[i] = await startServe({ port, adminToken: ADMIN, databaseUrl, env: JOBS_EVERY_SECOND });
    }
    await waitFor(() => agent.output().includes('the service is restarting'), 'the agent told of the restart', 10_000);
    assert.equal((await apis[1]!.call('PUT', `/api/domains/${d.body.id}`, { origins: [{ ip: '127.0.0.1', port: b.port }] })).status, 200);
    await waitForOrigin(agent.httpPort, 'restart.example.test', 'b', 60_000);
    await waitFor(
      async () => ((await apis[0]!.call('GET', '/api/servers')).body as { id: string; status: string }[]).find((s) => s.id === srv.body.id)?.status === 'active',
      'the agent active again',
      30_000,
    );
  });

  test("a killed process's agents reconnect to the other one through the load balancer and resync", async (t) => {
    if (!databaseUrl) return t.skip('PostgreSQL is not reachable');
    const { srv, agent: viaLb, d } = await agentBehindLb('edge-lb', 'lb.example.test');
    // kill both in turn is not needed: kill process 0, then change through process 1; whichever
    // process held the agent, it must end up on process 1 with the change
    await serves[0]!.stop('SIGKILL');
    serves[0] = undefined;
    assert.equal((await apis[1]!.call('PUT', `/api/domains/${d.body.id}`, { origins: [{ ip: '127.0.0.1', port: b.port }] })).status, 200);
    await waitForOrigin(viaLb.httpPort, 'lb.example.test', 'b', 60_000);
    await waitFor(
      async () => ((await apis[1]!.call('GET', '/api/servers')).body as { id: string; status: string }[]).find((s) => s.id === srv.body.id)?.status === 'active',
      'the agent active again',
      60_000,
    );
  });
});
