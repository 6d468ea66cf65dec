import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { freePort, startServe } from '../support/processes.js';

const ADMIN = 'e2e-admin-token';

async function api(url: string, method: string, path: string, key: string | null, body?: unknown) {
  const headers: Record<string, string> = key ? { 'x-api-key': key } : { authorization: `Bearer ${ADMIN}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url + path, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  return { status: res.status, body: (await res.json()) as any };
}

test('data survives a restart of rampart serve on the same data directory', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-restart-'));
  after(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();

  let server = await startServe({ port, dataDir, adminToken: ADMIN });
  const acct = await api(server.url, 'POST', '/admin/accounts', null, { email: 'restart@example.com', plan: 'pro', balance: 40 });
  assert.equal(acct.status, 201);
  const key = acct.body.apiKey as string;
  const srv = await api(server.url, 'POST', '/api/servers', key, { name: 'edge-1' });
  const dom = await api(server.url, 'POST', '/api/domains', key, {
    domain: 'persist.example.com',
    origins: [{ ip: '127.0.0.1', port: 9000 }],
    serverIds: [srv.body.id],
    sslEnabled: false,
  });
  assert.equal(dom.status, 201);
  const rule = await api(server.url, 'POST', '/api/waf', key, { rule_type: 'block_ip', value: '203.0.113.0/24' });
  assert.equal(rule.status, 201);
  assert.equal(await server.stop('SIGTERM'), 0, server.output());

  server = await startServe({ port, dataDir, adminToken: ADMIN });
  after(() => server.stop());
  const domains = await api(server.url, 'GET', '/api/domains', key);
  assert.equal(domains.status, 200, 'the API key still authenticates after the restart');
  assert.deepEqual(
    domains.body.map((d: any) => [d.domain, d.serverIds]),
    [['persist.example.com', [srv.body.id]]],
  );
  const rules = await api(server.url, 'GET', '/api/waf', key);
  assert.deepEqual(
    rules.body.map((r: any) => r.value),
    ['203.0.113.0/24'],
  );
  const account = await api(server.url, 'GET', '/api/account', key);
  assert.equal(account.body.balance, 40);
  const servers = await api(server.url, 'GET', '/api/servers', key);
  assert.equal(servers.body[0].desiredRevision, 3);
});
