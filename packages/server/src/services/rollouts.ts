import { randomUUID } from 'node:crypto';
import { histogramP99, LATENCY_BUCKETS_MS, type AnalyticsBatchPayload, type ServerSnapshot } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { isUuid, iso } from '../values.js';
import type { Database, Tx } from '../db/database.js';
import type { RolloutState } from '../db/schema.js';
import {
  bakingCanaryRow,
  canariesNotReportedSince,
  canaryReports,
  domainCountsOfServers,
  holdingRollout,
  insertRollout,
  liveServerIds,
  lockBakingRollout,
  lockRollout,
  markApplied,
  markHalted,
  markRolledBack,
  nextBakeUntil,
  overdueBakes,
  releasedSnapshots,
  rolloutRows,
  rolloutServerRows,
  rolloutSettingsRow as settingsRow,
  serverName,
  setBakeCounts,
  setReleasedSnapshot,
  setServerCanary,
  stopHolding,
  upsertRolloutSettings,
} from '../data/rollouts.js';
import { addHistograms, serverDomains } from '../data/analytics.js';
import { bumpAllServers, bumpServers } from '../data/servers.js';
import { AppError, invalidField } from '../errors.js';
import { buildSnapshots } from './snapshot.js';
import { notificationMessages, notify, quotedName } from './notifications.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { ROLLOUT_REPORT_SECONDS } from './rollout-holds.js';

// Staged rollout (docs/architecture.md "Staged rollout", docs/api.md "Rollout"). In staged mode a
// change reaches the account's canary servers first; the others keep the snapshot last released
// to them (servers.released_snapshot) until the change has baked on the canaries for bakeSeconds
// without a regression. Everything is in the database, so every control-plane process agrees.

export const ROLLOUT_MODES = ['immediate', 'staged'] as const;
export type RolloutMode = (typeof ROLLOUT_MODES)[number];
export const BAKE_SECONDS = { min: 5, max: 3600, default: 60 } as const;
/**
 * When a bake regresses (docs/api.md "Rollout"): a share is compared only once the canary counted
 * at least minRequests during the bake; it regresses when it rose by at least `rise` (absolute)
 * and to at least twice the share before the change.
 */
export const ROLLOUT_THRESHOLDS = { minRequests: 20, blockedRise: 0.25, errorRise: 0.2, minLatencySamples: 50, latencyFactor: 3, latencyRiseMs: 200 } as const;
/** The window before a change that the canary's "before" shares are read from. */
const BASELINE_MS = 15 * 60_000;
/** Rollouts GET /api/rollouts lists. */
const LISTED = 20;

type Db = Database | Tx;

// ------------------------------------------------------------------------------------------------
// Settings

const canaryIds = (db: Db, accountId: string) => liveServerIds(db, accountId, true);

export async function getRolloutSettings(ctx: ServiceContext, accountId: string) {
  const [row, canaries, current] = await Promise.all([settingsRow(ctx.db, accountId), canaryIds(ctx.db, accountId), holdingRollout(ctx.db, accountId)]);
  const mode: RolloutMode = row?.mode ?? 'immediate';
  return {
    mode,
    bakeSeconds: row?.bake_seconds ?? BAKE_SECONDS.default,
    canaries: canaries.length,
    state: current?.state ?? 'idle',
    rolloutId: current?.id ?? null,
    warning: mode === 'staged' && canaries.length === 0 ? 'No server is a canary (PUT /api/servers/{id} with canary: true): changes reach every server at once, as in immediate mode' : null,
  };
}

export async function putRolloutSettings(ctx: ServiceContext, accountId: string, body: { mode?: unknown; bakeSeconds?: unknown }, actor: Actor = SYSTEM_ACTOR) {
  if (body.mode !== undefined && !(ROLLOUT_MODES as readonly unknown[]).includes(body.mode)) throw invalidField('mode', `must be one of ${ROLLOUT_MODES.join(', ')}`);
  const bake = body.bakeSeconds;
  if (bake !== undefined && (typeof bake !== 'number' || !Number.isInteger(bake) || bake < BAKE_SECONDS.min || bake > BAKE_SECONDS.max)) {
    throw invalidField('bakeSeconds', `must be an integer from ${BAKE_SECONDS.min} to ${BAKE_SECONDS.max}`);
  }
  const touched = await ctx.db.transaction().execute(async (tx) => {
    const before = await settingsRow(tx, accountId, true);
    const mode = (body.mode as RolloutMode | undefined) ?? before?.mode ?? 'immediate';
    const bakeSeconds = bake ?? before?.bake_seconds ?? BAKE_SECONDS.default;
    await upsertRolloutSettings(tx, accountId, mode, bakeSeconds, ctx.now());
    await recordAudit(tx, ctx, accountId, actor, {
      objectType: 'rollout_settings',
      objectId: null,
      action: 'update',
      before: { mode: before?.mode ?? 'immediate', bakeSeconds: before?.bake_seconds ?? BAKE_SECONDS.default },
      after: { mode, bakeSeconds },
    });
    const wasStaged = before?.mode === 'staged';
    if (mode === 'staged' && !wasStaged) {
      // What every server runs now is the released state the next change is held against.
      await captureReleased(tx, accountId);
      return [];
    }
    if (mode === 'immediate' && wasStaged) {
      // Immediate again: nothing is held any more; a baking or halted rollout is superseded.
      const ended = await endHolding(tx, accountId, ctx.now());
      return ended ? liveServerIds(tx, accountId) : [];
    }
    return [];
  });
  ctx.serversChanged(touched);
  return getRolloutSettings(ctx, accountId);
}

/** The canary flag of a server the caller found and locked in its account. */
export async function setCanary(tx: Tx, serverId: string, canary: boolean): Promise<void> {
  await setServerCanary(tx, serverId, canary);
}

// ------------------------------------------------------------------------------------------------
// A change

/** Stores what every live server of the account is to run now as its released snapshot. */
async function captureReleased(db: Db, accountId: string): Promise<void> {
  const ids = await liveServerIds(db, accountId);
  const { snapshots } = await buildSnapshots(db, ids, { holds: false });
  for (const id of ids) {
    const s = snapshots.get(id);
    await setReleasedSnapshot(db, id, s ? JSON.stringify(s) : null);
  }
}

/** The account's holding rollout stops holding: superseded if it was baking. Returns whether there was one. */
async function endHolding(db: Db, accountId: string, now: Date): Promise<boolean> {
  const r = await holdingRollout(db, accountId, true);
  if (!r) return false;
  await stopHolding(db, r.id, r.state === 'baking', now);
  return true;
}

/**
 * A change of the configuration that reaches these servers of the account (every live one when
 * none are given): their revisions are bumped and, when any was, the change goes through the
 * account's rollout (noteChange), in the caller's transaction. Returns the ids bumped.
 */
export async function bumpForChange(tx: Db, accountId: string, serverIds?: readonly string[]): Promise<string[]> {
  const ids = serverIds === undefined ? await bumpAllServers(tx, accountId) : await bumpServers(tx, accountId, serverIds);
  if (ids.length > 0) await noteChange(tx, accountId);
  return ids;
}

/**
 * Called in the transaction of every configuration change, after its servers' revisions were
 * bumped (bumpForChange). Immediate mode: nothing. Staged mode: a new rollout starts (any one
 * holding is superseded): the canaries bake the change, the others stay on their released
 * snapshot. Staged without a canary: the change is released to every server at once.
 */
export async function noteChange(tx: Db, accountId: string): Promise<void> {
  const settings = await settingsRow(tx, accountId, true);
  if (settings?.mode !== 'staged') return;
  const now = new Date();
  await endHolding(tx, accountId, now);
  const canaries = new Set(await canaryIds(tx, accountId));
  if (canaries.size === 0) return captureReleased(tx, accountId);
  const ids = await liveServerIds(tx, accountId);
  const change = await describeChange(tx, ids);
  const id = randomUUID();
  const baselines = await domainCountsOfServers(tx, accountId, [...canaries], new Date(now.getTime() - BASELINE_MS));
  await insertRollout(
    tx,
    {
      id,
      account_id: accountId,
      state: 'baking',
      holding: true,
      change,
      bake_seconds: settings.bake_seconds,
      started_at: now,
      bake_until: new Date(now.getTime() + settings.bake_seconds * 1000),
    },
    ids.map((serverId) => {
      const b = baselines.get(serverId);
      const canary = canaries.has(serverId);
      return {
        rollout_id: id,
        server_id: serverId,
        canary,
        state: canary ? 'baking' : 'queued',
        base_requests: b?.requests ?? 0,
        base_blocked: b?.blocked ?? 0,
        base_errors: b?.errors ?? 0,
        base_latency: b?.latency ?? null,
      };
    }),
  );
}

/** What changed from each server's released snapshot to what it is to run now, as one line. */
async function describeChange(db: Db, serverIds: string[]): Promise<string> {
  const [{ snapshots }, released] = await Promise.all([buildSnapshots(db, serverIds, { holds: false }), releasedSnapshots(db, serverIds)]);
  const parts = new Set<string>();
  for (const r of released) {
    const after = snapshots.get(r.id);
    if (!after) continue;
    const before = r.released_snapshot ? (JSON.parse(r.released_snapshot) as ServerSnapshot) : undefined;
    for (const p of diffSnapshots(before, after)) parts.add(p);
  }
  const text = [...parts].join('; ') || 'no change to the configuration (a new revision)';
  return text.length > 1000 ? `${text.slice(0, 997)}...` : text;
}

/** Lines naming what differs between two snapshots of one server, by object. */
export function diffSnapshots(before: ServerSnapshot | undefined, after: ServerSnapshot): string[] {
  const out: string[] = [];
  const byId = <T extends { id: string }>(xs: readonly T[] | undefined) => new Map((xs ?? []).map((x) => [x.id, x]));
  const compare = <T extends { id: string }>(kind: string, a: readonly T[] | undefined, b: readonly T[] | undefined, name: (x: T) => string) => {
    const was = byId(a);
    const now = byId(b);
    for (const [id, x] of now) {
      const old = was.get(id);
      if (!old) out.push(`${kind} ${name(x)} added`);
      else if (JSON.stringify(old) !== JSON.stringify(x)) out.push(`${kind} ${name(x)} changed`);
    }
    for (const [id, x] of was) if (!now.has(id)) out.push(`${kind} ${name(x)} removed`);
  };
  compare('domain', before?.domains, after.domains, (d) => d.domain);
  compare('WAF rule', before?.rules, after.rules, (r) => `${r.type} ${r.value}`);
  compare('custom rule', before?.customRules, after.customRules, (r) => `"${r.expression}" (${r.action})`);
  if (JSON.stringify(before?.botKeys) !== JSON.stringify(after.botKeys)) out.push('bot keys rotated');
  return out;
}

// ------------------------------------------------------------------------------------------------
// Signals

export interface BakeCounts {
  requests: number;
  blocked: number;
  errors: number;
  /** Sampled requests by latency bucket (LATENCY_BUCKETS_MS); null without samples. */
  latency?: readonly number[] | null;
}

/**
 * A request blocked in a domain's backend is counted in its requests too, one blocked before it
 * (an IP list in the frontend) is not: the share is of the larger of both (at most 1).
 */
const seen = (c: BakeCounts) => Math.max(c.requests, c.blocked);
const blockedShare = (c: BakeCounts) => (seen(c) > 0 ? c.blocked / seen(c) : 0);
const errorShare = (c: BakeCounts) => (c.requests > 0 ? c.errors / c.requests : 0);
const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const samples = (c: BakeCounts) => (c.latency ?? []).reduce((a, b) => a + b, 0);
/** The p99 of a histogram with enough samples to judge by, else undefined. */
const judgedP99 = (c: BakeCounts) => (samples(c) >= ROLLOUT_THRESHOLDS.minLatencySamples ? histogramP99(c.latency!) : undefined);
const msText = (ms: number) => (ms === Infinity ? `over ${LATENCY_BUCKETS_MS.at(-1)! / 1000} s` : ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`);

/** The regression of a canary's bake against its "before", or undefined (ROLLOUT_THRESHOLDS). */
export function regression(before: BakeCounts, bake: BakeCounts): { signal: string; values: string } | undefined {
  if (seen(bake) < ROLLOUT_THRESHOLDS.minRequests) return undefined;
  const b0 = blockedShare(before);
  const b1 = blockedShare(bake);
  if (b1 - b0 >= ROLLOUT_THRESHOLDS.blockedRise && b1 >= 2 * b0) {
    return { signal: 'the share of requests blocked by the WAF', values: `${pct(b0)} before the change, ${pct(b1)} during the bake (${bake.blocked} of ${seen(bake)} requests)` };
  }
  const e0 = errorShare(before);
  const e1 = errorShare(bake);
  if (bake.requests >= ROLLOUT_THRESHOLDS.minRequests && e1 - e0 >= ROLLOUT_THRESHOLDS.errorRise && e1 >= 2 * e0) {
    return { signal: 'the share of origin errors (5xx)', values: `${pct(e0)} before the change, ${pct(e1)} during the bake (${bake.errors} of ${bake.requests} answers)` };
  }
  const p0 = judgedP99(before);
  const p1 = judgedP99(bake);
  if (p0 !== undefined && p1 !== undefined && p1 >= ROLLOUT_THRESHOLDS.latencyFactor * p0 && p1 - p0 >= ROLLOUT_THRESHOLDS.latencyRiseMs) {
    return { signal: 'the p99 latency', values: `at most ${msText(p0)} before the change, ${p1 === Infinity ? '' : 'up to '}${msText(p1)} during the bake (${samples(bake)} sampled requests)` };
  }
  return undefined;
}

/**
 * A canary's analytics/batch during a bake: its counts are added to the bake's, then the bake is
 * judged: a regression halts the rollout; past bake_until, once every canary has reported since,
 * the change is released to every server. Nothing for a server that is not a baking canary.
 */
export async function recordRolloutReport(ctx: ServiceContext, serverId: string, batch: AnalyticsBatchPayload): Promise<'none' | 'baking' | 'halted' | 'applied'> {
  const now = ctx.now();
  const result = await ctx.db.transaction().execute(async (tx) => {
    const row = await bakingCanaryRow(tx, serverId);
    if (!row) return { outcome: 'none' as const, push: [] as string[] };
    // Only what the agent may claim: the traffic of the domains this server serves.
    const own = new Set((await serverDomains(tx, row.account_id, serverId)).map((d) => d.domain.toLowerCase()));
    const counts = { requests: 0, blocked: 0, errors: 0, latency: null as number[] | null };
    for (const d of batch.domains) {
      if (!own.has(d.domain.toLowerCase())) continue;
      counts.requests += d.requests;
      counts.errors += d.status['5xx'];
      for (const n of Object.values(d.blocked)) counts.blocked += n ?? 0;
      if (d.latency) counts.latency = addHistograms(counts.latency, d.latency);
    }
    const latency = counts.latency || row.latency ? addHistograms(row.latency, counts.latency) : null;
    const bake = { requests: Number(row.requests) + counts.requests, blocked: Number(row.blocked) + counts.blocked, errors: Number(row.errors) + counts.errors, latency };
    await setBakeCounts(tx, row.rollout_id, serverId, bake, now);
    const base = { requests: Number(row.base_requests), blocked: Number(row.base_blocked), errors: Number(row.base_errors), latency: row.base_latency ? row.base_latency.map(Number) : null };
    const bad = regression(base, bake);
    if (bad) return { outcome: 'halted' as const, push: await halt(ctx, tx, row, serverId, bad.signal, bad.values) };
    if (now.getTime() < new Date(row.bake_until).getTime()) return { outcome: 'baking' as const, push: [] };
    const waiting = await canariesNotReportedSince(tx, row.rollout_id, coveredSince(row.bake_until));
    if (waiting.length > 0) return { outcome: 'baking' as const, push: [] };
    return { outcome: 'applied' as const, push: await release(tx, row.rollout_id, row.account_id, now) };
  });
  ctx.serversChanged(result.push);
  return result.outcome;
}

/**
 * A canary failed outright during a bake: its configuration update failed (config/ack not ok) or
 * its HAProxy stopped serving. The rollout halts at once.
 */
export async function recordCanaryFailure(ctx: ServiceContext, serverId: string, signal: string, values: string): Promise<boolean> {
  const push = await ctx.db.transaction().execute(async (tx) => {
    const row = await bakingCanaryRow(tx, serverId);
    return row ? halt(ctx, tx, row, serverId, signal, values) : undefined;
  });
  if (push) ctx.serversChanged(push);
  return push !== undefined;
}

/**
 * How long after a bake's end a rollout waits for every live canary's report before it halts:
 * a canary whose agent went away mid-bake (or never got the change) cannot say the change holds.
 */
export const SILENT_CANARY_SECONDS = 30;
/** How often the control plane looks at the bakes (serve.ts's rollout-watch job), besides waking at each bake's end. */
export const ROLLOUT_WATCH_MS = 1_000;
/**
 * A bake is covered when every live canary reported at most this long before its end: one report
 * interval and a second of slack (agents report on the interval's multiples of wall time, plus up
 * to a tenth of it), so a change is released when its bake ends, not up to an interval later.
 */
const COVERED_MS = ROLLOUT_REPORT_SECONDS * 1000 + 1000;
const coveredSince = (bakeUntil: Date | string) => new Date(new Date(bakeUntil).getTime() - COVERED_MS);

/**
 * The rollout watch, run every ROLLOUT_WATCH_MS and at each bake's end (serve.ts): each rollout
 * still baking past `bake_until` is released when every live canary's reports cover the bake
 * (and none regressed: a regression halts at the report); one whose canary has sent nothing for
 * SILENT_CANARY_SECONDS after the end halts, naming that canary, rather than release a change
 * nobody saw hold. Under the rollout's row lock, as the reports: processes never both act.
 */
export async function watchBakes(ctx: ServiceContext): Promise<{ applied: number; halted: number }> {
  const now = ctx.now();
  const out = { applied: 0, halted: 0 };
  for (const r of await overdueBakes(ctx.db, now)) {
    const result = await ctx.db.transaction().execute(async (tx) => {
      const row = await lockBakingRollout(tx, r.id);
      if (!row) return undefined; // a report applied or halted it meanwhile
      const waiting = await canariesNotReportedSince(tx, row.rollout_id, coveredSince(row.bake_until));
      if (waiting.length === 0) return { outcome: 'applied' as const, push: await release(tx, row.rollout_id, row.account_id, now) };
      if (now.getTime() < new Date(row.bake_until).getTime() + SILENT_CANARY_SECONDS * 1000) return undefined;
      const silent = await canaryReports(
        tx,
        row.rollout_id,
        waiting.map((w) => w.server_id),
      );
      const values = silent
        .map(
          (s) => `${quotedName(s.name)} sent no report in the ${SILENT_CANARY_SECONDS} s after the bake ended (${s.last_report_at ? `its last at ${iso(s.last_report_at)}` : 'none during the bake'})`,
        )
        .join('; ');
      const push = await halt(ctx, tx, row, silent[0]!.server_id, 'canary reports', values, notificationMessages.rolloutSilent(row.change, values));
      return { outcome: 'halted' as const, push };
    });
    if (!result) continue;
    out[result.outcome]++;
    ctx.serversChanged(result.push);
  }
  return out;
}

/**
 * The rollout watch of one process: watchBakes now, and again when the next bake ends (found at
 * each run), so a change is released as its bake ends rather than at the next periodic run.
 */
export function bakeWatch(ctx: ServiceContext) {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const run = async () => {
    const result = await watchBakes(ctx);
    const next = stopped ? undefined : await nextBakeUntil(ctx.db, ctx.now());
    const wait = next ? next.getTime() - ctx.now().getTime() + 5 : Infinity;
    if (!stopped && wait < ROLLOUT_WATCH_MS * 2) {
      clearTimeout(timer);
      timer = setTimeout(() => void run().catch(() => undefined), Math.max(0, wait)); // a failure: the periodic run retries
      timer.unref();
    }
    return result;
  };
  return {
    run,
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** Halts: the canaries go back to their released snapshot, the others stay on theirs; rollout_halted. */
async function halt(
  ctx: ServiceContext,
  tx: Tx,
  row: { rollout_id: string; account_id: string; change: string },
  serverId: string,
  signal: string,
  values: string,
  message?: string,
): Promise<string[]> {
  const canaries = await markHalted(tx, row.rollout_id, signal, values, ctx.now());
  const text = message ?? notificationMessages.rolloutHalted(row.change, (await serverName(tx, serverId))?.name ?? serverId, signal, values);
  await notify({ ...ctx, db: tx }, { accountId: row.account_id, kind: 'rollout_halted', serverId, message: text });
  return canaries;
}

/** The rollout's change reaches every server: it is their released snapshot from now on. */
async function release(tx: Tx, rolloutId: string, accountId: string, now: Date): Promise<string[]> {
  await markApplied(tx, rolloutId, now);
  await captureReleased(tx, accountId);
  return liveServerIds(tx, accountId);
}

// ------------------------------------------------------------------------------------------------
// The API

async function heldRollout(tx: Tx, accountId: string, id: string) {
  if (!isUuid(id)) throw new AppError('rollout_not_found');
  const r = await lockRollout(tx, accountId, id);
  if (!r) throw new AppError('rollout_not_found');
  if (!r.holding || (r.state !== 'halted' && r.state !== 'rolled_back')) throw new AppError('rollout_not_halted');
  return r;
}

/** POST /api/rollouts/{id}/resume: the halted change is released to every server (the user overrides the halt). */
export async function resumeRollout(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  const push = await ctx.db.transaction().execute(async (tx) => {
    await settingsRow(tx, accountId, true);
    const held = await heldRollout(tx, accountId, id);
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'rollout', objectId: id, action: 'resume', before: { state: held.state }, after: { state: 'applied' } });
    return release(tx, id, accountId, ctx.now());
  });
  ctx.serversChanged(push);
  return rolloutView(ctx, accountId, id);
}

/**
 * POST /api/rollouts/{id}/rollback: the halted change is given up: every server keeps its last
 * good revision until a newer change is saved (which starts a new rollout of the whole current
 * configuration: undo the change first).
 */
export async function rollbackRollout(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  await ctx.db.transaction().execute(async (tx) => {
    await settingsRow(tx, accountId, true);
    const held = await heldRollout(tx, accountId, id);
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'rollout', objectId: id, action: 'rollback', before: { state: held.state }, after: { state: 'rolled_back' } });
    await markRolledBack(tx, id, ctx.now());
  });
  return rolloutView(ctx, accountId, id);
}

/** A p99 for the API: the upper bound of its bucket in ms (the last bound for "that or more"), or null without enough samples. */
function p99View(latency: readonly (number | string)[] | null): number | null {
  const p = judgedP99({ requests: 0, blocked: 0, errors: 0, latency: latency?.map(Number) ?? null });
  return p === undefined ? null : Math.min(p, LATENCY_BUCKETS_MS.at(-1)!);
}

async function views(
  db: Db,
  rollouts: {
    id: string;
    state: string;
    change: string;
    bake_seconds: number;
    started_at: Date | string;
    bake_until: Date | string;
    ended_at: Date | string | null;
    signal: string | null;
    detail: string | null;
  }[],
) {
  const ids = rollouts.map((r) => r.id);
  const servers = ids.length ? await rolloutServerRows(db, ids) : [];
  return rollouts.map((r) => ({
    id: r.id,
    state: r.state as RolloutState,
    change: r.change,
    bakeSeconds: r.bake_seconds,
    startedAt: iso(r.started_at)!,
    bakeUntil: iso(r.bake_until)!,
    endedAt: iso(r.ended_at),
    signal: r.signal,
    detail: r.detail,
    servers: servers
      .filter((s) => s.rollout_id === r.id)
      .map((s) => ({
        serverId: s.server_id,
        name: s.name,
        canary: s.canary,
        state: s.state,
        requests: Number(s.requests),
        blocked: Number(s.blocked),
        originErrors: Number(s.errors),
        p99Ms: p99View(s.latency),
        baseP99Ms: p99View(s.base_latency),
        lastReportAt: iso(s.last_report_at),
      })),
  }));
}

/** GET /api/rollouts: the account's newest rollouts first, with their state per server. */
export async function listRollouts(ctx: ServiceContext, accountId: string) {
  const rows = await rolloutRows(ctx.db, accountId, LISTED);
  return views(ctx.db, rows);
}

export async function rolloutView(ctx: ServiceContext, accountId: string, id: string) {
  if (!isUuid(id)) throw new AppError('rollout_not_found');
  const rows = await rolloutRows(ctx.db, accountId, 1, id);
  if (rows.length === 0) throw new AppError('rollout_not_found');
  return (await views(ctx.db, rows))[0]!;
}
