import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// docs/architecture.md "The WAF", step 4, through real HAProxy: the rate limiter's window is fixed
// (60 s from an address's first request; refused requests do not extend it), counted per address
// in a stick table that every thread shares. The test takes a minute: it waits for the window.

describe('the rate limiter window through real HAProxy (two threads)', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const HOST = 'window.waf.test';
  const get = (from: string) => viaProxy(agent.httpPort, HOST, '/', {}, from);

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-window' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, nbthread: 2 });
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false, wafLevel: 'medium' });
    assert.equal(d.status, 201);
    assert.equal((await api.call('POST', '/api/waf', { rule_type: 'rate_limit', value: JSON.stringify({ requests_per_minute: 3 }) })).status, 201);
    await settle(api);
    await waitFor(async () => (await get('127.0.50.1')).status === 200, 'the origin to be up');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('3 per minute: the 4th is refused until 60 s after the first, however many are refused meanwhile', async () => {
    const from = '127.0.50.2';
    const start = Date.now();
    // new connections each time: they land on either thread, and the count is the address's
    for (let i = 0; i < 3; i++) assert.equal((await get(from)).status, 200, `request ${i + 1}`);
    const limited = await get(from);
    assert.equal(limited.status, 429);
    assert.match(limited.text, /rate limit/i);
    assert.equal((await get('127.0.50.3')).status, 200, 'another address has its own count');
    // Polled once a second: every refused request counts, none moves the window.
    let refused = 0;
    await waitFor(async () => {
      const r = await get(from);
      if (r.status === 429) refused++;
      return r.status === 200;
    }, 'the window to end', 75_000, 1000);
    const elapsed = (Date.now() - start) / 1000;
    assert.ok(elapsed >= 59 && elapsed < 66, `a new window after ${elapsed.toFixed(1)} s`);
    assert.ok(refused >= 50, `${refused} refused requests while waiting`);
    // the new window starts with that request: two more, then 429 again
    assert.equal((await get(from)).status, 200);
    assert.equal((await get(from)).status, 200);
    assert.equal((await get(from)).status, 429);
  });
});
