import type { ServerSnapshot } from '@rampart/protocol';
import { heldServerRows } from '../data/rollouts.js';
import type { Database, Tx } from '../db/database.js';

// Snapshots of held servers: what a holding rollout (services/rollouts.ts) makes buildSnapshots
// (services/snapshot.ts) send its servers instead of the state it built.

/** How often a baking canary's agent sends its analytics/batch (the snapshot's reportSeconds). */
export const ROLLOUT_REPORT_SECONDS = 2;

export interface Hold {
  /** Sent instead of the built snapshot (the server is held). */
  released?: ServerSnapshot;
  /** The server is a baking canary: it reports at this interval. */
  reportSeconds?: number;
}

/** For these servers, those the holding rollout of their account holds or bakes on. */
export async function holdsOf(db: Database | Tx, serverIds: readonly string[]): Promise<Map<string, Hold>> {
  const out = new Map<string, Hold>();
  if (serverIds.length === 0) return out;
  const rows = await heldServerRows(db, serverIds);
  for (const r of rows) {
    if (r.state === 'baking' && r.canary) out.set(r.server_id, { reportSeconds: ROLLOUT_REPORT_SECONDS });
    else if (r.released_snapshot) out.set(r.server_id, { released: JSON.parse(r.released_snapshot) as ServerSnapshot });
  }
  return out;
}
