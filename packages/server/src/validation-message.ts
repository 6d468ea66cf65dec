import type { FastifySchemaValidationError } from 'fastify/types/schema.js';

/** "/origins/0/port" -> "origins[0].port" */
function fieldName(instancePath: string, extra?: string): string {
  const parts = instancePath.split('/').filter(Boolean);
  if (extra) parts.push(extra);
  return parts.reduce((acc, p) => (/^\d+$/.test(p) ? `${acc}[${p}]` : acc ? `${acc}.${p}` : p), '');
}

/** A message names at most this many problems; the rest are counted ("; and 5 more"). */
export const MAX_LISTED = 10;
/** A body may be 1 MiB of one field name: a message part is cut at this many characters. */
const MAX_PART_LENGTH = 200;

/**
 * Turns schema errors into one message that names each field, e.g.
 * "name: must NOT have fewer than 1 characters; unknown field: account_id".
 */
export function validationMessage(errors: FastifySchemaValidationError[], context: string): string {
  const root = context === 'querystring' ? 'query' : context;
  const seen = new Set<string>();
  for (const e of errors) {
    const params = e.params;
    let msg: string;
    if (e.keyword === 'additionalProperties') {
      const where = fieldName(e.instancePath);
      msg = `unknown field: ${where ? `${where}.` : ''}${String(params.additionalProperty)}`;
    } else if (e.keyword === 'required') {
      msg = `${fieldName(e.instancePath, String(params.missingProperty))}: is required`;
    } else if (e.keyword === 'anyOf' || e.keyword === 'const') {
      continue; // reported through the union's summary below
    } else if (e.keyword === 'pattern') {
      msg = `${fieldName(e.instancePath) || root}: has characters that are not allowed`;
    } else {
      msg = `${fieldName(e.instancePath) || root}: ${e.message ?? 'is invalid'}`;
    }
    seen.add(msg.length > MAX_PART_LENGTH ? `${msg.slice(0, MAX_PART_LENGTH)}...` : msg);
  }
  for (const e of errors) {
    if (e.keyword !== 'anyOf') continue;
    const allowed = errors.filter((x) => x.keyword === 'const' && x.instancePath === e.instancePath).map((x) => String((x.params as { allowedValue?: unknown }).allowedValue));
    const field = fieldName(e.instancePath) || root;
    seen.add(allowed.length ? `${field}: must be one of ${allowed.join(', ')}` : `${field}: is invalid`);
  }
  if (seen.size === 0) seen.add(`${root}: is invalid`);
  const all = [...seen];
  if (all.length <= MAX_LISTED) return all.join('; ');
  return `${all.slice(0, MAX_LISTED).join('; ')}; and ${all.length - MAX_LISTED} more`;
}
