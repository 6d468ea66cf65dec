import { sql, type Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { RolloutServersTable, RolloutsTable } from '../db/schema.js';

// The rollout_settings, rollouts and rollout_servers tables, and the servers' canary flag and
// released snapshot (staged rollout: services/rollouts.ts).

type Db = Database | Tx;

export function rolloutSettingsRow(db: Db, accountId: string, lock = false) {
  return db
    .selectFrom('rollout_settings')
    .selectAll()
    .where('account_id', '=', accountId)
    .$if(lock, (q) => q.forUpdate())
    .executeTakeFirst();
}

export async function upsertRolloutSettings(db: Db, accountId: string, mode: 'immediate' | 'staged', bakeSeconds: number, now: Date): Promise<void> {
  await db
    .insertInto('rollout_settings')
    .values({ account_id: accountId, mode, bake_seconds: bakeSeconds, updated_at: now })
    .onConflict((oc) => oc.column('account_id').doUpdateSet({ mode, bake_seconds: bakeSeconds, updated_at: now }))
    .execute();
}

/** The account's live servers (not decommissioned); only the canaries with `canaries`. */
export async function liveServerIds(db: Db, accountId: string, canaries = false): Promise<string[]> {
  const rows = await db
    .selectFrom('servers')
    .select('id')
    .where('account_id', '=', accountId)
    .where('status', '<>', 'decommissioned')
    .$if(canaries, (q) => q.where('canary', '=', true))
    .execute();
  return rows.map((r) => r.id);
}

/** The canary flag of a server the caller found and locked in its account. */
export async function setServerCanary(db: Db, serverId: string, canary: boolean): Promise<void> {
  await db.updateTable('servers').set({ canary }).where('id', '=', serverId).execute();
}

export async function setReleasedSnapshot(db: Db, serverId: string, snapshot: string | null): Promise<void> {
  await db.updateTable('servers').set({ released_snapshot: snapshot }).where('id', '=', serverId).execute();
}

export function releasedSnapshots(db: Db, serverIds: readonly string[]) {
  return db
    .selectFrom('servers')
    .select(['id', 'released_snapshot'])
    .where('id', 'in', [...serverIds])
    .execute();
}

export function serverName(db: Db, serverId: string) {
  return db.selectFrom('servers').select('name').where('id', '=', serverId).executeTakeFirst();
}

/** The account's rollout that holds servers back, if any (locked with `lock`). */
export function holdingRollout(db: Db, accountId: string, lock = false) {
  return db
    .selectFrom('rollouts')
    .select(['id', 'state'])
    .where('account_id', '=', accountId)
    .where('holding', '=', true)
    .$if(lock, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** A rollout stops holding (superseded when `supersede`); its servers still queued or baking are superseded. */
export async function stopHolding(db: Db, rolloutId: string, supersede: boolean, now: Date): Promise<void> {
  await db
    .updateTable('rollouts')
    .set({ holding: false, ...(supersede ? { state: 'superseded' as const, ended_at: now } : {}) })
    .where('id', '=', rolloutId)
    .execute();
  await db.updateTable('rollout_servers').set({ state: 'superseded' }).where('rollout_id', '=', rolloutId).where('state', 'in', ['queued', 'baking']).execute();
}

export async function insertRollout(db: Db, row: Insertable<RolloutsTable>, servers: Insertable<RolloutServersTable>[]): Promise<void> {
  await db.insertInto('rollouts').values(row).execute();
  if (servers.length) await db.insertInto('rollout_servers').values(servers).execute();
}

/**
 * Requests, blocked requests and origin 5xx answers of each server's domains since `since`
 * (analytics_minute, across the domains' servers).
 */
export async function domainCountsOfServers(db: Db, accountId: string, serverIds: readonly string[], since: Date) {
  const rows = await db
    .selectFrom('analytics_minute as a')
    .innerJoin('domain_servers as ds', 'ds.domain_id', 'a.domain_id')
    .select(['ds.server_id', sql<string>`coalesce(sum(a.requests), 0)`.as('requests'), sql<string>`coalesce(sum(a.s5xx), 0)`.as('errors')])
    .select(sql<string>`coalesce(sum((select coalesce(sum(value::bigint), 0) from jsonb_each_text(a.blocked))), 0)`.as('blocked'))
    .where('a.account_id', '=', accountId)
    .where('ds.server_id', 'in', [...serverIds])
    .where('a.minute', '>=', since)
    .groupBy('ds.server_id')
    .execute();
  // Their latency samples, bucket by bucket (the buckets' order is their index in each array).
  const buckets = await sql<{ server_id: string; i: string; n: string }>`
    select ds.server_id, t.i, sum(t.n) as n
      from analytics_minute a
      join domain_servers ds on ds.domain_id = a.domain_id
      cross join lateral unnest(a.latency) with ordinality as t(n, i)
     where a.account_id = ${accountId} and ds.server_id in (${sql.join([...serverIds])}) and a.minute >= ${since} and a.latency is not null
     group by ds.server_id, t.i`.execute(db);
  const latency = new Map<string, number[]>();
  for (const b of buckets.rows) {
    const counts = latency.get(b.server_id) ?? latency.set(b.server_id, []).get(b.server_id)!;
    counts[Number(b.i) - 1] = Number(b.n);
  }
  const out = new Map<string, { requests: number; blocked: number; errors: number; latency: number[] | null }>();
  for (const r of rows) out.set(r.server_id, { requests: Number(r.requests), blocked: Number(r.blocked), errors: Number(r.errors), latency: null });
  for (const [id, counts] of latency) {
    const c = out.get(id) ?? out.set(id, { requests: 0, blocked: 0, errors: 0, latency: null }).get(id)!;
    c.latency = Array.from(counts, (n) => n ?? 0);
  }
  return out;
}

/** For these servers, their place in a holding rollout, and their released snapshot. */
export function heldServerRows(db: Db, serverIds: readonly string[]) {
  return db
    .selectFrom('rollout_servers as rs')
    .innerJoin('rollouts as r', 'r.id', 'rs.rollout_id')
    .innerJoin('servers as s', 's.id', 'rs.server_id')
    .select(['rs.server_id', 'rs.canary', 'r.state', 's.released_snapshot'])
    .where('r.holding', '=', true)
    .where('rs.server_id', 'in', [...serverIds])
    .execute();
}

/** The baking rollout a server is a canary of, its row locked. */
export function bakingCanaryRow(tx: Tx, serverId: string) {
  return tx
    .selectFrom('rollout_servers as rs')
    .innerJoin('rollouts as r', 'r.id', 'rs.rollout_id')
    .select([
      'rs.rollout_id',
      'rs.base_requests',
      'rs.base_blocked',
      'rs.base_errors',
      'rs.base_latency',
      'rs.requests',
      'rs.blocked',
      'rs.errors',
      'rs.latency',
      'r.account_id',
      'r.bake_until',
      'r.change',
    ])
    .where('rs.server_id', '=', serverId)
    .where('rs.canary', '=', true)
    .where('rs.state', '=', 'baking')
    .where('r.state', '=', 'baking')
    .where('r.holding', '=', true)
    .forUpdate()
    .executeTakeFirst();
}

export async function setBakeCounts(tx: Tx, rolloutId: string, serverId: string, bake: { requests: number; blocked: number; errors: number; latency: number[] | null }, now: Date): Promise<void> {
  await tx
    .updateTable('rollout_servers')
    .set({ requests: bake.requests, blocked: bake.blocked, errors: bake.errors, latency: bake.latency, last_report_at: now })
    .where('rollout_id', '=', rolloutId)
    .where('server_id', '=', serverId)
    .execute();
}

/** The live canaries of a rollout that have not reported since `since`. */
export function canariesNotReportedSince(tx: Tx, rolloutId: string, since: Date) {
  return tx
    .selectFrom('rollout_servers as rs')
    .innerJoin('servers as s', 's.id', 'rs.server_id')
    .select('rs.server_id')
    .where('rs.rollout_id', '=', rolloutId)
    .where('rs.canary', '=', true)
    .where('s.status', '<>', 'decommissioned')
    .where((eb) => eb.or([eb('rs.last_report_at', 'is', null), eb('rs.last_report_at', '<', since)]))
    .execute();
}

/** Rollouts still baking whose bake ended before `endedBefore` (a canary has not reported since). */
export function overdueBakes(db: Db, endedBefore: Date) {
  return db.selectFrom('rollouts').select(['id', 'account_id']).where('state', '=', 'baking').where('holding', '=', true).where('bake_until', '<', endedBefore).execute();
}

/** The earliest end of a bake after `after`. */
export async function nextBakeUntil(db: Db, after: Date): Promise<Date | undefined> {
  const row = await db
    .selectFrom('rollouts')
    .select((eb) => eb.fn.min('bake_until').as('at'))
    .where('state', '=', 'baking')
    .where('holding', '=', true)
    .where('bake_until', '>', after)
    .executeTakeFirst();
  return row?.at ? new Date(row.at) : undefined;
}

/** A baking rollout, locked (undefined once it stopped baking). */
export function lockBakingRollout(tx: Tx, rolloutId: string) {
  return tx
    .selectFrom('rollouts')
    .select(['id as rollout_id', 'account_id', 'change', 'bake_until'])
    .where('id', '=', rolloutId)
    .where('state', '=', 'baking')
    .where('holding', '=', true)
    .forUpdate()
    .executeTakeFirst();
}

/** The last report of each of these canaries of a rollout, with their names. */
export function canaryReports(db: Db, rolloutId: string, serverIds: readonly string[]) {
  return db
    .selectFrom('rollout_servers as rs')
    .innerJoin('servers as s', 's.id', 'rs.server_id')
    .select(['rs.server_id', 's.name', 'rs.last_report_at'])
    .where('rs.rollout_id', '=', rolloutId)
    .where('rs.server_id', 'in', [...serverIds])
    .orderBy('s.name')
    .execute();
}

/** A rollout halts: its canaries are rolled back, the others halted. Returns the canaries. */
export async function markHalted(tx: Tx, rolloutId: string, signal: string, detail: string, now: Date): Promise<string[]> {
  await tx.updateTable('rollouts').set({ state: 'halted', signal, detail, ended_at: now }).where('id', '=', rolloutId).execute();
  const canaries = await tx.updateTable('rollout_servers').set({ state: 'rolled_back' }).where('rollout_id', '=', rolloutId).where('canary', '=', true).returning('server_id').execute();
  await tx.updateTable('rollout_servers').set({ state: 'halted' }).where('rollout_id', '=', rolloutId).where('canary', '=', false).execute();
  return canaries.map((c) => c.server_id);
}

export async function markApplied(tx: Tx, rolloutId: string, now: Date): Promise<void> {
  await tx.updateTable('rollouts').set({ state: 'applied', holding: false, ended_at: now }).where('id', '=', rolloutId).execute();
  await tx.updateTable('rollout_servers').set({ state: 'applied' }).where('rollout_id', '=', rolloutId).execute();
}

export async function markRolledBack(tx: Tx, rolloutId: string, now: Date): Promise<void> {
  await tx.updateTable('rollouts').set({ state: 'rolled_back', ended_at: now }).where('id', '=', rolloutId).execute();
  await tx.updateTable('rollout_servers').set({ state: 'rolled_back' }).where('rollout_id', '=', rolloutId).execute();
}

/** One rollout of the account, locked. */
export function lockRollout(tx: Tx, accountId: string, id: string) {
  return tx.selectFrom('rollouts').select(['id', 'state', 'holding']).where('id', '=', id).where('account_id', '=', accountId).forUpdate().executeTakeFirst();
}

/** The account's rollouts, newest first (one with `id`). */
export function rolloutRows(db: Db, accountId: string, limit: number, id?: string) {
  return db
    .selectFrom('rollouts')
    .selectAll()
    .where('account_id', '=', accountId)
    .$if(id !== undefined, (q) => q.where('id', '=', id!))
    .orderBy('started_at', 'desc')
    .orderBy('id')
    .limit(limit)
    .execute();
}

export function rolloutServerRows(db: Db, rolloutIds: readonly string[]) {
  return db
    .selectFrom('rollout_servers as rs')
    .innerJoin('servers as s', 's.id', 'rs.server_id')
    .select(['rs.rollout_id', 'rs.server_id', 's.name', 'rs.canary', 'rs.state', 'rs.requests', 'rs.blocked', 'rs.errors', 'rs.base_latency', 'rs.latency', 'rs.last_report_at'])
    .where('rs.rollout_id', 'in', [...rolloutIds])
    .orderBy('s.name')
    .execute();
}
