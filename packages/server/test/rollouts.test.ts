import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { AGENT_LIMITS, CLOSE, LATENCY_BUCKETS_MS, latencyBucket, type AnalyticsBatchPayload } from '@rampart/protocol';
import { buildSnapshots } from '../src/services/snapshot.js';
import { storeAnalytics } from '../src/services/analytics.js';
import { ROLLOUT_REPORT_SECONDS } from '../src/services/rollout-holds.js';
import { recordCanaryFailure, recordRolloutReport, regression, ROLLOUT_THRESHOLDS, SILENT_CANARY_SECONDS, watchBakes } from '../src/services/rollouts.js';
import { backends, call, makeTestApp, newAccount, type TestApp } from './helpers.js';
import { hubFor } from './agent-hub-harness.js';
import { FakeAgent, WAIT_MS } from './fake-agent.js';
import { waitFor } from '../../../test/support/processes.js';

// Staged rollout (docs/api.md "Rollout"): the settings and the canary flag; in staged mode a change
// bakes on the canaries while the other servers keep their released snapshot; a canary's reports
// pass it (after bakeSeconds, once every canary reported) or halt it (a regression past the
// thresholds, a failed reload, HAProxy not serving): the canaries go back, rollout_halted names
// the change, the signal and its values; a newer change supersedes; resume and rollback. The clock
// is the test's (bake_until is when the change was saved; the test advances past it).

const ORIGINS = [{ ip: '192.0.2.10', port: 80 }];
const BLOCK_ALL = { name: 'block everything', expression: 'starts_with(http.request.uri.path, "/")', action: 'block' };
const LOG_LOGIN = { name: 'log login', expression: 'http.request.uri.path eq "/login"', action: 'log' };

function batch(domain: string, requests: number, blocked: number, errors = 0, latency?: number[], at = new Date()): AnalyticsBatchPayload {
  return {
    minute: new Date(Math.floor(at.getTime() / 60_000) * 60_000).toISOString(),
    domains: [
      {
        domain,
        requests,
        status: { '1xx': 0, '2xx': requests - errors, '3xx': 0, '4xx': 0, '5xx': errors, other: 0 },
        bytesIn: 0,
        bytesOut: 0,
        blocked: blocked ? { custom_rule_blocked: blocked } : {},
        ...(latency ? { latency } : {}),
      },
    ],
  };
}

test('regression: the documented thresholds', () => {
  const none = { requests: 0, blocked: 0, errors: 0 };
  assert.equal(regression(none, { requests: 0, blocked: ROLLOUT_THRESHOLDS.minRequests - 1, errors: 0 }), undefined, 'too few requests to judge');
  assert.match(regression({ requests: 100, blocked: 1, errors: 0 }, { requests: 100, blocked: 60, errors: 0 })!.values, /1\.0% before the change, 60\.0% during the bake \(60 of 100 requests\)/);
  assert.equal(regression({ requests: 100, blocked: 40, errors: 0 }, { requests: 100, blocked: 60, errors: 0 }), undefined, '40% to 60%: not twice');
  assert.equal(regression(none, { requests: 100, blocked: 10, errors: 10 }), undefined, '10 points is not a regression');
  assert.match(regression({ requests: 100, blocked: 0, errors: 1 }, { requests: 100, blocked: 0, errors: 50 })!.signal, /origin errors/);
  // p99 latency: judged with 50 samples on both sides; 3 times the before and 200 ms more.
  const fast = hist([
    [25, 99],
    [50, 1],
  ]);
  const slow = hist([
    [25, 60],
    [500, 40],
  ]);
  const t = { requests: 100, blocked: 0, errors: 0 };
  const p99 = regression({ ...t, latency: fast }, { ...t, latency: slow });
  assert.equal(p99?.signal, 'the p99 latency');
  assert.equal(p99?.values, 'at most 25 ms before the change, up to 500 ms during the bake (100 sampled requests)');
  assert.equal(
    regression(
      { ...t, latency: fast },
      {
        ...t,
        latency: hist([
          [25, 40],
          [500, 9],
        ]),
      },
    ),
    undefined,
    '49 samples: too few',
  );
  assert.equal(regression({ ...t, latency: hist([[25, 49]]) }, { ...t, latency: slow }), undefined, 'no judged before: no signal');
  assert.equal(regression({ ...t, latency: hist([[250, 100]]) }, { ...t, latency: hist([[500, 100]]) }), undefined, 'twice is not a regression');
  assert.equal(regression({ ...t, latency: hist([[25, 100]]) }, { ...t, latency: hist([[100, 100]]) }), undefined, '4 times but 75 ms more is not');
  assert.match(regression({ ...t, latency: fast }, { ...t, latency: hist([[60_000, 100]]) })!.values, /up to over 10 s|over 10 s during the bake/);
});

/** A latency histogram from [ms, count] pairs. */
function hist(entries: [number, number][]): number[] {
  const counts = new Array<number>(LATENCY_BUCKETS_MS.length + 1).fill(0);
  for (const [ms, n] of entries) counts[latencyBucket(ms)]! += n;
  return counts;
}

for (const backend of await backends()) {
  describe(`staged rollout (${backend})`, async () => {
    const t: TestApp = await makeTestApp(backend);
    const ctx = t.ctx;

    async function setup(bakeSeconds = 5) {
      const { key, accountId } = await newAccount(t.app);
      const tokens = new Map<string, string>();
      const mk = async (name: string) => {
        const r = await call(t.app, 'POST', '/api/servers', { key, body: { name } });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        tokens.set(r.body.id, r.body.connectionToken);
        return r.body.id as string;
      };
      const canary = await mk('canary');
      const fleet = await mk('fleet');
      const domain = `roll-${randomUUID().slice(0, 8)}.example.com`;
      const d = await call(t.app, 'POST', '/api/domains', { key, body: { domain, origins: ORIGINS, serverIds: [canary, fleet] } });
      assert.equal(d.status, 201, JSON.stringify(d.body));
      const c = await call(t.app, 'PUT', `/api/servers/${canary}`, { key, body: { canary: true } });
      assert.equal(c.status, 200, JSON.stringify(c.body));
      assert.equal(c.body.canary, true);
      const s = await call(t.app, 'PUT', '/api/settings/rollout', { key, body: { mode: 'staged', bakeSeconds } });
      assert.equal(s.status, 200, JSON.stringify(s.body));
      assert.deepEqual({ ...s.body }, { mode: 'staged', bakeSeconds, canaries: 1, state: 'idle', rolloutId: null, warning: null });
      return { key, accountId, canary, fleet, domain, tokens };
    }
    const snaps = async (...ids: string[]) => (await buildSnapshots(ctx.db, ids)).snapshots;
    const ruleExprs = (s: { customRules?: { expression: string }[] } | undefined) => (s?.customRules ?? []).map((r) => r.expression);
    const rollouts = async (key: string) =>
      (await call(t.app, 'GET', '/api/rollouts', { key })).body as {
        id: string;
        state: string;
        change: string;
        bakeUntil: string;
        signal: string | null;
        detail: string | null;
        servers: { name: string; state: string; canary: boolean; requests: number; blocked: number; p99Ms: number | null; baseP99Ms: number | null }[];
      }[];
    const states = (r: { servers: { name: string; state: string }[] }) => Object.fromEntries(r.servers.map((s) => [s.name, s.state]));
    /** Past the bake: the clock is moved past every bake_until this test made. */
    const pastBake = () => t.clock.set(new Date(Date.now() + 3_600_000 + 60_000));

    test('settings: defaults, a bad body names its field, staged without canary warns; servers show canary', async () => {
      const { key } = await newAccount(t.app);
      const g = await call(t.app, 'GET', '/api/settings/rollout', { key });
      assert.equal(g.status, 200);
      assert.deepEqual(g.body, { mode: 'immediate', bakeSeconds: 60, canaries: 0, state: 'idle', rolloutId: null, warning: null });
      for (const [body, field] of [
        [{ mode: 'later' }, /mode/],
        [{ bakeSeconds: 4 }, /bakeSeconds/],
        [{ bakeSeconds: 3601 }, /bakeSeconds/],
        [{ bakeSeconds: 1.5 }, /bakeSeconds/],
        [{}, /body/],
      ] as const) {
        const r = await call(t.app, 'PUT', '/api/settings/rollout', { key, body });
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.match(r.body.error, field);
      }
      const s = await call(t.app, 'PUT', '/api/settings/rollout', { key, body: { mode: 'staged' } });
      assert.equal(s.status, 200);
      assert.equal(s.body.bakeSeconds, 60);
      assert.match(s.body.warning, /No server is a canary/);
      const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'one' } });
      assert.equal(srv.body.canary, false);
      // Without a canary a change reaches every server at once.
      const rule = await call(t.app, 'POST', '/api/rules', { key, body: LOG_LOGIN });
      assert.equal(rule.status, 201);
      assert.deepEqual(ruleExprs((await snaps(srv.body.id)).get(srv.body.id)), [LOG_LOGIN.expression]);
      assert.deepEqual(await rollouts(key), []);
      const list = await call(t.app, 'GET', '/api/servers', { key });
      assert.equal(list.body[0].canary, false);
    });

    test('hold and pass: the canary bakes, the fleet keeps its snapshot until the bake held and every canary reported', async () => {
      const { key, canary, fleet, domain } = await setup();
      t.changed.length = 0;
      const rule = await call(t.app, 'POST', '/api/rules', { key, body: LOG_LOGIN });
      assert.equal(rule.status, 201);
      let s = await snaps(canary, fleet);
      assert.deepEqual(ruleExprs(s.get(canary)), [LOG_LOGIN.expression], 'the canary gets the change');
      assert.equal(s.get(canary)!.reportSeconds, ROLLOUT_REPORT_SECONDS, 'and reports at the short interval');
      assert.deepEqual(ruleExprs(s.get(fleet)), [], 'the fleet does not');
      assert.equal(s.get(fleet)!.reportSeconds, undefined);
      let [r] = await rollouts(key);
      assert.equal(r!.state, 'baking');
      assert.match(r!.change, /custom rule "http\.request\.uri\.path eq \\?"\/login\\?"" \(log\) added/);
      assert.deepEqual(states(r!), { canary: 'baking', fleet: 'queued' });
      assert.equal((await call(t.app, 'GET', '/api/settings/rollout', { key })).body.state, 'baking');

      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 100, 1)), 'baking', 'within the bake time');
      assert.equal(await recordRolloutReport(ctx, fleet, batch(domain, 100, 100)), 'none', "the fleet's reports judge nothing");
      pastBake();
      t.changed.length = 0;
      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 100, 1)), 'applied');
      assert.ok(t.changed.flat().includes(fleet), 'the fleet is pushed');
      s = await snaps(canary, fleet);
      assert.deepEqual(ruleExprs(s.get(fleet)), [LOG_LOGIN.expression], 'the fleet gets the change');
      assert.equal(s.get(canary)!.reportSeconds, undefined, 'the canary reports at its usual interval again');
      [r] = await rollouts(key);
      assert.equal(r!.state, 'applied');
      assert.deepEqual(states(r!), { canary: 'applied', fleet: 'applied' });
      assert.equal((await call(t.app, 'GET', '/api/settings/rollout', { key })).body.state, 'idle');
      t.clock.set(new Date());
    });

    test('halt: a rule blocking everything goes back on the canary, never reaches the fleet; rollout_halted says why; resume releases it', async () => {
      const { key, canary, fleet, domain } = await setup();
      await call(t.app, 'POST', '/api/rules', { key, body: BLOCK_ALL });
      t.changed.length = 0;
      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 0, 50)), 'halted');
      assert.deepEqual(t.changed.flat(), [canary], 'the canary is pushed its last good snapshot');
      const s = await snaps(canary, fleet);
      assert.deepEqual(ruleExprs(s.get(canary)), [], 'the canary is back on the last good revision');
      assert.deepEqual(ruleExprs(s.get(fleet)), [], 'the fleet never got the change');
      const [r] = await rollouts(key);
      assert.equal(r!.state, 'halted');
      assert.deepEqual(states(r!), { canary: 'rolled_back', fleet: 'halted' });
      assert.match(r!.signal!, /blocked by the WAF/);
      assert.match(r!.detail!, /0\.0% before the change, 100\.0% during the bake/);
      const n = await call(t.app, 'GET', '/api/notifications', { key });
      const halted = (n.body as { kind: string; message: string }[]).find((x) => x.kind === 'rollout_halted');
      assert.ok(halted, JSON.stringify(n.body));
      assert.match(halted.message, /starts_with\(http\.request\.uri\.path, "\/"\)/, 'names the change');
      assert.match(halted.message, /share of requests blocked by the WAF on canary "canary": 0\.0% before the change, 100\.0% during the bake/);
      const settings = (await call(t.app, 'GET', '/api/settings/rollout', { key })).body;
      assert.equal(settings.state, 'halted');
      assert.equal(settings.rolloutId, r!.id);
      // Later reports judge nothing; the halt holds.
      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 100, 0)), 'none');
      // Resume: the user overrides the halt.
      const other = await newAccount(t.app);
      assert.equal((await call(t.app, 'POST', `/api/rollouts/${r!.id}/resume`, { key: other.key })).status, 404, "another account's rollout");
      const res = await call(t.app, 'POST', `/api/rollouts/${r!.id}/resume`, { key });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.state, 'applied');
      assert.deepEqual(ruleExprs((await snaps(fleet)).get(fleet)), [BLOCK_ALL.expression]);
      assert.equal((await call(t.app, 'POST', `/api/rollouts/${r!.id}/resume`, { key })).status, 409, 'only a halted rollout resumes');
    });

    test('supersede: a change saved while another bakes replaces it; rollback keeps the last good revision until a newer change', async () => {
      const { key, canary, fleet, domain } = await setup();
      await call(t.app, 'POST', '/api/rules', { key, body: LOG_LOGIN });
      await call(t.app, 'POST', '/api/rules', { key, body: BLOCK_ALL });
      let list = await rollouts(key);
      assert.deepEqual(
        list.map((r) => r.state),
        ['baking', 'superseded'],
      );
      assert.deepEqual(states(list[1]!), { canary: 'superseded', fleet: 'superseded' });
      assert.match(list[0]!.change, /\(log\) added/, 'the newer rollout carries both changes');
      assert.match(list[0]!.change, /"starts_with\(http\.request\.uri\.path, "\/"\)" \(block\) added/);
      let s = await snaps(canary, fleet);
      assert.deepEqual(ruleExprs(s.get(canary)).sort(), [BLOCK_ALL.expression, LOG_LOGIN.expression].sort());
      assert.deepEqual(ruleExprs(s.get(fleet)), []);
      // A failed reload on the canary halts at once.
      assert.equal(await recordCanaryFailure(ctx, canary, 'reload health', 'the configuration update failed'), true);
      list = await rollouts(key);
      assert.equal(list[0]!.state, 'halted');
      assert.equal(list[0]!.signal, 'reload health');
      const rb = await call(t.app, 'POST', `/api/rollouts/${list[0]!.id}/rollback`, { key });
      assert.equal(rb.status, 200);
      assert.equal(rb.body.state, 'rolled_back');
      assert.deepEqual(states(rb.body), { canary: 'rolled_back', fleet: 'rolled_back' });
      s = await snaps(canary, fleet);
      assert.deepEqual([ruleExprs(s.get(canary)), ruleExprs(s.get(fleet))], [[], []], 'every server keeps the last good revision');
      // The user undoes the bad rule and saves: a new rollout of the current configuration.
      const rules = (await call(t.app, 'GET', '/api/rules', { key })).body as { id: string; name: string }[];
      const bad = rules.find((r) => r.name === BLOCK_ALL.name)!;
      assert.equal((await call(t.app, 'DELETE', `/api/rules/${bad.id}`, { key })).status, 200);
      list = await rollouts(key);
      assert.deepEqual(list.map((r) => r.state).slice(0, 2), ['baking', 'rolled_back']);
      s = await snaps(canary, fleet);
      assert.deepEqual(ruleExprs(s.get(canary)), [LOG_LOGIN.expression]);
      assert.deepEqual(ruleExprs(s.get(fleet)), []);
      pastBake();
      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 30, 0)), 'applied');
      assert.deepEqual(ruleExprs((await snaps(fleet)).get(fleet)), [LOG_LOGIN.expression]);
      t.clock.set(new Date());
      // Immediate again: nothing is held.
      await call(t.app, 'POST', '/api/rules', { key, body: { ...LOG_LOGIN, name: 'again', expression: 'http.request.uri.path eq "/x"' } });
      assert.equal((await rollouts(key))[0]!.state, 'baking');
      const im = await call(t.app, 'PUT', '/api/settings/rollout', { key, body: { mode: 'immediate' } });
      assert.equal(im.body.state, 'idle');
      assert.equal((await rollouts(key))[0]!.state, 'superseded');
      assert.equal(ruleExprs((await snaps(fleet)).get(fleet)).length, 2);
    });

    test('p99 latency: the before from the stored analytics, the bake summed over reports; a slow change halts with both values', async () => {
      const { key, accountId, canary, fleet, domain } = await setup();
      // The canary's traffic before the change, as the analytics store it, in the minute the
      // test clock is in (storing refuses a minute after the clock's).
      t.clock.set(new Date());
      const stored = await storeAnalytics(
        ctx,
        accountId,
        canary,
        batch(
          domain,
          600,
          0,
          0,
          hist([
            [25, 200],
            [50, 2],
          ]),
          t.clock.now(),
        ),
      );
      assert.equal(stored.stored, 1, JSON.stringify(stored));
      await call(t.app, 'POST', '/api/rules', { key, body: LOG_LOGIN });
      const [r0] = await rollouts(key);
      const base = r0!.servers.find((x) => x.name === 'canary')!;
      assert.equal(base.baseP99Ms, 25);
      assert.equal(base.p99Ms, null, 'no samples yet');
      // Two reports of 30 slow samples each: neither alone is enough to judge, together they are.
      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 300, 0, 0, hist([[800, 30]]))), 'baking');
      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 300, 0, 0, hist([[800, 30]]))), 'halted');
      const [r] = await rollouts(key);
      assert.equal(r!.signal, 'the p99 latency');
      assert.equal(r!.detail, 'at most 25 ms before the change, up to 1 s during the bake (60 sampled requests)');
      const row = r!.servers.find((x) => x.name === 'canary')!;
      assert.deepEqual([row.baseP99Ms, row.p99Ms], [25, 1000]);
      assert.deepEqual(ruleExprs((await snaps(fleet)).get(fleet)), [], 'the fleet never got the change');
      const n = (await call(t.app, 'GET', '/api/notifications', { key })).body as { kind: string; message: string }[];
      assert.match(n.find((x) => x.kind === 'rollout_halted')!.message, /regressed the p99 latency on canary "canary": at most 25 ms before the change, up to 1 s during the bake/);
    });

    test("the watch releases a change when its bake ends, the canary's last report within one interval of the end; not before the end", async () => {
      const { key, canary, fleet, domain } = await setup(5);
      await call(t.app, 'POST', '/api/rules', { key, body: LOG_LOGIN });
      const [r] = await rollouts(key);
      const bakeEnd = Date.parse(r!.bakeUntil);
      try {
        // A report one second before the end (the agent reports every 2 s), then nothing.
        t.clock.set(new Date(bakeEnd - 1000));
        assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 30, 0)), 'baking');
        assert.equal((await rollouts(key))[0]!.state, 'baking');
        await watchBakes(ctx);
        assert.equal((await rollouts(key))[0]!.state, 'baking', 'not before the end');
        t.changed.length = 0;
        t.clock.set(new Date(bakeEnd + 10));
        assert.ok((await watchBakes(ctx)).applied >= 1);
        assert.equal((await rollouts(key))[0]!.state, 'applied');
        assert.ok(t.changed.flat().includes(fleet), 'the fleet is pushed');
        assert.deepEqual(ruleExprs((await snaps(fleet)).get(fleet)), [LOG_LOGIN.expression]);
      } finally {
        t.clock.set(new Date());
      }
    });

    test("reports through the hub: only the canary's own domains count, a report past the bounds closes its connection and counts nothing, the fleet's judge nothing", async () => {
      const { key, canary, fleet, domain, tokens } = await setup(60);
      const h = await hubFor(ctx);
      await call(t.app, 'POST', '/api/rules', { key, body: LOG_LOGIN });
      const canaryRow = async () => (await rollouts(key))[0]!.servers.find((x) => x.name === 'canary')!;
      const onCanary = await h.connect(tokens.get(canary)!);
      // Another account's (or no one's) domain: what the agent may not claim.
      onCanary.send({ type: 'analytics/batch', payload: batch('other.example.com', 100, 100) });
      onCanary.send({ type: 'analytics/batch', payload: batch(domain, 10, 0) });
      await waitFor(async () => (await canaryRow()).requests === 10, 'the canary report counted', WAIT_MS);
      assert.equal((await canaryRow()).blocked, 0, 'the other domain did not count');
      // Past the bounds: 13 latency buckets, a count over the limit. The connection closes; nothing counts.
      const over = batch(domain, 10, 10, 0, new Array(LATENCY_BUCKETS_MS.length + 2).fill(100));
      onCanary.send({ type: 'analytics/batch', payload: over });
      assert.equal((await onCanary.closedWithin('the invalid report')).code, CLOSE.invalidMessage);
      const again = await h.connect(tokens.get(canary)!);
      again.send({ type: 'analytics/batch', payload: batch(domain, AGENT_LIMITS.analyticsRequests + 1, 0) });
      assert.equal((await again.closedWithin('the report over the count limit')).code, CLOSE.invalidMessage);
      const after = await canaryRow();
      assert.deepEqual([after.requests, after.blocked], [10, 0]);
      // The fleet's agent reports every request blocked: stored as its analytics, judging nothing.
      const onFleet = await h.connect(tokens.get(fleet)!);
      onFleet.send({ type: 'analytics/batch', payload: batch(domain, 0, 100) });
      await waitFor(
        async () => {
          const r = await call(t.app, 'GET', `/api/analytics?domain=${(await call(t.app, 'GET', '/api/domains', { key })).body[0].id}`, { key });
          return (r.body.series as { blocked: Record<string, number> }[]).some((p) => (p.blocked.custom_rule_blocked ?? 0) >= 100);
        },
        "the fleet's report stored",
        WAIT_MS,
      );
      assert.equal((await rollouts(key))[0]!.state, 'baking');
      // A connection without this server's token never reports at all.
      await assert.rejects(FakeAgent.connect(h.url, 'rmsk_forged'), /upgrade refused: HTTP 401/);
    });

    test('a silent canary: past the bake and the grace without its report, the rollout halts and names it; the fleet never gets the change', async () => {
      const { key, canary, fleet, domain } = await setup(5);
      const saved = Date.now();
      await call(t.app, 'POST', '/api/rules', { key, body: LOG_LOGIN });
      assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 10, 0)), 'baking', 'it reported once, during the bake');
      const [r] = await rollouts(key);
      const bakeEnd = Date.parse(r!.bakeUntil);
      assert.ok(bakeEnd >= saved + 5_000);
      try {
        // Within the grace its report may still come.
        t.clock.set(new Date(bakeEnd + (SILENT_CANARY_SECONDS - 5) * 1000));
        await watchBakes(ctx);
        assert.equal((await rollouts(key))[0]!.state, 'baking');
        t.changed.length = 0;
        t.clock.set(new Date(bakeEnd + (SILENT_CANARY_SECONDS + 1) * 1000));
        assert.ok((await watchBakes(ctx)).halted >= 1);
        assert.ok(t.changed.flat().includes(canary), 'the canary is pushed its last good snapshot');
        const [h] = await rollouts(key);
        assert.equal(h!.state, 'halted');
        assert.deepEqual(states(h!), { canary: 'rolled_back', fleet: 'halted' });
        assert.equal(h!.signal, 'canary reports');
        assert.match(h!.detail!, new RegExp(`"canary" sent no report in the ${SILENT_CANARY_SECONDS} s after the bake ended \\(its last at \\d{4}-`));
        const s = await snaps(canary, fleet);
        assert.deepEqual([ruleExprs(s.get(canary)), ruleExprs(s.get(fleet))], [[], []]);
        const n = (await call(t.app, 'GET', '/api/notifications', { key })).body as { kind: string; message: string }[];
        const halted = n.filter((x) => x.kind === 'rollout_halted');
        assert.equal(halted.length, 1);
        assert.match(halted[0]!.message, /^Rollout halted: the change \(custom rule .*\) was not seen to hold: "canary" sent no report .*check that the canary's agent is connected/);
        // Once halted, neither the watch nor a late report changes it.
        assert.equal(await recordRolloutReport(ctx, canary, batch(domain, 10, 0)), 'none');
        await watchBakes(ctx);
        assert.equal((await call(t.app, 'GET', '/api/notifications', { key })).body.filter((x: { kind: string }) => x.kind === 'rollout_halted').length, 1);
      } finally {
        t.clock.set(new Date());
      }
    });
  });
}
