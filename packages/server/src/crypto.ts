import { createHash, randomBytes, randomUUID, scrypt, timingSafeEqual } from 'node:crypto';

/** The fixed 5-character prefix of every API key. */
export const API_KEY_PREFIX = 'rmpk_';
export const SERVER_TOKEN_PREFIX = 'rmps_';

export function sha256(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

export function newApiKey(): string {
  return API_KEY_PREFIX + randomBytes(32).toString('hex');
}

export function newServerToken(): string {
  return SERVER_TOKEN_PREFIX + randomBytes(32).toString('hex');
}

export function newSessionToken(): string {
  return randomBytes(32).toString('base64url');
}

export function newSecret(): string {
  return randomBytes(32).toString('hex');
}

export function newId(): string {
  return randomUUID();
}

const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 } as const;

function scryptAsync(password: string, salt: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password, salt, SCRYPT.keylen, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p }, (err, key) =>
      err ? reject(err) : resolve(key),
    );
  });
}

/** scrypt$N$r$p$salt$hash, all parameters kept so they can be raised later. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(password, salt);
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64'), key.toString('base64')].join('$');
}

export async function verifyPassword(password: string, stored: string | null): Promise<boolean> {
  const parts = (stored ?? '').split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') {
    // Spend the same time as a real check so a missing account is not told apart by timing.
    await scryptAsync(password, randomBytes(16));
    return false;
  }
  const [, n, r, p, salt, hash] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(hash, 'base64');
  const key = await new Promise<Buffer>((resolve, reject) =>
    scrypt(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(n), r: Number(r), p: Number(p) }, (err, k) =>
      err ? reject(err) : resolve(k),
    ),
  );
  return key.length === expected.length && timingSafeEqual(key, expected);
}

/** Constant-time comparison of two secrets of any length (compares their hashes). */
export function secretsEqual(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}
