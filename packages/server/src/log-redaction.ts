import { REDACTED, redactQueryCredentials } from '@rampart/protocol';
import type { FastifyServerOptions } from 'fastify';
import pino, { type LoggerOptions } from 'pino';
import { API_KEY_PREFIX, INVITATION_PREFIX, SERVER_TOKEN_PREFIX } from './crypto.js';

// No secret in a log line (docs/api.md "Logs"). Whatever a log call is given, before it is written:
//
// - a URL keeps its scheme and host only: user info, path and query go (an RPC provider's key sits
//   in its path, a webhook's token in its path or query, an SMTP password in its user info);
// - a request's own URL keeps its path, but the values of query parameters that look like
//   credentials (token, key, secret, password, signature, code) go;
// - API keys, connection tokens and invitations (by their prefixes), Bearer tokens, and the
//   operator's own secrets (passed in) go wherever they appear;
// - fields named like credentials (password, token, secret, apiKey, the authorization, cookie and
//   x-api-key headers) are censored by pino's redact.
//
// Messages, error messages and stacks (with their causes and properties), and plain objects given
// to the logger are all scrubbed.

const CENSOR = REDACTED;

const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
  'res.headers["set-cookie"]',
  'password',
  'token',
  'secret',
  'apiKey',
  'webhookSecret',
  'connectionToken',
  '*.password',
  '*.token',
  '*.secret',
  '*.apiKey',
  '*.webhookSecret',
  '*.connectionToken',
];

const URL_RE = /\b([a-z][a-z0-9+.-]{1,20}:\/\/)([^\s/?#@"'<>]*@)?([^\s/?#"'<>\\]*)([/?#][^\s"'<>\\]*)?/gi;
const TOKEN_RE = new RegExp(`\\b(${[API_KEY_PREFIX, SERVER_TOKEN_PREFIX, INVITATION_PREFIX].join('|')})[0-9a-f]{8,}`, 'gi');
const BEARER_RE = /\b(Bearer\s+)[^\s"',;]+/gi;

/** A text with every secret this module knows of taken out. */
export function scrubText(text: string, secrets: readonly string[] = []): string {
  let out = text;
  for (const s of secrets) if (s.length >= 6) out = out.split(s).join(CENSOR);
  return out
    .replace(URL_RE, (m, scheme: string, userinfo: string | undefined, host: string, rest: string | undefined) =>
      // file:// names a source file (stacks), not an endpoint
      scheme.toLowerCase() === 'file://' ? m : `${scheme}${userinfo ? `${CENSOR}@` : ''}${host}${rest === undefined || rest === '/' ? (rest ?? '') : `/${CENSOR}`}`,
    )
    .replace(TOKEN_RE, (_m, prefix: string) => `${prefix}${CENSOR}`)
    .replace(BEARER_RE, (_m, bearer: string) => `${bearer}${CENSOR}`);
}

/** A request URL (path and query) with the values of credential-like query parameters taken out. */
export function scrubRequestUrl(url: string, secrets: readonly string[] = []): string {
  const q = url.indexOf('?');
  const path = scrubText(q === -1 ? url : url.slice(0, q), secrets);
  if (q === -1) return path;
  return `${path}?${redactQueryCredentials(url.slice(q + 1), (pair) => scrubText(pair, secrets))}`;
}

function isPlain(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Strings scrubbed inside plain objects and arrays (not class instances: sockets, requests). */
function scrubDeep(value: unknown, secrets: readonly string[], depth = 0): unknown {
  if (typeof value === 'string') return scrubText(value, secrets);
  if (depth > 6) return value;
  if (Array.isArray(value)) return value.map((v) => scrubDeep(v, secrets, depth + 1));
  if (!isPlain(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = scrubDeep(v, secrets, depth + 1);
  return out;
}

/**
 * pino's serialized error (message, stack, cause, every own property) with its strings scrubbed.
 * The serialized error is not a plain object, so it goes through JSON first (bigints as text); one
 * that cannot (a cycle) keeps only its type, message and stack.
 */
function scrubError(err: Error, secrets: readonly string[]): unknown {
  const serialized = pino.stdSerializers.err(err);
  try {
    return scrubDeep(JSON.parse(JSON.stringify(serialized, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))), secrets);
  } catch {
    return scrubDeep({ type: serialized.type, message: serialized.message, stack: serialized.stack }, secrets);
  }
}

interface LoggedRequest {
  method: string;
  url: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/**
 * Pino options for the control plane's logger: the caller's (level, stream...) plus the scrubbing
 * above. `secrets`: strings to take out wherever they appear (the operator token, webhook secrets).
 */
export function redactingLoggerOptions(options: LoggerOptions, secrets: readonly string[] = []): LoggerOptions {
  const known = secrets.filter((s) => s.length >= 6);
  return {
    ...options,
    redact: { paths: REDACT_PATHS, censor: CENSOR },
    serializers: {
      ...options.serializers,
      req: (req: LoggedRequest) => ({ method: req.method, url: scrubRequestUrl(req.url, known), host: req.host, remoteAddress: req.ip, remotePort: req.socket?.remotePort }),
      err: (err: Error) => scrubError(err, known),
    },
    formatters: { ...options.formatters, log: (obj) => scrubDeep(options.formatters?.log ? options.formatters.log(obj) : obj, known) as Record<string, unknown> },
    hooks: {
      ...options.hooks,
      logMethod(args, method) {
        method.apply(this, args.map((a) => (typeof a === 'string' ? scrubText(a, known) : a)) as Parameters<typeof method>);
      },
    },
  };
}

/** The part of an endpoint's URL that may hold a credential (user info, path, query), to take out wherever it appears. */
export function urlSecrets(url: string | undefined): string[] {
  if (!url) return [];
  try {
    const u = new URL(url);
    return [u.username, u.password, `${u.pathname}${u.search}`].filter((s) => s.length >= 6 && s !== '/');
  } catch {
    return [url];
  }
}

/** buildApp's logger option with the scrubbing added; false, true and a logger instance as they come. */
export function redactingLogger(logger: FastifyServerOptions['logger'], secrets: readonly string[]): FastifyServerOptions['logger'] {
  if (logger === undefined || logger === false) return false;
  if (logger === true) return redactingLoggerOptions({}, secrets);
  if (typeof (logger as { child?: unknown }).child === 'function') return logger; // an instance: configured by its maker
  return redactingLoggerOptions(logger, secrets);
}
