import { clearSessionCookie, SESSION_COOKIE, setSessionCookie } from '../auth.js';
import { LoginLimiter } from '../login-limiter.js';
import { login, logout, register } from '../services/sessions.js';
import { Credentials, Registration, SessionView, SignupView, Success } from '../schemas.js';
import { ERROR_RESPONSES, type App, type RouteDeps } from './types.js';

export function authRoutes(app: App, { ctx, publicUrl, signup = 'closed' }: RouteDeps): void {
  const tags = ['Sessions'];
  const config = { public: true, frozen: 'allow' } as const;
  // Failed sign-ins, per account and per address, in this process (docs/api.md "Browser sessions").
  const limiter = new LoginLimiter(() => ctx.now().getTime());
  // Secure when users reach the control plane over HTTPS: a TLS terminator in front of it, named by
  // RAMPART_PUBLIC_URL, or a request that says so (TLS here, or X-Forwarded-Proto from a trusted proxy).
  const secure = (protocol: string) => publicUrl?.protocol === 'https:' || protocol === 'https';
  app.get('/api/auth/signup', {
    config,
    schema: { tags, summary: "Whether this server lets people register (the operator's RAMPART_SIGNUP)", response: { 200: SignupView } },
    handler: () => ({ signup }),
  });
  app.post('/api/auth/register', {
    config,
    schema: {
      tags,
      summary: 'Create a free account and sign in (sets an HttpOnly session cookie)',
      description: 'Only as RAMPART_SIGNUP allows (GET /api/auth/signup): closed answers 403; invite needs an unused invitation from the operator.',
      body: Registration,
      response: { 201: SessionView, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES, 503: { $ref: 'Error#' } },
    },
    handler: async (req, reply) => {
      const r = await register(ctx, req.body, signup);
      setSessionCookie(reply, r.session.token, r.session.expires, secure(req.protocol));
      return reply.code(201).send({ accountId: r.accountId, email: r.email, plan: r.plan });
    },
  });
  app.post('/api/auth/login', {
    config,
    schema: {
      tags,
      summary: 'Sign in (sets an HttpOnly session cookie)',
      description:
        'Failed sign-ins are limited per account (10 in 15 minutes, holding back only addresses with failures of their own) and per source address (50 in 15 minutes): over a limit, 429 with Retry-After. ' +
        "The source address is X-Forwarded-For's only from a trusted proxy (--trust-proxy). " +
        'When too many passwords are being checked at once, 503 with Retry-After.',
      body: Credentials,
      response: { 200: SessionView, ...ERROR_RESPONSES, 429: { $ref: 'Error#' }, 503: { $ref: 'Error#' } },
    },
    handler: async (req, reply) => {
      const r = await login(ctx, req.body.email, req.body.password, { limiter, address: req.ip });
      setSessionCookie(reply, r.session.token, r.session.expires, secure(req.protocol));
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
