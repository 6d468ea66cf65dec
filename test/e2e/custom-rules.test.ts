import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// Custom rules (docs/rules.md) through the whole product: written through /api/rules, pushed to
// a real agent, compiled and applied to its HAProxy, enforced on requests from loopback sources,
// and their events back in /api/waf/events with the rule's id, their hits in /api/rules.
describe('custom rules through the control plane, an agent and HAProxy', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const HOST = 'shop.rules-e2e.test';
  const get = (from: string, path: string, headers: Record<string, string> = {}) => viaProxy(agent.httpPort, HOST, path, headers, from);
  const rule = async (body: object) => {
    const r = await api.call('POST', '/api/rules', body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  };

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-rules' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, analyticsIntervalMs: 1000 });
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false, wafLevel: 'low' });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    await settle(api);
    await waitFor(async () => (await get('127.0.50.1', '/')).status === 200, 'the origin to be up');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('block, log and rate_limit rules are enforced as written, and their events carry the rule id; a disabled rule stops', async () => {
    const block = await rule({ name: 'admin', expression: 'starts_with(lower(http.request.uri.path), "/wp-admin") and not ip.src in {127.0.51.0/24}', action: 'block' });
    const log = await rule({ name: 'watch', expression: 'http.request.headers["x-scanner"] contains "a\\"b }%[src]"', action: 'log' });
    const limit = await rule({
      name: 'login',
      expression: 'http.request.uri.path eq "/login"',
      action: 'rate_limit',
      rateLimit: { requests: 2, period: 60, characteristics: ['ip'], mitigation: 'block', duration: 60 },
    });
    await settle(api);
    assert.equal((await get('127.0.50.2', '/WP-Admin/x')).status, 403);
    assert.equal((await get('127.0.51.7', '/wp-admin/x')).status, 200, 'the office range is excepted');
    const logged = await get('127.0.50.3', '/watched', { 'x-scanner': 'xa"b }%[src]y' });
    assert.equal(logged.status, 200);
    assert.equal(JSON.parse(logged.text).origin, 'origin', 'a log rule lets the request through');
    assert.deepEqual([(await get('127.0.50.4', '/login')).status, (await get('127.0.50.4', '/login')).status, (await get('127.0.50.4', '/login')).status], [200, 200, 429]);
    await waitFor(
      async () => {
        const events = (await api.call('GET', '/api/waf/events?limit=200')).body as { reason: string; rule_id: string; blocked: boolean }[];
        const of = (reason: string, id: string) => events.find((e) => e.reason === reason && e.rule_id === id);
        return of('custom_rule_blocked', block)?.blocked === true && of('custom_rule_logged', log)?.blocked === false && of('rate_limited', limit)?.blocked === true;
      },
      'the events of the three rules',
      15_000,
      200,
    );
    // Each rule's hits, counted by HAProxy and reported by the agent: the blocked, the logged and the refused request.
    await waitFor(
      async () => {
        const rules = (await api.call('GET', '/api/rules')).body as { id: string; hits: { hour: number; day: number; week: number } }[];
        const hits = Object.fromEntries(rules.map((r) => [r.id, r.hits.hour]));
        return hits[block] === 1 && hits[log] === 1 && hits[limit] === 1;
      },
      'one hit of each rule in the last hour',
      15_000,
      200,
    );
    const all = (await api.call('GET', '/api/rules')).body as { id: string; hits: { hour: number; day: number; week: number } }[];
    assert.deepEqual(all.find((r) => r.id === limit)?.hits, { hour: 1, day: 1, week: 1 }, 'the two requests it only counted are not hits');
    assert.equal((await api.call('PUT', `/api/rules/${block}`, { enabled: false })).status, 200);
    await settle(api);
    assert.equal((await get('127.0.50.2', '/wp-admin/x')).status, 200, 'a disabled rule no longer blocks');
  });
});
