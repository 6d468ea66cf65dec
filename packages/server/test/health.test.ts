import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { checkServers, httpProbe, runHealthCycle, type HealthCycleOptions, type Probe } from '../src/services/health.js';
import {
  AGENT_CONNECTION_TIMEOUT_MS,
  recordAgentConnected,
  recordAgentDisconnected,
  recordProxyServing,
  releaseAgentConnections,
  touchAgentConnections,
  type AgentConnection,
} from '../src/services/servers.js';
import { waitFor } from '../../../test/support/processes.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';
import { startProbeTarget, type ProbeTarget } from './probe-target.js';

// Server health (docs/api.md "Shield servers", docs/dns-failover.md "The health cycle"): healthy
// when the agent is connected and heartbeating, HAProxy serves, and the probe of
// /.well-known/rampart/health on the server's address answers 200 "ok". server_down and
// server_recovered once per outage, whether the cycle or a disconnect saw it first. The probe
// targets are node:http servers on loopback addresses; time is the test clock.

const PROCESS = randomUUID();
/** Ports probed, in order: what a cycle asked, whatever the targets saw. */
const probed: number[] = [];
/** The real probe, with 3 s as in production; a target on a port in `short` gets 0.4 s. */
const short = new Set<number>();
const recording: Probe = (target, timeoutMs) => {
  probed.push(target.port);
  return httpProbe(target, short.has(target.port) ? 400 : timeoutMs);
};
const FAST: HealthCycleOptions = { probe: recording };

for (const backend of await backends()) {
  describe(`server health on ${backend}`, async () => {
    const t = await makeTestApp(backend);
    const app = t.app;
    t.clock.set(new Date('2031-01-10T08:00:00Z'));
    const cycle = (options: HealthCycleOptions = FAST) => runHealthCycle(t.ctx, t.clock.now(), options);

    /** An account with one server whose agent is connected, its HAProxy standing in as `target`. */
    async function connected(target: ProbeTarget, name = 'edge-1', key?: string) {
      key ??= (await newAccount(app)).key;
      const s = await call(app, 'POST', '/api/servers', { key, body: { name } });
      assert.equal(s.status, 201);
      assert.equal((await call(app, 'PUT', `/api/servers/${s.body.id}`, { key, body: { publicIp: target.address } })).status, 200);
      const conn: AgentConnection = { serverId: s.body.id, connectionId: randomUUID(), processId: PROCESS, ip: '127.0.0.1', httpPort: target.port };
      assert.equal((await recordAgentConnected(t.ctx, conn)).recorded, true);
      return { key, id: s.body.id as string, conn };
    }
    const view = async (key: string, id: string) => ((await call(app, 'GET', '/api/servers', { key })).body as any[]).find((s) => s.id === id);
    const notes = async (key: string, kind: string) => ((await call(app, 'GET', '/api/notifications?limit=200', { key })).body as { kind: string; message: string }[]).filter((n) => n.kind === kind);
    /** Time passes with the agent heartbeating (its process writes the heartbeat). */
    const passWhileConnected = async (ms: number, ...conns: AgentConnection[]) => {
      t.clock.advance(ms);
      await touchAgentConnections(t.ctx, conns);
    };

    test('a connected server whose HAProxy answers the probe is healthy: GET /api/servers shows healthy, healthCheckedAt, no error; no notification', async () => {
      const target = await startProbeTarget('127.0.0.2');
      const { key, id } = await connected(target);
      const before = await view(key, id);
      assert.equal(before.healthy, null, 'unknown before the first cycle');
      assert.equal(before.healthCheckedAt, null);
      await cycle();
      const after = await view(key, id);
      assert.equal(after.healthy, true);
      assert.equal(after.healthError, null);
      assert.equal(after.healthCheckedAt, t.clock.now().toISOString());
      assert.equal(after.status, 'active', 'status stays active/offline/decommissioned');
      await waitFor(() => target.hits === 1, 'the probe to reach the target');
      assert.equal(target.hits, 1, 'probed once, at the health path of publicIp and the reported HTTP port');
      assert.equal(target.otherHits, 0);
      assert.deepEqual(await notes(key, 'server_down'), []);
      assert.deepEqual(await notes(key, 'server_recovered'), []);
    });

    test('a failing probe: server_down once with the cause and what to do, nothing more while it lasts; server_recovered once when it answers again', async () => {
      const target = await startProbeTarget('127.0.0.3');
      const { key, id, conn } = await connected(target);
      await cycle();
      target.mode = '503';
      await passWhileConnected(10_000, conn);
      await cycle();
      const down = await view(key, id);
      assert.equal(down.healthy, false);
      assert.match(down.healthError, new RegExp(`The health probe of http://127\\.0\\.0\\.3:${target.port}/\\.well-known/rampart/health answered HTTP 503`));
      const downs = await notes(key, 'server_down');
      assert.equal(downs.length, 1);
      assert.match(
        downs[0]!.message,
        /Shield server "edge-1" is connected but failed its health check: the health probe .* answered HTTP 503\. Check that its HAProxy runs and that port \d+ of 127\.0\.0\.3 is reachable/,
      );
      for (let i = 0; i < 3; i++) {
        await passWhileConnected(10_000, conn);
        await cycle();
      }
      assert.equal((await notes(key, 'server_down')).length, 1, 'one outage, one server_down');
      target.mode = 'ok';
      await passWhileConnected(10_000, conn);
      await cycle();
      assert.equal((await view(key, id)).healthy, true);
      const ups = await notes(key, 'server_recovered');
      assert.equal(ups.length, 1);
      assert.match(ups[0]!.message, /Shield server "edge-1" is back/);
      await passWhileConnected(10_000, conn);
      await cycle();
      assert.equal((await notes(key, 'server_recovered')).length, 1);
    });

    test('another body than "ok", no answer in time, nothing listening: each unhealthy, with a reason that shows nothing of the answer', async () => {
      const other = await startProbeTarget('127.0.0.4', 'other-body');
      const hang = await startProbeTarget('127.0.0.5', 'hang');
      short.add(hang.port);
      const a = await connected(other, 'other');
      const b = await connected(hang, 'hang', a.key);
      const closed = await startProbeTarget('127.0.0.6');
      const c = await connected(closed, 'closed', a.key);
      await closed.close();
      await cycle();
      assert.match((await view(a.key, a.id)).healthError, /answered HTTP 200 with another body than Rampart HAProxy's "ok"/);
      assert.doesNotMatch((await view(a.key, a.id)).healthError, /nginx/, 'the answer itself is never shown');
      assert.match((await view(a.key, b.id)).healthError, /got no answer within 0\.4 s/);
      assert.match((await view(a.key, c.id)).healthError, /was refused/);
      assert.equal((await notes(a.key, 'server_down')).length, 3);
    });

    test('HAProxy reported not serving: unhealthy without a probe; server_down says so; serving again: recovered', async () => {
      const target = await startProbeTarget('127.0.0.7');
      const { key, id, conn } = await connected(target);
      await cycle();
      await recordProxyServing(t.ctx, id, false);
      await passWhileConnected(10_000, conn);
      probed.length = 0;
      await cycle();
      assert.ok(!probed.includes(target.port), 'not probed');
      assert.equal((await view(key, id)).healthError, 'The agent reports that HAProxy is not serving');
      const downs = await notes(key, 'server_down');
      assert.equal(downs.length, 1);
      assert.match(downs[0]!.message, /connected but its agent reports that HAProxy is not serving/);
      await recordProxyServing(t.ctx, id, true);
      await passWhileConnected(10_000, conn);
      await cycle();
      assert.equal((await view(key, id)).healthy, true);
      assert.equal((await notes(key, 'server_recovered')).length, 1);
    });

    test('a disconnect raises server_down itself; the cycle adds none, during the minute or after; back: one server_recovered', async () => {
      const target = await startProbeTarget('127.0.0.8');
      const { key, id, conn } = await connected(target);
      await cycle();
      assert.equal(await recordAgentDisconnected(t.ctx, conn, true), true);
      assert.equal((await notes(key, 'server_down')).length, 1, 'from the disconnect');
      assert.equal((await view(key, id)).healthy, false, 'down at once, before any cycle');
      await cycle();
      t.clock.advance(AGENT_CONNECTION_TIMEOUT_MS + 1000);
      await cycle();
      const v = await view(key, id);
      assert.equal(v.healthy, false);
      assert.match(v.healthError, /The agent is not connected \(last heard from at /);
      assert.equal((await notes(key, 'server_down')).length, 1, 'still one');
      const again = { ...conn, connectionId: randomUUID() };
      await recordAgentConnected(t.ctx, again);
      await cycle();
      assert.equal((await view(key, id)).healthy, true);
      assert.equal((await notes(key, 'server_recovered')).length, 1);
    });

    test('found down by the cycle, then disconnected: still one server_down; one server_recovered when healthy again', async () => {
      const target = await startProbeTarget('127.0.0.9', '503');
      const { key, conn } = await connected(target);
      await cycle();
      assert.equal((await notes(key, 'server_down')).length, 1, 'from the cycle');
      await recordAgentDisconnected(t.ctx, conn, true);
      assert.equal((await notes(key, 'server_down')).length, 1, 'the disconnect of a server already down raises nothing');
      target.mode = 'ok';
      await recordAgentConnected(t.ctx, { ...conn, connectionId: randomUUID() });
      await cycle();
      await cycle();
      assert.equal((await notes(key, 'server_recovered')).length, 1);
    });

    test('connections released by a control-plane restart: healthy kept while they reconnect, no notification; one that never comes back is down once after the minute', async () => {
      const back = await startProbeTarget('127.0.0.10');
      const gone = await startProbeTarget('127.0.0.11');
      const a = await connected(back, 'comes-back');
      const b = await connected(gone, 'stays-away', a.key);
      await cycle();
      await releaseAgentConnections(t.ctx, PROCESS); // the process stopped; no server_down
      t.clock.advance(5_000);
      await cycle(); // the new process's first cycle, before the agents are back
      assert.equal((await view(a.key, a.id)).healthy, true);
      assert.equal((await view(a.key, b.id)).healthy, true);
      const reconnected = { ...a.conn, connectionId: randomUUID() };
      await recordAgentConnected(t.ctx, reconnected);
      t.clock.advance(5_000);
      await cycle();
      assert.deepEqual(await notes(a.key, 'server_down'), []);
      assert.deepEqual(await notes(a.key, 'server_recovered'), []);
      t.clock.advance(AGENT_CONNECTION_TIMEOUT_MS);
      await touchAgentConnections(t.ctx, [reconnected]);
      await cycle();
      const downs = await notes(a.key, 'server_down');
      assert.equal(downs.length, 1);
      assert.match(downs[0]!.message, /Shield server "stays-away" has not been connected for over 1 minute/);
      assert.equal((await view(a.key, a.id)).healthy, true);
    });

    test('a server whose agent never connected: healthy null, said why, no notification', async () => {
      const { key } = await newAccount(app);
      const s = await call(app, 'POST', '/api/servers', { key, body: { name: 'new' } });
      await cycle();
      t.clock.advance(10 * AGENT_CONNECTION_TIMEOUT_MS);
      await cycle();
      const v = await view(key, s.body.id);
      assert.equal(v.healthy, null);
      assert.equal(v.healthError, 'The agent has never connected');
      assert.deepEqual(await notes(key, 'server_down'), []);
    });

    test('an agent that disconnects while it is being probed is not declared recovered on that probe', async () => {
      const target = await startProbeTarget('127.0.0.12');
      const { key, id, conn } = await connected(target);
      await cycle();
      await recordAgentDisconnected(t.ctx, conn, true);
      const again = { ...conn, connectionId: randomUUID() };
      await recordAgentConnected(t.ctx, again);
      // The probe succeeds, but the agent's connection drops meanwhile.
      const racing: Probe = async (target, timeout) => {
        const r = await httpProbe(target, timeout);
        await recordAgentDisconnected(t.ctx, again, true);
        return r;
      };
      await checkServers(t.ctx, t.clock.now(), { probe: racing });
      assert.equal((await view(key, id)).healthy, false);
      // The reconnect itself ended the first outage (server_recovered at once); the probe adds none.
      const ups = await notes(key, 'server_recovered');
      assert.equal(ups.length, 1);
      assert.match(ups[0]!.message, /its agent reconnected/);
    });

    test('probes run concurrently, never more than the bound at once', async () => {
      const { key } = await newAccount(app);
      const target = await startProbeTarget('127.0.0.13');
      for (let i = 0; i < 12; i++) await connected(target, `fleet-${i}`, key);
      let inFlight = 0;
      let most = 0;
      // No probe finishes until the bound is reached: an unbounded pool would start all of them first.
      let full!: () => void;
      const gate = new Promise<void>((r) => (full = r));
      const counting: Probe = async (target, timeout) => {
        most = Math.max(most, ++inFlight);
        if (inFlight === 4) full();
        await gate;
        inFlight--;
        return httpProbe(target, timeout);
      };
      const r = await checkServers(t.ctx, t.clock.now(), { probe: counting, probeConcurrency: 4 });
      assert.ok(r.servers >= 12);
      assert.equal(most, 4);
    });
  });
}
