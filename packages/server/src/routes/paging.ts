import { Type, type Static, type TObject, type TSchema } from '@sinclair/typebox';
import { PageQuery } from '../schemas.js';
import type { Page, PageParams } from '../services/paging.js';
import { ERROR_RESPONSES, SECURITY, type App } from './types.js';

// Newest-first lists in pages (services/paging.ts): the body is the page's array, and the Link
// header names the next page.

export const PAGING_DESCRIPTION =
  'Newest first, `limit` per page (1 to 200, default 50). When there are more, the `Link` header names the next page: ' +
  '`<...?limit=N&before=ID>; rel="next"`, where ID is the last entry of this page.';

/** The Link header value for the page after this one, or undefined on the last page. */
export function nextPageLink(path: string, page: Page<unknown>, limit: string | undefined, filters: Record<string, string | undefined> = {}): string | undefined {
  if (!page.next) return undefined;
  const kept = Object.entries(filters).filter((e): e is [string, string] => e[1] !== undefined && e[0] !== 'limit' && e[0] !== 'before');
  const query = new URLSearchParams([...kept, ...(limit !== undefined ? [['limit', limit]] : []), ['before', page.next]]);
  return `<${path}?${query.toString()}>; rel="next"`;
}

/**
 * GET `path`: the account's list, a page at a time, each entry as `item`. With `filters` (a
 * querystring schema holding PageQuery's fields and more), the Link header keeps the filters.
 */
export function pagedListRoute<T extends TSchema, Q extends TObject = typeof PageQuery>(
  app: App,
  path: string,
  doc: { tags: string[]; summary: string; description?: string },
  item: T,
  list: (accountId: string, query: Static<Q>) => Promise<Page<Static<T>>>,
  filters?: Q,
): void {
  // Typed as PageQuery for the route (the filters are strings the list checks itself).
  const querystring = (filters ?? PageQuery) as unknown as typeof PageQuery;
  app.get(path, {
    schema: {
      tags: doc.tags,
      summary: doc.summary,
      security: SECURITY,
      description: doc.description ? `${doc.description} ${PAGING_DESCRIPTION}` : PAGING_DESCRIPTION,
      querystring,
      response: { 200: Type.Array(item), ...ERROR_RESPONSES },
    },
    handler: async (req, reply) => {
      const query = req.query as unknown as Static<Q> & PageParams;
      const page = await list(req.principal.accountId, query);
      const link = nextPageLink(path, page, query.limit, filters ? (query as Record<string, string | undefined>) : {});
      if (link) reply.header('link', link);
      return page.items;
    },
  });
}
