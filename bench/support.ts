import { rmSync } from 'node:fs';
import type { Proc } from '../test/support/processes.js';

/**
 * The HAProxy processes a benchmark starts: stopped one by one or all together, and on Ctrl+C
 * killed (with `onInterrupt` for anything else the bench holds) and the temporary directory removed.
 */
export function benchProcesses(tmp: string, onInterrupt: () => void = () => {}) {
  const procs = new Set<Proc>();

  async function stop(p: Proc): Promise<void> {
    // SIGTERM is HAProxy's immediate stop; SIGKILL only if it has not exited within 5 s.
    const t = setTimeout(() => p.child.kill('SIGKILL'), 5000);
    await p.stop('SIGTERM');
    clearTimeout(t);
    procs.delete(p);
  }

  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      for (const p of procs) p.child.kill('SIGKILL');
      onInterrupt();
      rmSync(tmp, { recursive: true, force: true });
      process.exit(130);
    });
  }

  return {
    add: (p: Proc) => void procs.add(p),
    stop,
    stopAll: () => Promise.all([...procs].map(stop)).then(() => undefined),
  };
}
