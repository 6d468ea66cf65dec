import { CRAWLER_PREFIXES_MAX, parseCrawlerAddressList, SEARCH_CRAWLERS, searchCrawler, type CrawlerAddressList } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { crawlerListVersions, crawlerLists, deleteCrawlerListsExcept, saveCrawlerList } from '../data/crawler-lists.js';
import { jobIntervalFromEnv } from '../jobs.js';

/**
 * The search crawlers' published address lists (docs/bots.md "Verified crawlers"): Google, Bing
 * and Apple publish the ranges their crawlers use. The crawler-ranges job fetches each configured
 * crawler's lists, checks them (protocol parseCrawlerAddressList) and stores their union; the hub
 * hands the current ones to every agent, which verifies a claim from inside them without DNS.
 * A list is used for CRAWLER_LIST_MAX_AGE_MS after its last successful fetch, then dropped (the
 * agents fall back to reverse DNS for that crawler).
 */

/** How long a list stays in use after it was last fetched: 7 days. */
export const CRAWLER_LIST_MAX_AGE_MS = 7 * 86_400_000;
/** The default interval of the job: 6 hours. */
export const CRAWLER_RANGES_INTERVAL_DEFAULT = 6 * 3600;
/** Bytes of one published list (Google's is about 30 KB). */
const LIST_MAX_BYTES = 2 * 1024 * 1024;
const FETCH_TIMEOUT_MS = 15_000;

export interface CrawlerRangesConfig {
  /** Crawler id -> the URLs of its published lists: together they make its list. */
  sources: ReadonlyMap<string, readonly string[]>;
  intervalMs: number;
}

/** The owners' own lists (protocol SEARCH_CRAWLERS addressLists). */
export function defaultCrawlerSources(): Map<string, readonly string[]> {
  return new Map(SEARCH_CRAWLERS.filter((c) => c.addressLists.length > 0).map((c) => [c.id, c.addressLists]));
}

/**
 * RAMPART_CRAWLER_RANGES: unset or blank, the owners' lists; `off`, none; otherwise `id=URL`
 * entries separated by commas or blanks (a crawler named twice has all its URLs fetched), each id
 * a known crawler and each URL http or https. RAMPART_CRAWLER_RANGES_INTERVAL: seconds between
 * fetches (6 h by default, at most a day). Anything else throws naming the variable.
 */
export function crawlerRangesConfigFromEnv(env: NodeJS.ProcessEnv): CrawlerRangesConfig | null {
  const raw = (env.RAMPART_CRAWLER_RANGES ?? '').trim();
  const intervalMs = jobIntervalFromEnv('RAMPART_CRAWLER_RANGES_INTERVAL', env.RAMPART_CRAWLER_RANGES_INTERVAL, CRAWLER_RANGES_INTERVAL_DEFAULT) * 1000;
  if (raw === 'off') return null;
  if (raw === '') return { sources: defaultCrawlerSources(), intervalMs };
  const sources = new Map<string, string[]>();
  for (const entry of raw.split(/[\s,]+/).filter(Boolean)) {
    const eq = entry.indexOf('=');
    const id = entry.slice(0, Math.max(eq, 0));
    const url = entry.slice(eq + 1);
    let protocol = '';
    try {
      protocol = new URL(url).protocol;
    } catch {
      // reported below
    }
    if (eq <= 0 || !searchCrawler(id) || (protocol !== 'http:' && protocol !== 'https:')) {
      throw new Error(
        `RAMPART_CRAWLER_RANGES must be "off" or entries <crawler>=<http(s) URL> with a crawler among ${SEARCH_CRAWLERS.map((c) => c.id).join(', ')}; ${JSON.stringify(entry.slice(0, 40))} is not one`,
      );
    }
    sources.set(id, [...(sources.get(id) ?? []), url]);
  }
  return { sources, intervalMs };
}

/** Where a URL points, for logs: its origin only (a configured URL's path or query may hold a key). */
function origin(url: string): string {
  return new URL(url).origin;
}

type Fetched = { ok: true; prefixes: string[] } | { ok: false; error: string };

/** One published list: fetched, size-capped, parsed and checked. */
async function fetchList(url: string, fetchFn: typeof fetch): Promise<Fetched> {
  let text: string;
  try {
    const res = await fetchFn(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), headers: { accept: 'application/json' } });
    if (!res.ok) return { ok: false, error: `${origin(url)} answered ${res.status}` };
    text = await readCapped(res, LIST_MAX_BYTES);
  } catch (err) {
    return { ok: false, error: `${origin(url)}: ${(err as Error).name === 'TimeoutError' ? 'timed out' : (err as Error).message}` };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, error: `${origin(url)}: not JSON` };
  }
  const parsed = parseCrawlerAddressList(value);
  return parsed.ok ? parsed : { ok: false, error: `${origin(url)}: ${parsed.error}` };
}

/** A response's body as text, refused past `max` bytes. */
async function readCapped(res: Response, max: number): Promise<string> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body ?? []) {
    size += chunk.byteLength;
    if (size > max) throw new Error(`longer than ${max} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * One run of the job: each configured crawler's lists are fetched; when all of them are good,
 * their union is stored, otherwise the stored list stays as it was (a partial list would refuse
 * real crawlers) and the failure is logged. Lists of crawlers no longer configured are deleted.
 */
export async function runCrawlerRangesJob(
  ctx: ServiceContext,
  config: CrawlerRangesConfig,
  log: { warn(msg: string): void },
  fetchFn: typeof fetch = fetch,
): Promise<{ stored: string[]; failed: string[] }> {
  const stored: string[] = [];
  const failed: string[] = [];
  for (const [id, urls] of config.sources) {
    const results = await Promise.all(urls.map((u) => fetchList(u, fetchFn)));
    const errors = results.flatMap((r) => (r.ok ? [] : [r.error]));
    const prefixes = [...new Set(results.flatMap((r) => (r.ok ? r.prefixes : [])))].sort();
    if (errors.length === 0 && prefixes.length > CRAWLER_PREFIXES_MAX) errors.push(`more than ${CRAWLER_PREFIXES_MAX} prefixes together`);
    if (errors.length > 0) {
      failed.push(id);
      log.warn(`the published address list of crawler ${id} was not updated: ${errors.join('; ')}`);
      continue;
    }
    await saveCrawlerList(ctx.db, id, prefixes, urls, ctx.now());
    stored.push(id);
  }
  await deleteCrawlerListsExcept(ctx.db, [...config.sources.keys()]);
  return { stored, failed };
}

/** The lists agents use now (those fetched within CRAWLER_LIST_MAX_AGE_MS), with their expiry. */
export async function currentCrawlerLists(ctx: ServiceContext): Promise<CrawlerAddressList[]> {
  const now = ctx.now().getTime();
  return (await crawlerLists(ctx.db))
    .map((l) => ({ crawlerId: l.crawlerId, prefixes: l.prefixes, expiresAt: Math.floor((l.fetchedAt.getTime() + CRAWLER_LIST_MAX_AGE_MS) / 1000) }))
    .filter((l) => l.expiresAt * 1000 > now);
}

/** A word that changes whenever the stored lists that are still fresh change (the hub resends them then). */
export async function crawlerListsVersion(ctx: ServiceContext): Promise<string> {
  const now = ctx.now().getTime();
  return (await crawlerListVersions(ctx.db))
    .filter((v) => v.fetchedAt.getTime() + CRAWLER_LIST_MAX_AGE_MS > now)
    .map((v) => `${v.crawlerId}@${v.fetchedAt.toISOString()}`)
    .join(',');
}
