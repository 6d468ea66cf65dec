import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request, Agent } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import fc from 'fast-check';
import {
  ensureCountryClasses,
  countryLookup,
  CountryLookup,
  ipv6ToText,
  ownMapNotes,
  ownMapSegments,
  OWN_VALUE_MAX,
  minimalPrefixes,
  OTHER_COUNTRY,
  prefixSegments,
  rangeToCidrs,
  type CountryRange,
  type PrefixLine,
} from '../src/index.js';
import { refusedCountries } from '@rampart/proxy';
import { freePort, startProcess, waitFor } from '../../../test/support/processes.js';

const HAPROXY = '/usr/sbin/haproxy';

/** The value longest-prefix match gives `addr` over `lines` (undefined: no line holds it), as HAProxy's map_ip reads a map. */
function lookup(lines: readonly PrefixLine[], bits: number): (addr: bigint, shorterThan?: number) => string | undefined {
  const byPrefix = new Map<number, Map<bigint, string>>();
  for (const l of lines) {
    if (!byPrefix.has(l.prefix)) byPrefix.set(l.prefix, new Map());
    const same = byPrefix.get(l.prefix)!;
    // keyed by the prefix's own bits: V8 hashes a BigInt by its lowest 64 bits, all zero in most IPv6 bases
    const key = l.base >> BigInt(bits - l.prefix);
    if (!same.has(key)) same.set(key, l.value); // HAProxy keeps the first of equal keys
  }
  const lengths = [...byPrefix.keys()].sort((a, b) => b - a);
  // shorterThan: only lines of fewer bits (what a line is nested in)
  return (addr, shorterThan = bits + 1) => {
    for (const p of lengths) {
      if (p >= shorterThan) continue;
      const v = byPrefix.get(p)!.get(addr >> BigInt(bits - p));
      if (v !== undefined) return v;
    }
    return undefined;
  };
}

/** The value the whole map gives addr: longest-prefix match over the ranges' CIDR blocks, the first of equal blocks. */
function asWholeMap(ranges: readonly CountryRange[], bits: number): (addr: bigint) => string | undefined {
  const blocks: PrefixLine[] = [];
  for (const r of ranges) for (const c of rangeToCidrs(r.start, r.end, bits)) blocks.push({ ...c, value: r.country });
  return lookup(blocks, bits);
}

/** The value of the segment holding addr, by binary search (the segments are sorted and disjoint). */
function segmentAt(segments: readonly CountryRange[], addr: bigint): string | undefined {
  let lo = 0;
  for (let hi = segments.length; lo < hi;) {
    const m = (lo + hi) >> 1;
    if (segments[m]!.end < addr) lo = m + 1;
    else hi = m;
  }
  const s = segments[lo];
  return s && s.start <= addr ? s.country : undefined;
}

/** The value of the segment holding addr. */
const segmentOf = (segments: readonly CountryRange[], addr: bigint) => segments.find((r) => r.start <= addr && addr <= r.end)?.country;

const COUNTRIES = ['AA', 'BB', 'CC'];
/** Ranges over an 8-bit space, nested, adjacent and crossing as they come. */
const rangesArb = fc.array(
  fc
    .tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 80 }), fc.constantFrom(...COUNTRIES))
    .map(([start, len, country]) => ({ start: BigInt(start), end: BigInt(Math.min(255, start + len)), country })),
  { maxLength: 12 },
);

describe('CIDR blocks', () => {
  test('a range becomes the fewest aligned CIDR blocks that cover exactly the range', () => {
    assert.deepEqual(rangeToCidrs(16777472n, 16778239n, 32), [
      { base: 16777472n, prefix: 24 },
      { base: 16777728n, prefix: 23 },
    ]);
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 2n ** 128n - 1n }), fc.bigInt({ min: 0n, max: 2n ** 70n }), fc.constantFrom(32, 128), (s, len, bits) => {
        const start = s % 2n ** BigInt(bits);
        const end = start + len < 2n ** BigInt(bits) ? start + len : 2n ** BigInt(bits) - 1n;
        let cur = start;
        const blocks = rangeToCidrs(start, end, bits);
        for (const b of blocks) {
          assert.equal(b.base, cur, 'contiguous');
          assert.equal(b.base % 2n ** BigInt(bits - b.prefix), 0n, 'aligned');
          cur += 2n ** BigInt(bits - b.prefix);
        }
        assert.equal(cur - 1n, end, 'ends exactly at the range end');
        // the fewest: no two neighbours of one size could be one block of the next size
        for (let i = 1; i < blocks.length; i++) {
          const [a, b] = [blocks[i - 1]!, blocks[i]!];
          if (a.prefix === b.prefix) assert.notEqual(a.base % 2n ** BigInt(bits - a.prefix + 1), 0n, `${a.base}/${a.prefix} and the next could be one block`);
        }
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
});

describe('the country map of the countries rules name', () => {
  test('the ranges become disjoint segments that answer as the whole map: the more specific block wins', () => {
    assert.deepEqual(
      prefixSegments(
        [
          { start: 0n, end: 127n, country: 'FR' }, // one /25
          { start: 16n, end: 31n, country: 'SK' }, // a /28 inside it
          { start: 16n, end: 19n, country: 'FR' }, // a /30 inside that
          { start: 120n, end: 135n, country: 'US' }, // crosses the end of the first: /29 and /29
          { start: 128n, end: 143n, country: 'DE' }, // the second of them again: the US one came first
        ],
        8,
      ),
      [
        { start: 0n, end: 19n, country: 'FR' },
        { start: 20n, end: 31n, country: 'SK' },
        { start: 32n, end: 119n, country: 'FR' },
        { start: 120n, end: 135n, country: 'US' },
        { start: 136n, end: 143n, country: 'DE' },
      ],
    );
    fc.assert(
      fc.property(rangesArb, (ranges) => {
        const out = prefixSegments(ranges, 8);
        for (let i = 1; i < out.length; i++) assert.ok(out[i]!.start > out[i - 1]!.end, 'sorted and disjoint');
        const whole = asWholeMap(ranges, 8);
        for (let a = 0n; a < 256n; a++) assert.equal(segmentOf(out, a), whole(a), `address ${a}`);
      }),
      { numRuns: 300 },
    );
  });

  test('longest-prefix match over the fewest lines gives every address its range', () => {
    // All of an 8-bit space one country but one /4 of another: two lines, where one block a range
    // would take 5 (0-127, 128-191, 192-223, 224-239 and 240-255 around the /4).
    const lines = minimalPrefixes(
      [
        { start: 0n, end: 207n, country: 'AA' },
        { start: 208n, end: 223n, country: 'BB' },
        { start: 224n, end: 255n, country: 'AA' },
      ],
      8,
      OTHER_COUNTRY,
    );
    assert.deepEqual(lines, [
      { base: 0n, prefix: 0, value: 'AA' },
      { base: 208n, prefix: 4, value: 'BB' },
    ]);
    fc.assert(
      fc.property(rangesArb, (raw) => {
        const ranges = prefixSegments(raw, 8);
        const lines = minimalPrefixes(ranges, 8, OTHER_COUNTRY);
        const find = lookup(lines, 8);
        for (let a = 0n; a < 256n; a++) assert.equal(find(a) ?? OTHER_COUNTRY, segmentOf(ranges, a) ?? OTHER_COUNTRY, `address ${a}`);
        const blocks = ranges.reduce((n, r) => n + rangeToCidrs(r.start, r.end, 8).length, 0);
        assert.ok(lines.length <= blocks, `${lines.length} lines, ${blocks} blocks`);
      }),
      { numRuns: 500 },
    );
  });

  test("an operator's map reads as HAProxy's map_ip does: the more specific block wins, the first of two equal ones", async () => {
    const segments = ownMapSegments(
      [
        '# our offices',
        '10.0.0.0/8 AA',
        '10.1.0.0/16 BB',
        '',
        '10.1.0.0/16 CC',
        '10.1.2.3 CC',
        '  192.0.2.0/24   DD  ',
        '2001:db8::/32 EE',
        '2001:db8:1::/48 AA',
        'not-an-address XX',
        '10.0.0.0/33 XX',
        '10.2.0.0/ XX',
        '10.3.0.0/16',
      ].join('\n'),
    );
    const v4 = (t: string) => BigInt(t.split('.').reduce((n, o) => n * 256 + Number(o), 0));
    assert.deepEqual(
      segments[4].map((r) => [v4Text(r.start), v4Text(r.end), r.country]),
      [
        ['10.0.0.0', '10.0.255.255', 'AA'],
        ['10.1.0.0', '10.1.2.2', 'BB'],
        ['10.1.2.3', '10.1.2.3', 'CC'],
        ['10.1.2.4', '10.1.255.255', 'BB'],
        ['10.2.0.0', '10.255.255.255', 'AA'],
        ['192.0.2.0', '192.0.2.255', 'DD'],
      ],
    );
    assert.equal(segmentOf(segments[4], v4('10.3.0.1')), 'AA', 'a line without a value is skipped');
    assert.deepEqual(
      segments[6].map((r) => r.country),
      ['EE', 'AA', 'EE'],
    );
    assert.equal(segmentOf(segments[6], v6Number('2001:db8:1:0:0:0:0:5')), 'AA');
    // the value is the rest of the line, as HAProxy reads a map; a netmask is a number of bits
    const more = ownMapSegments('198.51.100.0/255.255.255.0 United States\n203.0.113.0/255.0.255.0 XX\n');
    assert.deepEqual(
      more[4].map((r) => [v4Text(r.start), v4Text(r.end), r.country]),
      [['198.51.100.0', '198.51.100.255', 'United States']],
      'a mask that is no prefix is skipped',
    );
  });

  test("the lookup of an address's country reads IPv6 as HAProxy's map_ip does: an IPv6 range first, then the IPv4 address an IPv6 one carries", () => {
    const segments = ownMapSegments('192.0.2.0/24 KP\n2001:db8::/32 IR\n::ffff:198.51.100.0/120 CN\n');
    const lookup = new CountryLookup(segments, new Set(['KP', 'IR', 'CN']));
    assert.equal(lookup.countryOf('192.0.2.7'), 'KP');
    assert.equal(lookup.countryOf('2001:db8::1'), 'IR');
    assert.equal(lookup.countryOf('::ffff:192.0.2.7'), 'KP', 'IPv4-mapped');
    assert.equal(lookup.countryOf('::192.0.2.7'), 'KP', 'IPv4-compatible');
    assert.equal(lookup.countryOf('2002:c000:0207::1'), 'KP', '6to4');
    assert.equal(lookup.countryOf('::ffff:198.51.100.1'), 'CN', 'an IPv6 range wins over the IPv4 address it carries');
    assert.equal(lookup.countryOf('2002:c633:6401::1'), undefined, '6to4 of an address in no range');
    assert.equal(new CountryLookup(segments, new Set(['IR'])).countryOf('192.0.2.7'), undefined, 'a country left out');
    assert.equal(lookup.countryOf('198.51.100.1'), 'CN', 'an IPv4 address in no IPv4 range, as the IPv4-mapped address');
  });

  test("an operator's map: a value over OWN_VALUE_MAX characters or a line HAProxy would not take is skipped, and counted with the values no block_country rule names", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-own-notes-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const own = join(dir, 'own.map');
    writeFileSync(own, ['10.0.0.0/8 CN', '11.0.0.0/8 RU\t# russia', '12.0.0.0/8 cn', `13.0.0.0/8 ${'X'.repeat(OWN_VALUE_MAX + 1)}`, '14.0.0.0/33 DE', 'nowhere FR', '15.0.0.0/8'].join('\n'));
    const segments = ownMapSegments(readFileSync(own, 'latin1'));
    assert.deepEqual(
      segments[4].map((r) => r.country),
      ['CN', 'RU\t# russia', 'cn'],
    );
    assert.deepEqual(await ownMapNotes(own), { skipped: 4, unlike: 2, examples: ['RU\t# russia', 'cn'] });
  });

  test('a map of IPv4 lines only keeps the IPv6 lines of IPv4-mapped addresses, which map_ip reads for an IPv4 address no IPv4 line holds: HAProxy answers every IPv4 address as with both families', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-v4-only-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const own = join(dir, 'own.map');
    writeFileSync(own, ['10.0.0.0/8 CN', '192.0.2.0/24 IR', '2001:db8::/32 IR', '::ffff:198.51.100.0/120 IR', '::ffff:203.0.113.0/120 CN'].join('\n'));
    const both = await ensureCountryClasses(dir, [refusedCountries(['IR'])], own);
    const v4 = await ensureCountryClasses(dir, [refusedCountries(['IR'])], own, false);
    assert.notEqual(v4.map, both.map);
    const lines = readFileSync(v4.map, 'utf8')
      .split('\n')
      .filter((l) => l && !l.startsWith('#'));
    assert.ok(!lines.some((l) => l.startsWith('2001:db8')), 'no IPv6 line of a range no IPv4 client is looked up in');
    assert.ok(
      lines.some((l) => l.startsWith('::ffff:') && l.endsWith(' c000')),
      `the IPv4-mapped range of IR: ${lines.join(', ')}`,
    );
    const ask = await mapLookup(dir, [both.map, v4.map]);
    for (const [address, expected] of [
      ['192.0.2.7', 'c000'],
      ['198.51.100.7', 'c000'],
      ['203.0.113.7', 'none'],
      ['10.1.2.3', 'none'],
      ['8.8.8.8', 'none'],
    ] as const) {
      const [inBoth, inV4] = (await ask(address)).split('|');
      assert.equal(inBoth === '-' ? 'none' : inBoth, expected, `${address} in the map of both families`);
      assert.equal(inV4 === '-' ? 'none' : inV4, expected, `${address} in the map of IPv4 lines`);
    }
  });

  test('a class map of no class (no country the tests hold for is in the data) is read back, not made again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-no-class-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const own = join(dir, 'own.map');
    writeFileSync(own, '10.0.0.0/8 CN\n');
    const first = await ensureCountryClasses(dir, [refusedCountries(['ZZ'])], own);
    assert.equal(first.classes.size, 0);
    assert.ok(readFileSync(first.map, 'utf8').startsWith('# end of classes\n'));
    const written = statSync(first.map).mtimeMs;
    assert.deepEqual((await ensureCountryClasses(dir, [refusedCountries(['ZZ'])], own)).classes, new Map());
    assert.equal(statSync(first.map).mtimeMs, written, 'read back, not written again');
  });

  test('a class map cut short, or whose header names a class out of its form, is made again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-damaged-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const own = join(dir, 'own.map');
    writeFileSync(own, '10.0.0.0/8 CN\n11.0.0.0/8 RU\n');
    const tests = [refusedCountries(['CN'])];
    const first = await ensureCountryClasses(dir, tests, own);
    const whole = readFileSync(first.map, 'utf8');
    assert.ok(whole.endsWith('\n# end of map\n'));
    writeFileSync(first.map, whole.slice(0, whole.indexOf('10.0.0.0/8')));
    assert.deepEqual((await ensureCountryClasses(dir, tests, own)).classes, first.classes);
    assert.equal(readFileSync(first.map, 'utf8'), whole, 'cut short: made again');
    writeFileSync(first.map, whole.replace('c000=CN', 'cX=CN'));
    assert.deepEqual((await ensureCountryClasses(dir, tests, own)).classes, first.classes);
    assert.equal(readFileSync(first.map, 'utf8'), whole, 'a class id out of its form: made again');
  });

  test("a class map from an operator's map: any value, classes over several comment lines, read back as written", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-own-classes-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    // 300 values, two of them with what the classes' lines use as separators
    const values = [...Array.from({ length: 298 }, (_, i) => `Country-${i}-of-a-rather-long-name`), 'A,B', 'C=D%'];
    const own = join(dir, 'own.map');
    writeFileSync(own, values.map((v, i) => `10.${i >> 8}.${i & 255}.0/24 ${v}\n`).join(''));
    const comparisons = values.map((v) => refusedCountries([v]));
    const first = await ensureCountryClasses(dir, comparisons, own);
    assert.equal(first.classes.size, 300);
    const text = readFileSync(first.map, 'utf8');
    const head = text.split('\n').slice(0, text.split('\n').indexOf('# end of classes'));
    assert.ok(head.length > 5 && head.every((l) => l.startsWith('# classes: ') && l.length <= 1100), `${head.length} comment lines`);
    const again = await ensureCountryClasses(dir, [...comparisons].reverse(), own);
    assert.equal(again.map, first.map);
    assert.deepEqual(again.classes, first.classes, 'read back from the file');
    // one class of all 300 (a domain refusing them all): its members over several lines too
    const one = await ensureCountryClasses(dir, [refusedCountries(values)], own);
    const oneHead = readFileSync(one.map, 'utf8').split('\n');
    assert.ok(oneHead.indexOf('# end of classes') > 5 && oneHead.slice(0, oneHead.indexOf('# end of classes')).every((l) => l.length <= 1100));
    assert.deepEqual((await ensureCountryClasses(dir, [refusedCountries([...values].reverse())], own)).classes, new Map(values.map((v) => [v, 'c000'])));
    const classOf = first.classes.get('A,B')!;
    assert.ok(
      text.split('\n').some((l) => /^10\.1\.4[0-3]\.0\/2[2-4] /.test(l) && l.endsWith(` ${classOf}`)),
      'its range has its class',
    );
  });

  describe('from the bundled data set', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rampart-country-map-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    // the six countries with the most lines in the data set
    const wanted = new Set(['US', 'CN', 'DE', 'GB', 'FR', 'JP']);
    /** The class map of one comparison per country (each its own class), and the country of a class. */
    const subsetMap = async (countries: string[]) => {
      const { map, classes } = await ensureCountryClasses(
        dir,
        countries.map((c) => refusedCountries([c])),
      );
      const byId = new Map([...classes].map(([c, k]) => [k, c]));
      return { file: map, country: (value: string) => byId.get(value) ?? value };
    };
    const parse = (text: string) =>
      text
        .trim()
        .split('\n')
        .filter((l) => !l.startsWith('#'))
        .map((l) => {
          const [cidr, value] = l.split(' ') as [string, string];
          const [ip, prefix] = cidr.split('/') as [string, string];
          const family = ip.includes(':') ? 6 : 4;
          return { family, line: { base: family === 4 ? BigInt(ip.split('.').reduce((n, o) => n * 256 + Number(o), 0)) : v6Number(ip), prefix: Number(prefix), value } };
        });
    const dataDir = dirname(createRequire(import.meta.url).resolve('@ip-location-db/geo-whois-asn-country/package.json'));
    const ranges = (family: 4 | 6): CountryRange[] =>
      readFileSync(join(dataDir, `geo-whois-asn-country-ipv${family}-num.csv`), 'latin1')
        .split(/\r?\n/)
        .filter(Boolean)
        .map((l) => l.split(','))
        .map(([a, b, c]) => ({ start: BigInt(a!), end: BigInt(b!), country: c! }));

    test('class maps of one class per country, of every country and of six, answer as one line per block did, in far fewer lines', async () => {
      // every country its own class: the map of every country
      const every = await subsetMap([...new Set([...ranges(4), ...ranges(6)].map((r) => r.country))]);
      const all = parse(readFileSync(every.file, 'utf8')).map((l) => ({ ...l, line: { ...l.line, value: every.country(l.line.value) } }));
      let blocks = 0;
      const { file: subsetFile, country } = await subsetMap(['JP', 'CN', 'DE', 'GB', 'FR', 'US', 'JP']);
      const subsetText = readFileSync(subsetFile, 'utf8');
      assert.deepEqual(subsetText.split('\n').slice(0, 2), ['# classes: c000=CN c001=DE c002=FR c003=GB c004=JP c005=US', '# end of classes'], 'the classes in the first lines');
      assert.ok(
        subsetText
          .split('\n')
          .slice(2)
          .every((l) => l === '' || l === '# end of map' || /^[0-9a-f.:]+\/\d{1,3} (c00[0-5]|-)$/.test(l)),
        'every other line is "<cidr> <class or ->"',
      );
      assert.equal((await subsetMap([...wanted])).file, (await subsetMap([...wanted].reverse())).file, 'one file per set of comparisons');
      const subset = parse(subsetText).map((l) => ({ ...l, line: { ...l.line, value: country(l.line.value) } }));
      let wholeNamed = 0; // the blocks of these countries
      for (const [family, bits] of [
        [4, 32],
        [6, 128],
      ] as const) {
        const inSubset = lookup(
          subset.filter((l) => l.family === family).map((l) => l.line),
          bits,
        );
        const inAll = lookup(
          all.filter((l) => l.family === family).map((l) => l.line),
          bits,
        );
        const data = ranges(family);
        // what one line per block gives (prefixSegments, proven against asWholeMap above), by binary search
        const segments = prefixSegments(data, bits);
        const inWhole = (a: bigint) => segmentAt(segments, a);
        for (const r of data) {
          const n = rangeToCidrs(r.start, r.end, bits).length;
          blocks += n;
          if (wanted.has(r.country)) wholeNamed += n;
        }
        // Both ends of every 61st range and the addresses either side, plus random ones
        const addresses = data.filter((_, i) => i % 61 === 0).flatMap((r) => [r.start - 1n, r.start, r.end, r.end + 1n]);
        for (let i = 0; i < 2000; i++) addresses.push(BigInt(`0x${Buffer.from(Array.from({ length: bits / 8 }, () => Math.floor(Math.random() * 256))).toString('hex')}`));
        let named = 0;
        for (const a of addresses) {
          if (a < 0n || a >= 1n << BigInt(bits)) continue;
          const country = inWhole(a);
          const expected = country && wanted.has(country) ? country : OTHER_COUNTRY;
          if (expected !== OTHER_COUNTRY) named++;
          assert.equal(inSubset(a) ?? OTHER_COUNTRY, expected, `IPv${family} address ${a.toString(16)}`);
          const inEvery = inAll(a);
          assert.equal(inEvery === OTHER_COUNTRY ? undefined : inEvery, country, `IPv${family} address ${a.toString(16)} in the map of every country`);
        }
        assert.ok(named > 100, `IPv${family}: ${named} of the addresses checked are in the countries named`);
      }
      assert.ok(subset.length < wholeNamed * 0.6, `${subset.length} lines, where one line per block took ${wholeNamed} for these countries`);
      assert.ok(all.length < blocks * 0.5, `${all.length} lines for every country, where one line per block took ${blocks}`);
    });

    test('a class map of countries treated alike has one class for them, in fewer lines; the lookup names the country', async () => {
      // one comparison of the six countries (a domain refusing them): one class
      const { map: file, classes } = await ensureCountryClasses(dir, [refusedCountries([...wanted])]);
      const text = readFileSync(file, 'utf8');
      assert.deepEqual(text.split('\n').slice(0, 2), ['# classes: c000=CN,DE,FR,GB,JP,US', '# end of classes']);
      assert.deepEqual([...new Set(classes.values())], ['c000']);
      assert.ok(
        text
          .split('\n')
          .slice(2)
          .every((l) => l === '' || l === '# end of map' || /^[0-9a-f.:]+\/\d{1,3} (c000|-)$/.test(l)),
        'every other line is "<cidr> c000" or "<cidr> -"',
      );
      const again = await ensureCountryClasses(dir, [refusedCountries(['US', 'JP', 'GB', 'FR', 'DE', 'CN', 'US'])]);
      assert.equal(again.map, file, 'one file per set of comparisons, in any order');
      assert.deepEqual(again.classes, classes, 'the classes read back from the first line');
      const countries = await countryLookup([...wanted, 'KP']);
      const set = parse(text);
      const subsetLines = parse(readFileSync((await subsetMap([...wanted])).file, 'utf8')).length;
      assert.ok(set.length < subsetLines * 0.9, `${set.length} lines, where the map telling the countries apart takes ${subsetLines}`);
      for (const [family, bits] of [
        [4, 32],
        [6, 128],
      ] as const) {
        const inSet = lookup(
          set.filter((l) => l.family === family).map((l) => l.line),
          bits,
        );
        const data = ranges(family);
        const segments = prefixSegments(data, bits);
        const addresses = data.filter((_, i) => i % 61 === 0).flatMap((r) => [r.start - 1n, r.start, r.end, r.end + 1n]);
        for (let i = 0; i < 2000; i++) addresses.push(BigInt(`0x${Buffer.from(Array.from({ length: bits / 8 }, () => Math.floor(Math.random() * 256))).toString('hex')}`));
        // An IPv6 address in no range that carries an IPv4 one (IPv4-mapped, IPv4-compatible, 6to4:
        // 2002::/16, which random addresses hit now and then) is named as that address, as map_ip does.
        const v4 = prefixSegments(ranges(4), 32);
        const carried = (a: bigint) => (a >> 32n === 0xffffn || a >> 32n === 0n ? a & 0xffffffffn : a >> 112n === 0x2002n ? (a >> 80n) & 0xffffffffn : undefined);
        const shown = (c: string | undefined) => (c !== undefined && (wanted.has(c) || c === 'KP') ? c : undefined);
        let named = 0;
        for (const a of addresses) {
          if (a < 0n || a >= 1n << BigInt(bits)) continue;
          const country = segmentAt(segments, a);
          const inside = country !== undefined && wanted.has(country);
          if (inside) named++;
          const text = family === 4 ? v4Text(a) : v6Text(a);
          assert.equal((inSet(a) ?? OTHER_COUNTRY) === 'c000', inside, `IPv${family} address ${text} (${country})`);
          const inner = family === 6 && shown(country) === undefined ? carried(a) : undefined;
          assert.equal(countries.countryOf(text), shown(country) ?? (inner === undefined ? undefined : shown(segmentAt(v4, inner))), `the country of ${text}`);
        }
        for (const [text, inner] of [
          ['2002:abba:89b:cdd6::1', 0xabba089bn],
          ['::ffff:171.186.8.155', 0xabba089bn],
        ] as const) {
          assert.equal(countries.countryOf(text), shown(segmentAt(v4, inner)), `${text}: as the IPv4 address it carries`);
        }
        assert.ok(named > 100, `IPv${family}: ${named} of the addresses checked are in the set`);
      }
      assert.equal(countries.countryOf(`::ffff:${v4Text(prefixSegments(ranges(4), 32).find((r) => r.country === 'KP')!.start)}`), 'KP', 'an IPv4-mapped address as its IPv4 one');
      assert.equal(countries.countryOf('not an address'), undefined);
    });

    test('HAProxy reads the lines as longest-prefix match: map_ip answers as the data set, in a class map of one class per country and of one for all', async () => {
      const { file } = await subsetMap([...wanted]);
      const lines = parse(readFileSync(file, 'utf8'));
      const setFile = (await ensureCountryClasses(dir, [refusedCountries([...wanted])])).map;
      const setLines = parse(readFileSync(setFile, 'utf8'));
      // addresses inside lines that sit inside other lines of another value: where the order of
      // reading could matter and only longest-prefix match gives the right answer
      const samples: string[] = [];
      for (const [family, bits] of [
        [4, 32],
        [6, 128],
      ] as const) {
        for (const map of [lines, setLines]) {
          const own = map.filter((l) => l.family === family).map((l) => l.line);
          const find = lookup(own, bits);
          const findOther = lookup(
            (map === lines ? setLines : lines).filter((l) => l.family === family).map((l) => l.line),
            bits,
          );
          const nested = own.filter((l) => (find(l.base, l.prefix) ?? l.value) !== l.value);
          for (const l of [...nested.filter((_, i) => i % Math.ceil(nested.length / 150) === 0), ...own.filter((_, i) => i % Math.ceil(own.length / 50) === 0)]) {
            for (const a of [l.base, l.base + (1n << BigInt(bits - l.prefix)) - 1n, l.base + (1n << BigInt(bits - l.prefix))]) {
              if (a >= 1n << BigInt(bits)) continue;
              const [inLines, inSet] = map === lines ? [find(a), findOther(a)] : [findOther(a), find(a)];
              samples.push(`${family === 4 ? v4Text(a) : v6Text(a)} ${inLines ?? 'none'}|${inSet ?? 'none'}`);
            }
          }
        }
      }
      const ask = await mapLookup(dir, [file, setFile]);
      assert.ok(samples.length > 1000, `${samples.length} addresses`);
      for (const s of samples) {
        const [address, expected] = s.split(' ') as [string, string];
        assert.equal(await ask(address), expected, address);
      }
    });
  });
});

/**
 * A real HAProxy answering, for the address a request names in X-Address, what `map_ip` finds in
 * each of `maps` ("none" for no line), joined by "|"; stopped after the test.
 */
async function mapLookup(dir: string, maps: readonly string[]): Promise<(address: string) => Promise<string>> {
  const port = await freePort();
  const cfg = join(dir, `lookup-${port}.cfg`);
  const found = maps.map((m) => `%[src,map_ip(${m},none)]`).join('|');
  writeFileSync(
    cfg,
    [
      'global',
      '    nbthread 1',
      'defaults',
      '    mode http',
      '    timeout client 10s',
      '    timeout server 10s',
      '    timeout connect 10s',
      'frontend lookup',
      `    bind 127.0.0.1:${port}`,
      '    http-request set-src hdr(x-address)',
      `    http-request return status 200 content-type text/plain lf-string "${found}"`,
      '',
    ].join('\n'),
  );
  const proc = startProcess(HAPROXY, ['-db', '-f', cfg]);
  after(() => proc.stop());
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  after(() => agent.destroy());
  const ask = (address: string) =>
    new Promise<string>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, agent, headers: { 'x-address': address } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve(body));
      });
      req.on('error', reject);
      req.end();
    });
  await waitFor(() => ask('127.0.0.1').catch(() => undefined), 'HAProxy to answer', 15_000);
  return ask;
}

function v6Number(text: string): bigint {
  const [head = '', tail] = text.split('::') as [string, string | undefined]; // as ipv6ToText writes it
  const groups = (s: string) => (s ? s.split(':') : []);
  const parts = tail === undefined ? groups(head) : [...groups(head), ...Array<string>(8 - groups(head).length - groups(tail).length).fill('0'), ...groups(tail)];
  return parts.reduce((n, g) => (n << 16n) | BigInt(parseInt(g, 16)), 0n);
}
const v4Text = (n: bigint) => [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.');
const v6Text = (n: bigint) =>
  n
    .toString(16)
    .padStart(32, '0')
    .replace(/(.{4})(?!$)/g, '$1:');
