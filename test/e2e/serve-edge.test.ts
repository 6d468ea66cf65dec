import assert from 'node:assert/strict';
import { once } from 'node:events';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { after, describe, test } from 'node:test';
import { FakeAgent } from '../../packages/server/test/fake-agent.js';
import { CLI, freePort, startProcess, startServe, waitFor } from '../support/processes.js';

// The built control plane (`rampart serve`) at its edge, through real sockets (docs/api.md
// "Behind a reverse proxy", "Sign-up", "Timeouts and connection limit"): failed sign-ins through
// a trusted proxy hold back only their own addresses, the cookie is Secure behind an https public
// URL, sign-up is closed by default, and slow or idle clients are cut off while an agent stays.

const ADMIN = 'e2e-admin-token';
const PASSWORD = 'the owner password';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

/** One request on a connection of its own (no keep-alive pool), so tests can count connections. */
function http(url: string, method: string, path: string, opts: { body?: unknown; headers?: Record<string, string> } = {}): Promise<Answer> {
  const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, {
      method,
      agent: false,
      headers: { connection: 'close', ...(payload ? { 'content-type': 'application/json' } : {}), ...opts.headers },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text ? JSON.parse(text) : undefined }));
    });
    req.end(payload);
  });
}

const admin = { authorization: `Bearer ${ADMIN}` };

describe('rampart serve behind a reverse proxy', async () => {
  const port = await freePort();
  const serve = await startServe({
    port,
    adminToken: ADMIN,
    env: { RAMPART_TRUST_PROXY: '127.0.0.1', RAMPART_PUBLIC_URL: 'https://rampart.example.com' },
  });
  after(() => serve.stop());

  test('50 failed sign-ins with varying X-Forwarded-For through the trusted proxy: the owner signs in from a fresh address, with a Secure cookie', async () => {
    const created = await http(serve.url, 'POST', '/admin/accounts', { headers: admin, body: { email: 'owner@example.com', plan: 'pro', balance: 10, password: PASSWORD } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const login = (password: string, client: string) =>
      http(serve.url, 'POST', '/api/auth/login', { headers: { 'x-forwarded-for': client, 'x-forwarded-proto': 'http' }, body: { email: 'owner@example.com', password } });
    for (let i = 1; i <= 50; i++) {
      const r = await login(`wrong password ${i}`, `198.51.100.${i}`);
      assert.ok(r.status === 401 || r.status === 429, `attempt ${i}: ${r.status} ${JSON.stringify(r.body)}`);
    }
    const attacker = await login(PASSWORD, '198.51.100.1');
    assert.equal(attacker.status, 429, 'an attacking address is held back, right password or not');

    const owner = await login(PASSWORD, '192.0.2.44');
    assert.equal(owner.status, 200, `the owner: ${owner.status} ${JSON.stringify(owner.body)}`);
    const cookie = String(owner.headers['set-cookie']);
    assert.match(cookie, /^rampart_session=/);
    assert.match(cookie, /; Secure/, 'Secure: the public URL is https, though this request came over plain HTTP');
    assert.match(cookie, /; HttpOnly/);
  });

  test('sign-up is closed by default: 403, and GET /api/auth/signup says so', async () => {
    assert.deepEqual((await http(serve.url, 'GET', '/api/auth/signup')).body, { signup: 'closed' });
    const r = await http(serve.url, 'POST', '/api/auth/register', { body: { email: 'walk-in@example.com', password: PASSWORD } });
    assert.equal(r.status, 403);
    assert.deepEqual(r.body, { error: 'Sign-up is closed on this server: its operator creates accounts' });
  });

  test('--trust-proxy and RAMPART_SIGNUP refuse what they cannot read, naming it', async () => {
    // Both stop the command before it opens anything (the data directory is never created).
    const exitOf = (p: ReturnType<typeof startProcess>) => p.stop('SIGCONT'); // SIGCONT changes nothing: this waits for the exit
    const bad = startProcess(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', '/nonexistent/never', '--trust-proxy', '127.0.0.1,proxy.example.com']);
    assert.equal(await exitOf(bad), 1, bad.output());
    assert.match(bad.output(), /--trust-proxy: "proxy\.example\.com" is not an IP address or CIDR range/);
    const signup = startProcess(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', '/nonexistent/never'], { RAMPART_SIGNUP: 'sometimes' });
    assert.equal(await exitOf(signup), 1, signup.output());
    assert.match(signup.output(), /RAMPART_SIGNUP must be one of closed, invite, open/);
  });
});

/** A raw connection that records when it closed and what it received. */
function rawClient(port: number): { socket: Socket; received: () => string; closedAt: Promise<number> } {
  const socket = connect(port, '127.0.0.1');
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (d) => (text += d));
  socket.on('error', () => undefined);
  // Not events.once: a reset (the limit's refusal) emits 'error' before 'close', which would reject it.
  const closedAt = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())));
  return { socket, received: () => text, closedAt };
}

describe('rampart serve against slow and idle clients', async () => {
  const REQUEST_MS = 3000;
  const HEADERS_MS = 1500;
  const port = await freePort();
  const serve = await startServe({
    port,
    adminToken: ADMIN,
    env: { RAMPART_REQUEST_TIMEOUT_MS: String(REQUEST_MS), RAMPART_HEADERS_TIMEOUT_MS: String(HEADERS_MS), RAMPART_MAX_CONNECTIONS: '6' },
  });
  after(() => serve.stop());
  const account = await http(serve.url, 'POST', '/admin/accounts', { headers: admin, body: { email: 'slow@example.com', plan: 'pro', balance: 10 } });
  const key = { 'x-api-key': account.body.apiKey as string };
  const server = await http(serve.url, 'POST', '/api/servers', { headers: key, body: { name: 'edge-1' } });
  const agent = await FakeAgent.connect(`ws://127.0.0.1:${port}/agent`, server.body.connectionToken);
  const agentSince = Date.now();
  after(() => agent.close());

  test('a body sent one byte at a time is cut off with 408 once the request timeout has passed; an idle connection after the headers timeout', async () => {
    // A live stream, open all along: the timeouts bound how a request arrives, not how long its answer lasts.
    const stream = rawClient(port);
    stream.socket.write(`GET /api/stream HTTP/1.1\r\nHost: x\r\nx-api-key: ${key['x-api-key']}\r\n\r\n`);
    await waitFor(() => stream.received().includes(': connected'), 'the live stream to open');
    const slow = rawClient(port);
    await once(slow.socket, 'connect');
    const started = Date.now();
    slow.socket.write('POST /api/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n');
    const drip = setInterval(() => slow.socket.writable && slow.socket.write('x'), 500);
    const idle = rawClient(port);
    await once(idle.socket, 'connect');
    const idleStarted = Date.now();
    const [slowClosed, idleClosed] = await Promise.all([slow.closedAt, idle.closedAt]);
    clearInterval(drip);
    // Node checks the timeouts every half headers timeout (at most a second): that much late at most, plus scheduling.
    const slack = Math.min(1000, HEADERS_MS / 2) + 1000;
    assert.ok(slowClosed - started >= REQUEST_MS - 100 && slowClosed - started <= REQUEST_MS + slack, `the slow body was cut after ${slowClosed - started} ms`);
    assert.match(slow.received(), /^HTTP\/1\.1 408 /);
    assert.match(slow.received(), /"error":"request took too long to arrive"/);
    assert.ok(idleClosed - idleStarted <= HEADERS_MS + slack, `the idle connection was closed after ${idleClosed - idleStarted} ms`);
    assert.ok(!stream.socket.destroyed && stream.socket.readyState === 'open', 'the live stream is still open');
    stream.socket.destroy();

    // The agent's WebSocket, open longer than both timeouts, is still up and still gets snapshots.
    assert.ok(Date.now() - agentSince > REQUEST_MS, 'the agent has been connected longer than the request timeout');
    assert.equal(agent.ws.readyState, agent.ws.OPEN);
    const domain = await http(serve.url, 'POST', '/api/domains', {
      headers: key,
      body: { domain: 'slow.example.com', origins: [{ ip: '127.0.0.1', port: 9 }], serverIds: [server.body.id], sslEnabled: false },
    });
    assert.equal(domain.status, 201, JSON.stringify(domain.body));
    await agent.snapshot((s) => s.domains.some((d) => d.domain === 'slow.example.com'), 'the snapshot with the new domain');
  });

  test('past RAMPART_MAX_CONNECTIONS a new connection is closed unanswered; the agent keeps its own', async () => {
    // Kept-alive connections, one after the other, until one is turned away: the agent holds one
    // of the six, so five are answered (four if a test client's pooled connection is still open).
    const held: ReturnType<typeof rawClient>[] = [];
    let refused: ReturnType<typeof rawClient> | undefined;
    while (!refused && held.length < 10) {
      const c = rawClient(port);
      c.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      const answered = await Promise.race([waitFor(() => c.received().includes('"ok":true'), 'an answer').then(() => true), c.closedAt.then(() => false)]);
      if (answered) held.push(c);
      else refused = c;
    }
    assert.ok(refused, `a connection past the limit is refused (${held.length} were answered)`);
    assert.equal(refused.received(), '', 'closed without an answer');
    assert.ok(held.length >= 4 && held.length <= 5, `${held.length} connections answered besides the agent's`);
    for (const c of held) c.socket.destroy();
    await waitFor(async () => (await http(serve.url, 'GET', '/healthz').catch(() => ({ status: 0 }))).status === 200, 'a connection once the others closed');
    assert.equal(agent.ws.readyState, agent.ws.OPEN);
  });
});

// A taken port stops `rampart serve` at once with the flag to change, as `rampart up` does.
test('rampart serve on a taken port exits at once, naming the port and --port', async () => {
  const { createServer } = await import('node:net');
  const port = await freePort();
  const occupant = createServer().listen(port, '127.0.0.1');
  await once(occupant, 'listening');
  const serve = startProcess(process.execPath, [CLI, 'serve', '--port', String(port)], { RAMPART_ADMIN_TOKEN: 'x'.repeat(40) });
  after(async () => {
    await serve.stop();
    occupant.close();
  });
  await waitFor(() => serve.child.exitCode !== null, 'rampart serve to exit', 60_000);
  assert.equal(serve.child.exitCode, 1, serve.output());
  assert.match(serve.output(), new RegExp(`port ${port} is in use; choose another with --port\\b`));
});
