import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { verifyWebhook } from '../../packages/server/src/delivery/webhook.js';
import { FakeAgent } from '../../packages/server/test/fake-agent.js';
import { apiClient, ADMIN } from '../support/cluster.js';
import { CLI, freePort, startServe, waitFor } from '../support/processes.js';
import { webhookReceiver } from '../support/receivers.js';

// Rotating RAMPART_SECRET_KEY as docs/operations.md says: stop the control plane, `rampart rekey`
// with the current and the new key in the environment, start it with the new key. A webhook secret
// stored under the old key still signs deliveries afterwards; a wrong current key changes nothing.

const OLD_KEY = 'the-old-secret-key-0123456789';
const NEW_KEY = 'the-new-secret-key-9876543210';
const SECRET = 'e2e-webhook-secret-0123456789';

describe('rampart rekey', async () => {
  const hook = await webhookReceiver();
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-rekey-'));
  after(() => rmSync(dataDir, { recursive: true, force: true }));
  const env = { RAMPART_ALLOW_PRIVATE_WEBHOOKS: '1', RAMPART_DELIVERY_INTERVAL_MS: '200' };
  const rekey = (current: string) =>
    spawnSync(process.execPath, [CLI, 'rekey', '--data-dir', dataDir], { encoding: 'utf8', env: { ...process.env, RAMPART_SECRET_KEY: current, RAMPART_NEW_SECRET_KEY: NEW_KEY } });

  test('a webhook secret stored under the old key signs deliveries under the new one', async () => {
    const port = await freePort();
    let serve = await startServe({ port, dataDir, adminToken: ADMIN, env: { ...env, RAMPART_SECRET_KEY: OLD_KEY } });
    const api = await apiClient(serve.url);
    const put = await api.call('PUT', '/api/settings/notifications', { webhookUrl: `${hook.url}/rampart`, webhookSecret: SECRET, kinds: ['proxy_crash'] });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const server = await api.call('POST', '/api/servers', { name: 'edge-rekey' });
    await serve.stop();

    const wrong = rekey('not-the-current-key-at-all');
    assert.equal(wrong.status, 1);
    assert.match(wrong.stderr, /notification_settings of account .*neither the current RAMPART_SECRET_KEY nor the new one decrypts it; nothing was changed/);
    const done = rekey(OLD_KEY);
    assert.equal(done.status, 0, done.stderr);
    assert.deepEqual(JSON.parse(done.stdout), { reencrypted: { notification_settings: 1, dns_settings: 0 }, alreadyNew: 0 });
    assert.ok(!done.stdout.includes(NEW_KEY) && !done.stdout.includes(OLD_KEY));

    serve = await startServe({ port, dataDir, adminToken: ADMIN, env: { ...env, RAMPART_SECRET_KEY: NEW_KEY } });
    try {
      const agent = await FakeAgent.connect(`${serve.url.replace(/^http/, 'ws')}/agent`, server.body.connectionToken);
      agent.send({ type: 'status/report', payload: { kind: 'proxy_crash', message: 'HAProxy exited; restarted' } });
      const delivered = await waitFor(() => hook.requests.find((r) => r.url === '/rampart'), 'the webhook delivery', 15_000);
      agent.close();
      assert.ok(verifyWebhook(SECRET, delivered.headers, delivered.body, Math.floor(Date.now() / 1000)), 'signed with the same secret');
    } finally {
      await serve.stop();
    }
  });
});
