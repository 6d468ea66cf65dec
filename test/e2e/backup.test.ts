// Versions, backups and restores as an operator meets them, through the built `rampart`: the
// version, `rampart admin backup --out` from a running control plane, `rampart restore` into an
// empty embedded database and into PostgreSQL (the move from one to the other), and control planes
// started on the restored databases answering with the same data.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { AGENT_PATH, CLOSE, protocolRefusal, PROTOCOL_VERSION } from '@rampart/protocol';
import { WebSocketServer } from 'ws';
import { startAgent } from '../support/cluster.js';
import { freshPostgresSchema } from '../support/postgres.js';
import { CLI, freePort, ROOT, startServe, waitFor } from '../support/processes.js';

const ADMIN = 'backup-e2e-admin-token';

/** One run of the built command: its exit code and output. */
function rampart(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-backup-e2e-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function api(url: string, path: string, init: { key?: string; body?: unknown; admin?: boolean } = {}) {
  const headers: Record<string, string> = {};
  if (init.key) headers['x-api-key'] = init.key;
  if (init.admin) headers.authorization = `Bearer ${ADMIN}`;
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url + path, { method: init.body === undefined ? 'GET' : 'POST', headers, body: init.body === undefined ? undefined : JSON.stringify(init.body) });
  return { status: res.status, body: (await res.json()) as any };
}

/**
 * What the tests compare: the account's domains and rules as the API shows them, and its servers'
 * stored fields (a control plane's health cycle writes its own verdict on the servers as it starts).
 */
async function accountView(url: string, key: string) {
  const [domains, servers, rules, account] = await Promise.all([
    api(url, '/api/domains', { key }),
    api(url, '/api/servers', { key }),
    api(url, '/api/waf', { key }),
    api(url, '/api/account', { key }),
  ]);
  assert.equal(domains.status, 200, JSON.stringify(domains.body));
  const stored = (s: Record<string, unknown>) => ({
    id: s.id,
    name: s.name,
    desiredRevision: s.desiredRevision,
    appliedRevision: s.appliedRevision,
    createdAt: s.createdAt,
    agentVersion: s.agentVersion,
  });
  return { domains: domains.body, servers: servers.body.map(stored), rules: rules.body, balance: account.body.balance };
}

describe('versions, backup and restore through the built rampart', () => {
  test('rampart --version prints the version of the root package.json', async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const r = await rampart(['--version']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${version}\n`);
  });

  test("a real agent's version is stored and shown per server; an agent a control plane cannot speak to logs both versions", async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const dir = tempDir();
    const cp = await startServe({ port: await freePort(), dataDir: join(dir, 'cp'), adminToken: ADMIN });
    after(() => cp.stop());
    const key = (await api(cp.url, '/admin/accounts', { admin: true, body: { email: 'versions@example.com', plan: 'pro' } })).body.apiKey as string;
    const server = await api(cp.url, '/api/servers', { key, body: { name: 'edge-v' } });
    const agent = await startAgent({ serverUrl: cp.url, token: server.body.connectionToken, dataDir: join(dir, 'agent') });
    after(() => agent.stop());
    const seen = await waitFor(async () => (await api(cp.url, '/api/servers', { key })).body.find((s: { agentVersion: string | null }) => s.agentVersion), 'the agent version stored', 30_000);
    assert.equal(seen.agentVersion, version);
    assert.equal(seen.agentRefused, null);
    await agent.stop();

    // A control plane of a newer protocol refuses this agent: the agent's log names both versions.
    const port = await freePort();
    const newer = new WebSocketServer({ host: '127.0.0.1', port, path: AGENT_PATH });
    after(() => new Promise<void>((r) => newer.close(() => r())));
    newer.on('connection', (ws) =>
      ws.once('message', (data) => {
        const hello = JSON.parse(data.toString()) as { payload: { protocol: number; agentVersion: string } };
        ws.close(CLOSE.protocolMismatch, protocolRefusal(hello.payload, { protocol: PROTOCOL_VERSION + 1, version: '9.0.0' }));
      }),
    );
    const refused = await startAgent({ serverUrl: `http://127.0.0.1:${port}`, token: 'rmps_test', dataDir: join(dir, 'agent2') });
    after(() => refused.stop());
    const line = await waitFor(
      () =>
        refused
          .output()
          .split('\n')
          .find((l) => l.includes('refused this agent')),
      'the refusal in the agent log',
      30_000,
    );
    for (const part of [`rampart ${version}, protocol ${PROTOCOL_VERSION}`, 'control plane rampart 9.0.0', `protocol ${PROTOCOL_VERSION + 1}`, 'upgrade the agent']) {
      assert.ok(line.includes(part), `the agent's log line names ${part}: ${line}`);
    }
  });

  test('a backup of a running embedded control plane restores into an empty embedded database and into PostgreSQL, and both serve the same data', async () => {
    const dir = tempDir();
    const source = await startServe({ port: await freePort(), dataDir: join(dir, 'source'), adminToken: ADMIN });
    after(() => source.stop());
    const account = await api(source.url, '/admin/accounts', { admin: true, body: { email: 'backup@example.com', plan: 'pro', balance: 12.5 } });
    assert.equal(account.status, 201, JSON.stringify(account.body));
    const key = account.body.apiKey as string;
    const server = await api(source.url, '/api/servers', { key, body: { name: 'edge-1' } });
    const domain = await api(source.url, '/api/domains', { key, body: { domain: 'shop.example.com', origins: [{ ip: '192.0.2.7', port: 8080 }], serverIds: [server.body.id], sslEnabled: false } });
    assert.equal(domain.status, 201, JSON.stringify(domain.body));
    await api(source.url, '/api/waf', { key, body: { rule_type: 'block_country', value: 'FR' } });
    const before = await accountView(source.url, key);

    const file = join(dir, 'rampart.backup.gz');
    const refused = await rampart(['admin', 'backup', '--out', file, '--url', source.url, '--admin-token', 'wrong']);
    assert.equal(refused.code, 1, 'a wrong operator token gets no backup');
    const taken = await rampart(['admin', 'backup', '--out', file, '--url', source.url], { RAMPART_ADMIN_TOKEN: ADMIN });
    assert.equal(taken.code, 0, taken.stdout + taken.stderr);
    const summary = JSON.parse(taken.stdout) as { file: string; rows: number; tables: number; schemaVersion: string };
    assert.equal(summary.file, file);
    assert.ok(summary.rows > 0 && summary.tables > 10, taken.stdout);
    assert.equal(statSync(file).mode & 0o777, 0o600, 'the backup holds password hashes and secrets: owner only');
    // The control plane went on serving while the backup was taken, and still does.
    assert.deepEqual(await accountView(source.url, key), before);

    const embedded = join(dir, 'restored');
    const restored = await rampart(['restore', '--in', file, '--data-dir', embedded]);
    assert.equal(restored.code, 0, restored.stdout + restored.stderr);
    assert.equal(JSON.parse(restored.stdout).rows, summary.rows);
    const again = await rampart(['restore', '--in', file, '--data-dir', embedded]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /not empty .*--force/);
    const forced = await rampart(['restore', '--in', file, '--data-dir', embedded, '--force']);
    assert.equal(forced.code, 0, forced.stderr);

    const fromEmbedded = await startServe({ port: await freePort(), dataDir: embedded, adminToken: ADMIN });
    after(() => fromEmbedded.stop());
    assert.deepEqual(await accountView(fromEmbedded.url, key), before);

    const pgUrl = await freshPostgresSchema('restore');
    if (!pgUrl) return; // no PostgreSQL here: the embedded half stands alone
    const intoPg = await rampart(['restore', '--in', file, '--database-url', pgUrl]);
    assert.equal(intoPg.code, 0, intoPg.stdout + intoPg.stderr);
    const fromPg = await startServe({ port: await freePort(), databaseUrl: pgUrl, adminToken: ADMIN });
    after(() => fromPg.stop());
    assert.deepEqual(await accountView(fromPg.url, key), before);
  });

  test('a control plane whose migration fails exits naming the migration and the copy, and leaves the embedded database as it was', async () => {
    // The previous release's database (packages/server/test/fixtures/upgrade), in which the column
    // that 0020_agent_version adds already exists: that migration fails, for real.
    const fixture = readFileSync(join(ROOT, 'packages/server/test/fixtures/upgrade/previous-release.sql'), 'utf8');
    const dataDir = join(tempDir(), 'server');
    const lite = new PGlite(dataDir);
    await lite.exec(fixture);
    await lite.exec('alter table servers add column agent_version text');
    const before = (await lite.query<{ name: string }>('select name from kysely_migration order by name')).rows;
    await lite.close();

    const r = await rampart(['serve', '--port', String(await freePort()), '--data-dir', dataDir], { RAMPART_ADMIN_TOKEN: ADMIN, RAMPART_CRAWLER_RANGES: 'off' });
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /^rampart: migration 0020_agent_version failed: .*agent_version.*already exists/m);
    const copy = /a copy taken before migrating is in (\S+)$/m.exec(r.stderr)?.[1];
    assert.ok(copy && copy.startsWith(`${dataDir}.before-`), r.stderr);
    assert.ok(r.stderr.includes(`The database in ${dataDir} is left as it was`), r.stderr);

    for (const dir of [dataDir, copy]) {
      const db = new PGlite(dir);
      assert.deepEqual((await db.query<{ name: string }>('select name from kysely_migration order by name')).rows, before, `${dir} holds the previous release's schema`);
      assert.deepEqual((await db.query<{ domain: string }>('select domain from domains')).rows, [{ domain: 'shop.fixture.example' }]);
      await db.close();
    }
  });

  test('restore names what is missing or wrong', async () => {
    const dir = tempDir();
    const missing = await rampart(['restore', '--data-dir', join(dir, 'x')]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--in FILE/);
    const both = await rampart(['restore', '--in', 'f', '--data-dir', 'd', '--database-url', 'postgres://x']);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /not both/);
    const noFile = await rampart(['restore', '--in', join(dir, 'absent.gz'), '--data-dir', join(dir, 'y')]);
    assert.equal(noFile.code, 1);
    assert.match(noFile.stderr, /ENOENT|no such file/);
  });
});
