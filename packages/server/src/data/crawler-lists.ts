import type { Database } from '../db/database.js';

// The search crawlers' published address lists the control plane fetched (services/crawler-ranges.ts).

export interface StoredCrawlerList {
  crawlerId: string;
  prefixes: string[];
  fetchedAt: Date;
}

/** Stores a crawler's list as just fetched (replacing the one before). */
export async function saveCrawlerList(db: Database, crawlerId: string, prefixes: readonly string[], sources: readonly string[], fetchedAt: Date): Promise<void> {
  const row = { prefixes: JSON.stringify(prefixes), sources: JSON.stringify(sources), fetched_at: fetchedAt };
  await db
    .insertInto('crawler_address_lists')
    .values({ crawler_id: crawlerId, ...row })
    .onConflict((oc) => oc.column('crawler_id').doUpdateSet(row))
    .execute();
}

/** Forgets the lists of crawlers no longer configured. */
export async function deleteCrawlerListsExcept(db: Database, crawlerIds: readonly string[]): Promise<void> {
  let q = db.deleteFrom('crawler_address_lists');
  if (crawlerIds.length > 0) q = q.where('crawler_id', 'not in', [...crawlerIds]);
  await q.execute();
}

/** Which list was fetched when: cheap to read often, it changes whenever a list is stored. */
export async function crawlerListVersions(db: Database): Promise<{ crawlerId: string; fetchedAt: Date }[]> {
  const rows = await db.selectFrom('crawler_address_lists').select(['crawler_id', 'fetched_at']).orderBy('crawler_id').execute();
  return rows.map((r) => ({ crawlerId: r.crawler_id, fetchedAt: new Date(r.fetched_at) }));
}

export async function crawlerLists(db: Database): Promise<StoredCrawlerList[]> {
  const rows = await db.selectFrom('crawler_address_lists').select(['crawler_id', 'prefixes', 'fetched_at']).orderBy('crawler_id').execute();
  return rows.map((r) => ({ crawlerId: r.crawler_id, prefixes: JSON.parse(r.prefixes) as string[], fetchedAt: new Date(r.fetched_at) }));
}
