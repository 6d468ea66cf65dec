import cookie from '@fastify/cookie';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyError, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify';
import { maxHeaderSize, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { authenticate, SESSION_COOKIE, type Principal } from './auth.js';
import type { ServiceContext } from './context.js';
import { databaseProblem } from './db/database.js';
import { AppError } from './errors.js';
import { LISTENER_LIMITS, listenerOptions, type ListenerLimits } from './listener-limits.js';
import { redactingLogger, urlSecrets } from './log-redaction.js';
import { ControlPlaneMetrics } from './metrics.js';
import { metricsRoutes } from './routes/metrics.js';
import { LiveStreams, streamRoutes } from './routes/stream.js';
import { accountRoutes } from './routes/account.js';
import { adminRoutes } from './routes/admin.js';
import { apiKeyRoutes } from './routes/api-keys.js';
import { authRoutes } from './routes/auth.js';
import { billingWebhookRoutes } from './routes/billing-webhook.js';
import { dashboardRoutes } from './routes/dashboard.js';
import { downloadRoutes } from './routes/downloads.js';
import { domainRoutes } from './routes/domains.js';
import { notificationRoutes } from './routes/notifications.js';
import { serverRoutes } from './routes/servers.js';
import { dnsSettingsRoutes } from './routes/settings-dns.js';
import { rolloutRoutes } from './routes/rollouts.js';
import type { App } from './routes/types.js';
import { wafRoutes } from './routes/waf.js';
import { customRuleRoutes } from './routes/rules.js';
import { auditRoutes } from './routes/audit.js';
import { analyticsRoutes } from './routes/analytics.js';
import { ErrorBody } from './schemas.js';
import { lazySchemaController } from './schema-compilers.js';
import { SERVICE_VERSION } from './services/export.js';
import type { SignupMode } from './services/signup.js';
import { validationMessage } from './validation-message.js';

/** What a route may do while the account is frozen: docs/api.md lists the few mutations that still work. */
export type FrozenPolicy = 'block' | 'allow' | 'origins-only';

declare module 'fastify' {
  interface FastifyContextConfig {
    public?: boolean;
    frozen?: FrozenPolicy;
  }
  interface FastifyRequest {
    principal: Principal;
  }
}

export interface AppOptions {
  ctx: ServiceContext;
  adminToken?: string | undefined;
  logger?: FastifyServerOptions['logger'];
  /**
   * RAMPART_TRUST_PROXY / --trust-proxy: the addresses and ranges of the reverse proxies in front
   * (trust-proxy.ts); X-Forwarded-For and X-Forwarded-Proto are read only from them. Default none.
   */
  trustProxy?: boolean | string[];
  /** RAMPART_PUBLIC_URL: where users reach the control plane; https makes session cookies Secure. */
  publicUrl?: URL | undefined;
  /** RAMPART_SIGNUP (services/signup.ts); default closed. */
  signup?: SignupMode | undefined;
  /** Timeouts and the connection limit of the listener (listener-limits.ts); default LISTENER_LIMITS. */
  listener?: ListenerLimits | undefined;
  /** RAMPART_DOWNLOADS_DIR: the Debian packages served under /downloads/ (routes/downloads.ts); none when absent. */
  downloadsDir?: string | undefined;
  /** Prometheus metrics (src/metrics.ts); a registry of the app's own when absent. */
  metrics?: ControlPlaneMetrics | undefined;
  /** RAMPART_METRICS_TOKEN: GET /metrics answers this bearer token too (besides adminToken). */
  metricsToken?: string | undefined;
  /** GET /api/stream's streams (routes/stream.ts); serve.ts passes the ones the change bus feeds. */
  streams?: LiveStreams | undefined;
}

export const BODY_LIMIT = 1024 * 1024;
/** A path segment longer than this matches no route (404). */
export const MAX_PARAM_LENGTH = 200;
const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** What Node's parser refused, by its error code: status and message. */
function clientErrorAnswer(code: string | undefined): [number, string] {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return [431, `request line and headers are larger than the ${Math.floor(maxHeaderSize / 1024)} KiB limit`];
    case 'HPE_INVALID_CONTENT_LENGTH':
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
      return [400, 'Content-Length is not valid'];
    case 'HPE_INVALID_METHOD':
      return [400, 'method is not supported'];
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [408, 'request took too long to arrive'];
    default:
      return [400, 'malformed HTTP request'];
  }
}

/** How long GET /healthz waits for the database. */
const HEALTHZ_DATABASE_TIMEOUT_MS = 2_000;

function frameworkErrors(err: FastifyError, _req: FastifyRequest, reply: FastifyReply): void {
  if (err.code === 'FST_ERR_BAD_URL') reply.code(400).send({ error: 'url: is not valid percent-encoding' });
  else if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') reply.code(414).send({ error: `url: a path segment is longer than ${MAX_PARAM_LENGTH} characters` });
  else reply.code(500).send({ error: 'Internal server error' });
}

function clientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || !socket.writable) {
    socket.destroy();
    return;
  }
  const [status, message] = clientErrorAnswer(err.code);
  const body = JSON.stringify({ error: message });
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` + `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

export async function buildApp(options: AppOptions): Promise<App> {
  const listener = options.listener ?? LISTENER_LIMITS;
  // Secrets of the operator's that must never reach a log line, besides the patterns log-redaction.ts knows.
  const logSecrets = [options.adminToken, options.metricsToken, options.ctx.billing?.webhookSecret, ...urlSecrets(options.ctx.billing?.chain?.rpcUrl)].filter((s): s is string => !!s);
  const app = Fastify({
    logger: redactingLogger(options.logger, logSecrets),
    bodyLimit: BODY_LIMIT,
    ...listenerOptions(listener),
    trustProxy: Array.isArray(options.trustProxy) && options.trustProxy.length === 0 ? false : (options.trustProxy ?? false),
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // Fastify's own 503 while closing has a body of its own; the hook below answers { error }.
    return503OnClosing: false,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // Registering the routes and the OpenAPI documents takes a second or two; on a loaded host
    // (CI running test files side by side) Fastify's default 10 s for a plugin was seen to run out.
    pluginTimeout: 60_000,
    // Errors Fastify answers before any route or hook runs: the same { error } body as the rest.
    frameworkErrors,
    // Requests Node's HTTP parser refuses never reach Fastify: answered here, on the socket.
    clientErrorHandler: clientError,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: true } },
    // Fastify's compilers, each route's schemas compiled on the route's first request (schema-compilers.ts).
    schemaController: lazySchemaController,
  }).withTypeProvider<TypeBoxTypeProvider>();
  app.server.maxConnections = listener.maxConnections;
  const { ctx } = options;
  const metrics = options.metrics ?? new ControlPlaneMetrics();
  metrics.instrument(app); // on the root, before the routes: every answer is timed by its route pattern

  app.removeContentTypeParser('text/plain'); // JSON only: anything else is a 415
  app.addSchema(ErrorBody);
  await app.register(cookie);
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Rampart API',
        version: SERVICE_VERSION,
        description:
          'Management API of Rampart, the self-hostable edge proxy and web application firewall. ' +
          'Authenticate with the x-api-key header (Pro and Enterprise) or a browser session cookie. ' +
          'Errors are {"error": "<message>"}; money is in US dollars.',
      },
      components: {
        securitySchemes: {
          apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' },
          session: { type: 'apiKey', in: 'cookie', name: SESSION_COOKIE },
          adminToken: { type: 'http', scheme: 'bearer' },
        },
      },
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list', deepLinking: false } });
  app.get('/api/openapi.json', { config: { public: true }, schema: { hide: true } }, () => app.swagger());
  // For load balancers and service managers: 200 when the database answers, else 503 naming the part.
  app.get('/healthz', { config: { public: true }, schema: { hide: true } }, async (_req, reply) => {
    const problem = await databaseProblem(ctx.db, HEALTHZ_DATABASE_TIMEOUT_MS);
    if (problem === undefined) return { ok: true, database: 'ok' };
    app.log.warn({ problem }, 'healthz: the database does not answer');
    return reply.code(503).send({ ok: false, database: 'unavailable' });
  });

  // A request that reaches a closing app (pipelined, or on a busy keep-alive connection) is
  // turned away at once, as Fastify would, with the usual body.
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  app.addHook('onRequest', async (_req, reply) => {
    if (!closing) return;
    reply.header('connection', 'close');
    throw new AppError('shutting_down', undefined, { retryAfterSeconds: 1 });
  });
  app.addHook('onRequest', async (req) => {
    const config = req.routeOptions.config;
    // Decided on the matched route, not the raw URL, so an encoded path cannot skip authentication.
    const route = req.routeOptions.url;
    if (route === undefined || config.public || !route.startsWith('/api/')) return;
    req.principal = await authenticate(ctx, req);
  });
  app.addHook('preHandler', (req, _reply, done) => {
    if (!req.principal || req.principal.state !== 'frozen' || !MUTATING.has(req.method)) return done();
    const policy = req.routeOptions.config.frozen ?? 'block';
    if (policy === 'allow') return done();
    if (policy === 'origins-only') {
      const keys = Object.keys(req.body ?? {});
      if (keys.length === 1 && keys[0] === 'origins') return done();
    }
    done(new AppError('account_frozen'));
  });

  app.setErrorHandler((err: FastifyError | AppError, req, reply) => {
    if (err instanceof AppError) {
      if (err.retryAfterSeconds !== undefined) reply.header('retry-after', String(err.retryAfterSeconds));
      return reply.code(err.status).send({ error: err.message });
    }
    if (err.validation) return reply.code(400).send({ error: validationMessage(err.validation, err.validationContext ?? 'body') });
    switch (err.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return reply.code(413).send({ error: 'body: larger than the 1 MiB limit' });
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return reply.code(415).send({ error: 'body: Content-Type must be application/json' });
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return reply.code(400).send({ error: 'body: must not be empty when Content-Type is application/json' });
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
        return reply.code(400).send({ error: 'body: is not valid JSON' });
    }
    if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
      return reply
        .code(err.statusCode)
        .send({ error: err.statusCode === 400 && err instanceof SyntaxError ? 'body: is not valid JSON' : err.message || STATUS_CODES[err.statusCode] || 'Bad request' });
    }
    req.log.error({ err }, 'unhandled error');
    return reply.code(500).send({ error: 'Internal server error' });
  });
  app.setNotFoundHandler((_req, reply) => reply.code(404).send({ error: 'Not found' }));

  const deps = { ctx, adminToken: options.adminToken, publicUrl: options.publicUrl, signup: options.signup };
  await app.register(authRoutes, deps);
  await app.register(apiKeyRoutes, deps);
  await app.register(serverRoutes, deps);
  await app.register(domainRoutes, deps);
  await app.register(dnsSettingsRoutes, deps);
  await app.register(rolloutRoutes, deps);
  await app.register(wafRoutes, deps);
  await app.register(customRuleRoutes, deps);
  await app.register(auditRoutes, deps);
  await app.register(analyticsRoutes, deps);
  await app.register(accountRoutes, deps);
  await app.register(billingWebhookRoutes, deps);
  await app.register(notificationRoutes, deps);
  await app.register(adminRoutes, deps);
  await app.register(dashboardRoutes);
  await app.register(downloadRoutes, { dir: options.downloadsDir });
  const streams = options.streams ?? new LiveStreams(ctx);
  metrics.sources.liveStreams = () => streams.count();
  await app.register(streamRoutes, { ...deps, streams });
  await app.register(metricsRoutes, { metrics, adminToken: options.adminToken, metricsToken: options.metricsToken });
  return app;
}
