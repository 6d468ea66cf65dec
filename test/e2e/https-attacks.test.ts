// An attacker's pass over automatic HTTPS through a real control plane, a real agent and its
// HAProxy. No ACME authority: certificates (self-signed, valid 90 days) are written into the
// agent's store before it starts, where it finds them as it would its own, so it serves HTTPS
// at once and never orders (it is pointed at a dead resolver and directory all the same). One
// attacker holds the connection token of another server of one.rampart.test and speaks the raw
// agent protocol (packages/server/test/fake-agent.ts); another holds one of another account,
// whose own domain has the same name. The rest is what anyone can send to ports 80 and 443: the
// redirect, the ACME path, client-address headers, SNI against Host.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { connect as http2Connect } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { FakeAgent } from '../../packages/server/test/fake-agent.js';
import { apiClient, ADMIN, startAgent, startOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { selfSignedCertificate } from '../support/certificates.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

const ONE = 'one.rampart.test';
const TWO = 'two.rampart.test';
const PLAIN = 'plain.rampart.test';
const BLOCKED = '127.0.66.1'; // a block_ip rule of the account
const CLEAN = '127.0.67.1';
const KA = (token: string) => `${token}.${'t'.repeat(43)}`;

interface RawResponse {
  status: number;
  head: string;
  headers: [string, string][];
  body: string;
}

function header(r: RawResponse, name: string): string[] {
  return r.headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);
}

/** Splits what a server sent on one connection into its responses (Content-Length or chunked bodies). */
function parseResponses(text: string): RawResponse[] {
  const out: RawResponse[] = [];
  let rest = text;
  while (rest.length > 0) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) throw new Error(`incomplete response: ${JSON.stringify(rest.slice(0, 200))}`);
    const head = rest.slice(0, end);
    const [statusLine, ...lines] = head.split('\r\n');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine!)?.[1] ?? NaN);
    const headers = lines.map((l) => [l.slice(0, l.indexOf(':')).trim(), l.slice(l.indexOf(':') + 1).trim()] as [string, string]);
    rest = rest.slice(end + 4);
    const r: RawResponse = { status, head, headers, body: '' };
    const length = header(r, 'content-length')[0];
    if (length !== undefined) {
      r.body = rest.slice(0, Number(length));
      rest = rest.slice(Number(length));
    } else if (/chunked/i.test(header(r, 'transfer-encoding')[0] ?? '')) {
      for (;;) {
        const lineEnd = rest.indexOf('\r\n');
        const size = parseInt(rest.slice(0, lineEnd), 16);
        rest = rest.slice(lineEnd + 2);
        if (size === 0) {
          rest = rest.slice(rest.indexOf('\r\n') + 2);
          break;
        }
        r.body += rest.slice(0, size);
        rest = rest.slice(size + 2);
      }
    } else if (status !== 204 && status !== 304) {
      r.body = rest;
      rest = '';
    }
    out.push(r);
  }
  return out;
}

/**
 * Writes bytes as they are on one connection (plain or TLS) and reads until the server closes
 * it; every request a test sends ends with Connection: close or is refused, so it always does.
 */
function raw(port: number, bytes: string, opts: { from?: string; tls?: { servername?: string; ca: string } } = {}): Promise<RawResponse[]> {
  return new Promise((resolve, reject) => {
    let socket: Socket | TLSSocket;
    const chunks: Buffer[] = [];
    const onConnect = () => socket.write(bytes, 'latin1');
    if (opts.tls) {
      socket = tlsConnect(
        {
          host: '127.0.0.1',
          port,
          ca: opts.tls.ca,
          ALPNProtocols: ['http/1.1'],
          ...(opts.tls.servername ? { servername: opts.tls.servername } : {}),
          ...(opts.from ? { localAddress: opts.from } : {}),
          checkServerIdentity: () => undefined,
        },
        onConnect,
      );
    } else {
      socket = netConnect({ host: '127.0.0.1', port, ...(opts.from ? { localAddress: opts.from } : {}) }, onConnect);
    }
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer in 10 s')));
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', reject);
    socket.on('close', () => {
      try {
        resolve(parseResponses(Buffer.concat(chunks).toString('latin1')));
      } catch (err) {
        reject(err);
      }
    });
  });
}

/** One GET with these header lines, exactly as written. */
function get(target: string, headerLines: string[]): string {
  return `GET ${target} HTTP/1.1\r\n${[...headerLines, 'Connection: close'].map((h) => `${h}\r\n`).join('')}\r\n`;
}

async function one(port: number, bytes: string, opts: Parameters<typeof raw>[2] = {}): Promise<RawResponse> {
  const all = await raw(port, bytes, opts);
  assert.equal(all.length, 1, `one response, got ${all.length}: ${all.map((r) => r.head).join(' | ')}`);
  return all[0]!;
}

describe('HTTPS under attack (real control plane, agent and HAProxy)', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let other: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let httpsPort: number;
  let httpPort: number;
  let attacker: FakeAgent; // a server of one.rampart.test, with its token
  let stranger: FakeAgent; // a server of another account that has its own one.rampart.test
  const ca: Record<string, string> = {};
  const fakes: FakeAgent[] = [];
  const work = mkdtempSync(join(tmpdir(), 'rampart-https-attacks-'));
  const traffic: string[] = [];
  let edgeId = '';
  /** The real agent runs the newest configuration (the fake agents never apply anything). */
  const applied = () =>
    waitFor(
      async () => {
        const s = ((await api.call('GET', '/api/servers')).body as { id: string; desiredRevision: number; appliedRevision: number }[]).find((x) => x.id === edgeId);
        return s !== undefined && s.appliedRevision === s.desiredRevision;
      },
      'the agent to apply the newest configuration',
      20_000,
      25,
    );

  before(async () => {
    httpsPort = await freePort();
    httpPort = await freePort();
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    other = await apiClient(serve.url);
    origin = await startOrigin('origin');
    // Requests that came through a frontend (HAProxy's health checks carry no X-Real-IP).
    origin.server.on('request', (req) => req.headers['x-real-ip'] && traffic.push(`${req.headers.host} ${req.url}`));
    const server = async (client: ApiClient, name: string) => (await client.call('POST', '/api/servers', { name })).body as { id: string; connectionToken: string };
    const edge = await server(api, 'edge');
    const evil = await server(api, 'edge-compromised');
    const foreign = await server(other, 'edge-other-account');
    edgeId = edge.id;
    const domain = async (client: ApiClient, name: string, serverIds: string[], sslEnabled: boolean) => {
      const r = await client.call('POST', '/api/domains', { domain: name, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds, sslEnabled });
      assert.equal(r.status, 201, JSON.stringify(r.body));
    };
    await domain(api, ONE, [edge.id, evil.id], true);
    await domain(api, TWO, [edge.id], true);
    await domain(api, PLAIN, [edge.id], false);
    await domain(other, ONE, [foreign.id], true);
    assert.equal((await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: BLOCKED })).status, 201);

    // The agent's certificates, where it keeps its own.
    const dataDir = join(work, 'agent');
    for (const name of [ONE, TWO]) {
      const made = selfSignedCertificate(name);
      ca[name] = made.chainPem;
      mkdirSync(join(dataDir, 'certs', name), { recursive: true, mode: 0o700 });
      writeFileSync(join(dataDir, 'certs', name, '00000000000000aa.pem'), `${made.chainPem.trim()}\n${made.keyPem.trim()}\n`, { mode: 0o600 });
    }
    const dead = await freePort();
    agent = await startAgent({
      serverUrl: serve.url,
      token: edge.connectionToken,
      dataDir,
      httpPort,
      httpsPort,
      args: ['--acme-directory', `http://127.0.0.1:${dead}/dir`, '--resolver', `127.0.0.1:${dead}`],
    });
    const agentUrl = `${serve.url.replace(/^http/, 'ws')}/agent`;
    attacker = await FakeAgent.connect(agentUrl, evil.connectionToken);
    stranger = await FakeAgent.connect(agentUrl, foreign.connectionToken);
    fakes.push(attacker, stranger);
    await waitFor(
      async () => {
        const d = ((await api.call('GET', '/api/domains')).body as { domain: string; sslStatus: string }[]).filter((x) => x.sslStatus === 'active');
        return d.length === 2;
      },
      'the agent to report both certificates active',
      30_000,
      50,
    );
    await applied();
    await waitFor(async () => (await one(httpsPort, get('/', [`Host: ${ONE}`]), { tls: { servername: ONE, ca: ca[ONE]! } })).status === 200, 'HTTPS to be served', 20_000);
  });

  after(async () => {
    for (const f of fakes) f.close();
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
    rmSync(work, { recursive: true, force: true });
  });

  /** GET over HTTP/2 (TLS, ALPN h2) with SNI servername and these headers (lowercase, as HTTP/2 has them). */
  function h2(servername: string, headers: Record<string, string | string[]>, from?: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const client = http2Connect(`https://${servername}:${httpsPort}`, {
        createConnection: () =>
          tlsConnect({
            host: '127.0.0.1',
            port: httpsPort,
            servername,
            ca: ca[servername] ?? ca[ONE]!,
            ALPNProtocols: ['h2'],
            ...(from ? { localAddress: from } : {}),
            checkServerIdentity: () => undefined,
          }),
      });
      client.on('error', reject);
      const req = client.request({ ':path': '/h2', ...headers });
      let status = 0;
      let body = '';
      req.setEncoding('utf8');
      req.on('response', (h) => (status = Number(h[':status'])));
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        client.close();
        resolve({ status, body });
      });
      req.on('error', reject);
      req.end();
    });
  }

  /** Whether a TLS handshake with this SNI (none: undefined) completes, and the certificate it got. */
  function handshake(servername: string | undefined): Promise<{ ok: boolean; subject?: string }> {
    return new Promise((resolve) => {
      const socket = tlsConnect({ host: '127.0.0.1', port: httpsPort, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'], ...(servername !== undefined ? { servername } : {}) });
      socket.setTimeout(10_000, () => socket.destroy());
      socket.once('secureConnect', () => {
        const subject = socket.getPeerCertificate().subjectaltname;
        socket.end();
        resolve({ ok: true, subject });
      });
      socket.once('error', () => resolve({ ok: false }));
      socket.once('close', () => resolve({ ok: false }));
    });
  }

  const prefix = () => `https://${ONE}:${httpsPort}`;
  const seen = (r: RawResponse | { body: string }) => JSON.parse(r.body) as { origin: string; url: string; headers: Record<string, string> };

  test('the 301 to HTTPS points at the configured domain whatever the Host, request line or escapes say', async () => {
    const redirects: [string, string][] = [];
    const check = (what: string, r: RawResponse) => {
      assert.ok([301, 400, 404].includes(r.status), `${what}: ${r.head}`);
      const locations = header(r, 'location');
      if (r.status !== 301) return assert.deepEqual(locations, [], `${what}: no Location on a ${r.status}`);
      assert.equal(locations.length, 1, `${what}: one Location`);
      const location = locations[0]!;
      assert.ok(location.startsWith(`${prefix()}/`), `${what}: ${location}`);
      const url = new URL(location);
      assert.deepEqual([url.protocol, url.username, url.password, url.hostname, url.port], ['https:', '', '', ONE, String(httpsPort)], `${what}: ${location}`);
      assert.equal(r.headers.filter(([n]) => /evil/i.test(n) || /^location$/i.test(n)).length, 1, `${what}: no injected header`);
      redirects.push([what, location]);
    };
    // Hostile Host headers: another host is not this domain's (404); a Host that merely starts with it is not it.
    for (const host of ['evil.com', `${ONE}@evil.com`, `evil.com@${ONE}`, `${ONE}.evil.com`, `${ONE}evil.com`, `${ONE}:80@evil.com`, 'ONE.RAMPART.TEST', `${ONE}:1`, `${ONE}:`, `[${ONE}]`]) {
      check(`Host ${host}`, await one(httpPort, get('/x', [`Host: ${host}`])));
    }
    assert.equal((await one(httpPort, get('/x', ['Host: evil.com']))).status, 404);
    assert.equal((await one(httpPort, get('/x', [`Host: ${ONE}@evil.com`]))).status, 404);
    // Hostile request targets with the right Host.
    for (const target of [
      '//evil.com/x',
      '///evil.com',
      '/\\evil.com/x',
      '/\\/evil.com',
      '/%2f%2fevil.com',
      '/%5c%5cevil.com',
      '/..;/evil.com',
      '/a%0d%0aLocation:%20http://evil.com/',
      '/a%0aSet-Cookie:%20x=1',
      '*',
      '/?next=https://evil.com',
      '/.well-known/../x',
      `@evil.com`,
      'evil.com/x',
      'https://evil.com/',
      `http://evil.com/`,
      `http://${ONE}@evil.com/`,
      `http://evil.com@${ONE}/`,
      'http:evil.com',
      '\\\\evil.com',
    ]) {
      check(`target ${target}`, await one(httpPort, get(target, [`Host: ${ONE}`])));
    }
    // Absolute form naming another host than Host, or a Host naming another: refused, not redirected.
    assert.equal((await one(httpPort, get('http://evil.com/', [`Host: ${ONE}`]))).status, 400);
    assert.equal((await one(httpPort, get(`http://${ONE}/`, ['Host: evil.com']))).status, 400);
    // Absolute form without Host is routed by its authority? Not by Rampart: no Host, no domain.
    check('absolute, no Host', await one(httpPort, `GET http://${ONE}/p HTTP/1.1\r\nConnection: close\r\n\r\n`));
    // Two Host headers, CR/LF smuggled into the request line or the Host: refused.
    for (const [what, bytes] of [
      ['two Hosts', get('/', [`Host: ${ONE}`, 'Host: evil.com'])],
      ['two Hosts, the same', get('/', [`Host: ${ONE}`, `Host: ${ONE}`])],
      ['CRLF in the target', `GET /a\r\nLocation: http://evil.com/ HTTP/1.1\r\nHost: ${ONE}\r\nConnection: close\r\n\r\n`],
      ['bare CR in Host', get('/', [`Host: ${ONE}\rLocation: http://evil.com/`])],
      ['bare LF in the target', `GET /a\nLocation:http://evil.com/ HTTP/1.1\r\nHost: ${ONE}\r\nConnection: close\r\n\r\n`],
      ['NUL in Host', get('/', [`Host: ${ONE}\u0000evil.com`])],
      ['space in Host', get('/', [`Host: ${ONE} evil.com`])],
      ['HTTP/1.0 without Host', `GET / HTTP/1.0\r\n\r\n`],
    ] as const) {
      const r = await raw(httpPort, bytes).catch(() => [] as RawResponse[]);
      for (const x of r) check(what, x);
      assert.ok(
        r.every((x) => x.status !== 301 || header(x, 'location')[0]!.startsWith(`${prefix()}/`)),
        what,
      );
    }
    // The ones that did redirect kept the path as sent, under the domain.
    assert.ok(
      redirects.some(([, l]) => l === `${prefix()}//evil.com/x`),
      JSON.stringify(redirects),
    );
    assert.ok(redirects.some(([w, l]) => w === 'Host ONE.RAMPART.TEST' && l === `${prefix()}/x`));
  });

  test('the ACME path: a key authorization only for its own host, traversal never reaches an origin, and the WAF still sees every other path', async () => {
    const token = 'attacker-token-1';
    assert.equal(await attacker.publish({ domain: ONE, token, keyAuthorization: KA(token), action: 'add' }), 1, 'relayed to the agent (the attacker is a server of the domain)');
    const path = `/.well-known/acme-challenge/${token}`;
    const answered = await waitFor(
      async () => {
        const r = await one(httpPort, get(path, [`Host: ${ONE}`]));
        return r.status === 200 && r;
      },
      'the agent to answer the relayed challenge',
      10_000,
      20,
    );
    assert.equal(answered.body, KA(token));
    // Over HTTPS too (the path is answered before routing on every listener), and in any spelling of the host.
    assert.equal((await one(httpsPort, get(path, [`Host: ${ONE}`]), { tls: { servername: ONE, ca: ca[ONE]! } })).body, KA(token));
    assert.equal((await one(httpPort, get(path, [`Host: ONE.rampart.test.:80`]))).body, KA(token));
    // Never for another host: the account's other domains, a plain one, unknown ones, look-alikes.
    for (const host of [TWO, PLAIN, 'evil.com', `${ONE}.evil.com`, `evil.${ONE}`, `${ONE}@evil.com`]) {
      const r = await one(httpPort, get(path, [`Host: ${host}`]));
      assert.equal(r.status, 404, host);
      assert.ok(!r.body.includes(token), host);
    }
    // Relays an agent must never get: another account's server naming this domain; the attacker naming a domain that is not its server's.
    assert.equal(await stranger.publish({ domain: ONE, token: 'stranger-token', keyAuthorization: KA('stranger-token'), action: 'add' }), 0);
    assert.equal(await attacker.publish({ domain: TWO, token: 'two-token', keyAuthorization: KA('two-token'), action: 'add' }), 0);
    assert.equal(await attacker.publish({ domain: 'TWO.rampart.test.', token: 'two-token-2', keyAuthorization: KA('two-token-2'), action: 'add' }), 0);
    for (const [tok, host] of [
      ['stranger-token', ONE],
      ['two-token', TWO],
      ['two-token-2', TWO],
    ]) {
      assert.equal((await one(httpPort, get(`/.well-known/acme-challenge/${tok}`, [`Host: ${host}`]))).status, 404, tok);
    }

    // Traversal under the ACME prefix goes to the responder (404), never to an origin, from any client.
    const hits = traffic.length;
    for (const target of [
      '/.well-known/acme-challenge/../../admin',
      '/.well-known/acme-challenge/%2e%2e/%2e%2e/admin',
      '/.well-known/acme-challenge/..%2f..%2fadmin',
      `/.well-known/acme-challenge/${token}/../../admin`,
      `/.well-known/acme-challenge/../acme-challenge/${token}`,
    ]) {
      for (const host of [ONE, PLAIN]) {
        const r = await one(httpPort, get(target, [`Host: ${host}`]), { from: BLOCKED });
        assert.deepEqual([r.status, r.body], [404, 'Not Found'], `${host} ${target}`);
        assert.deepEqual(header(r, 'cache-control'), ['no-store'], `${host} ${target}: the responder's answer`);
      }
    }
    assert.deepEqual(traffic.slice(hits), [], 'no traversal reached an origin');
    // Look-alikes of the prefix are ordinary paths: the WAF decides (a blocked client gets 403, plain HTTP to an HTTPS domain its 301 first).
    const lookalikes = [
      '//.well-known/acme-challenge/x',
      '/.WELL-KNOWN/acme-challenge/x',
      '/.well-known/ACME-CHALLENGE/x',
      '/.well-known/acme-challenge',
      '/.well-known/acme-challenge%2fx',
      '/.well-known/%61cme-challenge/x',
      '/%2ewell-known/acme-challenge/x',
      '/x/../.well-known/acme-challenge/x',
      '/.well-known//acme-challenge/x',
      '/./.well-known/./acme-challenge/x',
    ];
    for (const target of lookalikes) {
      assert.equal((await one(httpPort, get(target, [`Host: ${PLAIN}`]), { from: BLOCKED })).status, 403, `plain HTTP ${target}`);
      assert.equal((await one(httpsPort, get(target, [`Host: ${ONE}`]), { from: BLOCKED, tls: { servername: ONE, ca: ca[ONE]! } })).status, 403, `HTTPS ${target}`);
      assert.equal((await one(httpPort, get(target, [`Host: ${ONE}`]), { from: BLOCKED })).status, 301, `plain HTTP to an HTTPS domain ${target}`);
    }
    assert.deepEqual(traffic.slice(hits), [], 'no look-alike reached an origin from a blocked client');
    // One connection, the ACME path first: the next request is routed (and judged) on its own.
    const pipelined = await raw(httpPort, `GET ${path} HTTP/1.1\r\nHost: ${PLAIN}\r\n\r\nGET /secret HTTP/1.1\r\nHost: ${PLAIN}\r\nConnection: close\r\n\r\n`, { from: BLOCKED });
    assert.deepEqual(
      pipelined.map((r) => r.status),
      [404, 403],
    );
    const pipelinedTls = await raw(httpsPort, `GET ${path} HTTP/1.1\r\nHost: ${ONE}\r\n\r\nGET /secret HTTP/1.1\r\nHost: ${ONE}\r\nConnection: close\r\n\r\n`, {
      from: BLOCKED,
      tls: { servername: ONE, ca: ca[ONE]! },
    });
    assert.deepEqual(
      pipelinedTls.map((r) => r.status),
      [200, 403],
    );
    assert.equal((await h2(ONE, { ':path': '/secret' }, BLOCKED)).status, 403);
    assert.deepEqual(traffic.slice(hits), []);
    // The same from a client the WAF lets through reaches the origin: the 403s above were the WAF's.
    assert.equal((await one(httpPort, get('/.WELL-KNOWN/acme-challenge/x', [`Host: ${PLAIN}`]), { from: CLEAN })).status, 200);
    assert.deepEqual(traffic.slice(hits), [`${PLAIN} /.WELL-KNOWN/acme-challenge/x`]);
  });

  test('client-address and scheme headers in every spelling never reach the origin, over HTTP, HTTPS and HTTP/2', async () => {
    const names = [
      'X-Forwarded-For',
      'Forwarded',
      'True-Client-IP',
      'X-Client-IP',
      'X-Cluster-Client-IP',
      'CF-Connecting-IP',
      'Fastly-Client-IP',
      'X-Forwarded-Host',
      'X-Forwarded-Port',
      'X-Forwarded-Server',
      'X-Real-IP',
      'X-Forwarded-Proto',
      // PHP's usual "client IP" lookup reads HTTP_CLIENT_IP first, then HTTP_X_FORWARDED_FOR, HTTP_X_FORWARDED, HTTP_FORWARDED_FOR
      'Client-IP',
      'X-Forwarded',
      'Forwarded-For',
      'X-Originating-IP',
      'X-Remote-IP',
      'X-Remote-Addr',
      // the scheme, as Rack, Spring and others also read it
      'X-Forwarded-Ssl',
      'X-Forwarded-Scheme',
      'X-Forwarded-Protocol',
      'X-Forwarded-Prefix',
      // a path the WAF never saw, as IIS and Symfony route by them
      'X-Original-URL',
      'X-Rewrite-URL',
    ];
    const alternating = (n: string) => [...n].map((c, i) => (i % 2 ? c.toUpperCase() : c.toLowerCase())).join('');
    const spellings = (n: string) => [n, n.toLowerCase(), n.toUpperCase(), alternating(n), n.replace(/-/g, '_'), n.toLowerCase().replace(/-/g, '_')];
    // Each spelling twice, with two different values (HAProxy takes about 100 header lines: one request per name).
    const lines = (n: string) => spellings(n).flatMap((s, i) => [`${s}: 6.6.${i}.6`, `${s}: 7.7.${i}.7`]);
    const expectOnly = (what: string, r: { status: number; body: string }, scheme: 'http' | 'https') => {
      assert.equal(r.status, 200, `${what}: ${r.body.slice(0, 200)}`);
      const h = seen(r).headers;
      assert.equal(h['x-forwarded-for'], CLEAN, `${what}: x-forwarded-for is the address HAProxy saw, once`);
      assert.equal(h['x-real-ip'], CLEAN, what);
      assert.equal(h['x-forwarded-proto'], scheme, what);
      const leaked = Object.keys(h).filter(
        (k) => names.some((n) => n.toLowerCase() === k || n.toLowerCase().replace(/-/g, '_') === k) && !['x-forwarded-for', 'x-real-ip', 'x-forwarded-proto'].includes(k),
      );
      assert.deepEqual(leaked, [], `${what}: ${JSON.stringify(h)}`);
      assert.deepEqual(
        Object.keys(h).filter((k) => k.includes('_')),
        [],
        what,
      );
      assert.ok(!Object.values(h).some((v) => /6\.6\.|7\.7\./.test(v)), `${what}: a spoofed value got through: ${JSON.stringify(h)}`);
    };
    for (const n of names) {
      expectOnly(`plain HTTP, ${n}`, await one(httpPort, get('/h1', [`Host: ${PLAIN}`, ...lines(n)]), { from: CLEAN }), 'http');
      // first and alone (the guard reads the list of names, where the first has no comma before it)
      expectOnly(`plain HTTP, ${n} first`, await one(httpPort, get('/h1', [`${n.toLowerCase()}: 6.6.0.6`, `Host: ${PLAIN}`]), { from: CLEAN }), 'http');
      expectOnly(`HTTPS, ${n}`, await one(httpsPort, get('/h1', [`Host: ${ONE}`, ...lines(n)]), { from: CLEAN, tls: { servername: ONE, ca: ca[ONE]! } }), 'https');
    }
    const h2headers: Record<string, string[]> = {};
    for (const n of names) for (const s of [n.toLowerCase(), n.toLowerCase().replace(/-/g, '_')]) h2headers[s] = ['6.6.6.6', '7.7.7.7'];
    expectOnly('HTTP/2', await h2(ONE, h2headers, CLEAN), 'https');
    // A name with a space before the colon is not a header HAProxy forwards under another name: refused.
    assert.equal((await one(httpPort, get('/', [`Host: ${PLAIN}`, 'X-Forwarded-For : 6.6.6.6']), { from: CLEAN })).status, 400);
  });

  test('SNI and Host must name the same domain: no domain fronting, no HTTPS for a domain without its own certificate', async () => {
    const tls = (servername: string) => ({ tls: { servername, ca: ca[servername] ?? ca[ONE]! } });
    // The ordinary case, in any spelling of the same name.
    assert.equal((await one(httpsPort, get('/', [`Host: ${ONE}`]), tls(ONE))).status, 200);
    assert.equal((await one(httpsPort, get('/', [`Host: ONE.Rampart.Test:${httpsPort}`]), tls(ONE))).status, 200);
    assert.equal((await one(httpsPort, get('/', [`Host: ${TWO}`]), tls(TWO))).status, 200);
    // The certificate of one, a request for another domain of the same server: 421, the origin never sees it.
    const hits = traffic.length;
    for (const host of [TWO, PLAIN, 'evil.com', `${ONE}.evil.com`]) {
      const r = await one(httpsPort, get('/', [`Host: ${host}`]), tls(ONE));
      assert.equal(r.status, 421, `SNI ${ONE}, Host ${host}: ${r.head}`);
    }
    assert.equal((await h2(ONE, { ':authority': TWO })).status, 421, 'HTTP/2 :authority of another domain');
    assert.deepEqual(traffic.slice(hits), []);
    // No SNI, or the SNI of a domain without a certificate here (SSL off, unknown): no handshake at all.
    assert.deepEqual(await handshake(ONE), { ok: true, subject: `DNS:${ONE}` });
    assert.deepEqual(await handshake('ONE.RAMPART.TEST'), { ok: true, subject: `DNS:${ONE}` });
    for (const sni of [undefined, PLAIN, 'evil.com', `x.${ONE}`]) assert.deepEqual(await handshake(sni), { ok: false }, `SNI ${sni}`);
  });

  test('a flood of challenges from the compromised server: the agent holds a bounded number and keeps serving', async () => {
    const n = 1100;
    const ids = Array.from({ length: n }, (_, i) => {
      const requestId = `flood-${i}`;
      attacker.send({ type: 'acme/challenge-publish', payload: { requestId, domain: ONE, token: `flood-${i}`, keyAuthorization: KA(`flood-${i}`), action: 'add' } });
      return requestId;
    });
    await waitFor(() => attacker.of('acme/challenge-reply').filter((r) => r.requestId.startsWith('flood-')).length === ids.length, 'every publish answered', 30_000, 20);
    const status = (token: string) => one(httpPort, get(`/.well-known/acme-challenge/${token}`, [`Host: ${ONE}`])).then((r) => r.status);
    await waitFor(async () => (await status('flood-0')) === 200, 'the first of the flood to be answered', 10_000, 20);
    // The relays arrive in order: the last one answered is the newest there is room for.
    await waitFor(async () => (await status('flood-900')) === 200, 'the flood to arrive', 10_000, 20);
    assert.equal(await status(`flood-${n - 1}`), 404, 'past the bound: dropped');
    assert.equal((await one(httpsPort, get('/', [`Host: ${ONE}`]), { tls: { servername: ONE, ca: ca[ONE]! } })).status, 200, 'HTTPS still served');
  });
});
