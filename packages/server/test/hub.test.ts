import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CLOSE, parseServiceMessage, PROTOCOL_VERSION, type ServerSnapshot, type ServiceMessage } from '@rampart/protocol';
import { RAMPART_VERSION } from '@rampart/protocol/version';
import WebSocket from 'ws';
import { hubServer } from './fake-agent.js';
import { waitFor } from '../../../test/support/processes.js';
import { ADMIN_TOKEN, call, newAccount } from './helpers.js';

// The agent hub (docs/architecture.md "The flow of one change", docs/api.md "The agent WebSocket"): a real control plane
// in this process, and the `ws` client playing a shield-server agent. The token travels only in
// the Authorization header; a snapshot goes out on hello and after every change; acks, closes and
// silent agents end up in the server's status and notifications.

const HEARTBEAT_MS = 200;
const WAIT_MS = 10_000;

type Snapshot = ServerSnapshot;
type Closed = { code: number; reason: string };

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([p.finally(() => clearTimeout(t)), new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)))]);
}

describe('agent hub', async () => {
  const { srv, agentUrl, agents } = await hubServer({ agentHeartbeatMs: HEARTBEAT_MS });
  const { key } = await newAccount(srv.app, 'pro');

  /** A shield-server agent reduced to its wire protocol. */
  class FakeAgent {
    readonly ws: WebSocket;
    readonly received: ServiceMessage[] = [];
    readonly invalid: string[] = [];
    readonly opened: Promise<void>;
    readonly closed: Promise<Closed>;

    constructor(token: string, options: { autoPong?: boolean } = {}) {
      this.ws = new WebSocket(agentUrl, { headers: { authorization: `Bearer ${token}` }, autoPong: options.autoPong ?? true });
      agents.push(this);
      this.opened = new Promise((resolve, reject) => {
        this.ws.once('open', () => resolve());
        this.ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
      });
      this.opened.catch(() => undefined);
      this.closed = new Promise((resolve) => this.ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
      this.ws.on('error', () => undefined);
      this.ws.on('message', (data) => {
        const parsed = parseServiceMessage(data.toString());
        if (parsed.ok) this.received.push(parsed.message);
        else this.invalid.push(parsed.error);
      });
    }

    send(message: unknown): void {
      this.ws.send(typeof message === 'string' ? message : JSON.stringify(message));
    }

    hello(protocol = PROTOCOL_VERSION, runningRevision: number | null = null): void {
      this.send({ type: 'agent/hello', payload: { protocol, agentVersion: 'fake-0.0.1', runningRevision } });
    }

    snapshots(): Snapshot[] {
      return this.received.flatMap((m) => (m.type === 'config/snapshot' ? [m.payload] : []));
    }

    /** The first snapshot (already received or still to come) that satisfies pred. */
    snapshot(pred: (s: Snapshot) => boolean = () => true, what = 'a snapshot'): Promise<Snapshot> {
      return waitFor(() => this.snapshots().find(pred), what, WAIT_MS, 10);
    }

    closedWithin(what: string): Promise<Closed> {
      return within(this.closed, WAIT_MS, what);
    }

    get isOpen(): boolean {
      return this.ws.readyState === WebSocket.OPEN;
    }
  }

  /** A connected agent that has said hello and got its first snapshot. */
  async function connect(token: string, options: { autoPong?: boolean } = {}): Promise<{ agent: FakeAgent; first: Snapshot }> {
    const agent = new FakeAgent(token, options);
    await within(agent.opened, WAIT_MS, 'the upgrade');
    agent.hello();
    const first = await agent.snapshot(() => true, 'the first snapshot');
    return { agent, first };
  }

  /** What an upgrade attempt ends in: the HTTP status of a refusal, or 'open'. */
  function tryUpgrade(url: string, headers: Record<string, string>): Promise<number | 'open'> {
    return within(
      new Promise((resolve, reject) => {
        const ws = new WebSocket(url, { headers });
        ws.on('error', (err) => reject(err));
        ws.once('unexpected-response', (_req, res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
          ws.terminate();
        });
        ws.once('open', () => {
          resolve('open');
          ws.terminate();
        });
      }),
      WAIT_MS,
      'the upgrade answer',
    );
  }

  async function newServer(name: string): Promise<{ id: string; token: string }> {
    const r = await call(srv.app, 'POST', '/api/servers', { key, body: { name } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return { id: r.body.id, token: r.body.connectionToken };
  }
  async function serverView(id: string) {
    const r = await call(srv.app, 'GET', '/api/servers', { key });
    assert.equal(r.status, 200);
    const s = (r.body as { id: string; status: string; ip: string | null; desiredRevision: number; appliedRevision: number; agentVersion: string | null; agentRefused: string | null }[]).find(
      (x) => x.id === id,
    );
    assert.ok(s, `server ${id} is listed`);
    return s;
  }
  async function notifications() {
    const r = await call(srv.app, 'GET', '/api/notifications', { key });
    assert.equal(r.status, 200);
    return r.body as { kind: string; message: string; serverId: string | null }[];
  }
  function waitForStatus(id: string, status: string) {
    return waitFor(async () => (await serverView(id)).status === status, `server status ${status}`, WAIT_MS, 25);
  }
  async function newDomain(domain: string, serverIds: string[]) {
    const r = await call(srv.app, 'POST', '/api/domains', { key, body: { domain, origins: [{ ip: '10.0.0.1', port: 8080 }], serverIds } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string; domain: string };
  }

  // ------------------------------------------------------------------------ (a) authentication

  test('an upgrade without a valid token in the Authorization header is refused with 401', async () => {
    const { id, token } = await newServer('auth');
    assert.equal(await tryUpgrade(agentUrl, {}), 401, 'no token');
    assert.equal(await tryUpgrade(agentUrl, { authorization: 'Bearer ' }), 401, 'empty bearer');
    assert.equal(await tryUpgrade(agentUrl, { authorization: `Bearer ${token}x` }), 401, 'wrong token');
    assert.equal(await tryUpgrade(agentUrl, { authorization: 'Bearer rst_0000000000000000000000000000000000000000' }), 401, 'unknown token');
    assert.equal(await tryUpgrade(agentUrl, { authorization: token }), 401, 'token without the Bearer scheme');
    assert.equal(await tryUpgrade(agentUrl, { authorization: `Bearer ${'a'.repeat(5000)}` }), 401, 'oversized token');
    assert.equal(await tryUpgrade(`${agentUrl}?token=${encodeURIComponent(token)}`, {}), 401, 'token in the query only');
    assert.equal(await tryUpgrade(`${agentUrl}?access_token=${encodeURIComponent(token)}`, {}), 401, 'token in the query only');
    // The same token in the header is accepted, so the refusals above are about where it was sent.
    assert.equal(await tryUpgrade(agentUrl, { authorization: `Bearer ${token}` }), 'open');
    assert.equal((await serverView(id)).status, 'offline', 'no hello, so never active');
  });

  test('an upgrade on another path than /agent is answered 404', async () => {
    const { token } = await newServer('path');
    const base = srv.url.replace(/^http/, 'ws');
    assert.equal(await tryUpgrade(`${base}/agents`, { authorization: `Bearer ${token}` }), 404);
    assert.equal(await tryUpgrade(`${base}/api/servers`, { authorization: `Bearer ${token}` }), 404);
  });

  // ------------------------------------------------------------------------ (b) (d) (e) a healthy agent

  describe('a connected agent', async () => {
    const server = await newServer('edge-main');
    const before = await newDomain('before.example.com', [server.id]);
    let agent: FakeAgent;
    let first: Snapshot;

    test('hello with protocol 1 is answered with the full snapshot at the desired revision; the server turns active with its ip', async () => {
      assert.equal((await serverView(server.id)).status, 'offline');
      ({ agent, first } = await connect(server.token));
      const view = await waitFor(
        async () => {
          const v = await serverView(server.id);
          return v.status === 'active' && v;
        },
        'server active',
        WAIT_MS,
        25,
      );
      assert.equal(first.serverId, server.id);
      assert.equal(first.revision, view.desiredRevision);
      assert.ok(first.revision >= 1, 'assigning a domain bumped the revision');
      assert.deepEqual(
        first.domains.map((d) => d.domain),
        ['before.example.com'],
      );
      assert.equal(first.domains[0]!.id, before.id);
      assert.deepEqual(first.domains[0]!.origins, [{ ip: '10.0.0.1', port: 8080 }]);
      assert.equal(view.ip, '127.0.0.1');
      assert.deepEqual(agent.invalid, [], 'every message from the hub parses');
    });

    test('a domain assigned to the server pushes a new snapshot with a higher revision containing it', async () => {
      const count = agent.snapshots().length;
      await newDomain('pushed.example.com', [server.id]);
      const next = await agent.snapshot((s) => s.revision > first.revision && s.domains.some((d) => d.domain === 'pushed.example.com'), 'the pushed snapshot');
      assert.ok(agent.snapshots().length > count);
      assert.deepEqual(next.domains.map((d) => d.domain).sort(), ['before.example.com', 'pushed.example.com']);
      assert.equal(next.domains.find((d) => d.domain === 'pushed.example.com')!.wafCompressedBodies, 'refuse', "the domain's settings travel with it");
      assert.equal(next.revision, (await serverView(server.id)).desiredRevision);
      assert.ok(agent.isOpen);
    });

    test('a domain on another server pushes nothing to this one', async () => {
      const other = await newServer('edge-other');
      const { agent: otherAgent } = await connect(other.token);
      const mine = agent.snapshots().length;
      await newDomain('elsewhere.example.com', [other.id]);
      await otherAgent.snapshot((s) => s.domains.some((d) => d.domain === 'elsewhere.example.com'), 'the other server snapshot');
      // A push to this agent would have been sent in the same serversChanged call, before the other's.
      assert.equal(agent.snapshots().length, mine);
      assert.ok(agent.snapshots().every((s) => !s.domains.some((d) => d.domain === 'elsewhere.example.com')));
      otherAgent.ws.close();
    });

    test('config/ack ok sets appliedRevision; an older ack does not lower it', async () => {
      const latest = agent.snapshots().at(-1)!;
      assert.equal((await serverView(server.id)).appliedRevision === latest.revision, false, 'not applied before the ack');
      agent.send({ type: 'config/ack', payload: { revision: latest.revision, ok: true, errors: [] } });
      await waitFor(async () => (await serverView(server.id)).appliedRevision === latest.revision, 'appliedRevision', WAIT_MS, 25);
      agent.send({ type: 'config/ack', payload: { revision: latest.revision - 1, ok: true, errors: [] } });
      // A report sent after the stale ack: once its notification is stored, the ack has been handled.
      agent.send({ type: 'status/report', payload: { kind: 'proxy_crash', message: 'marker after a stale ack' } });
      await waitFor(async () => (await notifications()).some((n) => n.message.includes('marker after a stale ack')), 'the marker notification', WAIT_MS, 25);
      assert.equal((await serverView(server.id)).appliedRevision, latest.revision);
      assert.ok(agent.isOpen);
    });

    test('a failed config/ack becomes a server_error notification naming the revision and the line', async () => {
      const latest = agent.snapshots().at(-1)!;
      agent.send({ type: 'config/ack', payload: { revision: latest.revision, ok: false, errors: [{ line: 17, message: "unknown keyword 'bogus'" }] } });
      const n = await waitFor(async () => (await notifications()).find((x) => x.kind === 'server_error' && x.message.includes("unknown keyword 'bogus'")), 'server_error', WAIT_MS, 25);
      assert.equal(n.serverId, server.id);
      assert.match(n.message, new RegExp(`\\b${latest.revision}\\b`));
      assert.match(n.message, /\b17\b/);
    });
  });

  // ------------------------------------------------------------------------ (c) protocol version

  test('hello with an unsupported protocol is closed with 4000 and a reason naming the supported version', async () => {
    const { id, token } = await newServer('old-agent');
    const agent = new FakeAgent(token);
    await within(agent.opened, WAIT_MS, 'the upgrade');
    agent.hello(99);
    const closed = await agent.closedWithin('the protocol mismatch close');
    assert.equal(closed.code, CLOSE.protocolMismatch);
    assert.equal(closed.code, 4000);
    assert.match(closed.reason, new RegExp(`(^|\\D)${PROTOCOL_VERSION}(\\D|$)`), closed.reason);
    assert.equal(agent.snapshots().length, 0, 'no snapshot for an agent that speaks another protocol');
    assert.equal((await serverView(id)).status, 'offline');
  });

  test("every hello stores the agent's version (agentVersion); a protocol this control plane cannot speak is refused naming both versions, in the close reason and the server's agentRefused, whatever the rest of the hello looks like", async () => {
    const { id, token } = await newServer('versions');
    const { agent } = await connect(token);
    await waitFor(async () => (await serverView(id)).agentVersion === 'fake-0.0.1', 'the agent version stored', WAIT_MS, 25);
    assert.equal((await serverView(id)).agentRefused, null);
    agent.ws.close();
    await waitForStatus(id, 'offline');

    // A newer agent: another protocol, and a hello this control plane's schema does not know.
    const newer = new FakeAgent(token);
    await within(newer.opened, WAIT_MS, 'the upgrade');
    newer.send({ type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION + 1, agentVersion: '9.9.9', runningRevision: null, features: ['x'] } });
    const closed = await newer.closedWithin('the protocol mismatch close');
    assert.equal(closed.code, CLOSE.protocolMismatch, closed.reason);
    for (const part of [`rampart ${RAMPART_VERSION}`, `protocol ${PROTOCOL_VERSION}`, 'agent 9.9.9', `protocol ${PROTOCOL_VERSION + 1}`, 'upgrade the control plane']) {
      assert.ok(closed.reason.includes(part), `the close reason names ${part}: ${closed.reason}`);
    }
    const refused = await serverView(id);
    assert.equal(refused.status, 'offline');
    assert.equal(refused.agentVersion, '9.9.9', 'the refused hello stored its version too');
    assert.equal(refused.agentRefused, closed.reason, "the server's agentRefused says what the agent was told");
    assert.equal(newer.snapshots().length, 0);

    // An older agent is told to upgrade itself; a long version is cut so the reason fits a close frame.
    const older = new FakeAgent(token);
    await within(older.opened, WAIT_MS, 'the upgrade');
    older.send({ type: 'agent/hello', payload: { protocol: 0, agentVersion: `0.0.1-${'x'.repeat(200)}`, runningRevision: null } });
    const closedOld = await older.closedWithin('the protocol mismatch close');
    assert.equal(closedOld.code, CLOSE.protocolMismatch, closedOld.reason);
    assert.ok(closedOld.reason.startsWith(`control plane rampart ${RAMPART_VERSION} speaks protocol ${PROTOCOL_VERSION}`), closedOld.reason);
    const olderView = await serverView(id);
    assert.match(olderView.agentRefused ?? '', /protocol 0: upgrade the agent$/);
    assert.equal(olderView.agentVersion?.length, 64, 'the stored version is cut to AGENT_LIMITS.agentVersion');

    // An agent this control plane speaks clears the refusal.
    const { agent: again } = await connect(token);
    await waitFor(async () => (await serverView(id)).agentRefused === null, 'the refusal cleared', WAIT_MS, 25);
    assert.equal((await serverView(id)).agentVersion, 'fake-0.0.1');
    assert.equal((await serverView(id)).status, 'active');
    again.ws.close();
  });

  // ------------------------------------------------------------------------ (f) token regeneration

  test('regenerating the token closes the live connection with 4002 and the old token is refused afterwards', async () => {
    const { id, token } = await newServer('regen');
    const { agent } = await connect(token);
    await waitForStatus(id, 'active');
    const r = await call(srv.app, 'POST', `/api/servers/${id}/token`, { key });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const closed = await agent.closedWithin('the token-revoked close');
    assert.equal(closed.code, CLOSE.tokenRevoked);
    assert.equal(closed.code, 4002);
    assert.equal(await tryUpgrade(agentUrl, { authorization: `Bearer ${token}` }), 401, 'old token');
    await waitForStatus(id, 'offline');
    // The new token works.
    const { first } = await connect(r.body.connectionToken);
    assert.equal(first.serverId, id);
  });

  // ------------------------------------------------------------------------ (g) decommissioning

  test('decommissioning closes the live connection with 4001 and the token is refused afterwards', async () => {
    const { id, token } = await newServer('retired');
    const { agent } = await connect(token);
    await waitForStatus(id, 'active');
    const r = await call(srv.app, 'DELETE', `/api/servers/${id}`, { key });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const closed = await agent.closedWithin('the decommissioned close');
    assert.equal(closed.code, CLOSE.decommissioned);
    assert.equal(closed.code, 4001);
    assert.equal(await tryUpgrade(agentUrl, { authorization: `Bearer ${token}` }), 401);
    assert.equal((await serverView(id)).status, 'decommissioned');
  });

  // ------------------------------------------------------------------------ (h) disconnect

  test('an agent that closes its socket leaves the server offline with a server_down notification', async () => {
    const { id, token } = await newServer('leaving');
    const { agent } = await connect(token);
    await waitForStatus(id, 'active');
    assert.equal((await notifications()).filter((n) => n.kind === 'server_down' && n.serverId === id).length, 0);
    agent.ws.close(1000, 'bye');
    await agent.closedWithin('the close');
    await waitForStatus(id, 'offline');
    const downOf = async () => (await notifications()).filter((n) => n.kind === 'server_down' && n.serverId === id);
    const down = await waitFor(async () => (await downOf()).length > 0 && downOf(), 'server_down', WAIT_MS, 25);
    assert.equal(down.length, 1, 'exactly one server_down');
    assert.match(down[0]!.message, /leaving/);
  });

  // ------------------------------------------------------------------------ (i) silent agent

  test('an agent that stops answering pings is dropped within a few heartbeat intervals; one that answers stays', async () => {
    const silent = await newServer('silent');
    const healthy = await newServer('healthy');
    const { agent: mute } = await connect(silent.token, { autoPong: false });
    const { agent: alive } = await connect(healthy.token);
    await waitForStatus(silent.id, 'active');
    await waitForStatus(healthy.id, 'active');
    let pings = 0;
    mute.ws.on('ping', () => pings++);
    const started = Date.now();
    const closed = await mute.closedWithin('the silent agent to be dropped');
    const elapsed = Date.now() - started;
    assert.ok(pings >= 1, 'the hub pinged the silent agent');
    assert.ok(elapsed < HEARTBEAT_MS * 10, `dropped after ${elapsed} ms`);
    assert.notEqual(closed.code, 1000, 'dropped, not closed politely');
    await waitForStatus(silent.id, 'offline');
    assert.ok(alive.isOpen, 'the agent that answers pings is still connected');
    assert.equal((await serverView(healthy.id)).status, 'active');
  });

  // ------------------------------------------------------------------------ (j) invalid messages

  test('an invalid message closes the connection with 4003', async () => {
    const { token } = await newServer('garbled');
    const cases: [string, (a: FakeAgent) => void][] = [
      ['not JSON', (a) => a.send('this is not json')],
      ['unknown type', (a) => a.send({ type: 'agent/goodbye', payload: {} })],
      ['extra field', (a) => a.send({ type: 'agent/heartbeat', payload: { runningRevision: null, extra: 1 } })],
      ['wrong type', (a) => a.send({ type: 'config/ack', payload: { revision: 'one', ok: true, errors: [] } })],
      ['a service message', (a) => a.send({ type: 'service/heartbeat', payload: {} })],
      ['binary', (a) => a.ws.send(Buffer.from('{"type":"agent/heartbeat","payload":{"runningRevision":null}}'), { binary: true })],
    ];
    for (const [label, sendBad] of cases) {
      const agent = new FakeAgent(token);
      await within(agent.opened, WAIT_MS, `the upgrade (${label})`);
      agent.hello();
      await agent.snapshot(() => true, `the first snapshot (${label})`);
      sendBad(agent);
      const closed = await agent.closedWithin(`the close after ${label}`);
      assert.equal(closed.code, CLOSE.invalidMessage, label);
      assert.equal(closed.code, 4003, label);
    }
  });
});
