import { ANALYTICS_LIMITS, STATUS_CLASSES, WAF_REASONS } from '@rampart/protocol';
import { Type } from '@sinclair/typebox';
import { getAnalytics } from '../services/analytics.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

const Count = Type.Integer({ minimum: 0 });
const StatusCounts = Type.Object(Object.fromEntries(STATUS_CLASSES.map((c) => [c, Count])) as Record<(typeof STATUS_CLASSES)[number], typeof Count>, {
  description: 'Responses by status class',
});
const BlockedCounts = Type.Partial(Type.Object(Object.fromEntries(WAF_REASONS.map((r) => [r, Count])) as Record<(typeof WAF_REASONS)[number], typeof Count>), {
  description: 'Requests the WAF blocked, by reason (reasons without blocks left out)',
});

export const AnalyticsQuery = Type.Object(
  {
    domain: Type.Optional(Type.String({ maxLength: 100, description: "A domain's id; absent: all the account's domains" })),
    from: Type.Optional(Type.String({ maxLength: 40, description: 'ISO time, within the 30 days kept; default 24 hours before to' })),
    to: Type.Optional(Type.String({ maxLength: 40, description: 'ISO time, after from; default now' })),
    step: Type.Optional(
      Type.String({
        maxLength: 10,
        description: `minute or hour; default minute for ranges up to ${ANALYTICS_LIMITS.minuteStepMaxRangeHours} hours within the last ${ANALYTICS_LIMITS.minuteRetentionHours}, else hour. minute only within the last ${ANALYTICS_LIMITS.minuteRetentionHours} hours; at most ${ANALYTICS_LIMITS.maxPoints} points`,
      }),
    ),
  },
  { description: 'Other parameters are ignored, as on every read' },
);

const Top = (field: string, description: string) => Type.Array(Type.Object({ [field]: Type.String(), count: Count }), { maxItems: ANALYTICS_LIMITS.top, description });

export const AnalyticsView = Type.Object({
  from: Type.String({ format: 'date-time', description: 'The first bucket (from, rounded down to the step)' }),
  to: Type.String({ format: 'date-time' }),
  step: Type.Union([Type.Literal('minute'), Type.Literal('hour')]),
  series: Type.Array(
    Type.Object({
      t: Type.String({ format: 'date-time', description: "The bucket's start" }),
      requests: Count,
      status: StatusCounts,
      bytes_in: Count,
      bytes_out: Count,
      blocked: BlockedCounts,
    }),
    { description: 'One entry per step from from to to, zeros where nothing was counted' },
  ),
  top: Type.Object(
    {
      ips: Top('ip', 'Most blocked source addresses'),
      paths: Top('path', 'Most blocked paths'),
      countries: Top('country', 'Most blocked countries (country_blocked events, by the block_country rule that matched)'),
      rules: Top('rule_id', 'Rules that blocked most'),
    },
    { description: `From the stored WAF events (kept 7 days) over the same range and domain, blocked ones only, ${ANALYTICS_LIMITS.top} each` },
  ),
});

export function analyticsRoutes(app: App, { ctx }: RouteDeps): void {
  app.get('/api/analytics', {
    schema: {
      tags: ['Analytics'],
      security: SECURITY,
      summary: 'Traffic over time (requests, status classes, bytes, WAF blocks by reason) and the top blocked addresses, paths, countries and rules',
      description: "Shield servers report every 60 s. Minutes are kept 48 hours, hours 30 days. A 400 names the parameter at fault; a domain id that is not one of the account's domains is a 404.",
      querystring: AnalyticsQuery,
      response: { 200: AnalyticsView, ...ERROR_RESPONSES },
    },
    handler: async (req) => getAnalytics(ctx, req.principal.accountId, req.query),
  });
}
