import { AuditEntry, AuditQuery } from '../schemas.js';
import { AUDIT_RETENTION_DAYS, listAudit } from '../services/audit.js';
import { pagedListRoute } from './paging.js';
import type { App, RouteDeps } from './types.js';

// The audit log (services/audit.ts): read only. No route changes or deletes an entry.
export function auditRoutes(app: App, { ctx }: RouteDeps): void {
  pagedListRoute(
    app,
    '/api/audit',
    {
      tags: ['Audit log'],
      summary: `Changes to the account's configuration, keys, settings and billing: who, what, before and after (secrets never), kept ${AUDIT_RETENTION_DAYS} days`,
      description:
        "Filters: `objectType`, `objectId`, `action`, `actor` (an API key's name or prefix, a user's e-mail, or a type: api_key, user, operator, system), `since` and `until` (ISO times). " +
        'Entries cannot be changed or deleted.',
    },
    AuditEntry,
    (accountId, query) => listAudit(ctx, accountId, query),
    AuditQuery,
  );
}
