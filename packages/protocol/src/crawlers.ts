import { isCidr, isIPv4 } from './validate.js';

/**
 * The major search crawlers a shield server lets past the bot challenge, once their address is
 * verified (docs/bots.md "Verified crawlers"): by the owner's published address list when the
 * control plane has a current one, otherwise by forward-confirmed reverse DNS (the PTR name of the
 * address lies under one of the names the owner documents for that crawler, and resolves back to
 * the same address). A User-Agent that merely names a crawler proves nothing; until its address is
 * verified, the client is treated like any other.
 *
 * `tokens`: lowercase substrings of the User-Agent that claim the crawler. `domains`: the DNS
 * suffixes the owner documents for that crawler's reverse names, and only those: a provider's
 * generic names (googleusercontent.com is the default reverse name of every Google Cloud machine)
 * would let anyone's rented machine pass. `addressLists`: the owner's published lists of the
 * crawler's address ranges (JSON `{ "prefixes": [{ "ipv4Prefix" | "ipv6Prefix": CIDR }] }`), the
 * control plane's default sources. `source`: where the owner documents both.
 */
export interface SearchCrawler {
  id: string;
  name: string;
  tokens: readonly string[];
  domains: readonly string[];
  addressLists: readonly string[];
  source: string;
}

const GOOGLE_LISTS = 'https://developers.google.com/static/search/apis/ipranges';

export const SEARCH_CRAWLERS: readonly SearchCrawler[] = [
  {
    id: 'google',
    name: 'Googlebot',
    tokens: ['googlebot', 'adsbot-google', 'mediapartners-google', 'google-inspectiontool', 'storebot-google'],
    // crawl-*.googlebot.com and geo-crawl-*.geo.googlebot.com (common crawlers), rate-limited-proxy-*.google.com (special-case crawlers: AdsBot, Mediapartners)
    domains: ['googlebot.com', 'google.com'],
    addressLists: [`${GOOGLE_LISTS}/googlebot.json`, `${GOOGLE_LISTS}/special-crawlers.json`],
    source: 'https://developers.google.com/search/docs/crawling-indexing/verifying-googlebot',
  },
  {
    id: 'bing',
    name: 'Bingbot',
    tokens: ['bingbot', 'adidxbot', 'bingpreview'],
    domains: ['search.msn.com'],
    addressLists: ['https://www.bing.com/toolbox/bingbot.json'],
    source: 'https://www.bing.com/webmasters/help/how-to-verify-bingbot-3905dc26',
  },
  {
    id: 'yandex',
    name: 'YandexBot',
    tokens: ['yandexbot', 'yandeximages', 'yandexmobilebot'],
    domains: ['yandex.ru', 'yandex.net', 'yandex.com'],
    addressLists: [],
    source: 'https://yandex.com/support/webmaster/robot-workings/check-yandex-robots.html',
  },
  {
    id: 'baidu',
    name: 'Baiduspider',
    tokens: ['baiduspider'],
    domains: ['baidu.com', 'baidu.jp'],
    addressLists: [],
    source: 'https://www.baidu.com/search/spider_english.html',
  },
  {
    id: 'apple',
    name: 'Applebot',
    tokens: ['applebot'],
    domains: ['applebot.apple.com'],
    addressLists: ['https://search.developer.apple.com/applebot.json'],
    source: 'https://support.apple.com/en-us/119829',
  },
  {
    id: 'yahoo',
    name: 'Yahoo Slurp',
    tokens: ['slurp'],
    domains: ['crawl.yahoo.net'],
    addressLists: [],
    source: 'http://www.ysearchblog.com/2007/06/05/yahoo-search-crawler-slurp-has-a-new-address-and-signature-card/',
  },
];

const BY_ID = new Map(SEARCH_CRAWLERS.map((c) => [c.id, c]));

export function searchCrawler(id: string): SearchCrawler | undefined {
  return BY_ID.get(id);
}

/** Whether a reverse name lies under one of the crawler's domains (the name itself or a subdomain). */
export function underCrawlerDomain(crawler: SearchCrawler, name: string): boolean {
  const n = name.toLowerCase().replace(/\.$/, '');
  return crawler.domains.some((d) => n === d || n.endsWith(`.${d}`));
}

/**
 * The shortest prefixes a published list may hold (IPv4 /8, IPv6 /32): a list naming a wider
 * network is refused as a whole (a broken or tampered source must not verify half the Internet).
 */
export const CRAWLER_PREFIX_MIN_BITS = { v4: 8, v6: 32 } as const;
/** Prefixes one crawler's lists may hold together. */
export const CRAWLER_PREFIXES_MAX = 5000;

/** A prefix of a published list as the agent takes it: a CIDR with its length, within the bounds above. */
export function isCrawlerPrefix(value: string): boolean {
  if (typeof value !== 'string' || !isCidr(value) || !value.includes('/')) return false;
  const [addr, bits] = value.split('/') as [string, string];
  return Number(bits) >= (isIPv4(addr) ? CRAWLER_PREFIX_MIN_BITS.v4 : CRAWLER_PREFIX_MIN_BITS.v6);
}

/**
 * The prefixes of one published list (Google's and Bing's format: `{ "prefixes": [{ "ipv4Prefix":
 * "66.249.64.0/27" }, { "ipv6Prefix": "2001:4860:4801:10::/64" }] }`), or why it is refused. Every
 * entry must be one valid prefix: one bad entry refuses the whole list.
 */
export function parseCrawlerAddressList(value: unknown): { ok: true; prefixes: string[] } | { ok: false; error: string } {
  const prefixes = (value as { prefixes?: unknown } | null)?.prefixes;
  if (typeof value !== 'object' || value === null || !Array.isArray(prefixes)) return { ok: false, error: 'no "prefixes" array' };
  if (prefixes.length > CRAWLER_PREFIXES_MAX) return { ok: false, error: `more than ${CRAWLER_PREFIXES_MAX} prefixes` };
  const out: string[] = [];
  for (const [i, entry] of prefixes.entries()) {
    const e = entry as { ipv4Prefix?: unknown; ipv6Prefix?: unknown } | null;
    const v4 = typeof e?.ipv4Prefix === 'string' && isIPv4(e.ipv4Prefix.split('/')[0]!);
    const prefix = v4 ? e.ipv4Prefix : e?.ipv6Prefix;
    if (typeof prefix !== 'string' || !isCrawlerPrefix(prefix) || (!v4 && isIPv4(prefix.split('/')[0]!))) {
      return { ok: false, error: `prefixes[${i}] is not an IPv4 prefix of /${CRAWLER_PREFIX_MIN_BITS.v4} or longer nor an IPv6 prefix of /${CRAWLER_PREFIX_MIN_BITS.v6} or longer` };
    }
    out.push(prefix);
  }
  return { ok: true, prefixes: out };
}
