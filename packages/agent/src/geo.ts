import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { canonicalIPv6, ipBits, isIPv4, type ServerSnapshot } from '@rampart/protocol';
import { countryBlocks, countryClasses, countryTestKey, countryTests, distinctCountryTests, refusedCountries, type CountryTest } from '@rampart/proxy';

// The CIDR -> country map HAProxy looks up natively (map_ip), generated from the CC0 data set
// @ip-location-db/geo-whois-asn-country shipped as an npm package. Never fetched at run time.

const require = createRequire(import.meta.url);

/** Splits an inclusive integer range into the fewest aligned CIDR blocks. */
export function rangeToCidrs(start: bigint, end: bigint, bits: number): { base: bigint; prefix: number }[] {
  const out: { base: bigint; prefix: number }[] = [];
  let cur = start;
  while (cur <= end) {
    // The largest block at cur: aligned (no more bits than cur's trailing zeros, all of them for
    // 0) and inside the range (no more than the bits of what is left). A few BigInt operations a
    // block instead of a few per bit: the IPv6 half of the country map is 216,000 ranges.
    const aligned = cur === 0n ? bits : bitLength(cur & -cur) - 1;
    const size = Math.min(aligned, bitLength(end - cur + 1n) - 1);
    out.push({ base: cur, prefix: bits - size });
    cur += 1n << BigInt(size);
  }
  return out;
}

/** The number of bits of a positive integer. */
const bitLength = (n: bigint) => n.toString(2).length;

/** An address of 128 bits in the one spelling of canonicalIPv6 (RFC 5952). */
export function ipv6ToText(n: bigint): string {
  const hex = n.toString(16).padStart(32, '0');
  return canonicalIPv6(hex.replace(/(.{4})(?!$)/g, '$1:'));
}

const ipv4Number = (n: number) => `${Math.floor(n / 16777216) % 256}.${Math.floor(n / 65536) % 256}.${Math.floor(n / 256) % 256}.${n % 256}`;

/** A range of addresses of one family, both ends included, and the country the data set gives it. */
export interface CountryRange {
  start: bigint;
  end: bigint;
  country: string;
}

/** The rows of one of the data set's CSV files ("<first>,<last>,<CC>", addresses as integers), in its order. */
async function readRanges(csv: string): Promise<CountryRange[]> {
  const out: CountryRange[] = [];
  // read whole (8 and 17 MB), which is several times faster than line by line through readline
  for (const line of (await readFile(csv, 'latin1')).split(/\r?\n/)) {
    const [a, b, cc] = line.split(',');
    if (!a || !b || !cc || !/^[A-Z]{2}$/.test(cc)) continue;
    out.push({ start: BigInt(a), end: BigInt(b), country: cc });
  }
  return out;
}

const DATA_FILES = { 4: 'geo-whois-asn-country-ipv4-num.csv', 6: 'geo-whois-asn-country-ipv6-num.csv' } as const;
const prefixText = (family: 4 | 6, base: bigint, prefix: number) => `${family === 4 ? ipv4Number(Number(base)) : ipv6ToText(base)}/${prefix}`;

export function countryDataDir(): string {
  return dirname(require.resolve('@ip-location-db/geo-whois-asn-country/package.json'));
}

/** What the names of the maps made from this version of the bundled data set start with: `country-<version>`. */
function bundledTag(): string {
  const version = (require('@ip-location-db/geo-whois-asn-country/package.json') as { version: string }).version;
  return `country-${version.replace(/[^0-9A-Za-z.]/g, '')}`;
}

/**
 * Whether HAProxy accepts IPv6 clients on a bind address as the renderer writes it (`*`, an IPv4
 * address, or a bracketed IPv6 one): `*` is every IPv4 address.
 */
export const bindsIPv6 = (address: string): boolean => address.startsWith('[');

/** The value of a map's lines for addresses of no country it names (never a country code or class). */
export const OTHER_COUNTRY = '-';

/**
 * The country map of a shield server: each address's class of countries (countryClasses:
 * countries that every test treats alike share one; the tests are each domain's refused countries
 * and every custom rule's test of ip.src.country), as few lines as longest-prefix match allows
 * (minimalPrefixes). An address of no class, or of no country, finds no line or a line whose value
 * is OTHER_COUNTRY, which no test holds for. HAProxy keeps about 290 bytes for each line: where a
 * map of the countries themselves took 399,000 lines for the 60 largest countries (and one line per
 * block of the data set 954,000, 278 MB), a class map of the same countries refused together takes
 * 97,000. The classes are written in the file's first lines (comments to HAProxy), so a restarted
 * agent reads them back without loading the data. Written once per data, format and tests.
 */
export async function ensureCountryClasses(dir: string, tests: readonly CountryTest[], own?: string, ipv6 = true): Promise<{ map: string; classes: Map<string, string> }> {
  const data = await countryData(own);
  // the distinct tests in one order, a list's values too (the classes depend on neither)
  const key = JSON.stringify(distinctCountryTests(tests).map(countryTestKey).sort());
  // CLASSES_FORMAT: a later agent that makes or reads the file otherwise makes its own; "-v4": the
  // IPv4 lines only, for an HAProxy that accepts no IPv6 client
  const out = join(dir, `${data.tag}-classes-${CLASSES_FORMAT}-${createHash('sha256').update(key).digest('hex').slice(0, 16)}${ipv6 ? '' : '-v4'}.map`);
  if (existsSync(out)) {
    const classes = await readClasses(out);
    if (classes) return { map: out, classes };
  }
  const segments = await data.load();
  const classes = countryClasses(
    tests,
    [...segments[4], ...segments[6]].map((r) => r.country),
  );
  const byClass = new Map<string, string[]>();
  for (const [c, id] of classes) {
    const members = byClass.get(id);
    if (members) members.push(c);
    else byClass.set(id, [c]);
  }
  // `# classes: c000=AR,BR c001=CN ...` (a value of an operator's map percent-encoded; a class's
  // members over several groups when they are many), in lines of at most about 1,000 bytes
  // (HAProxy reads a map's lines into a buffer of its buffer size), then `# end of classes`
  const groups: string[] = [];
  for (const [id, cs] of byClass) {
    let group = '';
    for (const c of cs.map(encodeURIComponent)) {
      if (group && group.length + c.length > 900) {
        groups.push(group);
        group = '';
      }
      group = group ? `${group},${c}` : `${id}=${c}`;
    }
    groups.push(group);
  }
  const header: string[] = [];
  for (const g of groups) {
    if (header.length && header[header.length - 1]!.length + g.length < 1000) header[header.length - 1] += ` ${g}`;
    else header.push(`# classes: ${g}`);
  }
  await writeMarked(dir, out, ipv6 ? segments : { 4: segments[4], 6: mappedOnly(segments[6]) }, (c) => classes.get(c) ?? OTHER_COUNTRY, [...header, CLASSES_END], [MAP_END]);
  return { map: out, classes };
}

/** IPv4-mapped IPv6 addresses, ::ffff:0:0/96. */
const MAPPED = { start: 0xffffn << 32n, end: (0xffffn << 32n) | 0xffffffffn };

/**
 * The IPv6 ranges an IPv4 client can still be looked up in: `map_ip` looks an IPv4 address that no
 * IPv4 line holds up again as its IPv4-mapped IPv6 address (::ffff:a.b.c.d). The bundled data has
 * no range there; an operator's own map may.
 */
function mappedOnly(ranges: readonly CountryRange[]): CountryRange[] {
  return ranges
    .filter((r) => r.end >= MAPPED.start && r.start <= MAPPED.end)
    .map((r) => ({ ...r, start: r.start > MAPPED.start ? r.start : MAPPED.start, end: r.end < MAPPED.end ? r.end : MAPPED.end }));
}

const CLASSES_END = '# end of classes';
/** A class map's last line: a file without it was cut short, and is made again. */
const MAP_END = '# end of map';
/** How far into a class map its header is looked for (a header of operator values grows with them). */
const HEADER_READ_MAX = 64 * 1024 * 1024;
/** The version of a class map's making and header, in its name. */
const CLASSES_FORMAT = 'v1';

/**
 * The classes a class map's first lines list, by country; undefined when the file is damaged (its
 * header not whole, a class id not of its form, or its last line not MAP_END: cut short), so that
 * it is made again.
 */
async function readClasses(path: string): Promise<Map<string, string> | undefined> {
  const file = await open(path, 'r');
  let head = '';
  try {
    const { size } = await file.stat();
    const tail = Buffer.alloc(Math.min(size, MAP_END.length + 1));
    await file.read(tail, 0, tail.length, size - tail.length);
    if (tail.toString('latin1') !== `${MAP_END}\n`) return undefined;
    // the header, read on until its end line (as far as HEADER_READ_MAX)
    const chunk = Buffer.alloc(256 * 1024);
    // (a line break before the text, so that a header of no class, the end line first, is found too)
    const endLine = `\n${CLASSES_END}\n`;
    let text = '\n';
    for (let at = 0; at < Math.min(size, HEADER_READ_MAX);) {
      const { bytesRead } = await file.read(chunk, 0, chunk.length, at);
      if (bytesRead === 0) break;
      const from = Math.max(0, text.length - endLine.length);
      text += chunk.subarray(0, bytesRead).toString('latin1');
      at += bytesRead;
      if (text.indexOf(endLine, from) >= 0) break;
    }
    head = text.slice(1);
  } finally {
    await file.close();
  }
  const lines = head.split('\n');
  const end = lines.indexOf(CLASSES_END);
  if (end < 0) return undefined;
  const out = new Map<string, string>();
  for (const line of lines.slice(0, end)) {
    const m = /^# classes:((?: \S+)*)$/.exec(line);
    if (!m) return undefined;
    for (const group of m[1]!.split(' ').filter(Boolean)) {
      const [id = '', members = ''] = group.split('=');
      if (!/^c[0-9]{3,5}$/.test(id)) return undefined;
      for (const c of members.split(',')) {
        if (!c) continue;
        try {
          out.set(decodeURIComponent(c), id);
        } catch {
          return undefined; // a damaged header: the map is made again
        }
      }
    }
  }
  return out;
}

/** Writes the map of `segments` under `value` (a country's; OTHER_COUNTRY for the rest) in as few lines as longest-prefix match allows. */
async function writeMarked(
  dir: string,
  out: string,
  segments: Record<4 | 6, readonly CountryRange[]>,
  value: (country: string) => string,
  header: readonly string[] = [],
  trailer: readonly string[] = [],
): Promise<string> {
  const lines: string[] = [...header];
  for (const family of [4, 6] as const) {
    const bits = family === 4 ? 32 : 128;
    const marked = joinTouching(segments[family].map((r) => ({ ...r, country: value(r.country) })));
    for (const p of minimalPrefixes(marked, bits, OTHER_COUNTRY)) lines.push(`${prefixText(family, p.base, p.prefix)} ${p.value}`);
  }
  return writeMap(dir, out, [...lines, ...trailer]);
}

/** Writes a map's lines to out whole (a file beside it, on disk before it is renamed over it) and returns out. */
async function writeMap(dir: string, out: string, lines: readonly string[]): Promise<string> {
  await mkdir(dir, { recursive: true });
  const file = await open(`${out}.tmp`, 'w');
  try {
    await file.writeFile(lines.length ? `${lines.join('\n')}\n` : '');
    await file.sync();
  } finally {
    await file.close();
  }
  await rename(`${out}.tmp`, out);
  return out;
}

/**
 * Removes the country maps in `dir` (ensureCountryClasses' files, older versions' maps, and any
 * a generation left half-written) that no configuration under `configRoot` reads, never `own` (the
 * operator's map): every set of countries rules have named left a file of up to 20 MB. The applier keeps the running and the
 * previous configuration (a rollback's), and the maps either names stay. Returns what it removed.
 */
export async function pruneCountryMaps(dir: string, configRoot: string, own?: string): Promise<string[]> {
  const maps = (await readdir(dir).catch(() => [] as string[])).filter((name) => /^country-.*\.map(?:\.tmp)?$/.test(name));
  if (maps.length === 0) return [];
  const configs: string[] = [];
  for (const name of await readdir(configRoot).catch(() => [] as string[])) {
    if (name.startsWith('cfg-')) configs.push(await readFile(join(configRoot, name, 'haproxy.cfg'), 'utf8').catch(() => ''));
  }
  const removed: string[] = [];
  for (const name of maps) {
    const path = join(dir, name);
    if (path === own) continue; // the operator's own map (--country-map), wherever it is kept
    if (configs.some((c) => c.includes(`(${path},`) || c.includes(`(${path})`))) continue;
    await rm(path, { force: true });
    removed.push(path);
  }
  return removed;
}

/**
 * The address space as the whole map gives it (the data set's ranges as CIDR blocks, read by
 * longest-prefix match), as disjoint sorted ranges. The data set lists exceptions inside larger
 * ranges (a /23 of one country in a /21 of another) and a few ranges that overlap the next: the
 * more specific block wins, and of two equal blocks the first listed (HAProxy keeps the first of
 * two equal keys). Ranges of one country that touch are joined.
 */
export function prefixSegments(ranges: readonly CountryRange[], bits: number): CountryRange[] {
  const out: CountryRange[] = [];
  // A range that meets no other is its own segment; only a cluster of ranges that overlap (a few
  // hundred of the data set's 550,000) is resolved block by block, its ranges in the order listed.
  const order = ranges.map((_, i) => i).sort((a, b) => byStartThenOuter(ranges[a]!, ranges[b]!) || a - b);
  for (let i = 0; i < order.length;) {
    const first = ranges[order[i]!]!;
    let end = first.end;
    let j = i + 1;
    for (; j < order.length && ranges[order[j]!]!.start <= end; j++) if (ranges[order[j]!]!.end > end) end = ranges[order[j]!]!.end;
    if (j === i + 1) append(out, first.start, first.end, first.country);
    else
      appendBlockSegments(
        out,
        order
          .slice(i, j)
          .sort((a, b) => a - b)
          .map((k) => ranges[k]!),
        bits,
      );
    i = j;
  }
  return out;
}

/** Start first; of two with one start, the longer (outer) one first. */
const byStartThenOuter = (a: CountryRange, b: CountryRange) => (a.start < b.start ? -1 : a.start > b.start ? 1 : a.end > b.end ? -1 : a.end < b.end ? 1 : 0);

/** Adds a segment to sorted disjoint ones, joined to the last when it continues it with the same country; an empty one adds nothing. */
function append(out: CountryRange[], start: bigint, end: bigint, country: string): void {
  if (start > end) return;
  const last = out[out.length - 1];
  if (last && last.country === country && last.end + 1n === start) last.end = end;
  else out.push({ start, end, country });
}

/** prefixSegments for ranges that overlap: every range as its CIDR blocks, the most specific block winning. */
function appendBlockSegments(out: CountryRange[], ranges: readonly CountryRange[], bits: number): void {
  const blocks: CountryRange[] = [];
  for (const r of ranges) for (const c of rangeToCidrs(r.start, r.end, bits)) blocks.push({ start: c.base, end: c.base + (1n << BigInt(bits - c.prefix)) - 1n, country: r.country });
  // outer blocks before the blocks inside them; equal blocks in the order listed (a stable sort)
  blocks.sort(byStartThenOuter);
  // The blocks around the current address, outermost first (blocks nest or are disjoint), and
  // the first address not yet written out.
  const open: CountryRange[] = [];
  let at = blocks[0]!.start;
  const closeBefore = (limit: bigint) => {
    while (open.length && open[open.length - 1]!.end < limit) {
      const top = open.pop()!;
      append(out, at, top.end, top.country);
      at = top.end + 1n;
    }
  };
  for (const [i, b] of blocks.entries()) {
    const prev = blocks[i - 1];
    if (prev && prev.start === b.start && prev.end === b.end) continue; // an equal block: the first stays
    closeBefore(b.start);
    const top = open[open.length - 1];
    if (top) append(out, at, b.start - 1n, top.country);
    at = b.start;
    open.push(b);
  }
  closeBefore(1n << BigInt(bits + 1));
}

/** One line of a prefix map: the block of `prefix` leading bits at `base`, and its value. */
export interface PrefixLine {
  base: bigint;
  prefix: number;
  value: string;
}

/**
 * The fewest prefix lines that give every address of a `bits`-bit space the value of the range
 * holding it (`none` outside every range) under longest-prefix match, as HAProxy's map_ip reads
 * them: the Optimal Routing Table Constructor (Draves, King, Venkatachary and Zill, "Constructing
 * Optimal IP Routing Tables", INFOCOM 1999). A block one range covers is a leaf; a block's set of
 * values is its halves' intersection when they share one, else their union (bottom up); then, top
 * down, a block writes a line only when the value it inherits is not in its set. `ranges` are
 * disjoint and sorted. A line whose value is `none` is written inside a block of another value
 * where that saves lines.
 */
export function minimalPrefixes(ranges: readonly CountryRange[], bits: number, none: string): PrefixLine[] {
  // A set of values is a bit mask over `names` (bit i: names[i]); a block is a Node (mask and
  // halves), or, when one value covers it, that value's shared leaf: 1.3 million blocks for the
  // 60 largest countries, so a block holds nothing else.
  const names = [none, ...new Set(ranges.map((r) => r.country).filter((c) => c !== none))];
  const index = new Map(names.map((n, i) => [n, i]));
  interface Node {
    mask: bigint;
    left?: Node;
    right?: Node;
  }
  const leaves = names.map((_, i): Node => ({ mask: 1n << BigInt(i) }));
  const leafOf = ranges.map((r) => leaves[index.get(r.country)!]!);
  // ranges[lo, hi) are those meeting the block of 2^size addresses at base
  const build = (base: bigint, size: number, lo: number, hi: number): Node => {
    if (lo >= hi) return leaves[0]!;
    const last = base + (1n << BigInt(size)) - 1n;
    if (hi - lo === 1 && ranges[lo]!.start <= base && ranges[lo]!.end >= last) return leafOf[lo]!;
    const mid = base + (1n << BigInt(size - 1));
    // the first range ending at mid or later (binary search: ends are sorted, as the ranges are disjoint)
    let split = lo;
    for (let top = hi; split < top;) {
      const m = (split + top) >> 1;
      if (ranges[m]!.end < mid) split = m + 1;
      else top = m;
    }
    const left = build(base, size - 1, lo, split < hi && ranges[split]!.start < mid ? split + 1 : split);
    const right = build(mid, size - 1, split, hi);
    if (left === right) return left; // one leaf: the whole block has one value
    const shared = left.mask & right.mask;
    return { mask: shared !== 0n ? shared : left.mask | right.mask, left, right };
  };
  const lowestBit = (mask: bigint) => (mask & -mask).toString(2).length - 1;
  const out: PrefixLine[] = [];
  const emit = (n: Node, base: bigint, prefix: number, inherited: number) => {
    let value = inherited;
    if ((n.mask & (1n << BigInt(inherited))) === 0n) {
      value = lowestBit(n.mask);
      out.push({ base, prefix, value: names[value]! });
    }
    if (n.left && n.right) {
      emit(n.left, base, prefix + 1, value);
      emit(n.right, base + (1n << BigInt(bits - prefix - 1)), prefix + 1, value);
    }
  };
  emit(build(0n, bits, 0, ranges.length), 0n, 0, 0);
  return out;
}

/** Where the country of an address comes from: the bundled data set, or an operator's `<cidr> <CC>` map (--country-map). */
interface CountryData {
  /** What the files made from it start with: `country-<data set version>`, or `country-own-<hash of the map>`. */
  tag: string;
  /** Disjoint sorted segments of each family, as longest-prefix match reads the source. */
  load: () => Promise<Record<4 | 6, CountryRange[]>>;
}

async function countryData(own: string | undefined): Promise<CountryData> {
  if (own === undefined) {
    const dataDir = countryDataDir();
    return {
      tag: bundledTag(),
      load: async () => ({
        4: prefixSegments(await readRanges(join(dataDir, DATA_FILES[4])), 32),
        6: prefixSegments(await readRanges(join(dataDir, DATA_FILES[6])), 128),
      }),
    };
  }
  const text = await readFile(own, 'latin1');
  const tag = `country-own-${createHash('sha256').update(text).digest('hex').slice(0, 16)}`;
  return { tag, load: () => Promise.resolve(ownMapSegments(text)) };
}

/** The longest value an operator's map line may have (longer lines are skipped). */
export const OWN_VALUE_MAX = 64;

/** What reading an operator's map found worth telling the operator (ownMapNotes). */
export interface OwnMapNotes {
  /** Lines skipped: no value, a value longer than OWN_VALUE_MAX, or no address HAProxy would take. */
  skipped: number;
  /** Values that are not two capital letters, which no block_country rule names (custom rules may). */
  unlike: number;
  examples: string[];
}

/** Reads an operator's map (--country-map) for what to tell its operator: see OwnMapNotes. */
export async function ownMapNotes(path: string): Promise<OwnMapNotes> {
  const notes: OwnMapNotes = { skipped: 0, unlike: 0, examples: [] };
  ownMapSegments(await readFile(path, 'latin1'), notes);
  return notes;
}

/**
 * An operator's map as HAProxy's map_ip reads it: `<address>[/<bits or netmask>] <value>` lines,
 * the value the rest of the line (blank lines and lines starting with # skipped), the most specific
 * block holding an address giving its value, and of two equal blocks the first listed
 * (prefixSegments). A line HAProxy would not take is skipped.
 */
export function ownMapSegments(text: string, notes?: OwnMapNotes): Record<4 | 6, CountryRange[]> {
  const ranges: Record<4 | 6, CountryRange[]> = { 4: [], 6: [] };
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^(\S+)\s+(.+)$/.exec(line);
    const [, key = '', value = ''] = m ?? [];
    // a value is a country code or a name: one of more than OWN_VALUE_MAX bytes is no country, and
    // would not fit the class map's header lines
    if (!m || value.length > OWN_VALUE_MAX) {
      if (notes) notes.skipped++;
      continue;
    }
    if (notes && !/^[A-Z]{2}$/.test(value)) {
      notes.unlike++;
      if (notes.examples.length < 3 && !notes.examples.includes(value)) notes.examples.push(value);
    }
    const [addr = '', len] = key.split('/');
    const bits = ipBits(addr);
    if (bits === undefined) {
      if (notes) notes.skipped++;
      continue;
    }
    // a netmask (255.255.255.0) as its number of bits, when it is one
    const mask = len !== undefined && isIPv4(len) && isIPv4(addr) ? ipBits(len)! : undefined;
    const prefix = mask !== undefined ? (/^1*0*$/.test(mask) ? (mask.indexOf('0') === -1 ? 32 : mask.indexOf('0')) : NaN) : len === undefined ? bits.length : Number(len);
    if (!Number.isInteger(prefix) || prefix < 0 || prefix > bits.length || len === '') {
      if (notes) notes.skipped++;
      continue;
    }
    const size = BigInt(bits.length - prefix);
    const start = (BigInt(`0b${bits}`) >> size) << size;
    ranges[isIPv4(addr) ? 4 : 6].push({ start, end: start + (1n << size) - 1n, country: value });
  }
  return { 4: prefixSegments(ranges[4], 32), 6: prefixSegments(ranges[6], 128) };
}

/**
 * Finds the country of an address in the segments of some countries (the others are left out):
 * how the agent names the block_country rule behind a refused address, which HAProxy's class map
 * (ensureCountryClasses) only says is in one of the refused countries. About 34 bytes a segment.
 */
export class CountryLookup {
  private readonly families: Record<4 | 6, { hi: BigUint64Array; lo: BigUint64Array; endHi: BigUint64Array; endLo: BigUint64Array; country: Uint16Array }>;
  private readonly names: string[];

  constructor(segments: Record<4 | 6, readonly CountryRange[]>, keep: ReadonlySet<string>) {
    this.names = [...keep].sort();
    const index = new Map(this.names.map((n, i) => [n, i]));
    const mask = (1n << 64n) - 1n;
    const pack = (list: readonly CountryRange[]) => {
      const kept = list.filter((r) => index.has(r.country));
      const f = {
        hi: new BigUint64Array(kept.length),
        lo: new BigUint64Array(kept.length),
        endHi: new BigUint64Array(kept.length),
        endLo: new BigUint64Array(kept.length),
        country: new Uint16Array(kept.length),
      };
      kept.forEach((r, i) => {
        f.hi[i] = r.start >> 64n;
        f.lo[i] = r.start & mask;
        f.endHi[i] = r.end >> 64n;
        f.endLo[i] = r.end & mask;
        f.country[i] = index.get(r.country)!;
      });
      return f;
    };
    this.families = { 4: pack(segments[4]), 6: pack(segments[6]) };
  }

  /**
   * The country of an address, undefined outside the kept countries. As HAProxy's map_ip: an IPv6
   * address found in no IPv6 range is looked up as the IPv4 address it carries, if it is
   * IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) or 6to4 (2002:aabb:ccdd::).
   */
  countryOf(ip: string): string | undefined {
    const bits = ipBits(ip);
    if (bits === undefined) return undefined;
    const n = BigInt(`0b${bits}`);
    // (an IPv4 address in no IPv4 range: as the IPv4-mapped IPv6 address, as map_ip does)
    if (bits.length === 32) return this.find(4, n) ?? this.find(6, (0xffffn << 32n) | n);
    const found = this.find(6, n);
    if (found !== undefined) return found;
    if (n >> 32n === 0xffffn || n >> 32n === 0n) return this.find(4, n & 0xffffffffn);
    if (n >> 112n === 0x2002n) return this.find(4, (n >> 80n) & 0xffffffffn);
    return undefined;
  }

  private find(family: 4 | 6, n: bigint): string | undefined {
    const f = this.families[family];
    const hi = n >> 64n;
    const lo = n & ((1n << 64n) - 1n);
    // the last segment starting at or before the address
    let a = 0;
    let b = f.hi.length;
    while (a < b) {
      const m = (a + b) >> 1;
      if (f.hi[m]! < hi || (f.hi[m] === hi && f.lo[m]! <= lo)) a = m + 1;
      else b = m;
    }
    const i = a - 1;
    if (i < 0 || f.endHi[i]! < hi || (f.endHi[i] === hi && f.endLo[i]! < lo)) return undefined;
    return this.names[f.country[i]!];
  }
}

/** The lookup of the last countryLookup call, by data and countries (built again only when they change). */
let lastLookup: { key: string; lookup: CountryLookup } | undefined;

/**
 * The lookup of an address's country among `countries` (those block_country rules refuse), from
 * the bundled data set or the operator's map: what names the rule of a country_blocked event,
 * which HAProxy cannot (a class of the country map may hold several countries). Loads the data
 * only when the data or the countries change.
 */
export async function countryLookup(countries: Iterable<string>, own?: string): Promise<CountryLookup> {
  const data = await countryData(own);
  const keep = [...new Set(countries)].sort();
  const key = `${data.tag}:${keep.join(',')}`;
  if (lastLookup?.key !== key) lastLookup = { key, lookup: new CountryLookup(await data.load(), new Set(keep)) };
  return lastLookup.lookup;
}

/** Segments with the same value that touch, joined (minimalPrefixes takes disjoint sorted ranges; fewer is faster). */
function joinTouching(ranges: readonly CountryRange[]): CountryRange[] {
  const out: CountryRange[] = [];
  for (const r of ranges) append(out, r.start, r.end, r.country);
  return out;
}

/** What the renderer needs about countries for a snapshot (countryOptions). */
export interface CountryOptions {
  /** The map HAProxy looks a client's country up in (RenderOptions.countryMap). */
  countryMap: string | undefined;
  /** Its classes (RenderOptions.countryClasses). */
  countryClasses: Map<string, string> | undefined;
}

/** Whether a snapshot needs the country map: a rule refuses a country, or a custom rule reads one. */
export function needsCountries(snapshot: Pick<ServerSnapshot, 'rules' | 'customRules' | 'domains'>): boolean {
  return countryBlocks(snapshot).size > 0 || countryTests(snapshot.customRules ?? []).length > 0;
}

/**
 * The country map a snapshot needs, written into `dir` where missing: one map for the whole
 * server, of classes of countries (ensureCountryClasses) that answer every domain's set of refused
 * countries and every test of the country in custom rules, from the bundled data set or the
 * operator's `own` map. With `ipv6` false (HAProxy listens on IPv4 addresses only, bindsIPv6), its
 * IPv6 lines are left out but for those of IPv4-mapped addresses (mappedOnly, which map_ip reads
 * for an IPv4 address no IPv4 line holds): most of the map's lines and memory (60% for the 48
 * countries of `npm run bench:waf`), which no client could ever be looked up in.
 */
export async function countryOptions(snapshot: Pick<ServerSnapshot, 'rules' | 'customRules' | 'domains'>, dir: string, own?: string, ipv6 = true): Promise<CountryOptions> {
  const refused = [...countryBlocks(snapshot).values()].map((m) => refusedCountries([...m.keys()]));
  const tests = [...refused, ...countryTests(snapshot.customRules ?? [])];
  const read = tests.length ? await ensureCountryClasses(dir, tests, own, ipv6) : undefined;
  return { countryMap: read?.map, countryClasses: read?.classes };
}
