import type { ServiceContext } from '../context.js';
import { notifyExpiringCertificates, pruneCertificateOrders } from './certificates.js';

/** The server health check runs every 5 minutes by default (docs/api.md, "HTTPS certificates"). */
export const DEFAULT_HEALTH_INTERVAL_SECONDS = 300;
const MAX_HEALTH_INTERVAL_SECONDS = 86_400;

/** RAMPART_HEALTH_INTERVAL: seconds between health cycles (default 300). */
export function healthIntervalFromEnv(raw: string | undefined): number {
  if (raw === undefined || raw.trim() === '') return DEFAULT_HEALTH_INTERVAL_SECONDS;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_HEALTH_INTERVAL_SECONDS) {
    throw new Error(`RAMPART_HEALTH_INTERVAL must be a number of seconds above 0 and at most ${MAX_HEALTH_INTERVAL_SECONDS}, not ${JSON.stringify(raw)}`);
  }
  return seconds;
}

/**
 * One health cycle: warns of certificates about to expire and forgets orders the authority no
 * longer counts. Idempotent, so several processes sharing a database may each run it.
 */
export async function runHealthCycle(ctx: ServiceContext, now: Date = ctx.now()): Promise<void> {
  await notifyExpiringCertificates(ctx, now);
  await pruneCertificateOrders(ctx, now);
}
