import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { qrCode, qrPath } from '../src/qr.js';
import { payAmount } from '../src/views/deposit.js';

describe('the deposit QR code', () => {
  test('qrPath draws one unit square per dark module, at its column and row', () => {
    assert.equal(
      qrPath([
        [true, false],
        [false, true],
      ]),
      'M0 0h1v1h-1zM1 1h1v1h-1z',
    );
    assert.equal(qrPath([[false]]), '');
  });

  test('an address gives a square code with its finder patterns and a quiet border', () => {
    const address = '0x52908400098527886E0F7030069857D2E4169EE7';
    const { size, path } = qrCode(address);
    // Version 3 (29 modules) holds 42 characters at level M; 2 modules of border each side.
    assert.equal(size, 29 + 4);
    const squares = [...path.matchAll(/M(\d+) (\d+)h1v1h-1z/g)].map((m) => [Number(m[1]), Number(m[2])]);
    const dark = new Set(squares.map(([x, y]) => `${x},${y}`));
    // The top-left finder: a 7x7 dark ring starting inside the border, its centre 3x3 dark, the ring between light.
    for (let i = 0; i < 7; i++) {
      assert.ok(dark.has(`${2 + i},2`) && dark.has(`2,${2 + i}`) && dark.has(`${2 + i},8`) && dark.has(`8,${2 + i}`), `finder ring at ${i}`);
    }
    assert.ok(dark.has('5,5') && !dark.has('3,3'));
    assert.ok(!dark.has('0,0') && !dark.has('1,1'), 'the border is light');
  });

  test('payAmount names the token when there is one, dollars otherwise', () => {
    assert.equal(payAmount({ amount: 50, token: 'USDC', address: '0x1', network: 'base', expiresAt: null }), '50.00 USDC');
    assert.equal(payAmount({ amount: 12.5, token: null, address: null, network: null, expiresAt: null }), '$12.50');
  });
});
