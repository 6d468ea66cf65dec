import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AGENT_LIMITS, CLOSE, EVENT_ROWS } from '@rampart/protocol';
import { storeEvents } from '../src/services/events.js';
import { notificationMessages, notifyFromServer, SERVER_NOTIFICATION_LIMIT } from '../src/services/notifications.js';
import { waitFor } from '../../../test/support/processes.js';
import { hubFor } from './agent-hub-harness.js';
import { apiFixtures, WAIT_MS } from './fake-agent.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// docs/architecture.md "The agent connection", "What the service takes from an agent": the agent
// channel trusts nothing an agent says. An attacker holding one valid connection token can make
// that server's agent say anything the schemas allow; what it says reaches only that server's own
// data, within fixed limits.

type Notification = { id: string; kind: string; message: string; serverId: string | null; count: number; createdAt: string; updatedAt: string };

for (const backend of await backends()) {
  describe(`the agent channel trusts nothing (${backend})`, async () => {
    const t = await makeTestApp(backend);
    const h = await hubFor(t.ctx);
    const { newServer, newDomain, domain } = apiFixtures(t.app);
    const { key, accountId } = await newAccount(t.app, 'pro');
    const servers = async () => (await call(t.app, 'GET', '/api/servers', { key })).body as { id: string; status: string; desiredRevision: number; appliedRevision: number }[];
    const serverView = async (id: string) => (await servers()).find((s) => s.id === id)!;
    const notifications = async () => (await call(t.app, 'GET', '/api/notifications', { key })).body as Notification[];
    const events = async () => (await call(t.app, 'GET', '/api/waf/events', { key })).body as { domain: string; server_id: string }[];

    test('an ack for a revision above the desired one is refused and logged; it stores nothing, marks no domain active, and real acks still count', async () => {
      const s = await newServer(key, 'ack-liar');
      await newDomain(key, 'ack.example.com', [s.id], false);
      const agent = await h.connect(s.connectionToken);
      const first = agent.snapshots()[0]!;
      const huge = Number.MAX_SAFE_INTEGER; // 9007199254740991
      agent.send({ type: 'config/ack', payload: { revision: huge, ok: true, errors: [] } });
      agent.send({ type: 'config/ack', payload: { revision: first.revision + 1, ok: false, errors: [{ line: 1, message: 'made up' }] } });
      await agent.barrier();
      assert.equal((await serverView(s.id)).appliedRevision, 0, 'not stored');
      assert.equal((await domain(key, 'ack.example.com')).status, 'pending', 'no domain marked active');
      assert.deepEqual(
        (await notifications()).filter((n) => n.serverId === s.id),
        [],
        'a failed ack past the desired revision raises nothing',
      );
      assert.ok(
        h.logs.some((l) => l.includes(s.id) && l.includes(String(huge)) && /refused/.test(l)),
        h.logs.join('\n'),
      );
      assert.ok(agent.isOpen, 'the connection stays');
      // The real ack is not held back by the refused one.
      agent.send({ type: 'config/ack', payload: { revision: first.revision, ok: true, errors: [] } });
      await agent.barrier();
      assert.equal((await serverView(s.id)).appliedRevision, first.revision);
      assert.equal((await domain(key, 'ack.example.com')).status, 'active');
    });

    test("events are stored only for the server's own domains; the rest are dropped and counted in a log line", async () => {
      const s = await newServer(key, 'events-own');
      const other = await newServer(key, 'events-other');
      await newDomain(key, 'own.example.com', [s.id]);
      await newDomain(key, 'theirs.example.com', [other.id]);
      const agent = await h.connect(s.connectionToken);
      const ts = Math.floor(t.clock.now().getTime() / 1000) - 5;
      const ev = (domain: string) => ({ ts, ip: '198.51.100.7', domain, reason: 'ip_blocked', ruleId: null });
      agent.send({
        type: 'events/batch',
        payload: { events: [ev('own.example.com'), ev('theirs.example.com'), { ...ev('own.example.com'), ip: '198.51.100.8' }, ev('bank.example.org'), ev('unrelated.example.net')] },
      });
      await agent.barrier();
      const mine = (await events()).filter((e) => e.server_id === s.id);
      assert.deepEqual(
        mine.map((e) => e.domain),
        ['own.example.com', 'own.example.com'],
      );
      const line = h.logs.find((l) => l.includes(s.id) && /not assigned/.test(l));
      assert.ok(line, h.logs.join('\n'));
      assert.match(line, /\b3\b/, line);
    });

    test('the daily cap counts events by the time the service received them: backdated events are stored as sent and counted today', async () => {
      t.clock.set(new Date('2027-03-10T12:00:00Z'));
      const s = await newServer(key, 'backdater');
      await newDomain(key, 'cap.example.com', [s.id]);
      const threeDaysAgo = Math.floor(t.clock.now().getTime() / 1000) - 3 * 86_400;
      const batch = (from: number) =>
        Array.from({ length: AGENT_LIMITS.eventsPerBatch }, (_, i) => ({
          ts: threeDaysAgo - from - i,
          ip: `10.0.${((from + i) >> 8) & 255}.${(from + i) & 255}`,
          domain: 'cap.example.com',
          reason: 'ip_blocked' as const,
          ruleId: null,
        }));
      let stored = 0;
      for (let i = 0; i < 11; i++) stored += (await storeEvents(t.ctx, accountId, s.id, batch(i * 500))).stored;
      // ip_blocked is no detection: it stops where the rows kept for detections begin.
      assert.equal(stored, EVENT_ROWS.perDay - EVENT_ROWS.reservedForDetections);
      const oldest = await t.ctx.db
        .selectFrom('waf_events')
        .select((eb) => eb.fn.max('occurred_at').as('t'))
        .where('server_id', '=', s.id)
        .executeTakeFirstOrThrow();
      assert.equal(new Date(oldest.t as Date).getTime(), threeDaysAgo * 1000, 'the time the event carries is stored as sent');
      const over = await storeEvents(t.ctx, accountId, s.id, batch(6000).slice(0, 10));
      assert.deepEqual(over, { stored: 0, folded: 0, invalid: 0, unassigned: 0, overCap: 10 });
      // The next UTC day has room again, whatever time the events carry.
      t.clock.set(new Date('2027-03-11T00:00:01Z'));
      assert.equal((await storeEvents(t.ctx, accountId, s.id, batch(7000))).stored, 500);
    });

    test('identical notifications from one server are folded into one with a count', async () => {
      const s = await newServer(key, 'noisy-same');
      const agent = await h.connect(s.connectionToken);
      for (let i = 0; i < 300; i++) agent.send({ type: 'status/report', payload: { kind: 'proxy_reload_failed', message: 'the same failure' } });
      await agent.barrier();
      const mine = (await notifications()).filter((n) => n.serverId === s.id);
      assert.equal(mine.length, 1, JSON.stringify(mine.slice(0, 3)));
      assert.equal(mine[0]!.count, 300);
      assert.equal(mine[0]!.kind, 'proxy_reload_failed');
      assert.equal(mine[0]!.message, notificationMessages.fromAgent('proxy_reload_failed', 'noisy-same', 'the same failure'));
      assert.ok(Date.parse(mine[0]!.updatedAt) >= Date.parse(mine[0]!.createdAt));
    });

    test('notifications from one server are limited per kind per minute; what is over the limit is counted in one notice', async () => {
      const s = await newServer(key, 'noisy-distinct');
      const agent = await h.connect(s.connectionToken);
      const big = 'x'.repeat(AGENT_LIMITS.statusMessage - 20);
      for (let i = 0; i < 200; i++) agent.send({ type: 'status/report', payload: { kind: 'proxy_reload_failed', message: `${i} ${big}` } });
      await agent.barrier();
      const mine = (await notifications()).filter((n) => n.serverId === s.id);
      const kept = mine.filter((n) => n.message.includes(big));
      const notice = mine.filter((n) => !n.message.includes(big));
      assert.equal(kept.length, SERVER_NOTIFICATION_LIMIT.perWindow);
      assert.equal(notice.length, 1, JSON.stringify(notice));
      assert.equal(notice[0]!.count, 200 - SERVER_NOTIFICATION_LIMIT.perWindow);
      assert.match(notice[0]!.message, /dropped/);
      // Another kind has its own limit.
      agent.send({ type: 'status/report', payload: { kind: 'server_error', message: 'another kind' } });
      await agent.barrier();
      assert.ok((await notifications()).some((n) => n.serverId === s.id && n.message.includes('another kind')));
    });

    test('the limit is per minute: a minute later the server may raise notifications again', async () => {
      const s = await newServer(key, 'noisy-later');
      const n = (message: string) => notifyFromServer(t.ctx, { accountId, serverId: s.id, kind: 'server_error', message });
      for (let i = 0; i < SERVER_NOTIFICATION_LIMIT.perWindow; i++) assert.equal(await n(`m${i}`), 'created');
      assert.equal(await n('one more'), 'dropped');
      assert.equal(await n('m0'), 'folded', 'an identical one is still folded');
      t.clock.advance(SERVER_NOTIFICATION_LIMIT.windowMs + 1000);
      assert.equal(await n('m0'), 'created', 'a minute later it is a new notification');
      assert.equal(await n('fresh'), 'created');
    });

    test('a message over the size cap closes the connection with 1009 and nothing of it is handled', async () => {
      const s = await newServer(key, 'oversized');
      const agent = await h.connect(s.connectionToken);
      const filler = 'x'.repeat(AGENT_LIMITS.messageBytes);
      agent.send({ type: 'status/report', payload: { kind: 'server_error', message: filler } });
      const closed = await agent.closedWithin('the close after an oversized message');
      assert.equal(closed.code, 1009);
      // The report was not handled; the drop itself is a disconnect like any other.
      await waitFor(async () => (await notifications()).some((n) => n.serverId === s.id && n.kind === 'server_down'), 'server_down', WAIT_MS, 25);
      assert.deepEqual(
        (await notifications()).filter((n) => n.serverId === s.id).map((n) => n.kind),
        ['server_down'],
      );
    });

    test('strings over their caps are invalid messages (4003), as are revisions past 2^53', async () => {
      const s = await newServer(key, 'long-strings');
      const cases: unknown[] = [
        { type: 'config/ack', payload: { revision: 1, ok: false, errors: [{ line: 1, message: 'e'.repeat(AGENT_LIMITS.ackErrorMessage + 1) }] } },
        { type: 'config/ack', payload: { revision: 2 ** 60, ok: true, errors: [] } },
        { type: 'agent/heartbeat', payload: { runningRevision: 1e300 } },
      ];
      for (const m of cases) {
        const agent = await h.connect(s.connectionToken);
        agent.send(m);
        assert.equal((await agent.closedWithin(JSON.stringify(m).slice(0, 80))).code, CLOSE.invalidMessage);
      }
      await waitFor(async () => (await serverView(s.id)).status === 'offline', 'offline', WAIT_MS, 25);
      assert.equal((await serverView(s.id)).appliedRevision, 0);
    });
  });
}
