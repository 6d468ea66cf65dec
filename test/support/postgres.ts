import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const PG_URL = process.env.RAMPART_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A connection string to a fresh schema of the local PostgreSQL, or undefined when none answers. */
export async function freshPostgresSchema(prefix: string): Promise<string | undefined> {
  const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2000 });
  try {
    await c.connect();
  } catch {
    return undefined;
  }
  const schema = `${prefix}_${randomBytes(4).toString('hex')}`;
  await c.query(`CREATE SCHEMA ${schema}`);
  await c.end();
  const u = new URL(PG_URL);
  u.searchParams.set('options', `-c search_path=${schema}`);
  return u.toString();
}
