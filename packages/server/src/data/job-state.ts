import type { Database, Tx } from '../db/database.js';

// Small named values the periodic jobs keep between runs (the chain watcher's block cursor).

export async function readJobState(db: Database | Tx, name: string): Promise<string | undefined> {
  const r = await db.selectFrom('job_state').select('value').where('name', '=', name).executeTakeFirst();
  return r?.value;
}

export async function writeJobState(db: Database | Tx, name: string, value: string): Promise<void> {
  await db
    .insertInto('job_state')
    .values({ name, value })
    .onConflict((oc) => oc.column('name').doUpdateSet({ value }))
    .execute();
}
