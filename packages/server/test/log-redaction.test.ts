import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import pino from 'pino';
import { redactingLoggerOptions, scrubRequestUrl, scrubText, urlSecrets } from '../src/log-redaction.js';

// docs/api.md "Logs": what the control plane's logger takes out of every line.

function capture(secrets: string[] = []) {
  let out = '';
  const stream = new Writable({
    write(chunk, _enc, done) {
      out += String(chunk);
      done();
    },
  });
  return { log: pino(redactingLoggerOptions({ level: 'trace' }, secrets), stream), text: () => out };
}

describe('log redaction', () => {
  test('a URL keeps its scheme and host; user info, path and query go; file:// paths of stacks stay', () => {
    assert.equal(scrubText('POST https://mainnet.infura.io/v3/0123456789abcdef failed'), 'POST https://mainnet.infura.io/[redacted] failed');
    assert.equal(scrubText('smtp://mailer:hunter2hunter@mail.example.com:587'), 'smtp://[redacted]@mail.example.com:587');
    assert.equal(scrubText('hook http://10.0.0.1:8080/?token=abc; next'), 'hook http://10.0.0.1:8080/[redacted] next');
    assert.equal(scrubText('url "https://hooks.slack.com/services/T0/B0/XyZ"'), 'url "https://hooks.slack.com/[redacted]"');
    assert.equal(scrubText('https://example.com/ and https://example.com'), 'https://example.com/ and https://example.com');
    assert.equal(scrubText('at fn (file:///srv/rampart/app.js:1:2)'), 'at fn (file:///srv/rampart/app.js:1:2)');
  });

  test('keys, tokens and invitations by their prefixes, Bearer tokens, and the secrets it is given', () => {
    const key = `rmpk_${'a1'.repeat(32)}`;
    assert.equal(scrubText(`key ${key} refused`), 'key rmpk_[redacted] refused');
    assert.equal(scrubText(`rmps_${'0f'.repeat(32)} rmpi_${'9'.repeat(64)}`), 'rmps_[redacted] rmpi_[redacted]');
    assert.equal(scrubText('Authorization: Bearer s3cr3t-token, next'), 'Authorization: Bearer [redacted], next');
    assert.equal(scrubText('the operator token is admin-0123', ['admin-0123']), 'the operator token is [redacted]');
    assert.deepEqual(urlSecrets('https://user:pa55word@rpc.example.com/v3/KEY123?x=1'), ['pa55word', '/v3/KEY123?x=1']);
  });

  test("a request URL's credential-like query values go, the rest stays", () => {
    assert.equal(scrubRequestUrl('/api/notifications/confirm?token=abcdef&lang=en'), '/api/notifications/confirm?token=[redacted]&lang=en');
    assert.equal(scrubRequestUrl('/x?api_key=1&Signature=2&code=3&limit=50'), '/x?api_key=[redacted]&Signature=[redacted]&code=[redacted]&limit=50');
    assert.equal(scrubRequestUrl('/x?to%6Ben=1&q=2'), '/x?to%6Ben=[redacted]&q=2', 'a percent-encoded name');
    assert.equal(scrubRequestUrl('/api/waf/events?domain=a.example.com'), '/api/waf/events?domain=a.example.com');
  });

  test('messages, errors (message, stack, properties, cause) and credential-named fields are scrubbed', () => {
    const { log, text } = capture(['operator-secret-1']);
    const cause = new Error('connect ECONNREFUSED http://127.0.0.1:9/v3/causekey');
    const err = Object.assign(new Error('HTTP request failed. URL: https://rpc.example.com/v3/errkey', { cause }), { url: 'https://rpc.example.com/v3/propkey', big: 10n });
    log.warn({ err }, 'chain-watcher failed');
    log.info('calling https://rpc.example.com/v3/msgkey with operator-secret-1');
    log.info({ password: 'pw-123456', nested: { token: 'tk-123456', apiKey: 'ak-123456' }, target: 'https://h.example.com/p/pathkey' }, 'fields');
    const out = text();
    for (const s of ['errkey', 'propkey', 'causekey', 'msgkey', 'operator-secret-1', 'pw-123456', 'tk-123456', 'ak-123456', 'pathkey']) assert.ok(!out.includes(s), `${s} in ${out}`);
    assert.match(out, /https:\/\/rpc\.example\.com\/\[redacted\]/);
    assert.match(out, /"big":"10"/, 'a bigint property is written as text');
  });
});
