import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { AGENT_LIMITS, DETECTION_REASONS, HOST_PROBLEM, FLOOD_REASONS, type WafEventItem } from '@rampart/protocol';
import type { Insertable, Selectable } from 'kysely';
import type { ServiceContext } from '../src/context.js';
import type { Database, Tx } from '../src/db/database.js';
import type { AgentConnectionsTable, NotificationsTable, ServersTable, WafEventsTable } from '../src/db/schema.js';
import { DEFAULT_PLANS } from '../src/plans.js';
import type { AgentChannelStore } from '../src/services/agent-channel.js';
import { storeEvents } from '../src/services/events.js';
import { notificationMessages, recordStatusReport, SERVER_NOTIFICATION_LIMIT, type StatusReport } from '../src/services/notifications.js';
import { recordConfigAck } from '../src/services/revisions.js';
import {
  AGENT_CONNECTION_TIMEOUT_MS,
  expireAgentConnections,
  recordAgentConnected,
  recordAgentDisconnected,
  recordProxyServing,
  DISCONNECTED_REASON,
  releaseAgentConnections,
  touchAgentConnections,
} from '../src/services/servers.js';

// What the agent channel's service functions decide (docs/architecture.md "Layers of the control
// plane"), driven through an in-memory store: no database. The same functions against PostgreSQL
// and PGlite are in agent-connections.test.ts, agent-trust.test.ts and events.test.ts.

type Server = Selectable<ServersTable>;
type Connection = Omit<Selectable<AgentConnectionsTable>, 'server_id'>;
type Notification = Insertable<NotificationsTable> & { count: number; created_at: Date; updated_at: Date | null };
type Domain = { id: string; domain: string; ssl_enabled: boolean; status: string; serverIds: Set<string> };

const time = (t: Date | string | null | undefined) => (t == null ? 0 : new Date(t).getTime());

/** The tables the store functions read and write, in memory, and the name of every write made. */
class World {
  servers = new Map<string, Server>();
  connections = new Map<string, Connection>();
  domains: Domain[] = [];
  events: (Insertable<WafEventsTable> & { id?: string })[] = [];
  requestIds: { event_id: string; account_id: string; request_id: string }[] = [];
  notifications: Notification[] = [];
  writes: string[] = [];
  changed: string[][] = [];
  clock = new Date('2024-05-10T12:00:00Z');

  readonly ctx: ServiceContext;

  constructor() {
    // Transactions are the store's business: here they are plain calls on one in-memory world.
    const tx = { isTransaction: true } as unknown as Tx;
    const db = { isTransaction: false, transaction: () => ({ execute: <T>(fn: (t: Tx) => Promise<T>) => fn(tx) }) } as unknown as Database;
    this.ctx = { db, plans: DEFAULT_PLANS, now: () => new Date(this.clock), serversChanged: (ids) => this.changed.push([...ids]) };
  }

  advance(ms: number): void {
    this.clock = new Date(this.clock.getTime() + ms);
  }

  /** A server row with the columns the agent channel reads; the others (health, ...) are left out. */
  addServer(fields: Partial<Server> = {}): Server {
    const s = {
      id: randomUUID(),
      account_id: 'account-1',
      name: 'edge-1',
      token_hash: 'hash',
      status: 'offline',
      ip: null,
      public_ip: null,
      last_seen_at: null,
      desired_revision: 1,
      applied_revision: 0,
      created_at: this.clock,
      ...fields,
    } as Server;
    this.servers.set(s.id, s);
    return s;
  }

  addDomain(domain: string, serverIds: string[], sslEnabled = false): Domain {
    const d = { id: randomUUID(), domain, ssl_enabled: sslEnabled, status: 'pending', serverIds: new Set(serverIds) };
    this.domains.push(d);
    return d;
  }

  serverDowns(serverId: string): Notification[] {
    return this.notifications.filter((n) => n.server_id === serverId && n.kind === 'server_down');
  }

  readonly store: AgentChannelStore = {
    // Reads return copies, as rows read from a database are.
    findServer: async (_db, accountId, id) => {
      const s = this.servers.get(id);
      return s?.account_id === accountId ? { ...s } : undefined;
    },
    lockServer: async (_db, id) => {
      const s = this.servers.get(id);
      return s && { ...s };
    },
    markServerConnected: async (_db, id, ip, now) => {
      this.write('markServerConnected');
      Object.assign(this.servers.get(id)!, { status: 'active', ip, last_seen_at: now });
    },
    markServersOffline: async (_db, ids) => {
      this.write('markServersOffline');
      const live = ids.flatMap((id) => this.servers.get(id) ?? []).filter((s) => s.status !== 'decommissioned');
      for (const s of live) s.status = 'offline';
      return live.map((s) => ({ id: s.id, account_id: s.account_id, name: s.name }));
    },
    markServersDown: async (_db, ids, reason) => {
      const fresh = ids.flatMap((id) => this.servers.get(id) ?? []).filter((s) => s.status !== 'decommissioned' && s.healthy !== false);
      if (fresh.length) this.write('markServersDown');
      for (const s of fresh) Object.assign(s, { healthy: false, health_error: reason });
      return fresh.map((s) => ({ id: s.id, account_id: s.account_id, name: s.name }));
    },
    setProxyServing: async (_db, id, serving) => {
      this.write('setProxyServing');
      const s = this.servers.get(id);
      if (s && s.status !== 'decommissioned') s.proxy_serving = serving;
    },
    clearServerVerdict: async (_db, id) => {
      this.write('clearServerVerdict');
      Object.assign(this.servers.get(id)!, { healthy: null, health_error: null });
    },
    touchServersLastSeen: async (_db, ids, now) => {
      this.write('touchServersLastSeen');
      for (const id of ids) this.servers.get(id)!.last_seen_at = now;
    },
    desiredRevision: async (_db, id) => {
      const s = this.servers.get(id);
      return s && Number(s.desired_revision);
    },
    recordAppliedRevision: async (_db, id, revision, now) => {
      const s = this.servers.get(id);
      if (!s) return undefined;
      this.write('recordAppliedRevision');
      Object.assign(s, { applied_revision: Math.max(Number(s.applied_revision), revision), last_seen_at: now });
      return Number(s.applied_revision);
    },
    bumpServers: async (_db, accountId, ids) => {
      const bumped = ids.flatMap((id) => this.servers.get(id) ?? []).filter((s) => s.account_id === accountId && s.status !== 'decommissioned');
      for (const s of bumped) s.desired_revision = Number(s.desired_revision) + 1;
      if (bumped.length) this.write('bumpServers');
      return bumped.map((s) => s.id);
    },
    connectionOfServer: async (_db, serverId) => {
      const c = this.connections.get(serverId);
      return c && { ...c };
    },
    upsertConnection: async (_db, serverId, row) => {
      this.write('upsertConnection');
      this.connections.set(serverId, { ...row, connected_at: new Date(row.connected_at), last_heartbeat_at: new Date(row.last_heartbeat_at) });
    },
    deleteConnection: async (_db, serverId, connectionId, heartbeatBefore) => {
      const c = this.connections.get(serverId);
      if (!c || c.connection_id !== connectionId || (heartbeatBefore && time(c.last_heartbeat_at) > heartbeatBefore.getTime())) return [];
      this.write('deleteConnection');
      this.connections.delete(serverId);
      return [serverId];
    },
    deleteConnectionsOfProcess: async (_db, processId) => {
      const gone = [...this.connections].filter(([, c]) => c.process_id === processId).map(([serverId]) => serverId);
      for (const id of gone) this.connections.delete(id);
      return gone;
    },
    touchConnections: async (_db, ids, now) => {
      const live = [...this.connections.values()].filter((c) => ids.includes(c.connection_id));
      for (const c of live) c.last_heartbeat_at = now;
      return live.map((c) => c.connection_id);
    },
    staleConnections: async (_db, cutoff) =>
      [...this.connections].filter(([, c]) => time(c.last_heartbeat_at) <= cutoff.getTime()).map(([server_id, c]) => ({ server_id, connection_id: c.connection_id })),
    serversSharingDomains: async (_db, serverId) => [...new Set(this.domains.filter((d) => d.serverIds.has(serverId)).flatMap((d) => [...d.serverIds]))],
    domainNamesOfServer: async (_db, serverId) => this.domains.filter((d) => d.serverIds.has(serverId)).map((d) => d.domain),
    activatePlainDomainsOfServer: async (_db, serverId) => {
      this.write('activatePlainDomainsOfServer');
      for (const d of this.domains) if (d.serverIds.has(serverId) && !d.ssl_enabled) d.status = 'active';
    },
    eventRowsReceivedSince: async (_db, serverId, since) => {
      const today = this.events.filter((e) => e.server_id === serverId && time(e.received_at) >= since.getTime());
      const of = (reasons: readonly string[]) => today.filter((e) => reasons.includes(e.reason)).length;
      return { all: today.length, detections: of(DETECTION_REASONS), flood: of(FLOOD_REASONS) };
    },
    insertEvents: async (_db, rows) => {
      if (rows.length) this.write('insertEvents');
      return rows.map((r) => {
        const id = String(this.events.length + 1);
        this.events.push({ ...r, id });
        return id;
      });
    },
    foldableEvents: async (_db, serverId, ips, from, to) =>
      this.events
        .filter((e) => e.server_id === serverId && ips.includes(e.source_ip) && time(e.occurred_at) >= from.getTime() && time(e.occurred_at) <= to.getTime())
        .map((e, i) => ({
          id: String(e.id ?? i),
          source_ip: e.source_ip,
          domain: e.domain,
          reason: e.reason,
          rule_id: e.rule_id ?? null,
          method: e.method ?? null,
          path: e.path ?? null,
          location: e.location ?? null,
          blocked: e.blocked ?? true,
          occurred_at: new Date(time(e.occurred_at)),
        }))
        .reverse(),
    requestIdCounts: async (_db, eventIds) => new Map(eventIds.map((id) => [id, this.requestIds.filter((r) => r.event_id === id).length] as const).filter(([, n]) => n > 0)),
    insertEventRequestIds: async (_db, rows) => {
      if (rows.length) this.write('insertEventRequestIds');
      for (const r of rows) if (!this.requestIds.some((x) => x.event_id === r.event_id && x.request_id === r.request_id)) this.requestIds.push(r);
    },
    foldEvent: async (_db, id, n, lastSeen) => {
      this.write('foldEvent');
      const e = this.events.find((x) => String(x.id) === id)!;
      e.count = (e.count ?? 1) + n;
      e.last_seen_at = new Date(Math.max(time(e.last_seen_at ?? e.occurred_at), lastSeen.getTime()));
    },
    insertNotification: async (_db, row) => {
      this.write('insertNotification');
      this.notifications.push({ ...row, count: 1, created_at: new Date(row.created_at), updated_at: null });
    },
    foldNotification: async (_db, w, message, now) => {
      const latest = this.inWindow(w)
        .filter((n) => n.message === message)
        .sort((a, b) => time(b.created_at) - time(a.created_at))[0];
      if (!latest) return false;
      this.write('foldNotification');
      latest.count++;
      latest.updated_at = now;
      return true;
    },
    countNotifications: async (_db, w) => this.inWindow(w).length,
    queueDeliveries: async () => 0, // no notification settings in this world
  };

  private inWindow(w: { serverId: string; kind: string; since: Date }): Notification[] {
    return this.notifications.filter((n) => n.server_id === w.serverId && n.kind === w.kind && time(n.created_at) > w.since.getTime());
  }

  private write(what: string): void {
    this.writes.push(what);
  }
}

const ack = (revision: number, ok = true, errors: { line: number | null; message: string }[] = []) => ({ revision, ok, errors });

describe('config/ack', () => {
  const setUp = () => {
    const w = new World();
    const s = w.addServer({ desired_revision: 3, applied_revision: 1 });
    return { w, s, server: { accountId: s.account_id, serverId: s.id } };
  };

  test('a revision above the desired one is refused and nothing is written, nor a failed one raised', async () => {
    const { w, s, server } = setUp();
    w.addDomain('plain.example.com', [s.id]);
    assert.deepEqual(await recordConfigAck(w.ctx, server, ack(4), w.store), { outcome: 'refused', desiredRevision: 3 });
    assert.deepEqual(await recordConfigAck(w.ctx, server, ack(4, false, [{ line: 1, message: 'made up' }]), w.store), { outcome: 'refused', desiredRevision: 3 });
    assert.deepEqual(w.writes, []);
    assert.equal(s.applied_revision, 1);
    assert.equal(w.domains[0]!.status, 'pending');
  });

  test('a negative, fractional or unsafe revision, or the ack of a missing server, is refused', async () => {
    const { w, server } = setUp();
    for (const revision of [-1, 1.5, Number.MAX_SAFE_INTEGER + 2]) {
      assert.equal((await recordConfigAck(w.ctx, server, ack(revision), w.store)).outcome, 'refused', String(revision));
    }
    assert.deepEqual(await recordConfigAck(w.ctx, { ...server, serverId: randomUUID() }, ack(1), w.store), { outcome: 'refused', desiredRevision: 0 });
    assert.deepEqual(w.writes, []);
  });

  test('otherwise it is stored: the applied revision, and the domains of the server without SSL turn active', async () => {
    const { w, s, server } = setUp();
    const plain = w.addDomain('plain.example.com', [s.id]);
    const ssl = w.addDomain('ssl.example.com', [s.id], true);
    const elsewhere = w.addDomain('other.example.com', [randomUUID()]);
    assert.deepEqual(await recordConfigAck(w.ctx, server, ack(3), w.store), { outcome: 'applied', desiredRevision: 3 });
    assert.equal(s.applied_revision, 3);
    assert.deepEqual(s.last_seen_at, w.clock);
    assert.deepEqual([plain.status, ssl.status, elsewhere.status], ['active', 'pending', 'pending'], 'an SSL domain is active by its certificate');
  });

  test('an ack below the applied revision is stale: the applied revision stays, the domains do not change', async () => {
    const { w, s, server } = setUp();
    s.applied_revision = 3;
    const plain = w.addDomain('plain.example.com', [s.id]);
    assert.equal((await recordConfigAck(w.ctx, server, ack(2), w.store)).outcome, 'stale');
    assert.equal(s.applied_revision, 3);
    assert.equal(plain.status, 'pending');
  });

  test('a failed ack raises server_error with the proxy messages and stores no revision', async () => {
    const { w, s, server } = setUp();
    const r = await recordConfigAck(
      w.ctx,
      server,
      ack(3, false, [
        { line: 12, message: 'unknown keyword' },
        { line: null, message: 'fatal errors' },
      ]),
      w.store,
    );
    assert.equal(r.outcome, 'failed');
    assert.equal(s.applied_revision, 1);
    assert.deepEqual(
      w.notifications.map((n) => [n.kind, n.message]),
      [['server_error', notificationMessages.configFailed(3, 'line 12: unknown keyword; fatal errors')]],
    );
  });

  test('a failed ack whose cause is the host says to fix the host, not to correct a change', async () => {
    const { w, s, server } = setUp();
    const cause = 'HAProxy cannot listen on port 8081: it is already in use by haproxy (pid 42). Stop that process or give this agent another --http-port';
    await recordConfigAck(w.ctx, server, ack(3, false, [{ line: null, message: `${HOST_PROBLEM}${cause}` }]), w.store);
    assert.equal(s.applied_revision, 1);
    assert.equal(w.notifications.length, 1);
    assert.equal(w.notifications[0]!.message, notificationMessages.hostProblem(3, cause));
    assert.match(w.notifications[0]!.message, /because of its host, not the configuration: HAProxy cannot listen on port 8081: .*haproxy \(pid 42\)/);
    assert.doesNotMatch(w.notifications[0]!.message, /save it again/);
  });
});

describe('events/batch', () => {
  const event = (domain: string, fields: Partial<WafEventItem> = {}): WafEventItem => ({
    ts: Math.floor(Date.parse('2024-05-10T11:59:00Z') / 1000),
    ip: '198.51.100.7',
    domain,
    reason: 'ip_blocked',
    ruleId: null,
    ...fields,
  });
  const setUp = () => {
    const w = new World();
    const s = w.addServer();
    w.addDomain('shop.example.com', [s.id]);
    w.addDomain('theirs.example.com', [w.addServer().id]);
    return { w, s, store: (events: WafEventItem[]) => storeEvents(w.ctx, s.account_id, s.id, events, w.store) };
  };

  test('events for domains not assigned to the server are dropped and counted; invalid ones apart', async () => {
    const { w, s, store } = setUp();
    const r = await store([event('shop.example.com'), event('theirs.example.com'), event('nowhere.example.com'), event('shop.example.com', { ip: 'not an address' })]);
    assert.deepEqual(r, { stored: 1, invalid: 1, unassigned: 2, folded: 0, overCap: 0 });
    assert.deepEqual(
      w.events.map((e) => [e.domain, e.server_id]),
      [['shop.example.com', s.id]],
    );
  });

  test('a server of another account stores nothing: every event is unassigned', async () => {
    const { w, s } = setUp();
    const r = await storeEvents(w.ctx, 'account-2', s.id, [event('shop.example.com')], w.store);
    assert.deepEqual(r, { stored: 0, invalid: 0, unassigned: 1, folded: 0, overCap: 0 });
    assert.deepEqual(w.writes, []);
  });

  test(`an event dated yesterday counts toward today's cap of ${AGENT_LIMITS.eventsPerServerPerDay}, which counts by the time received`, async () => {
    const { w, s, store } = setUp();
    assert.equal(AGENT_LIMITS.eventsPerServerPerDay, 5000);
    // Detections, which may take the whole day's room.
    const received = (at: string, n: number) => {
      for (let i = 0; i < n; i++)
        w.events.push({ account_id: s.account_id, server_id: s.id, domain: 'shop.example.com', source_ip: '198.51.100.7', reason: 'sqli_detected', rule_id: null, occurred_at: at, received_at: at });
    };
    received('2024-05-09T23:59:00Z', 10); // yesterday's: not counted today
    received('2024-05-10T00:30:00Z', AGENT_LIMITS.eventsPerServerPerDay - 1);
    const yesterday = Math.floor(Date.parse('2024-05-09T08:00:00Z') / 1000);
    const sqli = { reason: 'sqli_detected' } as const;

    assert.deepEqual(await store([event('shop.example.com', { ...sqli, ts: yesterday }), event('shop.example.com', { ...sqli, ts: yesterday, ip: '198.51.100.8' })]), {
      stored: 1,
      invalid: 0,
      unassigned: 0,
      folded: 0,
      overCap: 1,
    });
    const stored = w.events.at(-1)!;
    assert.deepEqual([stored.occurred_at, stored.received_at], [new Date('2024-05-09T08:00:00Z'), w.clock], 'stored with its own time, received today');
    assert.deepEqual(await store([event('shop.example.com', sqli)]), { stored: 0, invalid: 0, unassigned: 0, folded: 0, overCap: 1 }, 'the backdated one took the last room');

    w.clock = new Date('2024-05-11T00:00:01Z');
    assert.equal((await store([event('shop.example.com', sqli)])).stored, 1, 'a new UTC day, a new cap');
  });

  test('an event from the future is stored at the service clock', async () => {
    const { w, store } = setUp();
    await store([event('shop.example.com', { ts: Math.floor(Date.parse('2030-01-01T00:00:00Z') / 1000) })]);
    assert.deepEqual(w.events[0]!.occurred_at, w.clock);
  });
});

describe('status/report', () => {
  const setUp = () => {
    const w = new World();
    const s = w.addServer();
    const server = { accountId: s.account_id, serverId: s.id };
    return { w, report: (kind: StatusReport['kind'], message: string) => recordStatusReport(w.ctx, server, { kind, message }, w.store) };
  };

  test('identical reports within the window fold into one notification with a count', async () => {
    const { w, report } = setUp();
    for (let i = 0; i < 3; i++) {
      assert.equal(await report('proxy_reload_failed', 'reload failed'), 0);
      w.advance(1_000);
    }
    assert.equal(w.notifications.length, 1);
    assert.equal(w.notifications[0]!.count, 3);
    assert.deepEqual(w.notifications[0]!.updated_at, new Date(w.clock.getTime() - 1_000));

    w.advance(SERVER_NOTIFICATION_LIMIT.windowMs);
    await report('proxy_reload_failed', 'reload failed');
    assert.deepEqual(
      w.notifications.map((n) => n.count),
      [3, 1],
      'past the window, a new notification',
    );
  });

  test('origin_down and origin_up are raised as they are, with the server named and what to do', async () => {
    const { w, report } = setUp();
    await report('origin_down', 'The origin 10.0.0.1:80 of "shop.example.com" is down (HAProxy\'s health check: the connection was refused or failed)');
    await report('origin_up', 'The origin 10.0.0.1:80 of "shop.example.com" is up again');
    assert.deepEqual(
      w.notifications.map((n) => n.kind),
      ['origin_down', 'origin_up'],
    );
    assert.match(w.notifications[0]!.message, /^Shield server ".*": The origin 10\.0\.0\.1:80 of "shop\.example\.com" is down .*\. Check that the origin runs/);
    assert.match(w.notifications[1]!.message, /is up again\. Nothing to do\.$/);
  });

  test('one report, one notification: a proxy crash raises proxy_crash only', async () => {
    const { w, report } = setUp();
    await report('proxy_crash', 'haproxy exited with code 139');
    assert.deepEqual(
      w.notifications.map((n) => n.kind),
      ['proxy_crash'],
    );
  });

  test('a host problem is told as one, without the advice to correct a change', async () => {
    const { w, report } = setUp();
    await report('server_error', `${HOST_PROBLEM}HAProxy cannot listen on port 8081: it is already in use by haproxy (pid 42). Stop that process or give this agent another --http-port`);
    assert.equal(w.notifications.length, 1);
    const [n] = w.notifications;
    assert.match(
      n!.message,
      /port 8081: it is already in use by haproxy \(pid 42\)\. Stop that process or give this agent another --http-port\. This is a problem of the server's host, not of the configuration\.$/,
    );
    assert.doesNotMatch(n!.message, /Host problem:|correct|save it again/i);
  });

  test(`past ${SERVER_NOTIFICATION_LIMIT.perWindow} distinct ones of a kind in the window, the rest are dropped and counted in one notice`, async () => {
    const { w, report } = setUp();
    for (let i = 0; i < SERVER_NOTIFICATION_LIMIT.perWindow; i++) assert.equal(await report('server_error', `error ${i}`), 0);
    assert.equal(await report('server_error', 'one too many'), 1);
    assert.equal(await report('server_error', 'two too many'), 1);
    assert.equal(await report('proxy_crash', 'crash'), 0, 'another kind: kept');
    const errors = w.notifications.filter((n) => n.kind === 'server_error');
    assert.equal(errors.length, SERVER_NOTIFICATION_LIMIT.perWindow + 1);
    const notice = errors.at(-1)!;
    assert.match(notice.message, /^More server_error notifications from this server were dropped/);
    assert.equal(notice.count, 2);
    assert.equal(w.notifications.filter((n) => n.kind === 'proxy_crash').length, 1);
  });
});

describe('agent connections', () => {
  const setUp = () => {
    const w = new World();
    const s = w.addServer({ name: 'edge-1' });
    const conn = (processId = 'process-a', ip = '203.0.113.1') => ({ serverId: s.id, connectionId: randomUUID(), processId, ip });
    return { w, s, conn };
  };

  test('the hello of a decommissioned or missing server is not recorded', async () => {
    const { w, s, conn } = setUp();
    s.status = 'decommissioned';
    assert.deepEqual(await recordAgentConnected(w.ctx, conn(), w.store), { recorded: false, replaced: null, peers: [] });
    assert.deepEqual(await recordAgentConnected(w.ctx, { ...conn(), serverId: randomUUID() }, w.store), { recorded: false, replaced: null, peers: [] });
    assert.deepEqual(w.writes, []);
    assert.equal(s.status, 'decommissioned');
  });

  test("a hello makes the connection the server's live one, active from its address; a newer one replaces it", async () => {
    const { w, s, conn } = setUp();
    const peer = w.addServer({ name: 'edge-2' });
    w.addDomain('shop.example.com', [s.id, peer.id]);
    const a = conn('process-a');
    const first = await recordAgentConnected(w.ctx, a, w.store);
    assert.equal(first.recorded, true);
    assert.equal(first.replaced, null);
    assert.deepEqual(first.peers.sort(), [s.id, peer.id].sort(), 'a new address reaches the snapshots of the servers sharing a domain');
    assert.deepEqual([s.status, s.ip, Number(peer.desired_revision)], ['active', '203.0.113.1', 2]);

    const b = conn('process-b');
    assert.deepEqual(await recordAgentConnected(w.ctx, b, w.store), { recorded: true, replaced: { connectionId: a.connectionId, processId: 'process-a' }, peers: [] });
    assert.equal(w.connections.get(s.id)!.connection_id, b.connectionId);
  });

  test('a disconnect of the live connection turns the server offline and raises server_down once', async () => {
    const { w, s, conn } = setUp();
    const a = conn();
    await recordAgentConnected(w.ctx, a, w.store);
    assert.equal(await recordAgentDisconnected(w.ctx, a, true, w.store), true);
    assert.equal(await recordAgentDisconnected(w.ctx, a, true, w.store), false, 'seen ending twice (two processes)');
    assert.equal(s.status, 'offline');
    assert.deepEqual(
      w.serverDowns(s.id).map((n) => n.message),
      [notificationMessages.serverDown('edge-1')],
    );
  });

  test('a reconnect ends the outage its disconnect began at once: not checked yet, and server_recovered', async () => {
    const { w, s, conn } = setUp();
    const a = conn();
    await recordAgentConnected(w.ctx, a, w.store);
    await recordAgentDisconnected(w.ctx, a, true, w.store);
    assert.deepEqual([s.healthy, s.health_error], [false, DISCONNECTED_REASON]);
    await recordAgentConnected(w.ctx, conn(), w.store);
    assert.deepEqual([s.status, s.healthy, s.health_error], ['active', null, null], 'no red "not connected" next to "online"');
    assert.deepEqual(
      w.notifications.filter((n) => n.kind === 'server_recovered').map((n) => n.message),
      [notificationMessages.serverRecovered('edge-1', 'its agent reconnected; the next health check confirms that HAProxy serves')],
    );
    // A server down for another cause (its probe failed) stays down until the health check says otherwise.
    Object.assign(s, { healthy: false, health_error: 'The health probe of http://203.0.113.1/ timed out' });
    await recordAgentConnected(w.ctx, conn(), w.store);
    assert.equal(s.healthy, false);
  });

  test('HAProxy reported not serving turns the server unhealthy at once, saying so, with one server_down', async () => {
    const { w, s, conn } = setUp();
    await recordAgentConnected(w.ctx, conn(), w.store);
    s.healthy = true;
    await recordProxyServing(w.ctx, s.id, false, w.store);
    await recordProxyServing(w.ctx, s.id, false, w.store);
    assert.deepEqual([s.healthy, s.health_error, s.proxy_serving], [false, 'The agent reports that HAProxy is not serving', false]);
    assert.deepEqual(
      w.serverDowns(s.id).map((n) => n.message),
      [notificationMessages.proxyNotServing('edge-1')],
    );
  });

  test('a disconnect of a replaced connection changes nothing', async () => {
    const { w, s, conn } = setUp();
    const a = conn();
    const b = conn();
    await recordAgentConnected(w.ctx, a, w.store);
    await recordAgentConnected(w.ctx, b, w.store);
    assert.equal(await recordAgentDisconnected(w.ctx, a, true, w.store), false);
    assert.equal(s.status, 'active');
    assert.equal(w.connections.get(s.id)!.connection_id, b.connectionId);
    assert.deepEqual(w.serverDowns(s.id), []);
  });

  test('a disconnect the service caused (raiseDown false) or a release at shutdown raises no server_down', async () => {
    const { w, s, conn } = setUp();
    const a = conn();
    await recordAgentConnected(w.ctx, a, w.store);
    assert.equal(await recordAgentDisconnected(w.ctx, a, false, w.store), true);
    assert.equal(s.status, 'offline');
    await recordAgentConnected(w.ctx, conn('process-a'), w.store);
    await releaseAgentConnections(w.ctx, 'process-a', w.store);
    assert.equal(s.status, 'offline');
    assert.equal(w.connections.size, 0);
    assert.deepEqual(w.serverDowns(s.id), []);
  });

  test('a connection without a heartbeat for the timeout expires with server_down; a younger one stays', async () => {
    const { w, s, conn } = setUp();
    const young = w.addServer({ name: 'edge-2' });
    await recordAgentConnected(w.ctx, conn(), w.store);
    w.advance(AGENT_CONNECTION_TIMEOUT_MS);
    await recordAgentConnected(w.ctx, { ...conn(), serverId: young.id }, w.store);
    assert.deepEqual(await expireAgentConnections(w.ctx, w.store), [s.id]);
    assert.deepEqual([s.status, young.status], ['offline', 'active']);
    assert.equal(w.serverDowns(s.id).length, 1);
    assert.deepEqual(await expireAgentConnections(w.ctx, w.store), []);
  });

  test('the heartbeat returns the connections another replaced, and records again one whose row expired', async () => {
    const { w, s, conn } = setUp();
    const a = conn('process-a');
    const b = conn('process-b');
    await recordAgentConnected(w.ctx, a, w.store);
    await recordAgentConnected(w.ctx, b, w.store);
    w.advance(10_000);
    assert.deepEqual(await touchAgentConnections(w.ctx, [a, b], w.store), [a.connectionId]);
    assert.deepEqual([w.connections.get(s.id)!.last_heartbeat_at, s.last_seen_at], [w.clock, w.clock]);

    w.connections.clear(); // expired while the database was away
    assert.deepEqual(await touchAgentConnections(w.ctx, [b], w.store), []);
    assert.equal(w.connections.get(s.id)!.connection_id, b.connectionId);
  });
});
