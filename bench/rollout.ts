// npm run bench:rollout — how long a change takes to reach the shield servers, immediate and
// staged (issue 23: the staged path adds no more than the bake time). A real `rampart serve`
// (embedded database) and two real agents with HAProxy, one of them the canary; each round moves
// a domain to the other of two origins and times, from the API's answer, when each server serves
// the new one (polling its HAProxy every 10 ms). Immediate rounds first (the baseline: the same
// change, the same servers), then staged rounds with BENCH_BAKE seconds of bake. Prints the p50
// and the slowest of each, and what staging added beyond the bake.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADMIN, apiClient, startAgent, startOrigin, viaProxy, type AgentProc } from '../test/support/cluster.js';
import { freePort, startServe, waitFor } from '../test/support/processes.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const BAKE = Number(process.env.BENCH_BAKE ?? 5);
const HOST = 'rollout.bench.test';

const dir = mkdtempSync(join(tmpdir(), 'rampart-bench-rollout-'));
const serve = await startServe({ port: await freePort(), adminToken: ADMIN, dataDir: join(dir, 'data') });
const origins = [await startOrigin('a'), await startOrigin('b')];
const agents: AgentProc[] = [];
try {
  const api = await apiClient(serve.url);
  const ids: string[] = [];
  for (const name of ['canary', 'fleet']) {
    const srv = await api.call('POST', '/api/servers', { name });
    ids.push(srv.body.id);
    agents.push(await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken }));
  }
  const [canary, fleet] = agents as [AgentProc, AgentProc];
  const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: ids, sslEnabled: false });
  if (d.status !== 201) throw new Error(`creating the domain: ${JSON.stringify(d.body)}`);
  const servedBy = async (agent: AgentProc) => {
    const r = await viaProxy(agent.httpPort, HOST).catch(() => undefined);
    return r?.status === 200 ? (JSON.parse(r.text) as { origin: string }).origin : undefined;
  };
  await waitFor(async () => (await servedBy(canary)) === 'a' && (await servedBy(fleet)) === 'a', 'both servers serving the domain', 60_000);
  let current = 0;

  /** One change: the domain moves to the other origin; ms until each server serves it. */
  async function round(): Promise<{ canary: number; fleet: number }> {
    const next = 1 - current;
    const name = next === 0 ? 'a' : 'b';
    const saved = performance.now();
    const r = await api.call('PUT', `/api/domains/${d.body.id}`, { origins: [{ ip: '127.0.0.1', port: origins[next]!.port }] });
    if (r.status !== 200) throw new Error(`the change: ${JSON.stringify(r.body)}`);
    const at: { canary?: number; fleet?: number } = {};
    await waitFor(
      async () => {
        if (at.canary === undefined && (await servedBy(canary)) === name) at.canary = performance.now() - saved;
        if (at.fleet === undefined && (await servedBy(fleet)) === name) at.fleet = performance.now() - saved;
        return at.canary !== undefined && at.fleet !== undefined;
      },
      'both servers to serve the change',
      BAKE * 1000 + 60_000,
      10,
    );
    current = next;
    return { canary: at.canary!, fleet: at.fleet! };
  }

  const immediate: { canary: number; fleet: number }[] = [];
  for (let i = 0; i < ROUNDS; i++) immediate.push(await round());

  await api.call('PUT', `/api/servers/${ids[0]}`, { canary: true });
  const set = await api.call('PUT', '/api/settings/rollout', { mode: 'staged', bakeSeconds: BAKE });
  if (set.status !== 200) throw new Error(`staged mode: ${JSON.stringify(set.body)}`);
  const staged: { canary: number; fleet: number }[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    staged.push(await round());
    // The next change waits for this rollout to be applied (a change during a bake supersedes it).
    await waitFor(async () => (await api.call('GET', '/api/settings/rollout')).body.state === 'idle', 'the rollout to be applied', 30_000);
  }
  const rollouts = (await api.call('GET', '/api/rollouts')).body as { state: string }[];

  const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  const max = (xs: number[]) => Math.max(...xs);
  const row = (label: string, xs: number[]) => `  ${label.padEnd(34)} p50 ${String(Math.round(p50(xs))).padStart(6)} ms   slowest ${String(Math.round(max(xs))).padStart(6)} ms`;
  const everyServer = (rs: { canary: number; fleet: number }[]) => rs.map((r) => Math.max(r.canary, r.fleet));
  const added = p50(staged.map((r) => r.fleet)) - p50(everyServer(immediate));
  console.log(`Change propagation, ${ROUNDS} rounds each, 2 shield servers (PGlite control plane, ${new Date().toISOString()}):`);
  console.log(row('immediate: every server', everyServer(immediate)));
  console.log(
    row(
      'staged: the canary',
      staged.map((r) => r.canary),
    ),
  );
  console.log(
    row(
      `staged: the fleet (bake ${BAKE} s)`,
      staged.map((r) => r.fleet),
    ),
  );
  console.log(
    `  staged added ${Math.round(added)} ms to the fleet's p50 (the bake: ${BAKE * 1000} ms; beyond it: ${Math.round(added - BAKE * 1000)} ms)  [target: no more than the bake: ${added <= BAKE * 1000 ? 'ok' : 'MISSED'}]`,
  );
  console.log(`  rollouts: ${rollouts.filter((r) => r.state === 'applied').length} applied of ${rollouts.length}`);
} finally {
  for (const a of agents) {
    await a.stop();
    rmSync(a.dataDir, { recursive: true, force: true });
  }
  await serve.stop();
  for (const o of origins) await o.close();
  rmSync(dir, { recursive: true, force: true });
}
