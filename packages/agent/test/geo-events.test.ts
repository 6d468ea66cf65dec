import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import fc from 'fast-check';
import { EventCollector, ensureCountryMap, ensureCountrySubset, ipv6ToText, parseEventLine, rangeToCidrs, rangeToCidrs4 } from '../src/index.js';

describe('country map', () => {
  test('a range becomes the fewest aligned CIDR blocks that cover exactly the range', () => {
    assert.deepEqual(rangeToCidrs4(16777472, 16778239), [
      { base: 16777472, prefix: 24 },
      { base: 16777728, prefix: 23 },
    ]);
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 32 - 1 }), fc.integer({ min: 0, max: 100_000 }), (start, len) => {
        const end = Math.min(2 ** 32 - 1, start + len);
        const blocks = rangeToCidrs4(start, end);
        let cur = start;
        for (const b of blocks) {
          assert.equal(b.base, cur, 'contiguous');
          assert.equal(b.base % 2 ** (32 - b.prefix), 0, 'aligned');
          cur += 2 ** (32 - b.prefix);
        }
        assert.equal(cur - 1, end, 'ends exactly at the range end');
        const big = rangeToCidrs(BigInt(start), BigInt(end), 32);
        assert.deepEqual(big.map((x) => [Number(x.base), x.prefix]), blocks.map((x) => [x.base, x.prefix]));
      }),
      { numRuns: 300 },
    );
  });

  test('IPv6 text is the canonical compressed form', () => {
    assert.equal(ipv6ToText(0x20010002000000000000000000000000n), '2001:2::');
    assert.equal(ipv6ToText(1n), '::1');
    assert.equal(ipv6ToText(0n), '::');
    assert.equal(ipv6ToText(0x20010db8000100000000000000000001n), '2001:db8:1::1');
  });

  test('the generated map places addresses from the bundled data set in their countries', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-geo-test-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const path = await ensureCountryMap(dir);
    const text = readFileSync(path, 'utf8');
    // From geo-whois-asn-country: 1.0.1.0-1.0.3.255 CN, 1.0.0.0-1.0.0.255 AU, 2001:2::/48 JP
    assert.match(text, /^1\.0\.0\.0\/24 AU$/m);
    assert.match(text, /^1\.0\.1\.0\/24 CN$/m);
    assert.match(text, /^1\.0\.2\.0\/23 CN$/m);
    assert.match(text, /^2001:2::\/48 JP$/m);
    assert.ok(text.split('\n').every((l) => l === '' || /^[0-9a-f.:]+\/\d{1,3} [A-Z]{2}$/.test(l)), 'every line is "<cidr> <CC>"');
    assert.equal(await ensureCountryMap(dir), path, 'generated once per data-set version');
    const subset = readFileSync(await ensureCountrySubset(dir, ['CN', 'JP']), 'utf8').trim().split('\n');
    assert.ok(subset.length > 1000);
    assert.ok(subset.every((l) => / (CN|JP)$/.test(l)), 'only the countries rules name');
    assert.ok(subset.includes('1.0.1.0/24 CN') && subset.includes('2001:2::/48 JP'));
  });
});

describe('WAF event collection', () => {
  const line = (ip: string, reason = 'ip_blocked') => `<134>Nov 22 07:20:00 haproxy[12]: rampart-waf 1795329600 ${ip} shop.example.com ${reason} 3f1c2e1a-9b0d-4c55-8f3e-0123456789ab`;

  test('parses HAProxy log lines and drops anything malformed', () => {
    assert.deepEqual(parseEventLine(line('127.0.0.9')), { ts: 1795329600, ip: '127.0.0.9', domain: 'shop.example.com', reason: 'ip_blocked', ruleId: '3f1c2e1a-9b0d-4c55-8f3e-0123456789ab' });
    assert.equal(parseEventLine(line('127.0.0.9', 'sqli_detected').replace(/ 3f1c\S+$/, ' -'))?.ruleId, null);
    assert.equal(parseEventLine(line('not-an-ip')), undefined);
    assert.equal(parseEventLine(line('127.0.0.9', 'made_up')), undefined);
    assert.equal(parseEventLine('rampart-waf 1 127.0.0.1 -'), undefined);
  });

  test('caps events at 5,000 per UTC day: logging stops at the cap and starts again the next day', () => {
    let now = new Date('2026-11-22T10:00:00Z');
    const shipped: number[] = [];
    const c = new EventCollector((batch) => (shipped.push(batch.length), true), () => now);
    for (let i = 0; i < 5200; i++) c.accept(line('127.0.0.9'));
    c.flush();
    assert.equal(shipped.reduce((a, b) => a + b, 0), 5000);
    assert.equal(c.dropped, 200);
    now = new Date('2026-11-23T00:00:01Z');
    c.accept(line('127.0.0.9'));
    c.flush();
    assert.equal(shipped.reduce((a, b) => a + b, 0), 5001);
  });

  test('keeps events while the service is unreachable and ships them when it returns', () => {
    let online = false;
    const shipped: unknown[] = [];
    const c = new EventCollector((batch) => (online ? (shipped.push(...batch), true) : false));
    for (let i = 0; i < 10; i++) c.accept(line(`127.0.0.${i + 1}`));
    c.flush();
    assert.equal(shipped.length, 0);
    online = true;
    c.flush();
    assert.equal(shipped.length, 10);
  });
});
