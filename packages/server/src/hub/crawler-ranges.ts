import type { CrawlerAddressList } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { crawlerListsVersion, currentCrawlerLists } from '../services/crawler-ranges.js';

/**
 * What the hub tells its agents of the search crawlers' published lists (services/crawler-ranges.ts).
 * Any process's job may store new lists, so each hub reads their versions (which crawler's list
 * was fetched when: a small query) on every heartbeat sweep, and the lists themselves only when
 * the versions changed or one expired; its agents then get them all (crawlers/ranges).
 */
export class CrawlerRangesRelay {
  /** Nothing read yet counts as no lists: agents are told nothing until there are some. */
  private version = '';
  private current: CrawlerAddressList[] = [];
  private loading: Promise<boolean> | undefined;

  constructor(private readonly ctx: ServiceContext) {}

  /** The lists as last read. */
  get lists(): CrawlerAddressList[] {
    return this.current;
  }

  /** Reads the versions, and the lists when they changed; true when they did. */
  refresh(): Promise<boolean> {
    this.loading ??= this.load().finally(() => (this.loading = undefined));
    return this.loading;
  }

  private async load(): Promise<boolean> {
    const version = await crawlerListsVersion(this.ctx);
    if (version === this.version) return false;
    this.current = await currentCrawlerLists(this.ctx);
    this.version = version;
    return true;
  }
}
