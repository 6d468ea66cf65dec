import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { describe, test } from 'node:test';
import { waitFor } from '../../../test/support/processes.js';
import { buildApp } from '../src/app.js';
import { openDatabase } from '../src/db/database.js';
import { DEFAULT_PLANS } from '../src/plans.js';
import { call, makeTestApp, migratedPglite, newAccount } from './helpers.js';

// docs/api.md "Conventions": every error answer is exactly {"error": "<message>"}, including the
// ones Fastify and Node's HTTP parser produce before any route runs, and a validation message
// names at most 10 problems.

const t = await makeTestApp();
const { key } = await newAccount(t.app);

function assertErrorBody(body: unknown, label: string): string {
  assert.equal(typeof body, 'object', `${label}: ${JSON.stringify(body)}`);
  assert.deepEqual(Object.keys(body as object), ['error'], `${label}: ${JSON.stringify(body)}`);
  const message = (body as { error: unknown }).error;
  assert.equal(typeof message, 'string', label);
  assert.ok((message as string).length > 0, label);
  return message as string;
}

/** One raw request on a fresh connection; the whole answer, once the server closes it. */
async function raw(port: number, text: string): Promise<{ status: number; headers: string; body: string }> {
  const out = await new Promise<string>((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.end(text));
    let data = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => (data += d));
    s.on('error', reject);
    s.on('close', () => resolve(data));
  });
  const at = out.indexOf('\r\n\r\n');
  assert.ok(at > 0, `an HTTP answer: ${JSON.stringify(out.slice(0, 200))}`);
  const head = out.slice(0, at);
  return { status: Number(head.split(' ')[1]), headers: head.toLowerCase(), body: out.slice(at + 4) };
}

describe('every error answer is { error }', () => {
  test('bad percent-encoding in the path is a 400 with the usual body, with or without credentials', async () => {
    for (const opts of [{ key }, {}]) {
      for (const [method, url] of [
        ['GET', '/api/servers/%zz'],
        ['PUT', '/api/domains/%E0%A4%A'],
        ['GET', '/%zz'],
      ] as const) {
        const r = await call(t.app, method, url, { ...opts, ...(method === 'PUT' ? { body: { sslEnabled: true } } : {}) });
        assert.equal(r.status, 400, `${method} ${url}: ${r.status} ${JSON.stringify(r.body)}`);
        assert.match(assertErrorBody(r.body, url), /^url: /);
      }
    }
  });

  test('unknown routes and unknown methods: 404 { error }', async () => {
    for (const [method, url] of [
      ['GET', '/nope'],
      ['GET', '/api/nope'],
      ['PATCH', '/api/servers'],
      ['PUT', '/api/settings/api-keys'],
      ['GET', `/api/servers/${'a'.repeat(300)}`],
    ] as const) {
      const r = await call(t.app, method, url, { key });
      assert.equal(r.status, 404, `${method} ${url.slice(0, 40)}: ${r.status}`);
      assert.deepEqual(r.body, { error: 'Not found' });
    }
  });

  test('a path parameter over 200 characters: 414 { error }; up to 200, the route checks it (400)', async () => {
    for (const [method, url] of [
      ['PUT', `/api/servers/${'a'.repeat(201)}`],
      ['DELETE', `/api/waf/${'a'.repeat(5000)}`],
      ['POST', `/api/servers/${'a'.repeat(201)}/token`],
    ] as const) {
      const r = await call(t.app, method, url, { key, ...(method === 'PUT' ? { body: { name: 'x' } } : {}) });
      assert.equal(r.status, 414, `${method} ${url.slice(0, 40)}: ${r.status} ${JSON.stringify(r.body)}`);
      assert.deepEqual(r.body, { error: 'url: a path segment is longer than 200 characters' });
    }
    const r = await call(t.app, 'DELETE', `/api/waf/${'a'.repeat(200)}`, { key });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.match(assertErrorBody(r.body, '200 characters'), /id/);
  });

  test('bodies: invalid JSON, empty JSON, too large, wrong type, Content-Length that does not match', async () => {
    const cases: [string, Parameters<typeof call>[3], number][] = [
      ['invalid JSON', { key, rawBody: '{"name":' }, 400],
      ['empty JSON', { key, rawBody: '' }, 400],
      ['too large', { key, rawBody: JSON.stringify({ name: 'x'.repeat(1024 * 1024 + 10) }) }, 413],
      ['not JSON', { key, rawBody: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }, 415],
      ['Content-Length too short', { key, rawBody: '{"name":"x"}', headers: { 'content-length': '3' } }, 400],
      ['Content-Length too long', { key, rawBody: '{"name":"x"}', headers: { 'content-length': '300' } }, 400],
    ];
    for (const [label, opts, status] of cases) {
      const r = await call(t.app, 'POST', '/api/servers', opts);
      assert.equal(r.status, status, `${label}: ${r.status} ${JSON.stringify(r.body)}`);
      assertErrorBody(r.body, label);
    }
  });

  test("what Node's HTTP parser refuses is answered with { error } too (a real socket)", async () => {
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    const port = (t.app.server.address() as { port: number }).port;
    const cases: [string, string, number][] = [
      ['bad percent-encoding', 'GET /api/servers/%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 400],
      ['non-numeric Content-Length', 'POST /api/servers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}', 400],
      ['two Content-Lengths', 'POST /api/servers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}', 400],
      ['Content-Length with chunked', 'POST /api/servers HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
      ['unknown method', 'FROB /api/servers HTTP/1.1\r\nHost: x\r\n\r\n', 400],
      ['not HTTP at all', 'hello there\r\n\r\n', 400],
      ['headers too large', `GET /api/servers HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
      ['request line too long', `GET /${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431],
      ['unknown route', 'GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 404],
    ];
    for (const [label, text, status] of cases) {
      const r = await raw(port, text);
      assert.equal(r.status, status, `${label}: ${r.status} ${r.body}`);
      assert.match(r.headers, /content-type: application\/json/, label);
      assertErrorBody(JSON.parse(r.body), label);
    }
  });

  test('a request that reaches a closing app: 503 { error } with Retry-After, the connection closed', async () => {
    const database = await openDatabase({ initialData: await migratedPglite() });
    const app = await buildApp({ ctx: { db: database.db, plans: DEFAULT_PLANS, now: () => new Date(), serversChanged: () => {} } });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = false;
    app.get('/api/slow-for-test', { config: { public: true } }, async () => {
      started = true;
      await gate;
      return { ok: true };
    });
    try {
      await app.listen({ port: 0, host: '127.0.0.1' });
      const port = (app.server.address() as { port: number }).port;
      let requests = 0;
      app.server.on('request', () => requests++);
      // A second request on a connection kept open by a first one still in its handler, sent once close began.
      const socket = connect(port, '127.0.0.1', () => socket.write('GET /api/slow-for-test HTTP/1.1\r\nHost: x\r\n\r\n'));
      let received = '';
      socket.setEncoding('utf8');
      socket.on('data', (d: string) => (received += d));
      const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      await waitFor(() => started, 'the first request in its handler', 10_000, 1);
      const closed = app.close();
      await waitFor(() => !app.server.listening, 'the app closing', 10_000, 1);
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      await waitFor(() => requests === 2, 'the second request read', 10_000, 1);
      release();
      await ended; // the server closes the connection after the second answer
      await closed;
      const text = received;
      assert.match(text, /^HTTP\/1\.1 200/, text);
      const second = text.slice(text.lastIndexOf('HTTP/1.1 '));
      assert.match(second, /^HTTP\/1\.1 503/, text);
      assert.match(second, /retry-after: 1/i);
      assert.match(second, /connection: close/i);
      const body = second.slice(second.lastIndexOf('\r\n\r\n') + 4);
      assert.deepEqual(JSON.parse(body), { error: 'The server is shutting down, try again' });
    } finally {
      release();
      await app.close();
      await database.close();
    }
  });

  test('a validation message names at most 10 problems and counts the rest', async () => {
    const body = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`field${i}`, i]));
    const r = await call(t.app, 'POST', '/api/servers', { key, body });
    assert.equal(r.status, 400);
    const message = assertErrorBody(r.body, '30 unknown fields');
    const parts = message.split('; ');
    assert.equal(parts.length, 11, message);
    assert.equal(parts.at(-1), 'and 21 more', message);
    assert.ok(
      parts.slice(0, 10).every((p) => /^(unknown field: field\d+|name: is required)$/.test(p)),
      message,
    );

    // Exactly 10 problems: all listed, no count.
    const ten = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`f${i}`, i]));
    const r10 = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'ok', ...ten } });
    assert.equal(r10.status, 400);
    assert.equal(assertErrorBody(r10.body, '10 unknown fields').split('; ').length, 10);
  });

  test('a huge field name is not echoed back whole', async () => {
    const r = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'ok', ['k'.repeat(500_000)]: 1 } });
    assert.equal(r.status, 400);
    const message = assertErrorBody(r.body, 'huge field name');
    assert.ok(message.length < 1000, `${message.length} characters`);
    assert.match(message, /^unknown field: k+\.\.\.$/);
  });
});

test('GET /healthz: 200 while the database answers; 503 naming the database when it does not', async () => {
  const database = await openDatabase({ initialData: await migratedPglite() });
  const app = await buildApp({ ctx: { db: database.db, plans: DEFAULT_PLANS, now: () => new Date(), serversChanged: () => {} }, logger: false });
  await app.ready();
  try {
    const up = await app.inject({ method: 'GET', url: '/healthz' });
    assert.equal(up.statusCode, 200);
    assert.deepEqual(up.json(), { ok: true, database: 'ok' });
    await database.close();
    const down = await app.inject({ method: 'GET', url: '/healthz' });
    assert.equal(down.statusCode, 503);
    assert.deepEqual(down.json(), { ok: false, database: 'unavailable' });
  } finally {
    await app.close();
  }
});
