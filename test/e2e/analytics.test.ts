import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// docs/analytics.md end to end: a real control plane, agent and HAProxy; the agent reads HAProxy's
// counters every 500 ms (RAMPART_AGENT_ANALYTICS_INTERVAL_MS) and GET /api/analytics shows the
// requests and the WAF's blocks, across a reload of HAProxy.
describe('traffic analytics through real HAProxy', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let domainId: string;
  const HOST = 'stats.analytics.test';
  const BLOCKED_FROM = '127.0.50.1';

  type Point = { requests: number; status: Record<string, number>; bytes_in: number; bytes_out: number; blocked: Record<string, number> };
  async function totals() {
    const r = await api.call('GET', `/api/analytics?domain=${domainId}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const series = r.body.series as Point[];
    const sum = (f: (p: Point) => number) => series.reduce((s, p) => s + f(p), 0);
    return {
      requests: sum((p) => p.requests),
      s2xx: sum((p) => p.status['2xx']!),
      s4xx: sum((p) => p.status['4xx']!),
      bytesOut: sum((p) => p.bytes_out),
      ipBlocked: sum((p) => p.blocked.ip_blocked ?? 0),
      top: r.body.top,
    };
  }

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-analytics' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, analyticsIntervalMs: 500 });
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    domainId = d.body.id;
    const rule = await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: BLOCKED_FROM, domain_id: domainId });
    assert.equal(rule.status, 201, JSON.stringify(rule.body));
    await settle(api);
    await waitFor(async () => (await viaProxy(agent.httpPort, HOST, '/', {}, '127.0.51.1')).status === 200, 'the origin to be served');
  });

  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('requests, status classes, bytes and blocks by reason reach GET /api/analytics, and keep adding up across a reload', async () => {
    const start = await totals();
    for (let i = 0; i < 6; i++) assert.equal((await viaProxy(agent.httpPort, HOST, `/page/${i}`, {}, '127.0.51.1')).status, 200);
    for (let i = 0; i < 3; i++) assert.equal((await viaProxy(agent.httpPort, HOST, '/wp-admin', {}, BLOCKED_FROM)).status, 403);
    const seen = await waitFor(
      async () => {
        const t = await totals();
        return t.s2xx >= start.s2xx + 6 && t.ipBlocked >= 3 && t.s4xx >= start.s4xx + 3 && t.top.ips.length > 0 ? t : undefined;
      },
      'the requests and blocks to show in GET /api/analytics',
      30_000,
      250,
    );
    assert.equal(seen.ipBlocked, 3, 'each block counted once');
    assert.ok(seen.requests >= start.requests + 9, JSON.stringify(seen));
    assert.ok(seen.bytesOut > start.bytesOut);
    assert.deepEqual(seen.top.ips, [{ ip: BLOCKED_FROM, count: 3 }]);
    assert.deepEqual(seen.top.paths, [{ path: '/wp-admin', count: 3 }]);
    assert.equal(seen.top.rules.length, 1);

    // A configuration change reloads HAProxy (a new worker, counters from 0): nothing is lost or counted twice.
    const before = await totals();
    const r = await api.call('PUT', `/api/domains/${domainId}`, { wafLevel: 'high' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    await settle(api);
    for (let i = 0; i < 4; i++) assert.equal((await viaProxy(agent.httpPort, HOST, `/after/${i}`, {}, '127.0.51.2')).status, 200);
    const afterReload = await waitFor(
      async () => {
        const t = await totals();
        return t.s2xx >= before.s2xx + 4 ? t : undefined;
      },
      'the requests after the reload to show',
      30_000,
      250,
    );
    assert.equal(afterReload.ipBlocked, 3, 'blocks are not counted again');
    assert.equal(afterReload.s2xx, before.s2xx + 4, 'the new worker counted from 0, not its counters again');
    // One more request, seen in a later interval: exactly one more (an interval that took a
    // restart for traffic would add the new worker's whole counters again).
    assert.equal((await viaProxy(agent.httpPort, HOST, '/marker', {}, '127.0.51.2')).status, 200);
    const later = await waitFor(
      async () => {
        const t = await totals();
        return t.s2xx > afterReload.s2xx ? t : undefined;
      },
      'the marker request to show',
      30_000,
      250,
    );
    assert.equal(later.s2xx, afterReload.s2xx + 1, `${JSON.stringify(later)} after ${JSON.stringify(afterReload)}`);
    assert.equal(later.ipBlocked, 3);
  });
});
