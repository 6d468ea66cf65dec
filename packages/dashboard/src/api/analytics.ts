import { api, ApiError, ok, type Answer } from './client';

// GET /api/analytics: traffic over time and the top blocked lists. A control plane without it
// (older) answers 404, and the views show an empty state.

export type Analytics = Answer<'/api/analytics', 'get'>;
export type StatusClass = keyof Analytics['series'][number]['status'];
export const STATUS_CLASSES: readonly StatusClass[] = ['1xx', '2xx', '3xx', '4xx', '5xx', 'other'];

export const RANGES = [
  { id: '1h', label: 'Last hour', ms: 3_600_000 },
  { id: '24h', label: 'Last 24 hours', ms: 86_400_000 },
  { id: '7d', label: 'Last 7 days', ms: 7 * 86_400_000 },
  { id: '30d', label: 'Last 30 days', ms: 30 * 86_400_000 },
] as const;
export type RangeId = (typeof RANGES)[number]['id'];

/** The analytics of one domain (by id; all when empty) over a range, at the step the service picks for it; null when the API has no analytics. */
export async function fetchAnalytics(domainId: string, range: RangeId): Promise<Analytics | null> {
  const r = RANGES.find((x) => x.id === range) ?? RANGES[1];
  const to = new Date();
  const from = new Date(to.getTime() - r.ms);
  try {
    return await ok(api.GET('/api/analytics', { params: { query: { from: from.toISOString(), to: to.toISOString(), ...(domainId ? { domain: domainId } : {}) } } }));
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

/** Seconds since the epoch of a point's time. */
export function pointSeconds(t: string): number {
  return Date.parse(t) / 1000;
}
