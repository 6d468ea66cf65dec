import { createReadStream } from 'node:fs';
import { createGunzip } from 'node:zlib';
import { restoreBackup } from '@rampart/server';
import { parseFlags, UsageError } from './args.js';

// `rampart restore`: a backup from `rampart admin backup` into an empty database, embedded or
// PostgreSQL, whichever the backup came from (docs/operations.md "Backup and restore").

export const RESTORE_HELP = `Usage: rampart restore --in FILE (--data-dir DIR | --database-url URL) [--force]

Restores a backup made by 'rampart admin backup' into an empty database: the embedded one in
--data-dir, or PostgreSQL. A backup of the embedded database restored into PostgreSQL is how a
control plane moves from one to the other. The control plane must not be running on the target.
A backup of an older release is brought up to this release's schema; one of a newer release is
refused.

Options:
  --in FILE           the backup (gzip'd JSON lines)
  --data-dir DIR      the embedded database directory to restore into (created when missing)
  --database-url URL  PostgreSQL to restore into (env DATABASE_URL)
  --force             replace what the target holds (its tables are dropped); without it a
                      target holding any row is refused
`;

export async function restoreCommand(args: string[]): Promise<number> {
  // --force is the one switch: taken out before the flags that carry a value are parsed.
  const force = args.includes('--force');
  const flags = parseFlags(
    args.filter((a) => a !== '--force'),
    ['in', 'data-dir', 'database-url'],
  );
  if (flags.help) {
    process.stdout.write(RESTORE_HELP);
    return 0;
  }
  if (!flags.in) throw new UsageError('restore needs --in FILE');
  const dataDir = flags['data-dir'];
  if (dataDir && flags['database-url']) throw new UsageError('restore takes one of --data-dir DIR or --database-url URL, not both');
  const url = dataDir ? undefined : (flags['database-url'] ?? process.env.DATABASE_URL);
  if (!dataDir && !url) throw new UsageError('restore needs one of --data-dir DIR or --database-url URL');
  const input = createReadStream(flags.in);
  await new Promise<void>((resolve, reject) => input.once('open', () => resolve()).once('error', reject));
  const summary = await restoreBackup({ url, dataDir, force }, input.pipe(createGunzip()));
  process.stdout.write(`${JSON.stringify({ restored: flags.in, into: dataDir ?? 'PostgreSQL', ...summary })}\n`);
  return 0;
}
