import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { createSocket } from 'node:dgram';
import { connect, createServer as createTcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ServerSnapshot, SnapshotDomain } from '@rampart/protocol';
import { renderHaproxyConfig } from '../src/haproxy-config.js';
import { freePort, startProcess, waitFor, type Proc } from '../../../test/support/processes.js';

// Our own pages for the answers HAProxy makes (waf-pages.ts), through a real HAProxy running the
// rendered configuration: an unknown host (404), an origin that refuses connections (503), one that
// answers garbage (502), each with the request id of its header. The 404 is HTML for browsers and
// text for other clients; HAProxy's own 502/503/504 are one HTML page for every client.
// An origin by name (localhost) is resolved and reached.

const HAPROXY = process.env.RAMPART_HAPROXY ?? '/usr/sbin/haproxy';

function get(port: number, host: string, accept?: string, path = '/'): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host, ...(accept ? { accept } : {}) } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

let n = 0;
const domain = (name: string, origins: SnapshotDomain['origins']): SnapshotDomain => ({
  id: `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`,
  domain: name,
  origins,
  sslEnabled: false,
  wafEnabled: true,
  wafLevel: 'medium',
  wafMode: 'block',
});

describe('branded answers of a real HAProxy', () => {
  let dir: string;
  let port: number;
  let haproxy: Proc;
  let origin: Server;
  let garbage: ReturnType<typeof createTcpServer>;
  // the event lines HAProxy sends (as to the agent)
  const lines: string[] = [];
  let events: ReturnType<typeof createSocket>;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rampart-pages-'));
    origin = createServer((_req, res) => res.end('hello from the origin\n'));
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    const originPort = (origin.address() as { port: number }).port;
    // Healthy to HAProxy's check (GET /), garbage for any other path.
    garbage = createTcpServer((s) => {
      s.on('error', () => {}); // HAProxy may close first
      s.once('data', (d) => s.end(String(d).startsWith('GET / ') ? 'HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n' : 'this is not HTTP\r\n\r\n'));
    });
    await new Promise<void>((r) => garbage.listen(0, '127.0.0.1', r));
    const garbagePort = (garbage.address() as { port: number }).port;
    const closedPort = await freePort();
    port = await freePort();
    events = createSocket('udp4');
    events.on('message', (m) => lines.push(m.toString()));
    await new Promise<void>((r) => events.bind(0, '127.0.0.1', r));
    const down = domain('down.example.com', [{ ip: '127.0.0.1', port: closedPort }]);
    const snapshot: ServerSnapshot = {
      serverId: 'srv-1',
      revision: 1,
      rules: [],
      domains: [domain('up.example.com', [{ host: 'localhost', port: originPort }]), down, domain('bad.example.com', [{ ip: '127.0.0.1', port: garbagePort }])],
      // a request this rule logs and the origin then fails: the page shows the event's id
      customRules: [{ id: '00000000-0000-4000-8000-0000000000f1', expression: 'http.request.uri.path eq "/logged"', action: 'log', priority: 1, domainId: down.id }],
    } as ServerSnapshot;
    const { files } = renderHaproxyConfig(snapshot, { httpBind: { address: '127.0.0.1', port }, runDir: dir, eventsPort: events.address().port }, { configDir: dir });
    for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content);
    haproxy = startProcess(HAPROXY, ['-db', '-f', join(dir, 'haproxy.cfg')]);
    await waitFor(
      async () => {
        if (haproxy.child.exitCode !== null) throw new Error(`haproxy exited: ${haproxy.output()}`);
        return get(port, 'up.example.com').then(
          (r) => r.status === 200 && r.body === 'hello from the origin\n',
          () => false,
        );
      },
      'HAProxy to reach the origin by name',
      20_000,
    );
  });

  after(async () => {
    await haproxy?.stop();
    origin?.close();
    garbage?.close();
    events?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function assertPage(r: Awaited<ReturnType<typeof get>>, status: number, title: RegExp) {
    assert.equal(r.status, status, r.body);
    const id = r.headers['x-rampart-request-id'];
    assert.match(String(id), /^[0-9a-f]{16}$/);
    assert.match(String(r.headers['content-type']), /^text\/html; charset=utf-8/);
    assert.match(r.body, /^<!doctype html>/);
    assert.match(r.body, title);
    assert.ok(r.body.includes(`<code id="request-id">${id}</code>`), r.body);
    assert.match(r.body, /Protected by Rampart/);
  }
  function assertText(r: Awaited<ReturnType<typeof get>>, status: number, first: RegExp) {
    assert.equal(r.status, status, r.body);
    const id = String(r.headers['x-rampart-request-id']);
    assert.match(id, /^[0-9a-f]{16}$/);
    assert.match(String(r.headers['content-type']), /^text\/plain; charset=utf-8/);
    const lines = r.body.split('\n');
    assert.match(lines[0]!, first);
    assert.equal(lines[1], `Request id: ${id}`);
    assert.equal(lines.length, 3, JSON.stringify(r.body));
  }

  test('an origin by name (localhost) is resolved and answers', async () => {
    const r = await get(port, 'up.example.com', 'text/html');
    assert.equal(r.status, 200);
    assert.equal(r.body, 'hello from the origin\n');
  });

  test('an origin that refuses connections: our 503 page, for browsers and any other client, with the request id', async () => {
    for (const accept of ['text/html,application/xhtml+xml,*/*;q=0.8', 'application/json', undefined]) {
      assertPage(await get(port, 'down.example.com', accept), 503, /<h1>Site temporarily unavailable<\/h1>/);
    }
  });

  test('a request an event logs (a log rule) whose origin then fails: the page shows the id of its event', async () => {
    for (const accept of ['text/html', undefined]) {
      const r = await get(port, 'down.example.com', accept, '/logged');
      assert.equal(r.status, 503);
      const id = String(r.headers['x-rampart-request-id']);
      assert.match(id, /^[0-9a-f]{16}$/);
      assert.ok(r.body.includes(id), r.body);
      await waitFor(() => lines.some((l) => l.includes(' custom_rule_logged ') && l.includes(` ${id} `)), `the event line with ${id}`, 10_000);
    }
  });

  test('an origin answering garbage: our 502 page, for browsers and any other client', async () => {
    assertPage(await get(port, 'bad.example.com', 'text/html', '/x'), 502, /<h1>Bad gateway<\/h1>/);
    assertPage(await get(port, 'bad.example.com', 'application/json', '/x'), 502, /<h1>Bad gateway<\/h1>/);
  });

  test("HAProxy's own checks, read from show stat as the agent reads them: the refused origin down (L4CON), the named one up", async () => {
    const { parseOriginStates } = await import('../../agent/src/origins.js');
    const showStat = () =>
      new Promise<string>((resolve, reject) => {
        let out = '';
        const s = connect(join(dir, 'admin.sock'), () => s.end('show stat\n'));
        s.on('data', (d) => (out += d));
        s.on('end', () => resolve(out));
        s.on('error', reject);
      });
    const states = await waitFor(
      async () => {
        const r = parseOriginStates(await showStat());
        return r.get('be_down_example_com/origin0')?.state === 'down' && r;
      },
      'the refused origin to be marked down',
      20_000,
      200,
    );
    assert.equal(states.get('be_down_example_com/origin0')!.check, 'L4CON');
    assert.equal(states.get('be_up_example_com/origin0')!.state, 'up');
  });

  test('an unknown host: our 404 page and text', async () => {
    const page = await get(port, 'nobody.example.org', 'text/html');
    assert.equal(page.status, 404);
    assert.match(page.body, /<h1>Site not found<\/h1>/);
    assert.ok(page.body.includes(`<code id="request-id">${page.headers['x-rampart-request-id']}</code>`), page.body);
    assertText(await get(port, 'nobody.example.org'), 404, /^Not Found: no site is set up for this name here\.$/);
  });
});
