import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

/**
 * Secrets the service must use again later (a webhook's signing secret, a DNS provider's API
 * credentials) cannot be stored as hashes: they are encrypted with AES-256-GCM under a key the
 * operator sets (RAMPART_SECRET_KEY), and never returned by the API. The stored form is
 * `v1.<iv>.<tag>.<ciphertext>` in base64url; a wrong key or a changed byte fails to decrypt.
 */
export type SecretKey = Buffer & { readonly __secretKey: unique symbol };

/** The operator's RAMPART_SECRET_KEY (any string of 16 characters or more) as a 256-bit key. */
export function secretKeyFrom(value: string | undefined): SecretKey | undefined {
  if (value === undefined || value === '') return undefined;
  if (value.length < 16) throw new Error('RAMPART_SECRET_KEY must be at least 16 characters (e.g. openssl rand -hex 32)');
  return createHash('sha256').update(value, 'utf8').digest() as SecretKey;
}

export function encryptSecret(key: SecretKey, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), data.toString('base64url')].join('.');
}

export function decryptSecret(key: SecretKey, stored: string): string {
  const [version, iv, tag, data] = stored.split('.');
  if (version !== 'v1' || !iv || !tag || data === undefined) throw new Error('not an encrypted secret');
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
  decipher.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]).toString('utf8');
}
