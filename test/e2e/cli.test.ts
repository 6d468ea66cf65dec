// The command line as a user meets it: every flag a command's --help names is in docs/cli.md's
// command table (and the other way round), and bad flag values are refused with the flag named.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CLI, freePort, ROOT, startServe } from '../support/processes.js';

const run = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 20_000 });
const flagsIn = (text: string) => new Set([...text.matchAll(/(?<![\w-])--[a-z][a-z-]*[a-z]/g)].map((m) => m[0]).filter((f) => f !== '--help'));

describe('rampart command line', () => {
  const doc = readFileSync(`${ROOT}docs/cli.md`, 'utf8');
  for (const command of ['up', 'serve', 'agent', 'admin', 'restore', 'export', 'apply']) {
    test(`docs/cli.md's row for \`rampart ${command}\` names exactly the flags of its --help`, () => {
      const help = run(command, '--help');
      assert.equal(help.status, 0, help.stderr);
      const row = doc.split('\n').find((l) => l.startsWith(`| \`rampart ${command} `));
      assert.ok(row, `docs/cli.md has a row for rampart ${command}`);
      assert.deepEqual([...flagsIn(row)].sort(), [...flagsIn(help.stdout)].sort());
    });
  }

  const refused: [string[], RegExp][] = [
    [['--nbthread', '0'], /--nbthread must be a whole number from 1 to 64/],
    [['--renew-before-days', 'x'], /--renew-before-days must be a whole number from 1 to 3650/],
    [['--resolver', '8.8.8.8'], /--resolver must be IP:PORT/],
    [['--acme-directory', 'ftp://x'], /--acme-directory must be an http\(s\) URL/],
    [['--acme-email', 'not an email'], /--acme-email must be an email address/],
  ];
  for (const [args, message] of refused) {
    test(`agent ${args.join(' ')} is refused, naming the flag`, () => {
      const r = run('agent', '--server', 'ws://127.0.0.1:9/agent', '--token', 't', ...args);
      assert.equal(r.status, 2);
      assert.match(r.stderr, message);
    });
  }
});

// Configuration as code (docs/config-as-code.md), through the built CLI against a real `rampart
// serve`: a file with every kind of object applied into an empty account, exported, applied into
// another empty account and exported again (the same text), applied twice (no changes), a dry run
// (nothing changes), --prune, an invalid file (refused whole, with lines), a frozen account.
describe('rampart export and apply', () => {
  const ADMIN = 'e2e-admin-token';
  const dir = mkdtempSync(join(tmpdir(), 'rampart-e2e-config-'));
  let serve: Awaited<ReturnType<typeof startServe>>;
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };
  const account = async (plan: string, balance: number) => {
    const res = await fetch(`${serve.url}/admin/accounts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ email: `config-${Math.random().toString(16).slice(2)}@example.com`, plan, balance }),
    });
    return (await res.json()) as { accountId: string; apiKey: string };
  };
  const get = async (key: string, path: string) => (await fetch(serve.url + path, { headers: { 'x-api-key': key } })).json() as Promise<any>;
  // Spawned, not spawnSync: the test's own requests and timers keep running meanwhile.
  const cli = (key: string, ...args: string[]) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, RAMPART_URL: serve.url, RAMPART_API_KEY: key, RAMPART_WEBHOOK_SECRET: 'e2e-webhook-secret-0123' } });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (status) => resolve({ status, stdout, stderr }));
    });
  const body = (yaml: string) => yaml.replace(/^#.*\n/gm, '');

  const FULL = `version: 1
servers:
  - name: edge-1
    publicIp: 203.0.113.10
  - name: edge-2
domains:
  - domain: www.example.com
    origins: ["192.0.2.10:8080", "[2001:db8::10]:8080"]
    servers: [edge-1, edge-2]
    sslEnabled: false
    wafEnabled: true
    wafLevel: high
    wafMode: detect
    wafCompressedBodies: allow
  - domain: api.example.com
    origins: ["192.0.2.11:80"]
    servers: [edge-2]
    wafEnabled: false
wafRules:
  - { type: block_ip, value: 203.0.113.0/24 }
  - { type: allow_ip, value: 192.0.2.0/24, enabled: false }
  - { type: block_country, value: KP, domain: www.example.com, priority: 10 }
  - { type: rate_limit, value: { requests_per_minute: 120 } }
  - { type: block_bot, value: { enabled: true, difficulty: 16 } }
  - { type: block_ai_bot, value: GPTBot, domain: api.example.com }
  - { type: waf_exception, value: { path: /comments, location: "body:content", detector: xss }, domain: www.example.com }
customRules:
  - name: admin from the office
    expression: starts_with(http.request.uri.path, "/wp-admin") and not ip.src in {192.0.2.0/24}
    action: block
    priority: 5
  - name: api limit
    domain: api.example.com
    expression: http.request.uri.path contains "/api"
    action: rate_limit
    rateLimit: { requests: 100, period: 60, characteristics: [ip], mitigation: challenge, duration: 120 }
    enabled: false
notifications:
  webhookUrl: http://127.0.0.1:9/hook
  kinds: [server_down, account_frozen]
`;

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN, env: { RAMPART_SECRET_KEY: 'e2e-secret-key-0123456789abcdef', RAMPART_ALLOW_PRIVATE_WEBHOOKS: '1' } });
  });
  after(async () => {
    await serve?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('every kind of object round-trips: apply into an empty account, export, apply into another, export again is the same', async () => {
    const a = await account('pro', 100);
    const applied = await cli(a.apiKey, 'apply', '-f', file('full.yaml', FULL));
    assert.equal(applied.status, 0, applied.stderr);
    assert.match(applied.stdout, /\+ server edge-1\n/);
    assert.match(applied.stdout, /\+ waf rule block_country KP \(www\.example\.com\)\n/);
    assert.match(applied.stdout, /Plan: 13 to create, 1 to change, 0 to delete\./);
    assert.equal([...applied.stdout.matchAll(/^  rmps_[0-9a-f]{64}$/gm)].length, 2, "each created server's connection token, once");
    const servers = await get(a.apiKey, '/api/servers');
    const domains = await get(a.apiKey, '/api/domains');
    assert.deepEqual(servers.map((s: any) => `${s.name} ${s.publicIp}`).sort(), ['edge-1 203.0.113.10', 'edge-2 null']);
    const www = domains.find((d: any) => d.domain === 'www.example.com');
    assert.deepEqual([www.wafLevel, www.wafMode, www.wafCompressedBodies, www.sslEnabled, www.serverIds.length], ['high', 'detect', 'allow', false, 2]);
    assert.equal((await get(a.apiKey, '/api/waf')).length, 7);
    assert.equal((await get(a.apiKey, '/api/rules')).length, 2);
    assert.equal((await get(a.apiKey, '/api/settings/notifications')).webhookSecretSet, true);

    const exported = await cli(a.apiKey, 'export');
    assert.equal(exported.status, 0, exported.stderr);
    assert.doesNotMatch(exported.stdout, /rmps_|rmpk_|secret-0123|[0-9a-f]{8}-[0-9a-f]{4}-/);
    const b = await account('pro', 100);
    const intoB = await cli(b.apiKey, 'apply', '-f', file('exported.yaml', exported.stdout));
    assert.equal(intoB.status, 0, intoB.stderr);
    const again = await cli(b.apiKey, 'export', '-o', join(dir, 'again.yaml'));
    assert.equal(again.status, 0, again.stderr);
    assert.equal(body(readFileSync(join(dir, 'again.yaml'), 'utf8')), body(exported.stdout));

    const twice = await cli(b.apiKey, 'apply', '-f', join(dir, 'exported.yaml'));
    assert.equal(twice.status, 0, twice.stderr);
    assert.match(twice.stdout, /^No changes\./);

    // A change and a removal: the dry run only prints; without --prune the removed domain is kept; with it, deleted.
    const edited = file(
      'edited.yaml',
      exported.stdout
        .replace('wafLevel: high', 'wafLevel: low')
        .replace(/  - domain: api\.example\.com\n(    .*\n)+/, '')
        .replace(/  - type: block_ai_bot\n(    .*\n)+/, '')
        .replace(/  - name: api limit\n(    .*\n|      .*\n)+/, ''),
    );
    const dry = await cli(b.apiKey, 'apply', '-f', edited, '--dry-run', '--prune');
    assert.equal(dry.status, 0, dry.stderr);
    assert.match(dry.stdout, /  ~ domain www\.example\.com\n      wafLevel: "high" -> "low"\n/);
    assert.match(dry.stdout, /  - domain api\.example\.com\n/);
    assert.match(dry.stdout, /Dry run: nothing was applied\./);
    assert.equal(body((await cli(b.apiKey, 'export')).stdout), body(exported.stdout));
    const kept = await cli(b.apiKey, 'apply', '-f', edited);
    assert.equal(kept.status, 0, kept.stderr);
    assert.match(kept.stdout, /Plan: 0 to create, 1 to change, 0 to delete\.\n3 object\(s\) of the account are not in the file and are kept/);
    assert.ok((await get(b.apiKey, '/api/domains')).some((d: any) => d.domain === 'api.example.com'));
    const pruned = await cli(b.apiKey, 'apply', '-f', edited, '--prune');
    assert.equal(pruned.status, 0, pruned.stderr);
    assert.match(pruned.stdout, /0 created, 0 changed, 3 deleted/);
    assert.deepEqual(
      (await get(b.apiKey, '/api/domains')).map((d: any) => d.domain),
      ['www.example.com'],
    );
    assert.match((await cli(b.apiKey, 'apply', '-f', edited, '--prune')).stdout, /^No changes\./);

    // An invalid file: every error with its line and field, and nothing applied.
    const before = (await cli(b.apiKey, 'export')).stdout;
    const invalid = await cli(b.apiKey, 'apply', '-f', file('invalid.yaml', FULL.replace('wafLevel: high', 'wafLevel: extreme').replace('"192.0.2.11:80"', '"192.0.2.11:99999"')), '--prune');
    assert.equal(invalid.status, 1);
    assert.match(invalid.stderr, /not a valid configuration \(2 error\(s\)\); nothing was applied/);
    assert.match(invalid.stderr, /line 12, column 15: domains\[0\]\.wafLevel: must be one of low, medium, high/);
    assert.match(invalid.stderr, /line 16, column 15: domains\[1\]\.origins\[0\]: must be IP:PORT/);
    assert.equal((await cli(b.apiKey, 'export')).stdout, before);
  });

  test("a frozen account's apply is refused and nothing is applied", async () => {
    const frozen = await account('pro', 0);
    await fetch(`${serve.url}/admin/billing/charge`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ accountId: frozen.accountId }),
    });
    assert.equal((await get(frozen.apiKey, '/api/account')).state, 'frozen');
    const r = await cli(frozen.apiKey, 'apply', '-f', file('frozen.yaml', FULL));
    assert.equal(r.status, 1);
    assert.match(r.stderr, /nothing was applied:\n  account is frozen, renew the plan to make changes/);
    assert.deepEqual(await get(frozen.apiKey, '/api/servers'), []);
    // Reads work while frozen: the export too.
    assert.equal((await cli(frozen.apiKey, 'export')).status, 0);
  });
});
