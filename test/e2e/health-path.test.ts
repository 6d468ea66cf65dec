import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, rawRequest, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// The health path (docs/dns-failover.md, "The health probe"): a real agent's HAProxy answers
// /.well-known/rampart/health itself with 200 "ok" (HAProxy's monitor-uri), for any Host and any
// method, with no domain configured. It is no way around the WAF: with every client blocked, that
// exact path still answers its constant "ok", and nothing near it (a query, other spellings, a
// body sent to it) reaches the origin.

const HEALTH = '/.well-known/rampart/health';

describe('the health path on a real HAProxy', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let serverId: string;
  let origin: Awaited<ReturnType<typeof startOrigin>>;

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    const srv = await api.call('POST', '/api/servers', { name: 'edge-health' });
    serverId = srv.body.id;
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
    origin = await startOrigin('origin');
    await waitFor(async () => (await api.call('GET', '/api/servers')).body[0].status === 'active', 'the agent to connect');
    await settle(api);
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('without any domain: 200 ok, text/plain, not cached, for any Host or none, for any method (HEAD without a body)', async () => {
    for (const host of ['anything.example', '203.0.113.9', 'x']) {
      const r = await viaProxy(agent.httpPort, host, HEALTH);
      assert.deepEqual([r.status, r.text], [200, 'ok'], host);
    }
    const raw = await rawRequest(agent.httpPort, `GET ${HEALTH} HTTP/1.0\r\n\r\n`);
    assert.deepEqual([raw.status, raw.text], [200, 'ok'], 'HTTP/1.0 without Host');
    const head = await rawRequest(agent.httpPort, `HEAD ${HEALTH} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n`);
    assert.equal(head.status, 200);
    assert.equal(head.text, '', 'no body for HEAD');
    const headers = await rawHeaders(agent.httpPort, `GET ${HEALTH} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n`);
    assert.match(headers, /\r\ncontent-type: text\/plain\r\n/i);
    assert.match(headers, /\r\ncache-control: no-store\r\n/i);
    for (const method of ['POST', 'PUT', 'DELETE', 'OPTIONS']) {
      const r = await rawRequest(agent.httpPort, `${method} ${HEALTH} HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
      assert.deepEqual([r.status, r.text], [200, 'ok'], method);
    }
    const query = await viaProxy(agent.httpPort, 'a.example', `${HEALTH}?x=1`);
    assert.equal(query.status, 404, 'with a query it is another path: routed like any request (no domain: 404)');
  });

  test('with every client blocked by the WAF: the exact path still answers its constant ok, and nothing reaches the origin through it', async () => {
    const d = await api.call('POST', '/api/domains', { domain: 'blocked.example.test', origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [serverId], sslEnabled: false, wafLevel: 'high' });
    assert.equal(d.status, 201);
    const rule = await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: '127.0.0.0/8' });
    assert.equal(rule.status, 201, JSON.stringify(rule.body));
    await settle(api);
    await waitFor(async () => (await viaProxy(agent.httpPort, 'blocked.example.test', '/')).status === 403, 'the block to apply');
    const hitsBefore = origin.hits;

    assert.deepEqual(await viaProxy(agent.httpPort, 'blocked.example.test', HEALTH).then((r) => [r.status, r.text]), [200, 'ok']);
    // Anything that is not exactly the path goes to the domain's backend, and its WAF blocks it.
    for (const path of [
      `${HEALTH}?next=/admin`,
      `${HEALTH}/`,
      `${HEALTH}x`,
      `${HEALTH}/../../admin`,
      '/.well-known/rampart/%68ealth',
      `/${HEALTH}`,
      '/.WELL-KNOWN/rampart/health',
      '/.well-known/rampart/health;x',
      '/admin',
    ]) {
      const r = await rawRequest(agent.httpPort, `GET ${path} HTTP/1.1\r\nHost: blocked.example.test\r\nConnection: close\r\n\r\n`);
      assert.equal(r.status, 403, path);
    }
    for (const method of ['POST', 'PUT']) {
      const r = await rawRequest(agent.httpPort, `${method} ${HEALTH} HTTP/1.1\r\nHost: blocked.example.test\r\nContent-Type: text/plain\r\nContent-Length: 4\r\nConnection: close\r\n\r\nping`);
      assert.deepEqual([r.status, r.text], [200, 'ok'], `${method} of the path gets the constant answer; its body goes nowhere`);
    }
    // A request smuggled behind it on the same connection is a request of its own, checked by the WAF.
    const pipelined = await rawRequest(agent.httpPort, `GET ${HEALTH} HTTP/1.1\r\nHost: blocked.example.test\r\n\r\nGET /admin HTTP/1.1\r\nHost: blocked.example.test\r\nConnection: close\r\n\r\n`);
    assert.match(pipelined.text, /ok[\s\S]*HTTP\/1\.1 403/, 'the second answer is the WAF block');
    assert.equal(origin.hits, hitsBefore, 'the origin was never reached');
  });
});

/** The status line and headers of one raw request. */
async function rawHeaders(port: number, raw: string): Promise<string> {
  const { connect } = await import('node:net');
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let text = '';
    socket.setTimeout(5_000, () => socket.destroy(new Error('timed out')));
    socket.on('data', (d) => (text += d));
    socket.on('error', reject);
    socket.on('end', () => resolve(text.slice(0, text.indexOf('\r\n\r\n') + 2)));
    socket.write(raw);
  });
}
