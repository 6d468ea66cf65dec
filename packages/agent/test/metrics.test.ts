import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { HEALTH_SOCKET, renderHaproxyConfig } from '@rampart/proxy';
import { skipUnless, waitFor } from '../../../test/support/processes.js';
import { EventCollector } from '../src/events.js';
import { AgentMetrics, fetchHaproxyMetrics } from '../src/metrics.js';

function fetchText(url: string): Promise<{ status: number; body: string; type: string }> {
  return new Promise((resolve, reject) => {
    get(url, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, type: String(res.headers['content-type']) }));
    }).on('error', reject);
  });
}

function sample(text: string, name: string, labels = ''): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const line = (ip: string) => `<134>Nov 22 07:20:00 haproxy[12]: rampart-waf 1795329600 ${ip} shop.example.com ip_blocked 3f1c2e1a-9b0d-4c55-8f3e-0123456789ab`;

describe('the agent metrics server', () => {
  test('serves the numbers of the objects it reads on a loopback port, and only /metrics', async () => {
    // A real collector with a cap of 2: three more lines the same day are dropped.
    const events = new EventCollector(
      () => true,
      () => new Date('2026-11-22T07:20:00Z'),
      2,
    );
    for (let i = 1; i <= 5; i++) events.accept(line(`192.0.2.${i}`));
    assert.equal(events.dropped, 3);
    const now = Date.parse('2026-11-22T00:00:00Z');
    const certs = [
      { domain: 'shop.example.com', expiresAt: now / 1000 + 86_400 * 10 },
      { domain: 'pending.example.com', expiresAt: null },
    ];
    const metrics = new AgentMetrics({ eventsDropped: () => events.dropped, certificates: () => certs, now: () => now });
    metrics.applied({ ok: true });
    metrics.applied({ ok: true });
    metrics.applied({ ok: false, stage: 'validate' });
    metrics.applied({ ok: false, stage: 'reload' });
    metrics.applied({ ok: false, stage: 'rollback' });
    const { server, port } = await metrics.listen(0);
    after(() => server.close());
    const addr = server.address();
    assert.ok(typeof addr === 'object' && addr && addr.address === '127.0.0.1', 'bound to loopback');

    const r = await fetchText(`http://127.0.0.1:${port}/metrics`);
    assert.equal(r.status, 200);
    assert.match(r.type, /^text\/plain/);
    assert.equal(sample(r.body, 'rampart_agent_waf_events_dropped_total'), 3);
    assert.equal(sample(r.body, 'rampart_agent_applies_total', '{outcome="ok"}'), 2);
    assert.equal(sample(r.body, 'rampart_agent_applies_total', '{outcome="failed"}'), 3);
    assert.equal(sample(r.body, 'rampart_agent_rollbacks_total', '{outcome="restored"}'), 1);
    assert.equal(sample(r.body, 'rampart_agent_rollbacks_total', '{outcome="failed"}'), 1);
    assert.equal(sample(r.body, 'rampart_agent_certificate_expiry_seconds', '{domain="shop.example.com"}'), 86_400 * 10);
    assert.ok(!r.body.includes('pending.example.com'), 'no certificate, no series');
    assert.match(r.body, /rampart_agent_process_cpu_user_seconds_total/);

    // Numbers are read at each scrape.
    events.accept(line('192.0.2.9'));
    certs.splice(0, 1);
    const again = await fetchText(`http://127.0.0.1:${port}/metrics`);
    assert.equal(sample(again.body, 'rampart_agent_waf_events_dropped_total'), 4);
    assert.equal(sample(again.body, 'rampart_agent_certificate_expiry_seconds', '{domain="shop.example.com"}'), undefined, 'a removed certificate leaves');

    assert.equal((await fetchText(`http://127.0.0.1:${port}/`)).status, 404);
    assert.equal((await fetchText(`http://127.0.0.1:${port}/metrics/../x`)).status, 404);
  });
});

const haproxyBuilt = spawnSync('haproxy', ['-vv'], { encoding: 'utf8' });
const hasExporter = haproxyBuilt.status === 0 && /prometheus-exporter/.test(haproxyBuilt.stdout);

describe("HAProxy's Prometheus exporter through the rendered health socket", () => {
  test(
    "the rendered rampart_health frontend answers /metrics with haproxy_* metrics, appended to the agent's",
    { skip: skipUnless(hasExporter, 'this HAProxy has no prometheus-exporter') },
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'rampart-metrics-'));
      after(() => rmSync(dir, { recursive: true, force: true }));
      const { files } = renderHaproxyConfig({ serverId: 'srv-1', revision: 1, domains: [], rules: [] }, { httpBind: { address: '127.0.0.1', port: 8080 }, runDir: dir }, { configDir: dir });
      // The renderer's own health frontend, verbatim, in a minimal configuration.
      const cfg = files['haproxy.cfg']!;
      const health = cfg.slice(cfg.indexOf('frontend rampart_health')).split('\n\n')[0]!;
      assert.match(health, /use-service prometheus-exporter/);
      writeFileSync(join(dir, 'h.cfg'), `global\n    log stderr format raw local0 emerg\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 5s\n    timeout server 5s\n\n${health}\n`);
      const check = spawnSync('haproxy', ['-c', '-f', join(dir, 'h.cfg')], { encoding: 'utf8' });
      assert.equal(check.status, 0, check.stderr + check.stdout);
      const proc = spawn('haproxy', ['-db', '-f', join(dir, 'h.cfg')], { stdio: 'ignore' });
      after(() => proc.kill('SIGKILL'));
      const socket = join(dir, HEALTH_SOCKET);
      const text = await waitFor(() => fetchHaproxyMetrics(socket, 500), "HAProxy's exporter", 10_000, 50);
      assert.match(text, /^haproxy_process_nbthread /m);

      const metrics = new AgentMetrics({ eventsDropped: () => 0, certificates: () => [], haproxy: () => fetchHaproxyMetrics(socket), now: () => Date.now() }, { defaultMetrics: false });
      const both = await metrics.text();
      assert.match(both, /^rampart_agent_waf_events_dropped_total 0$/m);
      assert.match(both, /^haproxy_process_nbthread /m);
      // HAProxy away: the agent's own metrics are still served.
      proc.kill('SIGKILL');
      await waitFor(async () => !(await metrics.text()).includes('haproxy_'), 'HAProxy gone', 10_000, 50);
    },
  );
});
