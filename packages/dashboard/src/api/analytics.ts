import { getOptional } from './client';

// GET /api/analytics (issue 12, point 2). Typed by hand until it is in the OpenAPI document;
// a control plane without it answers 404, and the views show an empty state.

export type StatusClass = '1xx' | '2xx' | '3xx' | '4xx' | '5xx' | 'other';
export const STATUS_CLASSES: readonly StatusClass[] = ['1xx', '2xx', '3xx', '4xx', '5xx', 'other'];

export interface AnalyticsPoint {
  t: string | number;
  requests: number;
  status: Record<StatusClass, number>;
  bytes_in: number;
  bytes_out: number;
  blocked: Record<string, number>;
}

export interface Analytics {
  from: string;
  to: string;
  step: 'minute' | 'hour';
  series: AnalyticsPoint[];
  top: {
    ips: { ip: string; count: number }[];
    paths: { path: string; count: number }[];
    countries: { country: string; count: number }[];
    rules: { rule_id: string; count: number }[];
  };
}

export const RANGES = [
  { id: '1h', label: 'Last hour', ms: 3_600_000, step: 'minute' },
  { id: '24h', label: 'Last 24 hours', ms: 86_400_000, step: 'minute' },
  { id: '7d', label: 'Last 7 days', ms: 7 * 86_400_000, step: 'hour' },
  { id: '30d', label: 'Last 30 days', ms: 30 * 86_400_000, step: 'hour' },
] as const;
export type RangeId = (typeof RANGES)[number]['id'];

/** The analytics of one domain (or all when domain is empty) over a range; null when the API has no analytics. */
export function fetchAnalytics(domain: string, range: RangeId): Promise<Analytics | null> {
  const r = RANGES.find((x) => x.id === range) ?? RANGES[1];
  const to = new Date();
  const from = new Date(to.getTime() - r.ms);
  const q = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), step: r.step });
  if (domain) q.set('domain', domain);
  return getOptional<Analytics>(`/api/analytics?${q.toString()}`);
}

/** Seconds since the epoch of a point's time (ISO string or seconds/milliseconds). */
export function pointSeconds(t: string | number): number {
  if (typeof t === 'number') return t > 1e12 ? t / 1000 : t;
  return Date.parse(t) / 1000;
}
