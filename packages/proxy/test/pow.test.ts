import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { runInNewContext } from 'node:vm';
import { test } from 'node:test';
import fc from 'fast-check';
import { leadingZeroBits, parseChallengePage, solveChallenge } from '../src/pow.js';

// The challenge page's solver (assets/pow-worker.js) outside a browser: its own SHA-256, used on
// plain-HTTP sites where Web Crypto is not available, must be SHA-256.
const source = readFileSync(new URL('../assets/pow-worker.js', import.meta.url), 'utf8');
const worker = runInNewContext(`${source};({ sha256, wordZeroBits, byteZeroBits, withScript })`, { postMessage: () => {}, Math, Int32Array, Uint8Array }) as {
  sha256(s: string): Int32Array;
  wordZeroBits(w: Int32Array): number;
  byteZeroBits(b: Uint8Array): number;
  withScript(t: string, d: number, n: number, k: number): number;
};
const hex = (words: Int32Array) => [...words].map((w) => (w >>> 0).toString(16).padStart(8, '0')).join('');

test("the worker's SHA-256 equals node's for ASCII strings of every block count", () => {
  for (const s of ['', 'abc', 'a'.repeat(55), 'a'.repeat(56), 'a'.repeat(64), 'x'.repeat(119), 'k2.1795504517.14.00ff00ff00ff00ff.' + 'e'.repeat(64) + '123456']) {
    assert.equal(hex(worker.sha256(s)), createHash('sha256').update(s).digest('hex'), JSON.stringify(s));
  }
  fc.assert(
    fc.property(
      fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 300 }),
      (s) => hex(worker.sha256(s)) === createHash('sha256').update(s).digest('hex'),
    ),
  );
});

test('zero bits are counted alike by the worker (words and bytes) and by the node solver', () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.integer({ min: 0, max: 40 }), (bytes, zeros) => {
      const b = Uint8Array.from(bytes);
      for (let i = 0; i < zeros; i++) b[i >> 3]! &= ~(0x80 >> (i & 7));
      const words = new Int32Array(8).map((_, i) => (b[i * 4]! << 24) | (b[i * 4 + 1]! << 16) | (b[i * 4 + 2]! << 8) | b[i * 4 + 3]!);
      const expected = leadingZeroBits(b);
      return expected >= zeros && worker.byteZeroBits(b) === expected && worker.wordZeroBits(words) === expected;
    }),
  );
});

test('the worker and the node solver find the same first counter', () => {
  const token = 'k2.1795504517.12.00ff00ff00ff00ff.' + 'a'.repeat(64);
  const { counter } = solveChallenge(token, 12);
  assert.equal(worker.withScript(token, 12, 0, 1), counter);
  assert.ok(
    leadingZeroBits(
      createHash('sha256')
        .update(token + counter)
        .digest(),
    ) >= 12,
  );
  // Two workers (step 2) from 0 and 1 together cover every counter: the first of the two is the same.
  assert.equal(Math.min(worker.withScript(token, 12, counter % 2, 2), worker.withScript(token, 12, 1 - (counter % 2), 2)), counter);
});

test('parseChallengePage reads the token and difficulty of a page, nothing else', () => {
  assert.deepEqual(parseChallengePage('<script>(function(){var T="k2.1.14.ab.cd",D=14,P=x'), { token: 'k2.1.14.ab.cd', difficulty: 14 });
  assert.equal(parseChallengePage('{"origin":"origin"}'), undefined);
});
