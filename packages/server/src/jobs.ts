import { releaseJobLock, tryJobLock } from './data/jobs.js';
import type { Database } from './db/database.js';

export type JobOutcome<T> = { ran: true; result: T } | { ran: false };

/**
 * Runs a periodic job unless another process sharing the database is running it: a session-level
 * advisory lock, held on one reserved connection for the job's duration. A process that dies
 * mid-job loses that connection, and PostgreSQL gives the lock to the next one. The embedded
 * database is one process by construction (nobody else can open its directory), and it has a
 * single connection, which the job itself needs: there the job simply runs.
 */
export async function runExclusive<T>(db: Database, kind: 'postgres' | 'pglite', job: string, fn: () => Promise<T>): Promise<JobOutcome<T>> {
  if (kind === 'pglite') return { ran: true, result: await fn() };
  return db.connection().execute(async (conn) => {
    if (!(await tryJobLock(conn, job))) return { ran: false };
    try {
      return { ran: true, result: await fn() };
    } finally {
      await releaseJobLock(conn, job);
    }
  });
}

/** Longest interval a job's environment variable may set: a day. */
const MAX_JOB_INTERVAL_SECONDS = 86_400;

/**
 * A job's interval from its environment variable (`name`, e.g. RAMPART_HEALTH_INTERVAL): seconds
 * above 0 and at most a day, `fallback` when unset or blank; anything else throws naming `name`.
 */
export function jobIntervalFromEnv(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw.trim() === '') return fallback;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_JOB_INTERVAL_SECONDS) {
    throw new Error(`${name} must be a number of seconds above 0 and at most ${MAX_JOB_INTERVAL_SECONDS}, not ${JSON.stringify(raw)}`);
  }
  return seconds;
}

export interface Job {
  name: string;
  everyMs: number;
  run(): Promise<unknown>;
}

/** What scheduleJobs reports of each run (src/metrics.ts counts them): one that ran here, one that threw. */
export interface JobObserver {
  ran(job: string): void;
  failed(job: string): void;
}

/**
 * Starts each job now and then every `everyMs`, each run under runExclusive; a failed run is
 * logged and the next one comes as usual. Returns the function that stops them all.
 */
export function scheduleJobs(db: Database, kind: 'postgres' | 'pglite', jobs: readonly Job[], log: (msg: string, err: unknown) => void, observer?: JobObserver): () => void {
  const timers = jobs.map((job) => {
    let running = false;
    const tick = () => {
      if (running) return; // a slow run is not overlapped by the next tick of the same process
      running = true;
      void runExclusive(db, kind, job.name, () => job.run())
        .then((o) => o.ran && observer?.ran(job.name))
        .catch((err) => {
          observer?.failed(job.name);
          log(`${job.name} failed`, err);
        })
        .finally(() => (running = false));
    };
    const timer = setInterval(tick, Math.min(job.everyMs, 2 ** 31 - 1));
    timer.unref();
    tick();
    return timer;
  });
  return () => timers.forEach(clearInterval);
}
