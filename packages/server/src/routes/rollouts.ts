import { Type } from '@sinclair/typebox';
import { IdParams } from '../schemas.js';
import { BAKE_SECONDS, getRolloutSettings, listRollouts, putRolloutSettings, resumeRollout, rollbackRollout, ROLLOUT_MODES } from '../services/rollouts.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

// Staged rollout (docs/api.md "Rollout", docs/architecture.md "Staged rollout").

const Mode = Type.Union(
  ROLLOUT_MODES.map((m) => Type.Literal(m)),
  { description: 'immediate (default): every change reaches every server at once; staged: canary servers first' },
);
const RolloutStateT = Type.Union(['baking', 'applied', 'halted', 'rolled_back', 'superseded'].map((s) => Type.Literal(s)));
const ServerStateT = Type.Union(['queued', 'baking', 'applied', 'halted', 'rolled_back', 'superseded'].map((s) => Type.Literal(s)));

export const RolloutSettingsPut = Type.Object(
  {
    mode: Type.Optional(Mode),
    bakeSeconds: Type.Optional(Type.Integer({ minimum: BAKE_SECONDS.min, maximum: BAKE_SECONDS.max, description: `How long a change bakes on the canaries; default ${BAKE_SECONDS.default}` })),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const RolloutSettingsView = Type.Object({
  mode: Mode,
  bakeSeconds: Type.Integer(),
  canaries: Type.Integer({ description: 'Live servers flagged canary' }),
  state: Type.Union([Type.Literal('idle'), RolloutStateT], { description: 'The rollout holding servers: baking, halted or rolled_back; idle: none' }),
  rolloutId: Type.Union([Type.String(), Type.Null()]),
  warning: Type.Union([Type.String(), Type.Null()], { description: 'Set when staged mode has no canary: changes then reach every server at once' }),
});

export const RolloutView = Type.Object({
  id: Type.String(),
  state: RolloutStateT,
  change: Type.String({ description: 'What the change did, from the last released configuration' }),
  bakeSeconds: Type.Integer(),
  startedAt: Type.String({ format: 'date-time' }),
  bakeUntil: Type.String({ format: 'date-time' }),
  endedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  signal: Type.Union([Type.String(), Type.Null()], { description: 'Why it halted' }),
  detail: Type.Union([Type.String(), Type.Null()], { description: "The signal's values before the change and during the bake" }),
  servers: Type.Array(
    Type.Object({
      serverId: Type.String(),
      name: Type.String(),
      canary: Type.Boolean(),
      state: ServerStateT,
      requests: Type.Integer({ description: 'Canaries: requests counted during the bake' }),
      blocked: Type.Integer(),
      originErrors: Type.Integer(),
      p99Ms: Type.Union([Type.Integer(), Type.Null()], {
        description: "Canaries: the p99 latency of the requests sampled during the bake, as its bucket's upper bound in ms (10000: 10 s or more); null below 50 samples",
      }),
      baseP99Ms: Type.Union([Type.Integer(), Type.Null()], { description: 'Canaries: the same over the 15 minutes before the change; null below 50 samples' }),
      lastReportAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    }),
  ),
});

export function rolloutRoutes(app: App, { ctx }: RouteDeps): void {
  const tags = ['Rollout'];
  app.get('/api/settings/rollout', {
    schema: { tags, security: SECURITY, summary: 'The rollout mode and bake time, with the canaries counted', response: { 200: RolloutSettingsView, ...ERROR_RESPONSES } },
    handler: async (req) => getRolloutSettings(ctx, req.principal.accountId),
  });
  app.put('/api/settings/rollout', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Set the rollout mode (immediate or staged) and bakeSeconds (5 to 3600)',
      body: RolloutSettingsPut,
      response: { 200: RolloutSettingsView, ...ERROR_RESPONSES },
    },
    handler: async (req) => putRolloutSettings(ctx, req.principal.accountId, req.body, req.principal.actor),
  });
  app.get('/api/rollouts', {
    schema: { tags, security: SECURITY, summary: 'The 20 newest rollouts, with their state per server', response: { 200: Type.Array(RolloutView), ...ERROR_RESPONSES } },
    handler: async (req) => listRollouts(ctx, req.principal.accountId),
  });
  app.post('/api/rollouts/:id/resume', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Release a halted (or rolled back) change to every server anyway',
      params: IdParams,
      response: { 200: RolloutView, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req) => resumeRollout(ctx, req.principal.accountId, req.params.id, req.principal.actor),
  });
  app.post('/api/rollouts/:id/rollback', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Give up a halted change: every server keeps its last good revision until a newer change is saved',
      params: IdParams,
      response: { 200: RolloutView, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req) => rollbackRollout(ctx, req.principal.accountId, req.params.id, req.principal.actor),
  });
}
