import { bearerMatches, type ControlPlaneMetrics } from '../metrics.js';
import type { App } from './types.js';

export interface MetricsRouteDeps {
  metrics: ControlPlaneMetrics;
  /** The operator token (RAMPART_ADMIN_TOKEN), accepted too. */
  adminToken?: string | undefined;
  /** RAMPART_METRICS_TOKEN: a token for the scraper alone. */
  metricsToken?: string | undefined;
}

/**
 * GET /metrics: Prometheus' text format, for `Authorization: Bearer <token>` with the metrics
 * token or the operator token. With neither set it does not exist (404); hidden from OpenAPI.
 */
export function metricsRoutes(app: App, { metrics, adminToken, metricsToken }: MetricsRouteDeps): void {
  const tokens = [adminToken, metricsToken].filter((t): t is string => typeof t === 'string' && t.length > 0);
  app.get('/metrics', { config: { public: true }, schema: { hide: true } }, async (req, reply) => {
    if (tokens.length === 0) return reply.code(404).send({ error: 'Not found' });
    if (!bearerMatches(req.headers.authorization, tokens)) {
      return reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'Invalid or missing metrics token' });
    }
    const body = await metrics.registry.metrics();
    return reply.header('content-type', metrics.registry.contentType).header('cache-control', 'no-store').send(body);
  });
}
