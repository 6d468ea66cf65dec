import { isUuid as isProtocolUuid } from '@rampart/protocol';

// Value helpers every layer shares: ids and times as the API reads and writes them. A leaf: it
// imports nothing of the server.

/** Ids come from URLs and bodies; anything that is not a UUID cannot name a row, so it is "not found". */
export function isUuid(value: unknown): value is string {
  return isProtocolUuid(value, true);
}

export const iso = (d: Date | string | null | undefined): string | null => (d == null ? null : (d instanceof Date ? d : new Date(d)).toISOString());

/** An ISO 8601 time as query parameters take it (since, until, from, to): minutes at least, a zone always. */
export const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i;
