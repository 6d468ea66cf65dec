import { openDatabase, reencryptSecrets, secretKeyFrom } from '@rampart/server';
import { parseFlags, UsageError } from './args.js';

// `rampart rekey`: every stored secret (webhook signing secrets, DNS provider credentials) from the
// current RAMPART_SECRET_KEY to RAMPART_NEW_SECRET_KEY, with the control plane stopped
// (docs/operations.md "Rotating secrets"). Both keys come from the environment, never the command line.

export const REKEY_HELP = `Usage: rampart rekey (--data-dir DIR | --database-url URL)

Encrypts every stored secret again under a new secret key, in one transaction. Stop the control
plane first; then put the new key in RAMPART_SECRET_KEY and start it again.

Options:
  --data-dir DIR      the embedded database directory
  --database-url URL  PostgreSQL (env DATABASE_URL)

Environment:
  RAMPART_SECRET_KEY      the key the secrets are stored under now
  RAMPART_NEW_SECRET_KEY  the key to store them under (16+ characters, e.g. openssl rand -hex 32)
`;

export async function rekeyCommand(args: string[]): Promise<number> {
  const flags = parseFlags(args, ['data-dir', 'database-url']);
  if (flags.help) {
    process.stdout.write(REKEY_HELP);
    return 0;
  }
  const dataDir = flags['data-dir'];
  if (dataDir && flags['database-url']) throw new UsageError('rekey takes one of --data-dir DIR or --database-url URL, not both');
  const url = dataDir ? undefined : (flags['database-url'] ?? process.env.DATABASE_URL);
  if (!dataDir && !url) throw new UsageError('rekey needs one of --data-dir DIR or --database-url URL');
  if (!process.env.RAMPART_SECRET_KEY) throw new UsageError('RAMPART_SECRET_KEY (the current key) is required');
  if (!process.env.RAMPART_NEW_SECRET_KEY) throw new UsageError('RAMPART_NEW_SECRET_KEY (the new key) is required');
  if (process.env.RAMPART_NEW_SECRET_KEY.length < 16) throw new UsageError('RAMPART_NEW_SECRET_KEY must be at least 16 characters (e.g. openssl rand -hex 32)');
  if (process.env.RAMPART_NEW_SECRET_KEY === process.env.RAMPART_SECRET_KEY) throw new UsageError('RAMPART_NEW_SECRET_KEY is the current key');
  const from = secretKeyFrom(process.env.RAMPART_SECRET_KEY)!;
  const to = secretKeyFrom(process.env.RAMPART_NEW_SECRET_KEY)!;
  const database = await openDatabase({ url, dataDir });
  try {
    const summary = await reencryptSecrets(database.db, from, to);
    process.stdout.write(`${JSON.stringify(summary)}\n`);
    return 0;
  } finally {
    await database.close();
  }
}
