/**
 * The major search crawlers a shield server lets past the bot challenge, once their address is
 * verified by forward-confirmed reverse DNS: the PTR name of the address lies under one of the
 * crawler's documented domains and that name resolves back to the same address. A User-Agent
 * that merely names a crawler proves nothing; until its address is verified, the client is treated
 * like any other.
 *
 * `tokens`: lowercase substrings of the User-Agent that claim the crawler. `domains`: the DNS
 * suffixes the operator documents for its crawlers' reverse names.
 */
export interface SearchCrawler {
  id: string;
  name: string;
  tokens: readonly string[];
  domains: readonly string[];
}

export const SEARCH_CRAWLERS: readonly SearchCrawler[] = [
  { id: 'google', name: 'Googlebot', tokens: ['googlebot', 'adsbot-google', 'mediapartners-google', 'google-inspectiontool', 'storebot-google'], domains: ['googlebot.com', 'google.com', 'googleusercontent.com'] },
  { id: 'bing', name: 'Bingbot', tokens: ['bingbot', 'adidxbot', 'bingpreview'], domains: ['search.msn.com'] },
  { id: 'yandex', name: 'YandexBot', tokens: ['yandexbot', 'yandeximages', 'yandexmobilebot'], domains: ['yandex.ru', 'yandex.net', 'yandex.com'] },
  { id: 'baidu', name: 'Baiduspider', tokens: ['baiduspider'], domains: ['baidu.com', 'baidu.jp'] },
  { id: 'apple', name: 'Applebot', tokens: ['applebot'], domains: ['applebot.apple.com'] },
  { id: 'yahoo', name: 'Yahoo Slurp', tokens: ['slurp'], domains: ['crawl.yahoo.net'] },
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
