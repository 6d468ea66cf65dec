import { randomBytes } from 'node:crypto';
import { parseJsonObject } from '@rampart/protocol';
import { isUuid } from './values.js';

/**
 * Change-bus messages that invalidate cached credentials (src/credential-cache.ts): every process,
 * the publisher included, drops what it cached of them and answers with a credential-ack carrying
 * the same nonce, so the publisher can tell when every process has dropped them.
 *
 * - key-revoked: these API keys were deleted;
 * - session-ended: these sessions (by SHA-256 of the token), or every session of these accounts, ended;
 * - account-changed: the state (frozen, active) or plan of these accounts changed;
 * - credential-ack: the process `from` (a random id per process) has applied message `nonce`.
 */
export type CredentialChangeMessage =
  | { kind: 'key-revoked'; keyIds: string[]; nonce: string }
  | { kind: 'session-ended'; tokenHashes: string[]; nonce: string }
  | { kind: 'session-ended'; accountIds: string[]; nonce: string }
  | { kind: 'account-changed'; accountIds: string[]; nonce: string };

export type CredentialAck = { kind: 'credential-ack'; nonce: string; from: string };

export type CredentialMessage = CredentialChangeMessage | CredentialAck;

/** A credential change, before it gets its nonce. */
export type CredentialChange = CredentialChangeMessage extends infer M ? (M extends CredentialChangeMessage ? Omit<M, 'nonce'> : never) : never;

const KINDS = new Set(['key-revoked', 'session-ended', 'account-changed', 'credential-ack']);

/** Ids per message: 100 UUIDs or SHA-256 hashes keep a payload far below NOTIFY's 8000 bytes. */
export const MAX_IDS_PER_MESSAGE = 100;
const MAX_PAYLOAD_BYTES = 7900;

const HASH_RE = /^[0-9a-f]{64}$/;
const NONCE_RE = /^[0-9a-f]{16}$/;

export function isCredentialMessage(m: { kind: string }): m is CredentialMessage {
  return KINDS.has(m.kind);
}

function list(m: CredentialChange): string[] {
  if ('keyIds' in m) return m.keyIds;
  if ('tokenHashes' in m) return m.tokenHashes;
  return m.accountIds;
}

/** A fresh random id: a message's nonce, a process's id in acks. */
export function newNonce(): string {
  return randomBytes(8).toString('hex');
}

/** One change as messages of at most MAX_IDS_PER_MESSAGE ids, each with a fresh nonce; none when it names nothing. */
export function credentialMessages(change: CredentialChange): CredentialChangeMessage[] {
  const ids = list(change);
  const out: CredentialChangeMessage[] = [];
  for (let i = 0; i < ids.length; i += MAX_IDS_PER_MESSAGE) {
    const part = ids.slice(i, i + MAX_IDS_PER_MESSAGE);
    const nonce = newNonce();
    if ('keyIds' in change) out.push({ kind: 'key-revoked', keyIds: part, nonce });
    else if ('tokenHashes' in change) out.push({ kind: 'session-ended', tokenHashes: part, nonce });
    else if (change.kind === 'session-ended') out.push({ kind: 'session-ended', accountIds: part, nonce });
    else out.push({ kind: 'account-changed', accountIds: part, nonce });
  }
  return out;
}

/** The NOTIFY payload of one message (its fields only, in a fixed order). */
export function encodeCredentialMessage(m: CredentialMessage): string {
  const text =
    m.kind === 'credential-ack'
      ? JSON.stringify({ kind: m.kind, nonce: m.nonce, from: m.from })
      : 'keyIds' in m
        ? JSON.stringify({ kind: m.kind, keyIds: m.keyIds, nonce: m.nonce })
        : 'tokenHashes' in m
          ? JSON.stringify({ kind: m.kind, tokenHashes: m.tokenHashes, nonce: m.nonce })
          : JSON.stringify({ kind: m.kind, accountIds: m.accountIds, nonce: m.nonce });
  if (Buffer.byteLength(text) > MAX_PAYLOAD_BYTES) throw new Error(`credential message of ${Buffer.byteLength(text)} bytes is too long`);
  return text;
}

/** A copy, as a NOTIFY would deliver it: the receiver never shares the sender's arrays. */
export function copyCredentialMessage(m: CredentialMessage): CredentialMessage {
  return JSON.parse(encodeCredentialMessage(m)) as CredentialMessage;
}

/**
 * Checks a payload that came from the database. Returns null for anything that is not exactly a
 * credential message: other kinds (the hub's), unknown fields, ids that are not UUIDs or hashes.
 */
export function parseCredentialMessage(text: string): CredentialMessage | null {
  const o = parseJsonObject(text);
  if (!o) return null;
  if (typeof o.kind !== 'string' || !KINDS.has(o.kind) || typeof o.nonce !== 'string' || !NONCE_RE.test(o.nonce)) return null;
  const keys = Object.keys(o).sort().join(',');
  if (o.kind === 'credential-ack') {
    return keys === 'from,kind,nonce' && typeof o.from === 'string' && NONCE_RE.test(o.from) ? { kind: 'credential-ack', nonce: o.nonce, from: o.from } : null;
  }
  const all = (x: unknown, ok: (s: unknown) => boolean): x is string[] => Array.isArray(x) && x.length > 0 && x.length <= MAX_IDS_PER_MESSAGE && x.every(ok);
  const isHash = (s: unknown) => typeof s === 'string' && HASH_RE.test(s);
  if (o.kind === 'key-revoked' && keys === 'keyIds,kind,nonce' && all(o.keyIds, isUuid)) return { kind: 'key-revoked', keyIds: o.keyIds, nonce: o.nonce };
  if (o.kind === 'session-ended' && keys === 'kind,nonce,tokenHashes' && all(o.tokenHashes, isHash)) return { kind: 'session-ended', tokenHashes: o.tokenHashes, nonce: o.nonce };
  if (o.kind === 'session-ended' && keys === 'accountIds,kind,nonce' && all(o.accountIds, isUuid)) return { kind: 'session-ended', accountIds: o.accountIds, nonce: o.nonce };
  if (o.kind === 'account-changed' && keys === 'accountIds,kind,nonce' && all(o.accountIds, isUuid)) return { kind: 'account-changed', accountIds: o.accountIds, nonce: o.nonce };
  return null;
}
