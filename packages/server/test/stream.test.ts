import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import http from 'node:http';
import { after, describe, test } from 'node:test';
import type { FastifyRequest } from 'fastify';
import { dropSchema } from '../src/db/database.js';
import { LiveStreams } from '../src/routes/stream.js';
import { startServer, type RunningServer } from '../src/serve.js';
import { waitFor } from '../../../test/support/processes.js';
import { apiFixtures, FakeAgent, WAIT_MS } from './fake-agent.js';
import { ADMIN_TOKEN, call, newAccount, postgresUrl } from './helpers.js';

/** One server-sent event as read off the wire: its event name and data, or a comment line. */
interface Frame {
  event?: string;
  data?: string;
  comment?: string;
}

/** A GET /api/stream read over a real socket: its status, headers and the frames so far. */
class StreamReader {
  status = 0;
  headers: http.IncomingHttpHeaders = {};
  body = '';
  readonly frames: Frame[] = [];
  ended = false;
  readonly req: http.ClientRequest;
  private buffer = '';

  constructor(url: string, headers: Record<string, string>) {
    this.req = http.get(`${url}/api/stream`, { headers }, (res) => {
      this.status = res.statusCode ?? 0;
      this.headers = res.headers;
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        this.body += chunk;
        this.buffer += chunk;
        let at: number;
        while ((at = this.buffer.indexOf('\n\n')) >= 0) {
          const block = this.buffer.slice(0, at);
          this.buffer = this.buffer.slice(at + 2);
          for (const f of parseBlock(block)) this.frames.push(f);
        }
      });
      res.on('end', () => (this.ended = true));
      res.on('close', () => (this.ended = true));
    });
    this.req.on('error', () => (this.ended = true));
  }

  /** Waits for the answer's head. */
  answered(): Promise<number> {
    return waitFor(() => this.status || undefined, 'the answer', WAIT_MS, 10);
  }

  events(name: string): unknown[] {
    return this.frames.filter((f) => f.event === name).map((f) => JSON.parse(f.data!));
  }

  waitEvent<T = any>(name: string, pred: (d: T) => boolean, what: string): Promise<T> {
    return waitFor(() => (this.events(name) as T[]).find(pred), what, WAIT_MS, 10);
  }

  close(): void {
    this.req.destroy();
  }
}

/** The frames of one block: a comment line each, and the event its fields make, if any. */
function parseBlock(block: string): Frame[] {
  const out: Frame[] = [];
  const ev: Frame = {};
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) out.push({ comment: line.slice(1).trim() });
    else if (line.startsWith('event: ')) ev.event = line.slice(7);
    else if (line.startsWith('data: ')) ev.data = (ev.data === undefined ? '' : `${ev.data}\n`) + line.slice(6);
  }
  if (ev.event !== undefined) out.push(ev);
  return out;
}

const readers: StreamReader[] = [];
function open(url: string, headers: Record<string, string>): StreamReader {
  const r = new StreamReader(url, headers);
  readers.push(r);
  return r;
}
after(() => readers.forEach((r) => r.close()));

/** An account with a shield server, a domain on it and its fake agent connected. */
async function tenant(srv: RunningServer, agentUrl: string, agents: FakeAgent[], domain: string) {
  const { key, accountId } = await newAccount(srv.app, 'pro');
  const fx = apiFixtures(srv.app);
  const server = await fx.newServer(key, `edge-${domain}`);
  await fx.newDomain(key, domain, [server.id], false);
  const agent = await FakeAgent.connect(agentUrl, server.connectionToken);
  agents.push(agent);
  return { key, accountId, serverId: server.id, agent, domain };
}

function sendEvent(agent: FakeAgent, domain: string, ip: string, path: string) {
  agent.send({
    type: 'events/batch',
    payload: { events: [{ ts: Math.floor(Date.now() / 1000), ip, domain, reason: 'sqli_detected', ruleId: null, method: 'GET', path, location: 'query:id', matched: "' or 1=1", blocked: true }] },
  });
}

describe('GET /api/stream on one process', async () => {
  const srv = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, logger: false, stream: { heartbeatMs: 150, maxPerAccount: 3 } });
  const agentUrl = `${srv.url.replace(/^http/, 'ws')}/agent`;
  const agents: FakeAgent[] = [];
  after(async () => {
    for (const a of agents) a.ws.terminate();
    await srv.close();
  });
  const a = await tenant(srv, agentUrl, agents, 'a.example.com');
  const b = await tenant(srv, agentUrl, agents, 'b.example.com');

  test('without a credential, or with a wrong one: 401, no stream', async () => {
    for (const headers of [{}, { 'x-api-key': 'rmpk_wrong' }, { cookie: 'rampart_session=nope' }]) {
      const r = open(srv.url, headers);
      assert.equal(await r.answered(), 401);
      await waitFor(() => r.ended, 'the end of the 401', WAIT_MS, 10);
      assert.deepEqual(JSON.parse(r.body), { error: 'Invalid or missing API key' });
    }
    assert.equal(srv.streams.count(), 0);
  });

  test("each account's stream carries its own WAF events and notifications, shaped as the lists show them, and nothing of the other account", async () => {
    const sa = open(srv.url, { 'x-api-key': a.key });
    const sb = open(srv.url, { 'x-api-key': b.key });
    assert.equal(await sa.answered(), 200);
    assert.equal(await sb.answered(), 200);
    assert.match(String(sa.headers['content-type']), /^text\/event-stream/);
    assert.match(String(sa.headers['cache-control']), /no-cache/);
    await waitFor(() => sa.frames.some((f) => f.comment === 'connected') && sb.frames.some((f) => f.comment === 'connected'), 'both streams open', WAIT_MS, 10);
    assert.equal(srv.streams.count(a.accountId), 1);

    sendEvent(a.agent, a.domain, '198.51.100.1', '/a-only');
    const got = await sa.waitEvent('waf_event', (e) => e.path === '/a-only', "A's event on A's stream");
    const listed = await call(srv.app, 'GET', '/api/waf/events', { key: a.key });
    assert.equal(listed.status, 200);
    assert.deepEqual(got, listed.body[0], 'the same JSON as an item of GET /api/waf/events');

    // B's own event reaches B after A's was delivered: had A's leaked, it would be there before.
    sendEvent(b.agent, b.domain, '198.51.100.2', '/b-only');
    await sb.waitEvent('waf_event', (e) => e.path === '/b-only', "B's event on B's stream");
    await sa.waitEvent('waf_event', () => true, 'A still open');
    assert.deepEqual(
      (sb.events('waf_event') as { domain: string }[]).map((e) => e.domain),
      ['b.example.com'],
    );
    assert.ok((sa.events('waf_event') as { domain: string }[]).every((e) => e.domain === 'a.example.com'));

    // A notification of A (the agent reports a reload failure).
    a.agent.send({ type: 'status/report', payload: { kind: 'proxy_reload_failed', message: 'reload of A failed' } });
    const n = await sa.waitEvent('notification', (x) => x.kind === 'proxy_reload_failed', "A's notification");
    const notes = await call(srv.app, 'GET', '/api/notifications', { key: a.key });
    assert.deepEqual(
      n,
      notes.body.find((x: { id: string }) => x.id === n.id),
      'the same JSON as an item of GET /api/notifications',
    );
    b.agent.send({ type: 'status/report', payload: { kind: 'proxy_reload_failed', message: 'reload of B failed' } });
    await sb.waitEvent('notification', (x) => x.message.includes('reload of B failed'), "B's notification");
    assert.ok(
      (sb.events('notification') as { message: string }[]).every((x) => !x.message.includes('of A')),
      "no notification of A on B's stream",
    );
    assert.ok(
      (sa.events('notification') as { message: string }[]).every((x) => !x.message.includes('of B')),
      "no notification of B on A's stream",
    );
    sa.close();
    sb.close();
    await waitFor(() => srv.streams.count() === 0, 'the closed streams gone', WAIT_MS, 10);
  });

  test("attack: a forged live message naming A's account with B's server, batch time or notification id shows A nothing of B", async () => {
    const sa = open(srv.url, { 'x-api-key': a.key });
    const sb = open(srv.url, { 'x-api-key': b.key });
    await waitFor(() => sa.frames.some((f) => f.comment === 'connected') && sb.frames.some((f) => f.comment === 'connected'), 'both open', WAIT_MS, 10);
    sendEvent(b.agent, b.domain, '198.51.100.9', '/b-secret');
    await sb.waitEvent('waf_event', (e) => e.path === '/b-secret', "B's event");
    b.agent.send({ type: 'status/report', payload: { kind: 'server_error', message: 'b secret notification' } });
    const note = await sb.waitEvent('notification', (x) => x.message.includes('b secret'), "B's notification");
    const row = await srv.ctx.db.selectFrom('waf_events').select(['received_at']).where('account_id', '=', b.accountId).where('path', '=', '/b-secret').executeTakeFirstOrThrow();
    srv.streams.deliver({ kind: 'live-events', accountId: a.accountId, serverId: b.serverId, receivedAt: new Date(row.received_at).toISOString() });
    srv.streams.deliver({ kind: 'live-notification', accountId: a.accountId, id: note.id });
    // A's own next notification arrives after the forged ones were handled.
    a.agent.send({ type: 'status/report', payload: { kind: 'server_error', message: 'a marker' } });
    await sa.waitEvent('notification', (x) => x.message.includes('a marker'), "A's marker");
    assert.ok(!sa.body.includes('secret'), "nothing of B on A's stream");
    sa.close();
    sb.close();
    await waitFor(() => srv.streams.count() === 0, 'closed', WAIT_MS, 10);
  });

  test('a heartbeat comment comes every heartbeat interval', async () => {
    const s = open(srv.url, { 'x-api-key': a.key });
    assert.equal(await s.answered(), 200);
    await waitFor(() => s.frames.filter((f) => f.comment === 'heartbeat').length >= 2, 'two heartbeats', WAIT_MS, 10);
    s.close();
  });

  test('at most maxPerAccount streams per account: one more is a 429, another account is not affected', async () => {
    const open3 = [0, 1, 2].map(() => open(srv.url, { 'x-api-key': a.key }));
    for (const s of open3) assert.equal(await s.answered(), 200);
    const fourth = open(srv.url, { 'x-api-key': a.key });
    assert.equal(await fourth.answered(), 429);
    assert.ok(fourth.headers['retry-after']);
    const other = open(srv.url, { 'x-api-key': b.key });
    assert.equal(await other.answered(), 200);
    open3[0]!.close();
    await waitFor(() => srv.streams.count(a.accountId) === 2, 'one stream of A closed', WAIT_MS, 10);
    const again = open(srv.url, { 'x-api-key': a.key });
    assert.equal(await again.answered(), 200);
    for (const s of [...open3, other, again]) s.close();
    await waitFor(() => srv.streams.count() === 0, 'all closed', WAIT_MS, 10);
  });

  test('a stream ends when its API key is deleted (checked at each heartbeat)', async () => {
    const created = await call(srv.app, 'POST', '/api/settings/api-keys', { key: a.key, body: { name: 'stream' } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const s = open(srv.url, { 'x-api-key': created.body.key });
    assert.equal(await s.answered(), 200);
    await waitFor(() => s.frames.some((f) => f.comment === 'heartbeat'), 'a heartbeat', WAIT_MS, 10);
    assert.equal(s.ended, false);
    assert.equal((await call(srv.app, 'DELETE', `/api/settings/api-keys?id=${created.body.id}`, { key: a.key })).status, 200);
    await waitFor(() => s.ended, 'the stream ended', WAIT_MS, 10);
  });

  test('the OpenAPI document describes it as text/event-stream', async () => {
    const doc = (await call(srv.app, 'GET', '/api/openapi.json')).body;
    const op = doc.paths['/api/stream'].get;
    assert.match(op.summary, /server-sent events/);
    assert.ok(op.responses['200'].content['text/event-stream']);
    assert.ok(op.responses['429']);
  });
});

describe('closing the server ends its streams at once', () => {
  test('close() returns promptly with streams open, and the clients see the end', async () => {
    const srv = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, logger: false });
    const { key } = await newAccount(srv.app, 'pro');
    const s = [open(srv.url, { 'x-api-key': key }), open(srv.url, { 'x-api-key': key })];
    for (const r of s) assert.equal(await r.answered(), 200);
    await waitFor(() => srv.streams.count() === 2, 'two streams', WAIT_MS, 10);
    const started = Date.now();
    await srv.close();
    assert.ok(Date.now() - started < 5000, `closed in ${Date.now() - started} ms`);
    await waitFor(() => s.every((r) => r.ended), 'both ended', WAIT_MS, 10);
  });
});

describe('LiveStreams bounds', () => {
  /** Just what LiveStreams reads of a request. */
  const fakeRequest = (accountId: string) => {
    const raw = new EventEmitter() as EventEmitter & { socket?: undefined };
    return { principal: { accountId, plan: 'pro', state: 'active', via: 'api_key' }, raw } as unknown as FastifyRequest;
  };

  test('a client that does not read past maxQueuedBytes is dropped; one that reads is kept', async () => {
    const streams = new LiveStreams({} as never, { maxQueuedBytes: 4096, heartbeatMs: 60_000 });
    after(() => streams.close());
    const slow = streams.open(fakeRequest('acc'))!;
    const fast = streams.open(fakeRequest('acc'))!;
    fast.resume(); // reads everything
    let slowClosed = false;
    slow.on('close', () => (slowClosed = true));
    for (let i = 0; i < 200; i++) {
      streams.resync(); // ~30 bytes each
      await new Promise((r) => setImmediate(r)); // the reading one drains meanwhile
    }
    assert.equal(streams.dropped, 1);
    await waitFor(() => slowClosed, 'the slow stream destroyed', WAIT_MS, 10);
    assert.equal(streams.count('acc'), 1, 'the reading client stays');
    assert.equal(fast.destroyed, false);
  });

  test('messages of an account without streams here are not even loaded', () => {
    let loads = 0;
    const ctx = new Proxy({}, { get: () => (loads++, undefined) });
    const streams = new LiveStreams(ctx as never);
    streams.deliver({ kind: 'live-notification', accountId: '00000000-0000-4000-8000-000000000001', id: '00000000-0000-4000-8000-000000000002' });
    assert.equal(loads, 0);
    streams.close();
  });
});

describe('GET /api/stream across two processes on PostgreSQL', async () => {
  const url = await postgresUrl();
  test('an event stored through one process reaches the stream held by the other, of its account only', { skip: url ? false : 'PostgreSQL is not reachable' }, async () => {
    const schema = `t_stream_${randomBytes(5).toString('hex')}`;
    const p1 = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false });
    const p2 = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false });
    const agents: FakeAgent[] = [];
    after(async () => {
      for (const a of agents) a.ws.terminate();
      await p1.close();
      await p2.close();
      await dropSchema(url!, schema);
    });
    const agentUrl = `${p1.url.replace(/^http/, 'ws')}/agent`;
    const a = await tenant(p1, agentUrl, agents, 'pa.example.com');
    const b = await tenant(p1, agentUrl, agents, 'pb.example.com');
    const sa = open(p2.url, { 'x-api-key': a.key });
    const sb = open(p2.url, { 'x-api-key': b.key });
    assert.equal(await sa.answered(), 200);
    assert.equal(await sb.answered(), 200);
    await waitFor(() => p2.streams.count() === 2, 'both streams on process 2', WAIT_MS, 10);
    sendEvent(a.agent, a.domain, '203.0.113.5', '/across');
    const got = await sa.waitEvent('waf_event', (e) => e.path === '/across', 'the event through the bus');
    const listed = await call(p2.app, 'GET', '/api/waf/events', { key: a.key });
    assert.deepEqual(got, listed.body[0]);
    a.agent.send({ type: 'status/report', payload: { kind: 'server_error', message: 'across processes' } });
    await sa.waitEvent('notification', (n) => n.message.includes('across processes'), 'the notification through the bus');
    sendEvent(b.agent, b.domain, '203.0.113.6', '/b-across');
    await sb.waitEvent('waf_event', (e) => e.path === '/b-across', "B's event");
    assert.deepEqual(
      (sb.events('waf_event') as { path: string }[]).map((e) => e.path),
      ['/b-across'],
    );
    assert.equal(sb.events('notification').length, 0);
  });
});
