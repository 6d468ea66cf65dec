import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { verifyWebhook } from '../../packages/server/src/delivery/webhook.js';
import { notificationMessages } from '../../packages/server/src/services/notifications.js';
import { FakeAgent } from '../../packages/server/test/fake-agent.js';
import { apiClient, ADMIN, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';
import { mailText, smtpReceiver, webhookReceiver } from '../support/receivers.js';

// docs/notifications.md: `rampart serve` as a real process delivers a real notification (an
// agent's status report over the agent WebSocket) to a real HTTP receiver, signed, and to a real
// SMTP server; a receiver that answers 500 first gets it again, and the delivery log shows both
// attempts.

const SECRET = 'e2e-webhook-secret-0123456789';
const FROM = 'rampart@e2e.example';

type Delivery = { notificationId: string; kind: string; channel: string; target: string; status: string; attempts: number; lastStatus: number | null; lastError: string | null };

describe('notification delivery from rampart serve', async () => {
  // Made in the suite's body, not in a before hook: the receivers close when the suite ends.
  const hook = await webhookReceiver();
  const smtp = await smtpReceiver();
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: FakeAgent | undefined;

  before(async () => {
    serve = await startServe({
      port: await freePort(),
      adminToken: ADMIN,
      env: {
        RAMPART_ALLOW_PRIVATE_WEBHOOKS: '1', // the receiver is on 127.0.0.1
        RAMPART_SMTP_URL: smtp.url,
        RAMPART_SMTP_FROM: FROM,
        RAMPART_SECRET_KEY: 'e2e-secret-key-0123456789abcdef',
        RAMPART_DELIVERY_INTERVAL_MS: '500',
      },
    });
    api = await apiClient(serve.url);
  });
  after(async () => {
    agent?.close();
    await serve?.stop();
  });

  test("an agent's proxy_crash report reaches the webhook, signed, after one 500, and the e-mail address; the delivery log shows it", async () => {
    const settings = await api.call('PUT', '/api/settings/notifications', {
      webhookUrl: `${hook.url}/rampart?k=v`,
      webhookSecret: SECRET,
      email: 'oncall@example.com',
      kinds: ['proxy_crash'],
    });
    assert.equal(settings.status, 200, JSON.stringify(settings.body));
    assert.deepEqual(settings.body.webhookSecretSet, true);
    assert.ok(!JSON.stringify(settings.body).includes(SECRET));
    // The address is confirmed first: the token of the confirmation e-mail, with no credentials.
    assert.equal(settings.body.emailConfirmed, false);
    const confirmation = await waitFor(() => smtp.messages.find((m) => m.to.includes('oncall@example.com')), 'the confirmation e-mail', 5000, 10);
    const token = /^([A-Za-z0-9_-]{43})$/m.exec(mailText(confirmation.raw))![1]!;
    const confirmed = await fetch(`${serve.url}/api/settings/notifications/email/confirm`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
    assert.deepEqual([confirmed.status, await confirmed.json()], [200, { email: 'oncall@example.com' }]);

    const server = await api.call('POST', '/api/servers', { name: 'edge-notify' });
    assert.equal(server.status, 201);
    agent = await FakeAgent.connect(`${serve.url.replace(/^http/, 'ws')}/agent`, server.body.connectionToken);

    hook.statuses.push(500); // the first attempt fails
    const sent = Date.now();
    agent.send({ type: 'status/report', payload: { kind: 'proxy_crash', message: 'HAProxy exited with code 139; the agent restarted it on the last-known-good configuration' } });

    // The first attempt comes at once (the queueing kicks a delivery run), not at the next tick.
    await waitFor(() => hook.requests.length >= 1, 'the first webhook attempt', 5000, 10);
    assert.ok(Date.now() - sent < 2500, `the first attempt came after ${Date.now() - sent} ms`);
    const mail = await waitFor(() => smtp.messages.find((m) => m.to.includes('oncall@example.com') && m !== confirmation), 'the e-mail', 5000, 10);

    const list = (await api.call('GET', '/api/notifications')).body as { id: string; kind: string; message: string; serverId: string; createdAt: string }[];
    const n = list.find((x) => x.kind === 'proxy_crash')!;
    assert.ok(!list.some((x) => x.kind === 'server_error'), 'one crash, one notification (docs/notifications.md)');
    assert.equal(n.message, notificationMessages.fromAgent('proxy_crash', 'edge-notify', 'HAProxy exited with code 139; the agent restarted it on the last-known-good configuration'));

    const first = await waitFor(
      async () => {
        const log = (await api.call('GET', '/api/notifications/deliveries')).body as Delivery[];
        return log.find((d) => d.channel === 'webhook' && d.attempts === 1 && d.status === 'pending') && log;
      },
      'the failed attempt in the log',
      5000,
    );
    assert.deepEqual(
      first.map((d) => [d.notificationId, d.kind, d.channel]).sort(),
      [
        [n.id, 'proxy_crash', 'email'],
        [n.id, 'proxy_crash', 'webhook'],
      ],
      'one delivery per channel, for the kind chosen only',
    );
    const failed = first.find((d) => d.channel === 'webhook')!;
    assert.deepEqual([failed.lastStatus, failed.lastError, failed.target], [500, 'the receiver answered HTTP 500', `${hook.url}/rampart`]);

    // The retry comes within the first backoff ceiling (30 s) and succeeds.
    await waitFor(() => hook.requests.length >= 2, 'the retried webhook', 40_000, 50);
    const log = await waitFor(
      async () => {
        const l = (await api.call('GET', '/api/notifications/deliveries')).body as Delivery[];
        return l.every((d) => d.status === 'delivered') && l;
      },
      'both deliveries delivered',
      5000,
    );
    const byChannel = Object.fromEntries(log.map((d) => [d.channel, d]));
    assert.deepEqual([byChannel.webhook!.attempts, byChannel.webhook!.lastStatus, byChannel.webhook!.lastError], [2, 204, null]);
    assert.deepEqual([byChannel.email!.attempts, byChannel.email!.target], [1, 'oncall@example.com']);

    assert.equal(hook.requests.length, 2, 'no third attempt');
    const expectedBody = JSON.stringify({ id: n.id, kind: 'proxy_crash', message: n.message, serverId: server.body.id, domainId: null, createdAt: n.createdAt });
    for (const req of hook.requests) {
      assert.equal(req.method, 'POST');
      assert.equal(req.url, '/rampart?k=v');
      assert.equal(req.body, expectedBody);
      assert.ok(verifyWebhook(SECRET, req.headers, req.body, Math.floor(Date.now() / 1000)), 'a valid signature');
    }

    assert.equal(mail.from, FROM);
    const text = mailText(mail.raw);
    assert.ok(text.includes(n.message), text);
    assert.ok(text.includes(`notification ${n.id}, kind proxy_crash`));
    assert.ok(!mail.raw.includes(SECRET) && !JSON.stringify(log).includes(SECRET));
  });

  test("one account's burst towards a webhook that never answers does not delay another account's server_down", async () => {
    const held: import('node:http').ServerResponse[] = [];
    let answering = false;
    const dead = await webhookReceiver((_req, res) => void (answering ? res.writeHead(204).end() : held.push(res)));
    const live = await webhookReceiver();
    const a = await apiClient(serve.url);
    const b = await apiClient(serve.url);
    const agents: FakeAgent[] = [];
    try {
      assert.equal((await a.call('PUT', '/api/settings/notifications', { webhookUrl: `${dead.url}/a`, webhookSecret: SECRET })).status, 200);
      assert.equal((await b.call('PUT', '/api/settings/notifications', { webhookUrl: `${live.url}/b`, webhookSecret: SECRET })).status, 200);

      // A: three servers whose agents report crashes, one notification each (proxy_crash).
      for (let i = 0; i < 3; i++) {
        const server = await a.call('POST', '/api/servers', { name: `a-${i}` });
        agents.push(await FakeAgent.connect(`${serve.url.replace(/^http/, 'ws')}/agent`, server.body.connectionToken));
      }
      for (let round = 0; round < 8; round++) {
        for (const agent of agents) agent.send({ type: 'status/report', payload: { kind: 'proxy_crash', message: `crash ${round}` } });
      }
      await waitFor(async () => ((await a.call('GET', '/api/notifications/deliveries?limit=200')).body as Delivery[]).length >= 24, "A's 24 deliveries queued", 10_000, 50);
      await waitFor(() => dead.requests.length >= 1, "A's first attempt", 5000, 10);

      // B's server goes down while A's attempt hangs (the receiver never answers; the timeout is 10 s).
      const server = await b.call('POST', '/api/servers', { name: 'b-edge' });
      const agent = await FakeAgent.connect(`${serve.url.replace(/^http/, 'ws')}/agent`, server.body.connectionToken);
      await waitFor(async () => ((await b.call('GET', '/api/servers')).body as { status: string }[])[0]!.status === 'active', "B's server connected", 5000, 20);
      agent.ws.terminate();
      const down = await waitFor(() => live.requests.find((r) => (JSON.parse(r.body) as { kind: string }).kind === 'server_down'), "B's server_down", 8000, 10);
      assert.equal(dead.requests.length, 1, "A's webhook holds one attempt, never more: B did not wait behind A's backlog");
      assert.ok(verifyWebhook(SECRET, down.headers, down.body, Math.floor(Date.now() / 1000)));
    } finally {
      answering = true;
      for (const res of held.splice(0)) res.writeHead(204).end();
      for (const agent of agents) agent.close();
    }
  });
});
