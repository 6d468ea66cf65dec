import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { PageQuery } from '../schemas.js';
import type { Page, PageParams } from '../services/paging.js';
import { ERROR_RESPONSES, SECURITY, type App } from './types.js';

// Newest-first lists in pages (services/paging.ts): the body is the page's array, and the Link
// header names the next page.

export const PAGING_DESCRIPTION =
  'Newest first, `limit` per page (1 to 200, default 50). When there are more, the `Link` header names the next page: ' +
  '`<...?limit=N&before=ID>; rel="next"`, where ID is the last entry of this page.';

/** The Link header value for the page after this one, or undefined on the last page. */
export function nextPageLink(path: string, page: Page<unknown>, limit: string | undefined): string | undefined {
  if (!page.next) return undefined;
  const query = new URLSearchParams({ ...(limit !== undefined ? { limit } : {}), before: page.next });
  return `<${path}?${query.toString()}>; rel="next"`;
}

/** GET `path`: the account's list, a page at a time, each entry as `item`. */
export function pagedListRoute<T extends TSchema>(
  app: App,
  path: string,
  doc: { tags: string[]; summary: string },
  item: T,
  list: (accountId: string, query: PageParams) => Promise<Page<Static<T>>>,
): void {
  app.get(path, {
    schema: { ...doc, security: SECURITY, description: PAGING_DESCRIPTION, querystring: PageQuery, response: { 200: Type.Array(item), ...ERROR_RESPONSES } },
    handler: async (req, reply) => {
      const page = await list(req.principal.accountId, req.query);
      const link = nextPageLink(path, page, req.query.limit);
      if (link) reply.header('link', link);
      return page.items as Static<T>[];
    },
  });
}
