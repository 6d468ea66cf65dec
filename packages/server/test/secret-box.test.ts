import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decryptSecret, encryptSecret, secretKeyFrom } from '../src/secret-box.js';

describe('secret box (RAMPART_SECRET_KEY)', () => {
  const key = secretKeyFrom('a-test-key-of-enough-length')!;

  test('round-trips, with a fresh IV each time and no plaintext in the stored form', () => {
    const a = encryptSecret(key, 'whsec_the-webhook-secret');
    const b = encryptSecret(key, 'whsec_the-webhook-secret');
    assert.notEqual(a, b);
    assert.ok(!a.includes('whsec'));
    assert.equal(decryptSecret(key, a), 'whsec_the-webhook-secret');
  });

  test('another key or a changed byte does not decrypt', () => {
    const stored = encryptSecret(key, 'pdns-api-key');
    assert.throws(() => decryptSecret(secretKeyFrom('another-key-of-enough-length')!, stored));
    const parts = stored.split('.');
    const data = Buffer.from(parts[3]!, 'base64url');
    data[0]! ^= 1;
    assert.throws(() => decryptSecret(key, [...parts.slice(0, 3), data.toString('base64url')].join('.')));
    assert.throws(() => decryptSecret(key, 'plain-text'), /not an encrypted secret/);
  });

  test('an absent key is undefined; a short one is refused naming the variable', () => {
    assert.equal(secretKeyFrom(undefined), undefined);
    assert.equal(secretKeyFrom(''), undefined);
    assert.throws(() => secretKeyFrom('short'), /RAMPART_SECRET_KEY/);
  });
});
