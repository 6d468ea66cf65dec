import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { apiClient, ADMIN, settle, startAgent, startOrigin, steadyLoad, viaProxy, waitForOrigin, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freshPostgresSchema } from '../support/postgres.js';
import { CLI, freePort, startProcess, waitFor, type Proc } from '../support/processes.js';

// SPEC, billing: an account whose automatic monthly charge finds the balance short is frozen.
// While frozen, mutations answer 403 (origins of existing domains excepted), reads work, and the
// shield servers keep running what they have: no stop, no snapshot without the domains, the WAF
// rules keep blocking. A confirmed deposit makes it active within seconds, no manual step.
// docs/billing.md, "Frozen accounts". Real processes: `rampart serve` on PostgreSQL (so the test
// can move the due date into the past), an agent with HAProxy, two origins.

const FROZEN = { error: 'account is frozen, renew the plan to make changes' };
const HOST = 'frozen.example.test';
const BLOCKED_FROM = '127.0.10.5'; // in the block_ip rule made while active
const BLOCKED_LATER = '127.0.12.5'; // in the rule made after the renewal

const url = await freshPostgresSchema('e2e_frozen');

describe('a frozen account at the edge', { skip: url ? false : 'no PostgreSQL answers (set RAMPART_TEST_DATABASE_URL)' }, () => {
  let serve: Proc & { url: string };
  let api: ApiClient;
  let agent: AgentProc;
  let accountId = '';
  let domainId = '';
  let serverId = '';
  let agentLogAtFreeze = 0;
  const origins: Awaited<ReturnType<typeof startOrigin>>[] = [];
  const db = new pg.Client({ connectionString: url });
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-e2e-frozen-'));

  const account = async () => (await api.call('GET', '/api/account')).body as { state: string; balance: number };
  const server = async () => ((await api.call('GET', '/api/servers')).body as { id: string; status: string; desiredRevision: number; appliedRevision: number }[]).find((s) => s.id === serverId)!;

  before(async () => {
    const port = await freePort();
    // The charge job every 200 ms (RAMPART_BILLING_INTERVAL), so the freeze comes from it.
    const proc = startProcess(process.execPath, [CLI, 'serve', '--port', String(port), '--database-url', url!, '--data-dir', dataDir], {
      RAMPART_ADMIN_TOKEN: ADMIN,
      RAMPART_LOG_LEVEL: 'warn',
      RAMPART_BILLING_INTERVAL: '0.2',
    });
    serve = { ...proc, url: `http://127.0.0.1:${port}` };
    await waitFor(
      async () => {
        if (proc.child.exitCode !== null) throw new Error(`rampart serve exited: ${proc.output()}`);
        return (await fetch(`${serve.url}/healthz`)).ok;
      },
      'rampart serve to answer',
      60_000,
    );
    await db.connect();
    api = await apiClient(serve.url);
    accountId = (await api.call('GET', '/api/account')).body.id;
    const srv = await api.call('POST', '/api/servers', { name: 'edge-frozen' });
    serverId = srv.body.id;
    origins.push(await startOrigin('a'), await startOrigin('b'));
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: [serverId], sslEnabled: false });
    assert.equal(d.status, 201);
    domainId = d.body.id;
    assert.equal((await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: '127.0.10.0/24' })).status, 201);
    await waitForOrigin(agent.httpPort, HOST, 'a');
    await waitFor(async () => (await viaProxy(agent.httpPort, HOST, '/', {}, BLOCKED_FROM)).status === 403, 'the block rule to reach the agent');
    await settle(api);
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    const schema = url && new URL(url).searchParams.get('options')?.replace('-c search_path=', '');
    if (schema) await db.query(`drop schema if exists ${schema} cascade`).catch(() => {});
    await db.end().catch(() => {});
    await Promise.all(origins.map((o) => o.close()));
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('the charge job freezes the account; the edge keeps serving, nothing is sent to the agent', async () => {
    const before = await server();
    assert.equal(before.appliedRevision, before.desiredRevision);
    const load = steadyLoad(agent.httpPort, HOST, { workers: 2, expect: (r) => r.status === 200 && JSON.parse(r.text).origin === 'a' });
    agentLogAtFreeze = agent.output().length;
    // The balance short of the $29 price (an operator's debit), the due date past (a test-only write).
    const debit = await fetch(`${serve.url}/admin/accounts/${accountId}/adjustments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ amount: -90 }),
    });
    assert.equal(debit.status, 201);
    await db.query(`update accounts set next_charge_at = now() - interval '1 minute' where id = $1`, [accountId]);
    await waitFor(async () => (await account()).state === 'frozen', 'the charge job to freeze the account', 10_000);
    assert.equal((await account()).balance, 10);
    const notes = (await api.call('GET', '/api/notifications')).body as { kind: string; message: string }[];
    assert.match(notes.find((n) => n.kind === 'account_frozen')!.message, /Deposit at least \$19\.00/);
    // A while of traffic after the freeze, then the same configuration everywhere.
    const okAtFreeze = load.stats.ok;
    const stats = await waitFor(async () => (load.stats.ok > okAtFreeze + 40 ? load.stop() : undefined), 'traffic after the freeze');
    assert.equal(stats.failed, 0, `failed requests while frozen: ${stats.errors.join(' | ')}`);
    const after = await server();
    assert.equal(after.status, 'active', 'the agent is still connected');
    assert.equal(after.desiredRevision, before.desiredRevision, 'freezing pushes nothing');
    assert.equal(after.appliedRevision, before.appliedRevision);
    assert.equal(agent.child.exitCode, null);
  });

  test('traffic still reaches the origin and the WAF rule still blocks', async () => {
    const ok = await viaProxy(agent.httpPort, HOST);
    assert.equal(ok.status, 200);
    assert.equal(JSON.parse(ok.text).origin, 'a');
    assert.equal((await viaProxy(agent.httpPort, HOST, '/', {}, BLOCKED_FROM)).status, 403);
  });

  test('mutations answer 403 with the SPEC message; reads work', async () => {
    for (const [method, path, body] of [
      ['POST', '/api/waf', { rule_type: 'block_ip', value: '127.0.12.0/24' }],
      ['POST', '/api/domains', { domain: 'other.example.test', origins: [{ ip: '127.0.0.1', port: origins[0]!.port }], serverIds: [serverId] }],
      ['PUT', `/api/domains/${domainId}`, { wafLevel: 'high' }],
      ['DELETE', `/api/domains/${domainId}`, undefined],
      ['PUT', '/api/account/plan', { plan: 'enterprise' }],
    ] as const) {
      const r = await api.call(method, path, body);
      assert.equal(r.status, 403, `${method} ${path}`);
      assert.deepEqual(r.body, FROZEN);
    }
    for (const path of ['/api/account', '/api/domains', '/api/waf', '/api/servers', '/api/billing/transactions']) {
      assert.equal((await api.call('GET', path)).status, 200, path);
    }
  });

  test('an origin change is still allowed and reaches the agent; that is the only configuration sent', async () => {
    assert.doesNotMatch(agent.output().slice(agentLogAtFreeze), /applied revision|closed the connection/, 'nothing applied while frozen');
    const r = await api.call('PUT', `/api/domains/${domainId}`, { origins: [{ ip: '127.0.0.1', port: origins[1]!.port }] });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    await waitForOrigin(agent.httpPort, HOST, 'b');
    assert.equal((await viaProxy(agent.httpPort, HOST, '/', {}, BLOCKED_FROM)).status, 403, 'the rule is in the new configuration too');
    const applied = () =>
      (
        agent
          .output()
          .slice(agentLogAtFreeze)
          .match(/applied revision/g) ?? []
      ).length;
    await waitFor(() => applied() > 0, "the agent's log of the apply"); // its output arrives through a pipe
    assert.equal(applied(), 1);
  });

  test('a confirmed deposit makes the account active within seconds, and a new WAF rule reaches the agent', async () => {
    const d = await api.call('POST', '/api/billing/deposits', { amount: 50 });
    assert.equal(d.status, 201);
    const confirmed = await fetch(`${serve.url}/admin/deposits/${d.body.id}/confirm`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
    assert.equal(confirmed.status, 200);
    const started = Date.now();
    await waitFor(async () => (await account()).state === 'active', 'the account to be active', 5_000);
    assert.ok(Date.now() - started < 5_000);
    assert.equal((await account()).balance, 10 + 50 - 29);
    const rule = await api.call('POST', '/api/waf', { rule_type: 'block_ip', value: '127.0.12.0/24' });
    assert.equal(rule.status, 201, JSON.stringify(rule.body));
    await waitFor(async () => (await viaProxy(agent.httpPort, HOST, '/', {}, BLOCKED_LATER)).status === 403, 'the new rule to block at the edge', 15_000);
    const ok = await viaProxy(agent.httpPort, HOST);
    assert.equal(JSON.parse(ok.text).origin, 'b');
  });
});
