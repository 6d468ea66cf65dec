import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { createGunzip } from 'node:zlib';
import { BackupError, inspectBackup } from '@rampart/server';
import { intFrom, parseFlags, UsageError } from './args.js';

export const ADMIN_HELP = `Usage: rampart admin <verb> [--url http://127.0.0.1:8080] [--admin-token T] [options]

Operator verbs over the operator API; each prints the JSON answer.

Verbs:
  create-account --email E --plan free|pro|enterprise [--balance DOLLARS] [--password P]
  charge [--account-id ID]        run the monthly charge now (one account, or every account due)
  confirm-deposit --id ID [--tx-hash H] [--log-index N]
                                  confirm a deposit by what paid it: for an on-chain one the
                                  transaction (read from the chain; N: one transfer of it)
  create-invitation [--email E] [--days N]
                                  a single-use invitation to register, when the server runs
                                  with RAMPART_SIGNUP=invite (only for E if given; valid N
                                  days, default 7, at most 90); its token is printed only here
  backup --out FILE               a consistent backup of the whole database, taken while the
                                  control plane runs (gzip'd JSON lines, mode 0600; it holds
                                  password hashes and encrypted secrets): restore it with
                                  'rampart restore'

Options:
  --url URL           the control plane (default http://127.0.0.1:8080, env RAMPART_URL)
  --admin-token T     the operator token (env RAMPART_ADMIN_TOKEN)
`;

export async function adminCommand(args: string[]): Promise<number> {
  const [verb, ...rest] = args;
  if (!verb || verb === '--help' || verb === '-h' || verb === 'help') {
    process.stdout.write(ADMIN_HELP);
    return verb ? 0 : 2;
  }
  const flags = parseFlags(rest, ['url', 'admin-token', 'email', 'plan', 'balance', 'password', 'account-id', 'id', 'tx-hash', 'log-index', 'out', 'days']);
  if (flags.help) {
    process.stdout.write(ADMIN_HELP);
    return 0;
  }
  const base = (flags.url ?? process.env.RAMPART_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
  const token = flags['admin-token'] ?? process.env.RAMPART_ADMIN_TOKEN ?? '';
  if (verb === 'backup') {
    if (!flags.out) throw new UsageError('backup needs --out FILE');
    return backup(base, token, flags.out);
  }
  let path: string;
  let body: Record<string, unknown>;
  switch (verb) {
    case 'create-account': {
      if (!flags.email || !flags.plan) throw new UsageError('create-account needs --email and --plan');
      const balance = flags.balance === undefined ? undefined : Number(flags.balance);
      if (balance !== undefined && !Number.isFinite(balance)) throw new UsageError('--balance must be a number of dollars');
      path = '/admin/accounts';
      body = { email: flags.email, plan: flags.plan, ...(balance !== undefined ? { balance } : {}), ...(flags.password ? { password: flags.password } : {}) };
      break;
    }
    case 'charge':
      path = '/admin/billing/charge';
      body = flags['account-id'] ? { accountId: flags['account-id'] } : {};
      break;
    case 'confirm-deposit':
      if (!flags.id) throw new UsageError('confirm-deposit needs --id');
      path = `/admin/deposits/${encodeURIComponent(flags.id)}/confirm`;
      body = {
        ...(flags['tx-hash'] ? { txHash: flags['tx-hash'] } : {}),
        ...(flags['log-index'] !== undefined ? { logIndex: intFrom(flags['log-index'], '--log-index', 0, 2_147_483_647) } : {}),
      };
      break;
    case 'create-invitation': {
      const days = flags.days === undefined ? undefined : intFrom(flags.days, '--days', 1, 90);
      path = '/admin/invitations';
      body = { ...(flags.email ? { email: flags.email } : {}), ...(days !== undefined ? { expiresInDays: days } : {}) };
      break;
    }
    default:
      throw new UsageError(`unknown admin verb: ${verb}`);
  }
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  return res.ok ? 0 : 1;
}

/**
 * GET /admin/backup into FILE: written beside it (mode 0600), read back whole and checked, and only
 * then renamed to FILE, so FILE is never a partial backup. Prints what it holds.
 */
async function backup(base: string, token: string, out: string): Promise<number> {
  const res = await fetch(`${base}/admin/backup`, { headers: { authorization: `Bearer ${token}` } });
  if (!res.ok || !res.body) {
    const text = await res.text();
    process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
    return 1;
  }
  const partial = `${out}.partial`;
  try {
    await pipeline(Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), createWriteStream(partial, { mode: 0o600 }));
    const summary = await inspectBackup(createReadStream(partial).pipe(createGunzip()));
    await rename(partial, out);
    process.stdout.write(`${JSON.stringify({ file: out, ...summary })}\n`);
    return 0;
  } catch (err) {
    await rm(partial, { force: true });
    if (err instanceof BackupError) throw new Error(`the backup received is not whole: ${err.message}`);
    throw err;
  }
}
