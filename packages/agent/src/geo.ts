import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { canonicalIPv6, parseRuleExpression, ruleCountries, type ServerSnapshot } from '@rampart/protocol';

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

/** rangeToCidrs for IPv4 in plain numbers (exact below 2^53), several times faster than BigInt. */
export function rangeToCidrs4(start: number, end: number): { base: number; prefix: number }[] {
  const out: { base: number; prefix: number }[] = [];
  let cur = start;
  while (cur <= end) {
    let size = 0;
    while (size < 32 && cur % 2 ** (size + 1) === 0 && cur + 2 ** (size + 1) - 1 <= end) size++;
    out.push({ base: cur, prefix: 32 - size });
    cur += 2 ** size;
  }
  return out;
}

const ipv4Number = (n: number) => `${Math.floor(n / 16777216) % 256}.${Math.floor(n / 65536) % 256}.${Math.floor(n / 256) % 256}.${n % 256}`;

async function convert(csv: string, family: 4 | 6, lines: string[]): Promise<void> {
  // read whole (8 and 17 MB), which is several times faster than line by line through readline
  for (const line of (await readFile(csv, 'latin1')).split(/\r?\n/)) {
    const [a, b, cc] = line.split(',');
    if (!a || !b || !cc || !/^[A-Z]{2}$/.test(cc)) continue;
    if (family === 4) for (const c of rangeToCidrs4(Number(a), Number(b))) lines.push(`${ipv4Number(c.base)}/${c.prefix} ${cc}`);
    else for (const c of rangeToCidrs(BigInt(a), BigInt(b), 128)) lines.push(`${ipv6ToText(c.base)}/${c.prefix} ${cc}`);
  }
}

export function countryDataDir(): string {
  return dirname(require.resolve('@ip-location-db/geo-whois-asn-country/package.json'));
}

export function countryMapPath(dir: string): string {
  const version = (require('@ip-location-db/geo-whois-asn-country/package.json') as { version: string }).version;
  return join(dir, `country-${version.replace(/[^0-9A-Za-z.]/g, '')}.map`);
}

/**
 * Writes (once per data set version) the map countryMapPath(dir) names and returns its path.
 * IPv4 and IPv6 ranges become CIDR lines "<cidr> <CC>".
 */
export async function ensureCountryMap(dir: string): Promise<string> {
  const dataDir = countryDataDir();
  const out = countryMapPath(dir);
  if (existsSync(out)) return out;
  const lines: string[] = [];
  await convert(join(dataDir, 'geo-whois-asn-country-ipv4-num.csv'), 4, lines);
  await convert(join(dataDir, 'geo-whois-asn-country-ipv6-num.csv'), 6, lines);
  await mkdir(dir, { recursive: true });
  await writeFile(`${out}.tmp`, `${lines.join('\n')}\n`);
  await rename(`${out}.tmp`, out);
  return out;
}

/**
 * The map HAProxy actually loads: only the blocks of the countries that rules name (a few MB
 * instead of about a million lines for the whole world). Cached per set of countries.
 */
export async function ensureCountrySubset(dir: string, countries: readonly string[]): Promise<string> {
  const wanted = [...new Set(countries)].filter((c) => /^[A-Z]{2}$/.test(c)).sort();
  const full = await ensureCountryMap(dir);
  const tag = createHash('sha256').update(wanted.join(',')).digest('hex').slice(0, 16);
  const out = full.replace(/\.map$/, `-${tag}.map`);
  if (existsSync(out)) return out;
  const keep = new Set(wanted);
  const lines = (await readFile(full, 'latin1')).split('\n').filter((line) => keep.has(line.slice(-2)));
  await writeFile(`${out}.tmp`, lines.length ? `${lines.join('\n')}\n` : '');
  await rename(`${out}.tmp`, out);
  return out;
}

/**
 * The countries a snapshot's rules look up: those of block_country rules and those its custom
 * rules compare ip.src.country with; 'all' when a custom rule reads the country in a way a list
 * cannot answer (then the whole map is loaded).
 */
export function countriesOf(snapshot: Pick<ServerSnapshot, 'rules' | 'customRules'>): string[] | 'all' {
  const out = snapshot.rules.filter((r) => r.type === 'block_country').map((r) => r.value);
  for (const rule of snapshot.customRules ?? []) {
    const parsed = parseRuleExpression(rule.expression);
    if (!parsed.ok) continue; // the proxy refuses it too
    const named = ruleCountries(parsed.expr);
    if (named === 'all') return 'all';
    out.push(...named);
  }
  return out;
}
