import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { buildApp } from '../src/app.js';
import { scheduleJobs } from '../src/jobs.js';
import { ControlPlaneMetrics } from '../src/metrics.js';
import { waitFor } from '../../../test/support/processes.js';
import { apiFixtures, FakeAgent, hubServer, WAIT_MS } from './fake-agent.js';
import { ADMIN_TOKEN, call, makeTestApp, newAccount } from './helpers.js';

const scrape = async (app: Parameters<typeof call>[0], token = ADMIN_TOKEN) => {
  const r = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${token}` } });
  assert.equal(r.statusCode, 200, r.body);
  return r.body;
};

/** The value of one sample line (`name{labels} value`), undefined when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const braces = line.match(/^[^{ ]+\{([^}]*)\}/)?.[1] ?? '';
    const have = braces ? braces.split(',') : [];
    if (want.every((w) => have.includes(w))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

describe('GET /metrics', async () => {
  const t = await makeTestApp();

  test('404 when neither the operator token nor a metrics token is set', async () => {
    const app = await buildApp({ ctx: t.ctx });
    after(() => app.close());
    const r = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(r.statusCode, 404);
  });

  test('401 without the token or with a wrong one; 200 in the text format with the operator token', async () => {
    assert.equal((await t.app.inject({ method: 'GET', url: '/metrics' })).statusCode, 401);
    for (const auth of [`Bearer ${ADMIN_TOKEN}x`, `Bearer `, ADMIN_TOKEN, `Basic ${ADMIN_TOKEN}`]) {
      const r = await t.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: auth } });
      assert.equal(r.statusCode, 401, auth);
    }
    const r = await t.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^text\/plain; version=0\.0\.4/);
    assert.match(r.body, /# TYPE rampart_http_request_duration_seconds histogram/);
    assert.match(r.body, /# TYPE rampart_agents_connected gauge/);
  });

  test('attack: a token configured as an empty string opens nothing; the token in the URL or in a second header does not count', async () => {
    const empty = await buildApp({ ctx: t.ctx, metricsToken: '' });
    after(() => empty.close());
    for (const authorization of [undefined, 'Bearer ', 'Bearer']) {
      const r = await empty.inject({ method: 'GET', url: '/metrics', headers: authorization === undefined ? {} : { authorization } });
      assert.equal(r.statusCode, 404, String(authorization));
    }
    const app = await buildApp({ ctx: t.ctx, adminToken: ADMIN_TOKEN, metricsToken: '' });
    after(() => app.close());
    for (const [url, headers] of [
      ['/metrics', { authorization: 'Bearer ' }],
      [`/metrics?token=${ADMIN_TOKEN}`, {}],
      ['/metrics', { authorization: ['Bearer wrong', `Bearer ${ADMIN_TOKEN}`] }],
    ] as const) {
      assert.equal((await app.inject({ method: 'GET', url, headers: headers as Record<string, string> })).statusCode, 401, `${url} ${JSON.stringify(headers)}`);
    }
  });

  test('a separate metrics token works, and the operator token still does; it is not in the OpenAPI document', async () => {
    const app = await buildApp({ ctx: t.ctx, adminToken: ADMIN_TOKEN, metricsToken: 'scrape-me' });
    after(() => app.close());
    await scrape(app, 'scrape-me');
    await scrape(app, ADMIN_TOKEN);
    const doc = JSON.parse((await app.inject({ method: 'GET', url: '/api/openapi.json' })).body);
    assert.equal(doc.paths['/metrics'], undefined);
    const only = await buildApp({ ctx: t.ctx, metricsToken: 'scrape-me' });
    after(() => only.close());
    await scrape(only, 'scrape-me');
    assert.equal((await only.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).statusCode, 401);
  });

  test('requests are timed by route pattern and status class; unknown URLs and ids never become labels', async () => {
    const { key } = await newAccount(t.app, 'pro');
    const before = sample(await scrape(t.app), 'rampart_http_request_duration_seconds_count', { method: 'GET', route: '/healthz', status_class: '2xx' }) ?? 0;
    assert.equal((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    const id = randomUUID();
    assert.equal((await call(t.app, 'DELETE', `/api/domains/${id}`, { key })).status, 404);
    const junk = `/no-such-${randomUUID()}`;
    assert.equal((await t.app.inject({ method: 'GET', url: junk })).statusCode, 404);
    const text = await scrape(t.app);
    assert.equal(sample(text, 'rampart_http_request_duration_seconds_count', { method: 'GET', route: '/healthz', status_class: '2xx' }), before + 1);
    assert.ok((sample(text, 'rampart_http_request_duration_seconds_bucket', { method: 'GET', route: '/healthz', status_class: '2xx', le: '+Inf' }) ?? 0) >= 1);
    assert.ok((sample(text, 'rampart_http_request_duration_seconds_count', { method: 'DELETE', route: '/api/domains/:id', status_class: '4xx' }) ?? 0) >= 1);
    assert.ok((sample(text, 'rampart_http_request_duration_seconds_count', { route: 'unmatched', status_class: '4xx' }) ?? 0) >= 1);
    assert.ok(!text.includes(id), 'the id is not a label');
    assert.ok(!text.includes(junk), 'the unknown URL is not a label');
    // More unknown URLs add no series.
    const series = (s: string) => s.split('\n').filter((l) => l.startsWith('rampart_http_request_duration_seconds_count')).length;
    const n = series(text);
    for (let i = 0; i < 5; i++) await t.app.inject({ method: 'GET', url: `/other-${randomUUID()}` });
    assert.equal(series(await scrape(t.app)), n);
  });

  test('scheduleJobs counts runs and failures by job name', async () => {
    const metrics = new ControlPlaneMetrics({ defaultMetrics: false });
    let okRuns = 0;
    const stop = scheduleJobs(
      t.database.db,
      'pglite',
      [
        { name: 'always-fails', everyMs: 20, run: async () => Promise.reject(new Error('boom')) },
        { name: 'works', everyMs: 20, run: async () => void okRuns++ },
      ],
      () => undefined,
      metrics.jobs,
    );
    after(stop);
    const text = () => metrics.registry.metrics();
    await waitFor(async () => (sample(await text(), 'rampart_job_failures_total', { job: 'always-fails' }) ?? 0) >= 2, 'two failures counted', WAIT_MS, 10);
    await waitFor(async () => (sample(await text(), 'rampart_job_runs_total', { job: 'works' }) ?? 0) >= 2, 'two runs counted', WAIT_MS, 10);
    stop();
    const s = await text();
    assert.ok((sample(s, 'rampart_job_runs_total', { job: 'always-fails' }) ?? 0) >= (sample(s, 'rampart_job_failures_total', { job: 'always-fails' }) ?? 0));
    assert.equal(sample(s, 'rampart_job_failures_total', { job: 'works' }), undefined);
    assert.ok(okRuns >= 2);
  });

  test('notification delivery outcomes by channel', async () => {
    const metrics = new ControlPlaneMetrics({ defaultMetrics: false });
    metrics.delivery('webhook', 'delivered');
    metrics.delivery('email', 'failed');
    metrics.delivery('email', 'given_up');
    const s = await metrics.registry.metrics();
    assert.equal(sample(s, 'rampart_notification_deliveries_total', { channel: 'webhook', outcome: 'delivered' }), 1);
    assert.equal(sample(s, 'rampart_notification_deliveries_total', { channel: 'email', outcome: 'failed' }), 1);
    assert.equal(sample(s, 'rampart_notification_deliveries_total', { channel: 'email', outcome: 'given_up' }), 1);
  });

  test('two apps in one process have registries of their own', async () => {
    const a = new ControlPlaneMetrics();
    const b = new ControlPlaneMetrics();
    a.jobs.ran('x');
    assert.equal(sample(await a.registry.metrics(), 'rampart_job_runs_total', { job: 'x' }), 1);
    assert.equal(sample(await b.registry.metrics(), 'rampart_job_runs_total', { job: 'x' }), undefined);
  });
});

describe('control-plane metrics of a running server', async () => {
  const { srv, agentUrl, agents } = await hubServer();

  test('agents connected, and the time from a snapshot push to its ack', async () => {
    const { key } = await newAccount(srv.app, 'pro');
    const server = await apiFixtures(srv.app).newServer(key, 'metrics-edge');
    assert.equal(sample(await scrape(srv.app), 'rampart_agents_connected'), 0);
    const agent = await FakeAgent.connect(agentUrl, server.connectionToken);
    agents.push(agent);
    await waitFor(async () => sample(await scrape(srv.app), 'rampart_agents_connected') === 1, 'one agent connected', WAIT_MS, 20);
    assert.equal(sample(await scrape(srv.app), 'rampart_config_push_ack_seconds_count', { outcome: 'ok' }) ?? 0, 0);
    const revision = agent.snapshots()[0]!.revision;
    agent.send({ type: 'config/ack', payload: { revision, ok: true, errors: [] } });
    await waitFor(async () => sample(await scrape(srv.app), 'rampart_config_push_ack_seconds_count', { outcome: 'ok' }) === 1, 'one push-to-ack sample', WAIT_MS, 20);
    const sum = sample(await scrape(srv.app), 'rampart_config_push_ack_seconds_sum', { outcome: 'ok' })!;
    assert.ok(sum > 0 && sum < 30, `${sum} s`);
    agent.close();
    await waitFor(async () => sample(await scrape(srv.app), 'rampart_agents_connected') === 0, 'no agent connected', WAIT_MS, 20);
  });

  test('job runs of the real schedule are counted', async () => {
    await waitFor(async () => (sample(await scrape(srv.app), 'rampart_job_runs_total', { job: 'event-retention' }) ?? 0) >= 1, 'event-retention counted', WAIT_MS, 20);
  });
});
