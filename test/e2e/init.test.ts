// `rampart init server|agent` and the agent's --server check, as processes of the built CLI. The
// configuration directory is a temporary one (RAMPART_CONFIG_DIR) instead of /etc/rampart; the
// package's end-to-end test (package.test.ts) runs them where the package is installed.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { CLI } from '../support/processes.js';

const TOKEN = `rst_${'ab12'.repeat(16)}`;

describe('rampart init', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-etc-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const run = (args: string[], input = '', env: Record<string, string> = {}) =>
    spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', input, timeout: 20_000, env: { ...process.env, RAMPART_CONFIG_DIR: dir, ...env } });

  test('init server writes server.env 0600 with a new operator token and secret key, prints neither, and keeps it on a second run', () => {
    const first = run(['init', 'server', '--public-url', 'https://rampart.example.com', '--database-url', 'postgres://rampart@db.internal/rampart']);
    assert.equal(first.status, 0, first.stderr);
    const path = join(dir, 'server.env');
    assert.equal(statSync(path).mode & 0o777, 0o600);
    const text = readFileSync(path, 'utf8');
    const token = /^RAMPART_ADMIN_TOKEN=([0-9a-f]{64})$/m.exec(text)?.[1];
    const key = /^RAMPART_SECRET_KEY=([A-Za-z0-9_-]{43})$/m.exec(text)?.[1];
    assert.ok(token && key, text);
    assert.match(text, /^DATABASE_URL=postgres:\/\/rampart@db\.internal\/rampart$/m);
    assert.match(text, /^RAMPART_PUBLIC_URL=https:\/\/rampart\.example\.com$/m);
    assert.ok(!first.stdout.includes(token) && !first.stdout.includes(key));
    assert.match(first.stdout, /Dashboard and API: https:\/\/rampart\.example\.com/);
    assert.match(first.stdout, /wss:\/\/rampart\.example\.com\/agent/);
    const second = run(['init', 'server']);
    assert.equal(second.status, 0, second.stderr);
    assert.match(second.stdout, /exists: kept/);
    assert.equal(readFileSync(path, 'utf8'), text);
  });

  test('init agent reads the token from standard input into agent.env 0600, never printing it', () => {
    const r = run(['init', 'agent', '--server', 'wss://rampart.example.com/agent'], `${TOKEN}\n`);
    assert.equal(r.status, 0, r.stderr);
    const path = join(dir, 'agent.env');
    assert.equal(statSync(path).mode & 0o777, 0o600);
    const text = readFileSync(path, 'utf8');
    assert.match(text, new RegExp(`^RAMPART_AGENT_TOKEN=${TOKEN}$`, 'm'));
    assert.match(text, /^RAMPART_SERVER_URL=wss:\/\/rampart\.example\.com\/agent$/m);
    assert.match(text, /^RAMPART_AGENT_OPTIONS=$/m);
    assert.ok(!r.stdout.includes(TOKEN) && !r.stderr.includes(TOKEN));
  });

  test('init agent refuses plain ws:// to another machine unless --insecure, and a missing or mangled token', () => {
    const plain = run(['init', 'agent', '--server', 'ws://203.0.113.7:8080/agent'], `${TOKEN}\n`);
    assert.equal(plain.status, 2);
    assert.match(plain.stderr, /in clear.*--insecure/);
    const insecure = run(['init', 'agent', '--server', 'ws://203.0.113.7:8080/agent', '--insecure'], `${TOKEN}\n`);
    assert.equal(insecure.status, 0, insecure.stderr);
    assert.match(readFileSync(join(dir, 'agent.env'), 'utf8'), /^RAMPART_AGENT_OPTIONS=--insecure$/m);
    assert.match(run(['init', 'agent', '--server', 'wss://r.example.com/agent'], '').stderr, /no connection token on standard input/);
    assert.match(run(['init', 'agent', '--server', 'wss://r.example.com/agent'], 'not a token; rm -rf /\n').stderr, /is not one/);
  });

  test('the agent itself refuses plain ws:// to another machine, naming --insecure, and warns about --token', () => {
    const plain = run(['agent', '--server', 'ws://203.0.113.7:8080/agent'], '', { RAMPART_AGENT_TOKEN: TOKEN });
    assert.equal(plain.status, 2);
    assert.match(plain.stderr, /--server ws:\/\/203\.0\.113\.7:8080 is plain WebSocket to another machine.*--insecure/);
    // (--nbthread 0 stops it right after the warning, before it starts.)
    const onCommandLine = run(['agent', '--server', 'ws://127.0.0.1:9/agent', '--token', TOKEN, '--nbthread', '0']);
    assert.match(onCommandLine.stderr, /warning: --token is visible to every user of this machine \(ps\); set RAMPART_AGENT_TOKEN instead/);
  });
});
