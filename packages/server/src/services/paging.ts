import { isUuid } from '../values.js';
import { invalidField } from '../errors.js';

// Newest-first lists in pages (GET /api/notifications, GET /api/notifications/deliveries):
// `?limit=` entries per page, and `?before=<id>` for the page after that entry.

/** Entries per page: `?limit=`, by default 50, at most 200. */
export const PAGE_LIMIT = { default: 50, max: 200 } as const;

/** `?limit=` and `?before=` as the query string has them. */
export interface PageParams {
  limit?: string | undefined;
  before?: string | undefined;
}

export interface Page<T> {
  items: T[];
  /** The id to pass as `before` for the next page; null on the last page. */
  next: string | null;
}

/** A page size from the query string: PAGE_LIMIT.default when absent. */
export function pageLimit(limit: string | undefined): number {
  if (limit === undefined) return PAGE_LIMIT.default;
  const n = /^[0-9]{1,4}$/.test(limit) ? Number(limit) : NaN;
  if (!(n >= 1 && n <= PAGE_LIMIT.max)) throw invalidField('limit', `must be a whole number from 1 to ${PAGE_LIMIT.max}`);
  return n;
}

/**
 * Where a page continues, from `before` (an id from the previous page); undefined for the first
 * page. An id that is not a UUID, or not one of the account's, is a 400 naming `before`.
 */
export async function pageCursor<C>(before: string | undefined, find: (id: string) => Promise<C | undefined>, isId: (id: string) => boolean = isUuid): Promise<C | undefined> {
  if (before === undefined) return undefined;
  if (!isId(before)) throw invalidField('before', 'must be the id of an entry of the previous page');
  const cursor = await find(before.toLowerCase());
  if (!cursor) throw invalidField('before', 'no such entry in this account');
  return cursor;
}

/** The page of rows fetched one past `limit`, and the id the next page starts after. */
export function pageOf<R extends { id: string }, T>(rows: R[], limit: number, view: (r: R) => T): Page<T> {
  const items = rows.slice(0, limit);
  return { items: items.map(view), next: rows.length > limit ? items[items.length - 1]!.id : null };
}

/**
 * One page of a newest-first list: the page size and cursor from the query, the rows after the
 * cursor (`rows` is asked for one more than the page, to know whether another follows), each as
 * `view` shows it.
 */
export async function listPage<C, R extends { id: string }, T>(
  query: PageParams,
  cursorOf: (id: string) => Promise<C | undefined>,
  rows: (limit: number, before: C | undefined) => Promise<R[]>,
  view: (r: R) => T,
  /** What an id looks like (a UUID unless said): anything else as `before` is a 400. */
  isId?: (id: string) => boolean,
): Promise<Page<T>> {
  const limit = pageLimit(query.limit);
  const before = await pageCursor(query.before, cursorOf, isId);
  return pageOf(await rows(limit + 1, before), limit, view);
}
