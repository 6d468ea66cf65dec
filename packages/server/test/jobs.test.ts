import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pg from 'pg';
import { openDatabase } from '../src/db/database.js';
import { runExclusive } from '../src/jobs.js';
import { migratedPglite, postgresUrl } from './helpers.js';

// docs/architecture.md, "Storage": a periodic job runs on one process at a time, whatever the
// number of control-plane processes sharing one PostgreSQL; one that dies mid-job leaves the lock.

const url = await postgresUrl();

describe('runExclusive', { skip: url ? false : 'no PostgreSQL answers (set RAMPART_TEST_DATABASE_URL)' }, () => {
  test('two processes never run the same job at once; other jobs are not held up', async () => {
    // Two pools on one database stand in for two control-plane processes.
    const [a, b] = await Promise.all([openDatabase({ url, poolSize: 2 }), openDatabase({ url, poolSize: 2 })]);
    try {
      let release!: () => void;
      let started!: () => void;
      const running = new Promise<void>((r) => (started = r));
      const first = runExclusive(a.db, 'postgres', 'test-job-once', async () => {
        started();
        await new Promise<void>((r) => (release = r));
        return 'a';
      });
      await running;
      assert.deepEqual(await runExclusive(b.db, 'postgres', 'test-job-once', async () => 'b'), { ran: false }, 'the other process skips it');
      assert.deepEqual(await runExclusive(b.db, 'postgres', 'test-job-other', async () => 'b'), { ran: true, result: 'b' }, 'another job runs');
      release();
      assert.deepEqual(await first, { ran: true, result: 'a' });
      assert.deepEqual(await runExclusive(b.db, 'postgres', 'test-job-once', async () => 'b'), { ran: true, result: 'b' }, 'free again once it ended');
      // A job that throws releases the lock too.
      await assert.rejects(
        runExclusive(a.db, 'postgres', 'test-job-once', async () => Promise.reject(new Error('boom'))),
        /boom/,
      );
      assert.deepEqual(await runExclusive(b.db, 'postgres', 'test-job-once', async () => 'b'), { ran: true, result: 'b' });
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  test('a process that dies mid-job leaves the lock to the next one', async () => {
    const db = await openDatabase({ url, poolSize: 2 });
    const dying = new pg.Client({ connectionString: url });
    await dying.connect();
    try {
      // What runExclusive takes, held by a connection that then goes away without unlocking.
      await dying.query(`select pg_advisory_lock(${0x4a4f_4253}, hashtext('test-job-crash'))`);
      assert.deepEqual(await runExclusive(db.db, 'postgres', 'test-job-crash', async () => 'x'), { ran: false });
      await dying.end();
      // The server notices the closed session at once; wait for it rather than for a fixed time.
      let outcome = await runExclusive(db.db, 'postgres', 'test-job-crash', async () => 'x');
      for (let i = 0; i < 200 && !outcome.ran; i++) {
        await new Promise((r) => setTimeout(r, 25));
        outcome = await runExclusive(db.db, 'postgres', 'test-job-crash', async () => 'x');
      }
      assert.deepEqual(outcome, { ran: true, result: 'x' });
    } finally {
      await db.close();
    }
  });
});

test('on the embedded database (one process by construction) the job simply runs', async () => {
  const db = await openDatabase({ initialData: await migratedPglite() });
  try {
    assert.deepEqual(await runExclusive(db.db, 'pglite', 'job', async () => 42), { ran: true, result: 42 });
  } finally {
    await db.close();
  }
});
