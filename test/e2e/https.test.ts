// HTTPS at the edge against a real ACME server: Pebble and its mock DNS (challtestsrv), two real
// agents with their HAProxies on different loopback addresses (the same HTTP port, the one Pebble
// validates on), and a third server that never connects.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect as http2Connect } from 'node:http2';
import { join } from 'node:path';
import { connect as tlsConnect, type PeerCertificate, type TLSSocket } from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, startAgent, startOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { startPebble, type Pebble } from '../support/pebble.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

const A = '127.0.0.2';
const B = '127.0.0.3';
const C = '127.0.0.4'; // a server of some domains whose agent never runs

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  alpn: string | false | null;
  cert: PeerCertificate | undefined;
}

/** GET over HTTPS/1.1 to address:port with SNI servername, trusting only ca. */
function https1(address: string, port: number, servername: string, ca: string, path = '/', headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: address, port, servername, ca, path, headers: { host: servername, ...headers }, ALPNProtocols: ['http/1.1'], agent: false }, (res) => {
      const socket = res.socket as TLSSocket;
      const alpn = socket.alpnProtocol;
      const cert = socket.getPeerCertificate();
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, alpn, cert }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** GET over HTTP/2 (ALPN h2 only) to address:port with SNI servername, trusting only ca. */
function https2(address: string, port: number, servername: string, ca: string, path = '/'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let socket: TLSSocket;
    const client = http2Connect(`https://${servername}:${port}`, {
      createConnection: () => (socket = tlsConnect({ host: address, port, servername, ca, ALPNProtocols: ['h2'] })),
    });
    client.on('error', reject);
    const req = client.request({ ':path': path, ':authority': servername });
    let status = 0;
    let headers: Record<string, string | string[] | undefined> = {};
    let text = '';
    req.setEncoding('utf8');
    req.on('response', (h) => {
      status = Number(h[':status']);
      headers = h as typeof headers;
    });
    req.on('data', (d) => (text += d));
    req.on('end', () => {
      const answer = { status, headers, text, alpn: socket.alpnProtocol, cert: socket.getPeerCertificate() };
      client.close();
      resolve(answer);
    });
    req.on('error', reject);
    req.end();
  });
}

/** Plain HTTP to address:port with a Host header. */
function http1(address: string, port: number, host: string, path = '/'): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: address, port, path, headers: { host }, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    req.end();
  });
}

function pemFiles(dataDir: string, domain: string): string[] {
  try {
    return readdirSync(join(dataDir, 'certs', domain))
      .filter((n) => n.endsWith('.pem'))
      .map((n) => join(dataDir, 'certs', domain, n));
  } catch {
    return [];
  }
}

describe('HTTPS certificates with a real ACME server (Pebble)', () => {
  let pebble: Pebble;
  let root: string;
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let httpsPort: number;
  const agents: Record<string, AgentProc> = {};
  const ids: Record<string, string> = {};

  const domain = async (name: string) => ((await api.call('GET', '/api/domains')).body as any[]).find((d) => d.domain === name);
  const createDomain = async (name: string, servers: string[]) => {
    const r = await api.call('POST', '/api/domains', { domain: name, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: servers.map((s) => ids[s]), sslEnabled: true });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  };
  const waitActive = (name: string) =>
    waitFor(
      async () => {
        const d = await domain(name);
        if (d?.sslStatus === 'error') throw new Error(`${name}: ${d.sslError}\n${agents.a?.output().slice(-3000)}`);
        return d?.sslStatus === 'active' && d.status === 'active' && d.sslExpires ? d : undefined;
      },
      `${name} to get its certificate`,
      60_000,
      100,
    );
  const startShield = (name: string, address: string, extra: string[] = []) =>
    startAgent({
      serverUrl: serve.url,
      token: tokens[name]!,
      bind: address,
      httpPort: pebble.httpPort,
      httpsPort,
      args: ['--acme-directory', pebble.directoryUrl, '--resolver', pebble.resolver, '--acme-email', 'ops@rampart.test', ...extra],
      env: { NODE_EXTRA_CA_CERTS: pebble.caFile },
      ...(agents[name] ? { dataDir: agents[name]!.dataDir } : {}),
    });
  const tokens: Record<string, string> = {};

  before(async () => {
    pebble = await startPebble();
    root = await pebble.issuerRoots();
    httpsPort = await freePort();
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    for (const [name, address] of [
      ['a', A],
      ['b', B],
      ['c', C],
    ] as const) {
      const s = await api.call('POST', '/api/servers', { name: `edge-${name}` });
      ids[name] = s.body.id;
      tokens[name] = s.body.connectionToken;
      const put = await api.call('PUT', `/api/servers/${s.body.id}`, { publicIp: address });
      assert.equal(put.status, 200, JSON.stringify(put.body));
    }
    // Agent a renews anything that has less than 10 years left: every certificate Pebble issues
    // is due at once, so SIGHUP forces a renewal.
    agents.a = await startShield('a', A, ['--renew-before-days', '3650']);
    agents.b = await startShield('b', B);
    await waitFor(async () => ((await api.call('GET', '/api/servers')).body as any[]).filter((s) => s.status === 'active').length === 2, 'both agents to connect', 30_000);
  });

  after(async () => {
    await Promise.all(Object.values(agents).map((a) => a.stop()));
    await serve?.stop();
    await origin?.close();
    await pebble?.stop();
  });

  test("issuance: HTTPS with SNI verified against the authority's root, over HTTP/2 and HTTP/1.1, with the real scheme and client address", async () => {
    await pebble.setA('one.rampart.test', [A]);
    await createDomain('one.rampart.test', ['a']);
    const d = await waitActive('one.rampart.test');
    assert.match(d.sslExpires, /^\d{4}-\d{2}-\d{2}$/);
    assert.equal(d.sslError, null);

    const h2 = await waitFor(() => https2(A, httpsPort, 'one.rampart.test', root).catch(() => undefined), 'HTTPS to be served', 10_000);
    assert.equal(h2.alpn, 'h2');
    assert.equal(h2.status, 200);
    assert.equal(JSON.parse(h2.text).origin, 'origin');
    assert.equal(h2.cert?.subjectaltname, 'DNS:one.rampart.test');

    const h1 = await https1(A, httpsPort, 'one.rampart.test', root, '/who?x=1', {
      'X-Forwarded-For': '6.6.6.6',
      Forwarded: 'for=6.6.6.6;proto=https',
      'True-Client-IP': '6.6.6.6',
      'X-Real-IP': '6.6.6.6',
      X_Real_IP: '6.6.6.6',
      'X-Forwarded-Host': 'evil.example',
    });
    assert.equal(h1.alpn, 'http/1.1');
    assert.equal(h1.status, 200);
    const seen = JSON.parse(h1.text);
    assert.equal(seen.url, '/who?x=1');
    assert.equal(seen.headers['x-forwarded-proto'], 'https');
    assert.equal(seen.headers['x-forwarded-for'], '127.0.0.1', 'only the address HAProxy saw');
    assert.equal(seen.headers['x-real-ip'], '127.0.0.1');
    for (const h of ['forwarded', 'true-client-ip', 'x_real_ip', 'x-forwarded-host']) assert.equal(seen.headers[h], undefined, `${h} is dropped`);

    // The served chain verifies against Pebble's root; the key never left the agent's data dir.
    const files = pemFiles(agents.a!.dataDir, 'one.rampart.test');
    assert.equal(files.length, 1);
    assert.equal(statSync(files[0]!).mode & 0o777, 0o600);
    assert.equal(statSync(join(agents.a!.dataDir, 'acme', 'account.json')).mode & 0o777, 0o600);
  });

  test('plain HTTP gets a 301 to HTTPS once the certificate is served; the ACME path is never redirected', async () => {
    await waitActive('one.rampart.test');
    const r = await http1(A, pebble.httpPort, 'one.rampart.test', '/shop/cart?id=7');
    assert.equal(r.status, 301);
    assert.equal(r.headers.location, `https://one.rampart.test:${httpsPort}/shop/cart?id=7`);
    const acme = await http1(A, pebble.httpPort, 'one.rampart.test', '/.well-known/acme-challenge/unknown-token');
    assert.equal(acme.status, 404, 'the responder answers (an unknown token), not the redirect');
    const other = await http1(A, pebble.httpPort, 'unknown.rampart.test', '/.well-known/acme-challenge/unknown-token');
    assert.equal(other.status, 404);
  });

  test("two servers: the domain resolves to a, and b's order is validated through a, which answers b's challenge", async () => {
    await pebble.setA('two.rampart.test', [A]);
    await createDomain('two.rampart.test', ['a', 'b']);
    await waitActive('two.rampart.test');
    await waitFor(() => pemFiles(agents.b!.dataDir, 'two.rampart.test').length === 1, 'b to hold its own certificate', 30_000);
    const viaB = await waitFor(() => https1(B, httpsPort, 'two.rampart.test', root).catch(() => undefined), 'b to serve HTTPS', 10_000);
    assert.equal(viaB.status, 200);
    // "active" needs one server; a may still be finishing its own order.
    await waitFor(() => pemFiles(agents.a!.dataDir, 'two.rampart.test').length === 1, 'a to hold its own certificate', 30_000);
    const viaA = await waitFor(
      async () => {
        const r = await https1(A, httpsPort, 'two.rampart.test', root).catch(() => undefined);
        return r?.cert?.subjectaltname === 'DNS:two.rampart.test' ? r : undefined;
      },
      'a to serve HTTPS',
      10_000,
    );
    assert.notEqual(viaA.cert?.serialNumber, viaB.cert?.serialNumber, 'each server has its own certificate (private keys never travel)');
  });

  test('a domain that resolves elsewhere is an error with a message a user can act on; the others keep serving', async () => {
    await pebble.setA('elsewhere.rampart.test', ['127.0.0.9']);
    await createDomain('elsewhere.rampart.test', ['a']);
    const d = await waitFor(
      async () => {
        const x = await domain('elsewhere.rampart.test');
        return x?.sslStatus === 'error' ? x : undefined;
      },
      'the DNS check to fail',
      30_000,
      100,
    );
    assert.equal(d.status, 'error');
    assert.equal(d.sslError, `elsewhere.rampart.test resolves to 127.0.0.9, not to a shield server of this domain (${A})`);
    assert.equal((await https1(A, httpsPort, 'one.rampart.test', root)).status, 200);
  });

  test('a failed order (the validation reaches a server that is down) leaves the other domains serving', async () => {
    // Resolves to c, a server of the domain whose agent never runs: a's check passes, Pebble's validation fails.
    await pebble.setA('fails.rampart.test', [C]);
    await createDomain('fails.rampart.test', ['a', 'c']);
    const d = await waitFor(
      async () => {
        const x = await domain('fails.rampart.test');
        return x?.sslStatus === 'error' ? x : undefined;
      },
      'the order to fail',
      60_000,
      100,
    );
    assert.match(d.sslError, /^the certificate order for fails\.rampart\.test failed: /);
    assert.equal((await https1(A, httpsPort, 'one.rampart.test', root)).status, 200);
    // The order can fail before the snapshot that adds the domain is applied: wait for that, then
    // plain HTTP serves the domain (no certificate, no redirect).
    await waitFor(async () => (await http1(A, pebble.httpPort, 'fails.rampart.test')).status === 200, 'plain HTTP to serve the failed domain', 20_000);
  });

  test('a forced renewal goes live with a zero-downtime reload', async () => {
    const before = await https1(A, httpsPort, 'one.rampart.test', root);
    const stats = { ok: 0, failed: [] as string[] };
    let running = true;
    const load = (async () => {
      for (let i = 0; running && i < 20_000; i++) {
        try {
          const r = await https1(A, httpsPort, 'one.rampart.test', root);
          if (r.status === 200) stats.ok++;
          else stats.failed.push(String(r.status));
        } catch (err) {
          stats.failed.push(String(err));
        }
      }
    })();
    agents.a!.child.kill('SIGHUP');
    const renewed = await waitFor(
      async () => {
        const r = await https1(A, httpsPort, 'one.rampart.test', root);
        return r.cert?.serialNumber !== before.cert?.serialNumber ? r : undefined;
      },
      'the renewed certificate to be served',
      60_000,
      100,
    );
    running = false;
    await load;
    assert.equal(renewed.status, 200);
    assert.ok(new X509Certificate(renewed.cert!.raw).checkHost('one.rampart.test'));
    assert.ok(stats.ok > 0);
    assert.deepEqual(stats.failed, [], 'no request failed during the reload');
    assert.equal((await domain('one.rampart.test')).sslStatus, 'active');
  });

  test('switching sslEnabled off removes the HTTPS route and the redirect; on again reuses the certificate', async () => {
    // On b, whose renewal window is the default 30 days (a renews everything it sees).
    await pebble.setA('toggle.rampart.test', [B]);
    const id = await createDomain('toggle.rampart.test', ['b']);
    await waitActive('toggle.rampart.test');
    await waitFor(async () => (await http1(B, pebble.httpPort, 'toggle.rampart.test')).status === 301, 'the redirect', 20_000);
    const files = pemFiles(agents.b!.dataDir, 'toggle.rampart.test');
    assert.equal(files.length, 1);

    assert.equal((await api.call('PUT', `/api/domains/${id}`, { sslEnabled: false })).status, 200);
    await waitFor(async () => (await http1(B, pebble.httpPort, 'toggle.rampart.test')).status === 200, 'plain HTTP without the redirect', 20_000);
    const off = await https1(B, httpsPort, 'toggle.rampart.test', root).then(
      (r) => r.cert?.subjectaltname,
      (e) => String(e),
    );
    assert.notEqual(off, 'DNS:toggle.rampart.test', 'its certificate is no longer served');
    assert.equal((await domain('toggle.rampart.test')).sslStatus, 'off');

    assert.equal((await api.call('PUT', `/api/domains/${id}`, { sslEnabled: true })).status, 200);
    await waitActive('toggle.rampart.test');
    const on = await waitFor(
      async () => {
        const r = await https1(B, httpsPort, 'toggle.rampart.test', root).catch(() => undefined);
        return r?.cert?.subjectaltname === 'DNS:toggle.rampart.test' ? r : undefined;
      },
      'HTTPS again',
      20_000,
    );
    assert.equal(on.status, 200);
    assert.deepEqual(pemFiles(agents.b!.dataDir, 'toggle.rampart.test'), files, 'no new order');
  });
});
