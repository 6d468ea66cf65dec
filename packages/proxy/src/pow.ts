import { createHash } from 'node:crypto';

const sha256hex = (s: string) => createHash('sha256').update(s).digest('hex');

/**
 * The proof of work of the bot challenge (docs/bots.md), as native code does it: what a client
 * that does not run the page's JavaScript must pay per pass. Used by the tests and by
 * `npm run bench:bots`; the shield server checks answers in HAProxy (rampart_waf.lua).
 */

/** Where the challenge page sends its answer: GET with `c` (the token) and `n` (the counter). */
export const BOT_ANSWER_PATH = '/.well-known/rampart/bot';

/** The token and difficulty a challenge page carries, or undefined when html is not one. */
export function parseChallengePage(html: string): { token: string; difficulty: number } | undefined {
  const m = /var T="([0-9a-z.]+)",D=(\d+)/.exec(html);
  return m ? { token: m[1]!, difficulty: Number(m[2]) } : undefined;
}

/** Leading zero bits of a digest. */
export function leadingZeroBits(digest: Uint8Array): number {
  let bits = 0;
  for (const byte of digest) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

/** The first counter n (from 0) whose SHA-256(token + n) has `difficulty` leading zero bits. */
export function solveChallenge(token: string, difficulty: number): { counter: number; hashes: number } {
  for (let n = 0; ; n++) {
    if (
      leadingZeroBits(
        createHash('sha256')
          .update(token + n)
          .digest(),
      ) >= difficulty
    )
      return { counter: n, hashes: n + 1 };
  }
}

/** The answer's path and query for a solved token. */
export function answerUrl(token: string, counter: number): string {
  return `${BOT_ANSWER_PATH}?c=${token}&n=${counter}`;
}

/**
 * The pass cookie's MAC keys, derived from a bot key (hex): two independent 64-character keys,
 * each exactly one SHA-256 block, for HMAC's nested construction done with plain SHA-256 (the one
 * HAProxy runs fast on every request; its hmac converter costs several times more per call):
 *   MAC = SHA-256(outer || HEX(SHA-256(inner || "|" domain "|" ip "|" user-agent "|" expiry)))
 * The domain is the site's name as configured (not the request's Host header): a pass earned on one
 * domain is worth nothing on another domain of the same shield server, as Cloudflare's clearance
 * cookie is bound to its zone.
 * HEX is upper case, as HAProxy's hex converter writes it; the cookie carries the MAC in lower case.
 */
export function cookieKeys(secretHex: string): { inner: string; outer: string } {
  return { inner: sha256hex(`rampart pass cookie inner|${secretHex}`), outer: sha256hex(`rampart pass cookie outer|${secretHex}`) };
}

/** The pass cookie's MAC (lower-case hex) for a client of a domain, as the shield server computes it. */
export function passCookieMac(secretHex: string, domain: string, ip: string, ua: string, expiry: number): string {
  const { inner, outer } = cookieKeys(secretHex);
  return sha256hex(outer + sha256hex(`${inner}|${domain}|${ip}|${ua}|${expiry}`).toUpperCase());
}
