import { sql } from 'kysely';
import type { Database } from '../db/database.js';

// The session-level advisory locks that keep a periodic job on one process at a time. They
// belong to the connection they are taken on: the caller reserves one for the job's duration.

/** First key of the jobs' advisory locks, so they cannot meet another feature's. */
const JOB_LOCK_SPACE = 0x4a4f_4253; // "JOBS"

/** Takes the job's lock on this connection unless another connection holds it; true when taken. */
export async function tryJobLock(conn: Database, job: string): Promise<boolean> {
  const lock = await sql<{ ok: boolean }>`select pg_try_advisory_lock(${JOB_LOCK_SPACE}, hashtext(${job})) as ok`.execute(conn);
  return lock.rows[0]?.ok ?? false;
}

export async function releaseJobLock(conn: Database, job: string): Promise<void> {
  await sql`select pg_advisory_unlock(${JOB_LOCK_SPACE}, hashtext(${job}))`.execute(conn);
}
