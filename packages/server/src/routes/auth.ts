import { clearSessionCookie, SESSION_COOKIE, setSessionCookie } from '../auth.js';
import { LoginLimiter } from '../login-limiter.js';
import { login, logout, register } from '../services/sessions.js';
import { Credentials, SessionView, Success } from '../schemas.js';
import { ERROR_RESPONSES, type App, type RouteDeps } from './types.js';

export async function authRoutes(app: App, { ctx }: RouteDeps) {
  const tags = ['Sessions'];
  const config = { public: true, frozen: 'allow' } as const;
  // Failed sign-ins, per account and per address, in this process (docs/api.md "Browser sessions").
  const limiter = new LoginLimiter(() => ctx.now().getTime());
  app.post('/api/auth/register', {
    config,
    schema: { tags, summary: 'Create a free account and sign in (sets an HttpOnly session cookie)', body: Credentials, response: { 201: SessionView, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES, 503: { $ref: 'Error#' } } },
    handler: async (req, reply) => {
      const r = await register(ctx, req.body.email, req.body.password);
      setSessionCookie(reply, r.session.token, r.session.expires, req.protocol === 'https');
      return reply.code(201).send({ accountId: r.accountId, email: r.email, plan: r.plan });
    },
  });
  app.post('/api/auth/login', {
    config,
    schema: {
      tags,
      summary: 'Sign in (sets an HttpOnly session cookie)',
      description:
        'Failed sign-ins are limited per account (10 in 15 minutes) and per source address (50 in 15 minutes): over a limit, 429 with Retry-After. ' +
        'When too many passwords are being checked at once, 503 with Retry-After.',
      body: Credentials,
      response: { 200: SessionView, ...ERROR_RESPONSES, 429: { $ref: 'Error#' }, 503: { $ref: 'Error#' } },
    },
    handler: async (req, reply) => {
      const r = await login(ctx, req.body.email, req.body.password, { limiter, address: req.ip });
      setSessionCookie(reply, r.session.token, r.session.expires, req.protocol === 'https');
      return { accountId: r.accountId, email: r.email, plan: r.plan };
    },
  });
  app.post('/api/auth/logout', {
    config,
    schema: { tags, summary: 'Sign out (ends the session)', response: { 200: Success } },
    handler: async (req, reply) => {
      await logout(ctx, req.cookies[SESSION_COOKIE]);
      clearSessionCookie(reply);
      return { success: true as const };
    },
  });
}
