import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import dns, { type LookupAddress } from 'node:dns';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, mock, test } from 'node:test';
import { isPublicAddress } from '../src/delivery/addresses.js';
import { afterFailure, circuitPauseMs, endpointCondition, ENDPOINT_DISABLE_AFTER_MS, HEALTHY_ENDPOINT } from '../src/delivery/circuit.js';
import { deliverEmail, EMAIL_ATTEMPT_TIMEOUT_MS, emailTransport, notificationEmail } from '../src/delivery/email.js';
import { DELIVERY_GIVE_UP_MS, nextAttemptDelayMs, RETRY_BASE_MS, RETRY_CAP_MS, shouldGiveUp } from '../src/delivery/retry.js';
import { checkWebhookUrl, deliverWebhook, signWebhook, verifyWebhook, webhookBody } from '../src/delivery/webhook.js';
import { DELIVERY_CONCURRENCY, deliveryConfigFromEnv } from '../src/services/notification-delivery.js';
import { mailText, smtpReceiver, webhookReceiver, type ReceivedRequest } from '../../../test/support/receivers.js';

// docs/notifications.md: webhook and e-mail delivery of notifications, against real receivers on
// loopback, and the retry schedule.

const SECRET = 'whsec-test-secret';
const NOW = new Date('2025-03-01T12:00:30.000Z');
const NOW_SECONDS = Math.floor(NOW.getTime() / 1000);
const NOTIFICATION = {
  id: '0b7c3c1e-5d7c-4f0e-9a37-2a1c4d9e8f10',
  kind: 'server_down',
  message: 'Shield server eu-1 disconnected',
  serverId: '5f0e8a44-1c2b-4d3e-8f9a-0b1c2d3e4f5a',
  createdAt: new Date('2025-03-01T12:00:00.000Z'),
};

/**
 * DNS answers for names under .test (which the real resolver never answers), through the lookup
 * the webhook's check uses; the connection itself never asks it.
 */
function fakeDns(answers: Record<string, LookupAddress[]>) {
  const real = dns.promises.lookup;
  return mock.method(dns.promises, 'lookup', (host: string, options: dns.LookupAllOptions) => (host in answers ? Promise.resolve(answers[host]) : real(host, options)));
}

const deliver = (url: string, options: { allowPrivate: boolean; timeoutMs?: number }) => deliverWebhook(url, SECRET, NOTIFICATION, { ...options, now: () => NOW });

describe('webhook delivery', () => {
  test('the body is the notification in a fixed key order, absent ids null', () => {
    assert.equal(
      webhookBody(NOTIFICATION),
      '{"id":"0b7c3c1e-5d7c-4f0e-9a37-2a1c4d9e8f10","kind":"server_down","message":"Shield server eu-1 disconnected",' +
        '"serverId":"5f0e8a44-1c2b-4d3e-8f9a-0b1c2d3e4f5a","domainId":null,"createdAt":"2025-03-01T12:00:00.000Z"}',
    );
    assert.equal(
      webhookBody({ id: 'n1', kind: 'ssl_expiring', message: 'm', createdAt: '2025-03-01T13:00:00+01:00' }),
      '{"id":"n1","kind":"ssl_expiring","message":"m","serverId":null,"domainId":null,"createdAt":"2025-03-01T12:00:00.000Z"}',
    );
  });

  test('a 2xx receiver gets the exact body, signed; the signature verifies', async () => {
    const r = await webhookReceiver();
    const result = await deliver(`${r.url}/hooks/rampart?source=test`, { allowPrivate: true });
    assert.equal(result.ok, true, result.error);
    assert.equal(result.status, 204);
    assert.equal(result.error, undefined);
    assert.ok(result.durationMs >= 0 && result.durationMs < 5000);
    assert.equal(r.requests.length, 1);
    const [req] = r.requests as [ReceivedRequest];
    assert.equal(req.method, 'POST');
    assert.equal(req.url, '/hooks/rampart?source=test');
    assert.equal(req.body, webhookBody(NOTIFICATION));
    assert.equal(req.headers['content-type'], 'application/json');
    assert.equal(req.headers['x-rampart-timestamp'], String(NOW_SECONDS));
    assert.match(String(req.headers['x-rampart-signature']), /^sha256=[0-9a-f]{64}$/);
    assert.equal(req.headers['x-rampart-signature'], signWebhook(SECRET, NOW_SECONDS, req.body));
    assert.equal(verifyWebhook(SECRET, req.headers, req.body, NOW_SECONDS + 10), true);
  });

  test('a 500 answer is a failure with its status', async () => {
    const r = await webhookReceiver((_req, res) => res.writeHead(500).end('database down'));
    const result = await deliver(`${r.url}/`, { allowPrivate: true });
    assert.equal(result.ok, false);
    assert.equal(result.status, 500);
    assert.equal(result.error, 'the receiver answered HTTP 500');
    assert.equal(r.requests.length, 1);
  });

  test('a receiver that never answers times out', async () => {
    const r = await webhookReceiver(() => {});
    const result = await deliver(`${r.url}/`, { allowPrivate: true, timeoutMs: 300 });
    assert.deepEqual({ ok: result.ok, status: result.status, error: result.error }, { ok: false, status: undefined, error: 'timed out after 300 ms' });
    assert.ok(result.durationMs >= 290 && result.durationMs < 5000, String(result.durationMs));
    assert.equal(r.requests.length, 1);
  });

  test('a redirect is not followed and is a failure', async () => {
    const r = await webhookReceiver((req, res) => res.writeHead(req.url === '/moved' ? 302 : 204, { Location: '/elsewhere' }).end());
    const result = await deliver(`${r.url}/moved`, { allowPrivate: true });
    assert.equal(result.ok, false);
    assert.equal(result.status, 302);
    assert.equal(result.error, 'the receiver answered HTTP 302; redirects are not followed');
    assert.deepEqual(
      r.requests.map((q) => q.url),
      ['/moved'],
    );
  });

  test('an endless answer is read up to 64 KiB, then the connection is dropped', async () => {
    let closed!: Promise<unknown>;
    const r = await webhookReceiver((_req, res) => {
      closed = once(res, 'close');
      res.writeHead(200);
      const chunk = Buffer.alloc(16 * 1024, 'x');
      const more = () => {
        while (!res.destroyed && res.write(chunk));
      };
      res.on('drain', more);
      more();
    });
    const result = await deliver(`${r.url}/`, { allowPrivate: true });
    assert.equal(result.ok, true, result.error);
    await closed;
  });

  test('the connection goes to the address the check resolved, with the URL host in Host', async () => {
    const r = await webhookReceiver();
    const lookup = fakeDns({ 'hooks.example.test': [{ address: '127.0.0.1', family: 4 }] });
    try {
      const result = await deliver(`http://hooks.example.test:${r.port}/pinned`, { allowPrivate: true });
      assert.equal(result.ok, true, result.error);
      assert.equal(lookup.mock.callCount(), 1);
      assert.equal(r.requests[0]!.headers.host, `hooks.example.test:${r.port}`);
    } finally {
      lookup.mock.restore();
    }
  });

  test('over https the TLS server name is the URL host and the certificate is verified', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-webhook-tls-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const [key, cert] = [join(dir, 'key.pem'), join(dir, 'cert.pem')];
    const name = 'hooks.example.test';
    const openssl = ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1'];
    execFileSync('openssl', [...openssl, '-subj', `/CN=${name}`, '-addext', `subjectAltName=DNS:${name}`, '-keyout', key, '-out', cert], { stdio: 'ignore' });
    const serverNames: string[] = [];
    let requests = 0;
    const sni = (servername: string, cb: (err: Error | null) => void) => {
      serverNames.push(servername);
      cb(null);
    };
    const server = https.createServer({ key: readFileSync(key), cert: readFileSync(cert), SNICallback: sni }, (_req, res) => {
      requests++;
      res.writeHead(204).end();
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    after(() => server.close());
    const lookup = fakeDns({ [name]: [{ address: '127.0.0.1', family: 4 }] });
    try {
      const result = await deliver(`https://${name}:${(server.address() as AddressInfo).port}/`, { allowPrivate: true });
      assert.deepEqual({ ok: result.ok, error: result.error }, { ok: false, error: 'self-signed certificate' });
      assert.deepEqual(serverNames, [name]);
      assert.equal(requests, 0);
    } finally {
      lookup.mock.restore();
    }
  });

  test('a connection error is a failure, not a throw', async () => {
    const r = await webhookReceiver();
    const result = await deliver(`http://127.0.0.1:1/`, { allowPrivate: true });
    assert.equal(result.ok, false);
    assert.match(result.error!, /ECONNREFUSED/);
    assert.equal(r.requests.length, 0);
  });
});

describe('webhook URLs and private addresses', () => {
  test('only http(s) URLs without credentials, at most 2048 characters', () => {
    assert.equal(checkWebhookUrl('https://hooks.example.com/rampart?x=1', false), null);
    assert.equal(checkWebhookUrl('http://hooks.example.com:8080/', false), null);
    assert.equal(checkWebhookUrl(`https://hooks.example.com/${'a'.repeat(2048 - 26)}`, false), null);
    const cases: [string, RegExp][] = [
      ['ftp://hooks.example.com/', /^webhookUrl: must be an http or https URL/],
      ['file:///etc/passwd', /^webhookUrl: must be an http or https URL/],
      ['hooks.example.com/rampart', /^webhookUrl: must be an http or https URL/],
      ['', /^webhookUrl: must be an http or https URL/],
      ['https://user:pass@hooks.example.com/', /^webhookUrl: must not contain a user name or password$/],
      ['https://token@hooks.example.com/', /^webhookUrl: must not contain a user name or password$/],
      [`https://hooks.example.com/${'a'.repeat(2048 - 25)}`, /^webhookUrl: must be at most 2048 characters$/],
    ];
    for (const [url, message] of cases) assert.match(checkWebhookUrl(url, true) ?? '', message, url);
  });

  test('the URL parser reads decimal, hex and octal IPv4 forms as the address they name', () => {
    for (const host of ['2130706433', '0x7f.0.0.1', '017700000001', '0x7f000001', '127.1']) {
      assert.equal(new URL(`http://${host}/`).hostname, '127.0.0.1', host);
    }
  });

  test('private, loopback and reserved targets are refused without a connection', async () => {
    const r = await webhookReceiver();
    const lookup = fakeDns({
      'loopback.example.test': [{ address: '127.0.0.1', family: 4 }],
      'mixed.example.test': [
        { address: '93.184.215.14', family: 4 },
        { address: '::1', family: 6 },
      ],
    });
    try {
      const literal = [
        `http://127.0.0.1:${r.port}/`,
        `http://localhost:${r.port}/`,
        `http://[::1]:${r.port}/`,
        'http://10.0.0.1/',
        'http://169.254.169.254/latest/meta-data/',
        `http://[::ffff:127.0.0.1]:${r.port}/`,
        'http://100.64.0.1/',
        `http://0.0.0.0:${r.port}/`,
        `http://2130706433:${r.port}/`,
        `http://0x7f.0.0.1:${r.port}/`,
        `http://017700000001:${r.port}/`,
        'https://192.168.1.1/',
        'https://[fd00::1]/',
        'https://[fe80::1]/',
      ];
      for (const url of literal) {
        const message = checkWebhookUrl(url, false);
        assert.match(message ?? '', /^webhookUrl: .+ is a private or reserved address; webhooks are sent to public addresses only$/, url);
        const result = await deliver(url, { allowPrivate: false });
        assert.deepEqual({ ok: result.ok, error: result.error }, { ok: false, error: message }, url);
      }
      // A name is only known to be private once resolved, at delivery.
      for (const [name, address] of [
        ['loopback.example.test', '127.0.0.1'],
        ['mixed.example.test', '::1'],
      ]) {
        const url = `http://${name}:${r.port}/`;
        assert.equal(checkWebhookUrl(url, false), null);
        const result = await deliver(url, { allowPrivate: false });
        assert.deepEqual({ ok: result.ok, error: result.error }, { ok: false, error: `refused: ${name} resolves to ${address}, a private or reserved address` });
      }
      assert.equal(r.requests.length, 0);
    } finally {
      lookup.mock.restore();
    }
  });

  test('isPublicAddress', () => {
    for (const ip of ['8.8.8.8', '93.184.215.14', '2606:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808']) {
      assert.equal(isPublicAddress(ip), true, ip);
    }
    const notPublic = [
      '0.0.0.0',
      '10.1.2.3',
      '100.64.0.1',
      '127.0.0.1',
      '127.255.255.254',
      '169.254.169.254',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.0.1',
      '192.0.2.1',
      '198.18.0.1',
      '224.0.0.1',
      '255.255.255.255',
      '::',
      '::1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '::ffff:10.0.0.1',
      '64:ff9b::7f00:1',
      'fc00::1',
      'fd12:3456::1',
      'fe80::1',
      'fe80::1%eth0',
      'ff02::1',
      '2001:db8::1',
      '2002:7f00:1::1',
      'localhost',
      '',
      '127.0.0.1.nip.io',
    ];
    for (const ip of notPublic) assert.equal(isPublicAddress(ip), false, ip);
  });
});

describe('webhook signatures', () => {
  const body = webhookBody(NOTIFICATION);
  const headers = { 'X-Rampart-Timestamp': String(NOW_SECONDS), 'X-Rampart-Signature': signWebhook(SECRET, NOW_SECONDS, body) };

  test('a fresh signature verifies, whatever the case of the header names', () => {
    assert.equal(verifyWebhook(SECRET, headers, body, NOW_SECONDS), true);
    assert.equal(verifyWebhook(SECRET, { 'x-rampart-timestamp': headers['X-Rampart-Timestamp'], 'x-rampart-signature': headers['X-Rampart-Signature'] }, body, NOW_SECONDS), true);
    assert.equal(verifyWebhook(SECRET, headers, body, NOW_SECONDS + 300), true);
    assert.equal(verifyWebhook(SECRET, headers, body, NOW_SECONDS - 300), true);
  });

  test('a replayed old request, a tampered body, another secret or a missing header fail', () => {
    assert.equal(verifyWebhook(SECRET, headers, body, NOW_SECONDS + 301), false);
    assert.equal(verifyWebhook(SECRET, headers, body, NOW_SECONDS + 86_400), false);
    assert.equal(verifyWebhook(SECRET, headers, body, NOW_SECONDS - 301), false);
    assert.equal(verifyWebhook(SECRET, headers, body.replace('eu-1', 'eu-2'), NOW_SECONDS), false);
    assert.equal(verifyWebhook('another-secret', headers, body, NOW_SECONDS), false);
    // A fresh timestamp on an old signature: the timestamp is signed.
    assert.equal(verifyWebhook(SECRET, { ...headers, 'X-Rampart-Timestamp': String(NOW_SECONDS + 600) }, body, NOW_SECONDS + 600), false);
    assert.equal(verifyWebhook(SECRET, { 'X-Rampart-Timestamp': headers['X-Rampart-Timestamp'] }, body, NOW_SECONDS), false);
    assert.equal(verifyWebhook(SECRET, { 'X-Rampart-Signature': headers['X-Rampart-Signature'] }, body, NOW_SECONDS), false);
    assert.equal(verifyWebhook(SECRET, { ...headers, 'X-Rampart-Signature': 'sha256=00' }, body, NOW_SECONDS), false);
    assert.equal(verifyWebhook(SECRET, { ...headers, 'X-Rampart-Timestamp': `${NOW_SECONDS}.5` }, body, NOW_SECONDS), false);
  });
});

describe('e-mail delivery', () => {
  const mail = notificationEmail(NOTIFICATION, 'owner@example.com', 'rampart@localhost');

  test('the subject names the kind in words and the ids; the message (which says what to do) is in the body, once', () => {
    assert.equal(mail.from, 'rampart@localhost');
    assert.equal(mail.to, 'owner@example.com');
    assert.equal(mail.subject, '[Rampart] Server down (server 5f0e8a44-1c2b-4d3e-8f9a-0b1c2d3e4f5a)');
    assert.match(mail.text, /^Server down\n\nShield server eu-1 disconnected\n\nRaised at /);
    assert.match(mail.text, /Raised at 2025-03-01T12:00:00.000Z \(notification 0b7c3c1e-5d7c-4f0e-9a37-2a1c4d9e8f10, kind server_down\)/);
    const long = notificationEmail({ ...NOTIFICATION, kind: 'server_error', message: `${'x'.repeat(200)}\nsecond line` }, 'o@example.com', 'f@example.com');
    assert.equal(long.subject, '[Rampart] Server error (server 5f0e8a44-1c2b-4d3e-8f9a-0b1c2d3e4f5a)', 'no text of the message in the subject');
    const domainId = '7a1b2c3d-0000-4000-8000-000000000001';
    assert.equal(
      notificationEmail({ ...NOTIFICATION, kind: 'ssl_expiring', serverId: null, domainId }, 'o@example.com', 'f@example.com').subject,
      `[Rampart] Certificate expiring (domain ${domainId})`,
    );
    assert.equal(notificationEmail({ ...NOTIFICATION, kind: 'quota_reached', serverId: null }, 'o@example.com', 'f@example.com').subject, '[Rampart] Quota reached');
  });

  test('the mail reaches an SMTP server with its subject and message', async () => {
    const smtp = await smtpReceiver();
    const transport = emailTransport(smtp.url);
    after(() => transport.close());
    const result = await deliverEmail(transport, mail);
    assert.equal(result.ok, true, result.error);
    assert.equal(smtp.messages.length, 1);
    const [m] = smtp.messages as [{ from: string; to: string[]; raw: string }];
    assert.equal(m.from, 'rampart@localhost');
    assert.deepEqual(m.to, ['owner@example.com']);
    const headers = m.raw.slice(0, m.raw.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' '); // unfolded
    assert.match(headers, /^Subject: \[Rampart\] Server down \(server 5f0e8a44-1c2b-4d3e-8f9a-0b1c2d3e4f5a\)$/m);
    const body = mailText(m.raw);
    assert.ok(body.includes(mail.text.trim()), body);
  });

  test('a server that holds the message past the attempt deadline fails the attempt, however it trickles', async () => {
    const slow = await smtpReceiver({ onData: (stream) => stream.resume() }); // reads the message and never answers it
    const transport = emailTransport(slow.url);
    after(() => transport.close());
    const r = await deliverEmail(transport, mail, 300);
    assert.deepEqual([r.ok, r.error], [false, 'timed out after 300 ms']);
    assert.equal(EMAIL_ATTEMPT_TIMEOUT_MS, 60_000);
  });

  test('a refused recipient is a failure with the SMTP answer', async () => {
    const smtp = await smtpReceiver({
      onRcptTo(_address, _session, callback) {
        callback(Object.assign(new Error('Mailbox unavailable: no such user'), { responseCode: 550 }));
      },
    });
    const transport = emailTransport(smtp.url);
    after(() => transport.close());
    const result = await deliverEmail(transport, mail);
    assert.equal(result.ok, false);
    assert.equal(result.status, 550);
    assert.match(result.error!, /^550 Mailbox unavailable: no such user$/);
    assert.equal(smtp.messages.length, 0);
  });

  test('an SMTP server that is not there is a failure, not a throw', async () => {
    const transport = emailTransport('smtp://127.0.0.1:1');
    after(() => transport.close());
    const result = await deliverEmail(transport, mail);
    assert.equal(result.ok, false);
    assert.match(result.error!, /ECONNREFUSED/);
  });
});

describe('retry schedule', () => {
  test('delays stay within [0, cap] with full jitter', () => {
    for (let attempt = 1; attempt <= 40; attempt++) {
      const ceiling = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** (attempt - 1));
      assert.equal(
        nextAttemptDelayMs(attempt, () => 0),
        0,
      );
      assert.equal(
        nextAttemptDelayMs(attempt, () => 0.999_999),
        Math.floor(0.999_999 * ceiling),
      );
      for (let i = 0; i < 50; i++) {
        const d = nextAttemptDelayMs(attempt);
        assert.ok(Number.isInteger(d) && d >= 0 && d < ceiling && d <= RETRY_CAP_MS, `${attempt}: ${d}`);
      }
    }
  });

  test('delays grow with the attempts up to the 1 h cap', () => {
    const half = () => 0.5;
    const delays = Array.from({ length: 12 }, (_, i) => nextAttemptDelayMs(i + 1, half));
    assert.deepEqual(delays.slice(0, 9), [15_000, 30_000, 60_000, 120_000, 240_000, 480_000, 960_000, 1_800_000, 1_800_000]);
    assert.equal(nextAttemptDelayMs(1000, half), RETRY_CAP_MS / 2);
    for (let i = 1; i < delays.length; i++) assert.ok(delays[i]! >= delays[i - 1]!);
  });

  test('a delivery is given up a day after its first attempt', () => {
    const first = new Date('2025-03-01T00:00:00Z');
    assert.equal(DELIVERY_GIVE_UP_MS, 24 * 3600 * 1000);
    assert.equal(shouldGiveUp(first, first), false);
    assert.equal(shouldGiveUp(first, new Date(first.getTime() + DELIVERY_GIVE_UP_MS - 1)), false);
    assert.equal(shouldGiveUp(first, new Date(first.getTime() + DELIVERY_GIVE_UP_MS)), true);
  });
});

describe('circuit breaker of an endpoint', () => {
  const t0 = new Date('2026-03-01T00:00:00.000Z');
  const at = (ms: number) => new Date(t0.getTime() + ms);

  test('the pause after each failure from the fifth on: 1 minute, doubling, at most an hour', () => {
    const minutes = [5, 6, 7, 8, 9, 10, 11, 12, 40].map((n) => circuitPauseMs(n) / 60_000);
    assert.deepEqual(minutes, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
  });

  test('closed for four failures, open from the fifth, disabled at a failure 3 days after the first; a success starts again', () => {
    let s = HEALTHY_ENDPOINT;
    for (let i = 0; i < 4; i++) s = afterFailure(s, at(i * 1000), 'HTTP 500');
    assert.deepEqual([s.consecutiveFailures, s.pausedUntil, endpointCondition(s, at(4000))], [4, null, 'failing']);
    s = afterFailure(s, at(4000), 'HTTP 500');
    assert.deepEqual([s.pausedUntil, s.failingSince], [at(4000 + 60_000), t0]);
    assert.equal(endpointCondition(s, at(4000)), 'paused');
    assert.equal(endpointCondition(s, at(64_000)), 'failing', 'half-open when the pause is over');
    const before = afterFailure(s, at(ENDPOINT_DISABLE_AFTER_MS - 1), 'HTTP 500');
    assert.equal(before.disabledAt, null);
    const disabled = afterFailure(s, at(ENDPOINT_DISABLE_AFTER_MS), 'timed out');
    assert.deepEqual([disabled.disabledAt, disabled.lastError, endpointCondition(disabled, at(ENDPOINT_DISABLE_AFTER_MS))], [at(ENDPOINT_DISABLE_AFTER_MS), 'timed out', 'disabled']);
    // Two failures 3 days apart are not 3 days of failing: the endpoint is disabled only once it has failed 5 in a row.
    const sparse = afterFailure(afterFailure(HEALTHY_ENDPOINT, t0, 'x'), at(ENDPOINT_DISABLE_AFTER_MS + 1), 'x');
    assert.equal(sparse.disabledAt, null);
  });
});

describe('delivery settings from the environment', () => {
  test('RAMPART_DELIVERY_CONCURRENCY: 10 attempts at once by default, 1 to 200, anything else refused naming it', () => {
    assert.equal(deliveryConfigFromEnv({}).concurrency, DELIVERY_CONCURRENCY);
    assert.equal(DELIVERY_CONCURRENCY, 10);
    assert.equal(deliveryConfigFromEnv({ RAMPART_DELIVERY_CONCURRENCY: '50' }).concurrency, 50);
    for (const bad of ['0', '201', '2.5', 'many']) {
      assert.throws(() => deliveryConfigFromEnv({ RAMPART_DELIVERY_CONCURRENCY: bad }), /^Error: RAMPART_DELIVERY_CONCURRENCY must be a whole number of attempts from 1 to 200$/);
    }
  });
});
