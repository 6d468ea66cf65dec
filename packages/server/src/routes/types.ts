import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { ServiceContext } from '../context.js';
import type { SignupMode } from '../services/signup.js';

// Route plugins are plain functions, (app, deps): void: Fastify (avvio) counts a plugin without a
// done parameter that returns no promise as loaded when it returns.
export type App = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, TypeBoxTypeProvider>;

export interface RouteDeps {
  ctx: ServiceContext;
  adminToken?: string | undefined;
  /** RAMPART_PUBLIC_URL: where users reach the control plane; https makes session cookies Secure. */
  publicUrl?: URL | undefined;
  /** RAMPART_SIGNUP (services/signup.ts): who may create an account with POST /api/auth/register. */
  signup?: SignupMode | undefined;
}

export const ERROR_RESPONSES = {
  400: { $ref: 'Error#' },
  401: { $ref: 'Error#' },
  403: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
} as const;

export const SECURITY: { [name: string]: string[] }[] = [{ apiKey: [] }, { session: [] }];
