import { HOST_PROBLEM, isHostProblem } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { agentChannelStore, type AgentChannelStore } from './agent-channel.js';
import { notificationMessages, notifyFromServer } from './notifications.js';

export interface ConfigAck {
  revision: number;
  ok: boolean;
  errors: readonly { line: number | null; message: string }[];
}

/**
 * What a config/ack means:
 * - `refused`: a revision above the server's desired one was never sent to it; nothing is stored
 *   (it would otherwise hold appliedRevision above every real ack, and mark domains active);
 * - `applied`: the revision is stored as appliedRevision (it only moves forward) and the
 *   server's domains without SSL become active (an SSL domain is active by its certificate);
 * - `stale`: an ok ack for a revision below the applied one: nothing changes;
 * - `failed`: a server_error notification with HAProxy's messages (`dropped` when over the
 *   server's notification limit).
 */
export async function recordConfigAck(
  ctx: ServiceContext,
  server: { accountId: string; serverId: string },
  ack: ConfigAck,
  store: AgentChannelStore = agentChannelStore,
): Promise<{ outcome: 'refused' | 'applied' | 'stale' | 'failed' | 'dropped'; desiredRevision: number }> {
  const desired = await store.desiredRevision(ctx.db, server.serverId);
  const desiredRevision = desired ?? 0;
  if (desired === undefined || !Number.isSafeInteger(ack.revision) || ack.revision < 0 || ack.revision > desiredRevision) return { outcome: 'refused', desiredRevision };
  if (!ack.ok) {
    // Errors whose cause is the host (HOST_PROBLEM) are not the configuration's: the message says to fix the host.
    const host = ack.errors.filter((e) => isHostProblem(e.message));
    const detail = (host.length ? host.map((e) => e.message.slice(HOST_PROBLEM.length)) : ack.errors.map((e) => (e.line ? `line ${e.line}: ${e.message}` : e.message))).join('; ');
    const message = (host.length ? notificationMessages.hostProblem(ack.revision, detail) : notificationMessages.configFailed(ack.revision, detail)).slice(0, 4000);
    const outcome = await notifyFromServer(ctx, { ...server, kind: 'server_error', message }, store);
    return { outcome: outcome === 'dropped' ? 'dropped' : 'failed', desiredRevision };
  }
  return ctx.db.transaction().execute(async (tx) => {
    const applied = await store.recordAppliedRevision(tx, server.serverId, ack.revision, ctx.now());
    // An older revision than the one already running says nothing about the domains.
    if (applied === undefined || applied > ack.revision) return { outcome: 'stale' as const, desiredRevision };
    await store.activatePlainDomainsOfServer(tx, server.serverId);
    return { outcome: 'applied' as const, desiredRevision };
  });
}
