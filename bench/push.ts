// npm run bench:push — in one run:
//  1. API write -> traffic served by the new config, p50/p95 over 100 changes, one real agent + HAProxy;
//  2. one change fanned out to 1,000 simulated agents holding real WebSocket connections to one
//     server process: time until all have acked, and memory per idle connection;
//  3. the same 1,000 agents spread over two server processes on one PostgreSQL: one change made
//     through one process, time until all have acked; then a reconnect storm after a process
//     restart, the simulated agents retrying with the real agent's backoff (peak / mean rate);
//  4. render time for 10,000 domains.
import { readFileSync } from 'node:fs';
import { CLOSE, PROTOCOL_VERSION, type ServerSnapshot } from '@rampart/protocol';
import { reconnectBackoff, RESTART_SPREAD_MS } from '@rampart/agent';
import { renderHaproxyConfig } from '@rampart/proxy';
import WebSocket from 'ws';
import { apiClient, ADMIN, startAgent, startOrigin, viaProxy, waitForOrigin } from '../test/support/cluster.js';
import { freePort, startServe, waitFor } from '../test/support/processes.js';
import { freshPostgresSchema } from '../test/support/postgres.js';

const CHANGES = Number(process.env.BENCH_CHANGES ?? 100);
const AGENTS = Number(process.env.BENCH_AGENTS ?? 1000);
const DOMAINS = Number(process.env.BENCH_DOMAINS ?? 10_000);

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const rssKb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);

async function writeToTraffic() {
  const serve = await startServe({ port: await freePort(), adminToken: ADMIN });
  const api = await apiClient(serve.url);
  const srv = await api.call('POST', '/api/servers', { name: 'bench-edge' });
  const agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
  const a = await startOrigin('a');
  const b = await startOrigin('b');
  try {
    const d = await api.call('POST', '/api/domains', { domain: 'bench.example.test', origins: [{ ip: '127.0.0.1', port: a.port }], serverIds: [srv.body.id], sslEnabled: false });
    await waitForOrigin(agent.httpPort, 'bench.example.test', 'a', 30_000);
    const times: number[] = [];
    for (let i = 0; i < CHANGES; i++) {
      const to = i % 2 === 0 ? b : a;
      const name = i % 2 === 0 ? 'b' : 'a';
      const t0 = performance.now();
      await api.call('PUT', `/api/domains/${d.body.id}`, { origins: [{ ip: '127.0.0.1', port: to.port }] });
      for (;;) {
        const r = await viaProxy(agent.httpPort, 'bench.example.test');
        if (r.status === 200 && JSON.parse(r.text).origin === name) break;
        await new Promise((res) => setTimeout(res, 2));
      }
      times.push(performance.now() - t0);
    }
    return { p50: pct(times, 50), p95: pct(times, 95), max: Math.max(...times) };
  } finally {
    await agent.stop();
    await serve.stop();
    await a.close();
    await b.close();
  }
}

async function fanOut() {
  // On PostgreSQL when one answers, so the server's memory is the hub's, not an embedded database's.
  const databaseUrl = await freshPostgresSchema('benchpush');
  const serve = await startServe({ port: await freePort(), adminToken: ADMIN, databaseUrl });
  const api = await apiClient(serve.url);
  const tokens: string[] = [];
  for (let i = 0; i < AGENTS; i++) tokens.push((await api.call('POST', '/api/servers', { name: `sim-${i}` })).body.connectionToken);
  const pid = serve.child.pid!;
  const rssBefore = rssKb(pid);
  const wsUrl = `${serve.url.replace(/^http/, 'ws')}/agent`;
  let target = -1;
  let acked = 0;
  const sockets: WebSocket[] = [];
  let connected = 0;
  for (let i = 0; i < tokens.length; i += 100) {
    await Promise.all(
      tokens.slice(i, i + 100).map(
        (token) =>
          new Promise<void>((resolve, reject) => {
            const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${token}` } });
            sockets.push(ws);
            ws.on('open', () => ws.send(JSON.stringify({ type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: 'bench', runningRevision: null } })));
            ws.on('message', (data) => {
              const m = JSON.parse(data.toString());
              if (m.type !== 'config/snapshot') return;
              ws.send(JSON.stringify({ type: 'config/ack', payload: { revision: m.payload.revision, ok: true, errors: [] } }));
              if (target < 0) {
                connected++;
                resolve();
              } else if (m.payload.rules.length > 0) acked++;
            });
            ws.on('error', reject);
          }),
      ),
    );
  }
  await waitFor(async () => (await api.call('GET', '/api/servers')).body.every((s: any) => s.appliedRevision === s.desiredRevision), 'initial acks', 60_000, 200);
  global.gc?.();
  const rssIdle = rssKb(pid);
  target = 1;
  const t0 = performance.now();
  await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: '198.51.100.0/24' });
  await waitFor(() => acked >= AGENTS, 'every simulated agent to ack', 60_000, 1);
  const fanOutMs = performance.now() - t0;
  for (const ws of sockets) ws.terminate();
  await serve.stop();
  return { connected, fanOutMs, perConnKb: (rssIdle - rssBefore) / AGENTS, storage: databaseUrl ? 'PostgreSQL' : 'PGlite' };
}

/**
 * A simulated agent: says hello, acks every snapshot, and reconnects after a close with the real
 * agent's backoff (1 s doubling to 60 s, full jitter; reset after a connection that got a snapshot;
 * retries spread over RESTART_SPREAD_MS after the service announces its restart with CLOSE.restarting).
 */
class SimAgent {
  ws: WebSocket | undefined;
  private readonly backoff = reconnectBackoff();
  private stopped = false;
  private healthy = false;
  snapshots = 0;
  constructor(
    private readonly url: () => string,
    private readonly token: string,
    private readonly onSnapshot: (agent: SimAgent, rules: number) => void,
    private readonly onConnected: (agent: SimAgent) => void,
  ) {}
  connect(): void {
    if (this.stopped) return;
    const ws = new WebSocket(this.url(), { headers: { authorization: `Bearer ${this.token}` } });
    this.ws = ws;
    ws.on('open', () => {
      this.onConnected(this);
      ws.send(JSON.stringify({ type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: 'bench', runningRevision: null } }));
    });
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString());
      if (m.type !== 'config/snapshot') return;
      this.healthy = true;
      this.snapshots++;
      ws.send(JSON.stringify({ type: 'config/ack', payload: { revision: m.payload.revision, ok: true, errors: [] } }));
      this.onSnapshot(this, m.payload.rules.length);
    });
    ws.on('error', () => undefined);
    ws.on('close', (code) => {
      // as the agent's connectLoop does
      if (this.healthy) this.backoff.reset();
      this.healthy = false;
      if (code === CLOSE.restarting) this.backoff.spread(RESTART_SPREAD_MS);
      if (!this.stopped) setTimeout(() => this.connect(), this.backoff.next());
    });
  }
  stop(): void {
    this.stopped = true;
    this.ws?.terminate();
  }
}

async function twoProcesses() {
  const databaseUrl = await freshPostgresSchema('benchpush2');
  if (!databaseUrl) return undefined;
  const ports = [await freePort(), await freePort()];
  const serves = [await startServe({ port: ports[0]!, adminToken: ADMIN, databaseUrl }), await startServe({ port: ports[1]!, adminToken: ADMIN, databaseUrl })];
  const api = await apiClient(serves[0]!.url);
  const tokens: string[] = [];
  for (let i = 0; i < AGENTS; i++) tokens.push((await api.call('POST', '/api/servers', { name: `sim2-${i}` })).body.connectionToken);
  const wsUrl = (i: number) => () => `${serves[i % 2]!.url.replace(/^http/, 'ws')}/agent`;
  let withRule = 0;
  const connects: number[] = [];
  const agents = tokens.map(
    (token, i) =>
      new SimAgent(
        wsUrl(i),
        token,
        (_a, rules) => {
          if (rules > 0) withRule++;
        },
        () => connects.push(performance.now()),
      ),
  );
  try {
    for (let i = 0; i < agents.length; i += 100) {
      agents.slice(i, i + 100).forEach((a) => a.connect());
      await waitFor(() => agents.slice(i, i + 100).every((a) => a.snapshots > 0), 'simulated agents to connect', 60_000, 10);
    }
    // one change through process 0 reaches the agents of both
    const t0 = performance.now();
    await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: '198.51.100.0/24' });
    await waitFor(() => withRule >= AGENTS, 'every agent on either process to ack', 60_000, 1);
    const fanOutMs = performance.now() - t0;
    // a restart of the control plane (both processes, as a deploy does): every agent retries
    // with the real agent's backoff until its process is back
    connects.length = 0;
    const before = agents.map((a) => a.snapshots);
    const down = performance.now();
    await Promise.all(serves.map((s) => s.stop()));
    for (const [i, s] of (await Promise.all(ports.map((port) => startServe({ port, adminToken: ADMIN, databaseUrl })))).entries()) serves[i] = s;
    const downMs = performance.now() - down;
    await waitFor(() => agents.every((a, k) => a.snapshots > before[k]!), 'every agent to resync', 120_000, 20);
    const span = Math.max(1, connects.at(-1)! - connects[0]!);
    /** Peak / mean of the connection rate counted in buckets of bucketMs. */
    const peakToMean = (bucketMs: number) => {
      const buckets = new Map<number, number>();
      for (const t of connects) buckets.set(Math.floor((t - connects[0]!) / bucketMs), (buckets.get(Math.floor((t - connects[0]!) / bucketMs)) ?? 0) + 1);
      return Math.max(...buckets.values()) / (connects.length / Math.max(1, Math.ceil(span / bucketMs)));
    };
    return { fanOutMs, reconnects: connects.length, spanMs: span, downMs, peakToMean: peakToMean(1000), peakToMean100ms: peakToMean(100) };
  } finally {
    for (const a of agents) a.stop();
    for (const s of serves) await s.stop();
  }
}

function renderTime() {
  const snapshot: ServerSnapshot = {
    serverId: 'bench',
    revision: 1,
    domains: Array.from({ length: DOMAINS }, (_, i) => ({
      id: `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`,
      domain: `site-${i}.example.com`,
      origins: [
        { ip: `10.${(i >> 8) & 255}.${i & 255}.1`, port: 8080 },
        { ip: `10.${(i >> 8) & 255}.${i & 255}.2`, port: 8080 },
      ],
      sslEnabled: true,
      wafEnabled: true,
      wafLevel: 'medium' as const,
      wafMode: 'block' as const,
      serverAddresses: [],
    })),
    rules: [],
  };
  const opts = { httpBind: { address: '*', port: 80 }, runDir: '/run/rampart' };
  renderHaproxyConfig(snapshot, opts, { configDir: '/etc/rampart/cfg' }); // warm-up
  const runs: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    renderHaproxyConfig(snapshot, opts, { configDir: '/etc/rampart/cfg' });
    runs.push(performance.now() - t0);
  }
  return { medianMs: pct(runs, 50) };
}

const w = await writeToTraffic();
const f = await fanOut();
const two = await twoProcesses();
const r = renderTime();
const line = (name: string, value: string, aim: string, ok: boolean) => console.log(`${name.padEnd(52)}${value.padStart(14)}   aim ${aim.padEnd(10)} ${ok ? 'met' : 'MISSED'}`);
console.log(`\nbench:push — ${CHANGES} changes, ${AGENTS} simulated agents, ${DOMAINS} domains\n`);
line('API write -> new config serving, p50', `${w.p50.toFixed(0)} ms`, '< 300 ms', w.p50 < 300);
line('API write -> new config serving, p95', `${w.p95.toFixed(0)} ms`, '< 1000 ms', w.p95 < 1000);
line(`one change to ${f.connected} agents, all acked (${f.storage})`, `${f.fanOutMs.toFixed(0)} ms`, '< 2000 ms', f.fanOutMs < 2000);
line('server memory per idle agent connection', `${f.perConnKb.toFixed(1)} KB`, '< 20 KB', f.perConnKb < 20);
if (two) {
  line(`one change via process 1 of 2, all ${AGENTS} acked`, `${two.fanOutMs.toFixed(0)} ms`, '< 1000 ms', two.fanOutMs < 1000);
  line(`restart (down ${(two.downMs / 1000).toFixed(1)} s): ${two.reconnects} reconnects in ${(two.spanMs / 1000).toFixed(1)} s`, '', '', true);
  line('  peak / mean connections per second', `${two.peakToMean.toFixed(2)}x`, '<= 3x', two.peakToMean <= 3);
  console.log(`  (per 100 ms: ${two.peakToMean100ms.toFixed(2)}x)`);
} else {
  console.log('two processes: PostgreSQL is not reachable, not measured');
}
line(`render ${DOMAINS} domains (median of 5)`, `${r.medianMs.toFixed(0)} ms`, '< 1000 ms', r.medianMs < 1000);
