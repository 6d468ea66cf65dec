import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { canonicalIPv6, parseRuleExpression, ruleCountries, type ServerSnapshot } from '@rampart/protocol';

// The CIDR -> country map HAProxy looks up natively (map_ip), generated from the CC0 data set
// @ip-location-db/geo-whois-asn-country shipped as an npm package. Never fetched at run time.

const require = createRequire(import.meta.url);

/** Splits an inclusive integer range into the fewest aligned CIDR blocks. */
export function rangeToCidrs(start: bigint, end: bigint, bits: number): { base: bigint; prefix: number }[] {
  const out: { base: bigint; prefix: number }[] = [];
  let cur = start;
  while (cur <= end) {
    let size = 0;
    // grow the block while it stays aligned and inside the range
    while (size < bits && (cur & ((1n << BigInt(size + 1)) - 1n)) === 0n && cur + (1n << BigInt(size + 1)) - 1n <= end) size++;
    out.push({ base: cur, prefix: bits - size });
    cur += 1n << BigInt(size);
  }
  return out;
}

/** An address of 128 bits in the one spelling of canonicalIPv6 (RFC 5952). */
export function ipv6ToText(n: bigint): string {
  const groups: string[] = [];
  for (let i = 7; i >= 0; i--) groups.push(((n >> BigInt(i * 16)) & 0xffffn).toString(16));
  return canonicalIPv6(groups.join(':'));
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
  const rl = createInterface({ input: createReadStream(csv), crlfDelay: Infinity });
  for await (const line of rl) {
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
  const lines: string[] = [];
  const rl = createInterface({ input: createReadStream(full), crlfDelay: Infinity });
  for await (const line of rl) if (keep.has(line.slice(-2))) lines.push(line);
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
