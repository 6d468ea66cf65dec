import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { App } from './types.js';

// The web dashboard (@rampart/dashboard): three static files, no build step. The page talks to
// the API with the session cookie, so it is served from the same origin, under a strict CSP:
// no inline script or style, nothing from another origin, no framing.

export const DASHBOARD_CSP = [
  "default-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "object-src 'none'",
].join('; ');

const ASSETS: readonly { url: string; file: string; type: string }[] = [
  { url: '/', file: 'index.html', type: 'text/html; charset=utf-8' },
  { url: '/dashboard/app.js', file: 'app.js', type: 'text/javascript; charset=utf-8' },
  { url: '/dashboard/style.css', file: 'style.css', type: 'text/css; charset=utf-8' },
];

/** The dashboard package's public folder, wherever npm put the package. */
export function dashboardDir(): string {
  return join(dirname(createRequire(import.meta.url).resolve('@rampart/dashboard/package.json')), 'public');
}

export async function dashboardRoutes(app: App) {
  const dir = dashboardDir();
  for (const asset of ASSETS) {
    const body = readFileSync(join(dir, asset.file)); // read once: a missing file fails at start, not per request
    app.get(asset.url, { config: { public: true }, schema: { hide: true } }, async (_req, reply) =>
      reply
        .headers({
          'content-type': asset.type,
          'content-security-policy': DASHBOARD_CSP,
          'x-content-type-options': 'nosniff',
          'x-frame-options': 'DENY',
          'referrer-policy': 'no-referrer',
          'cache-control': 'no-cache',
        })
        .send(body),
    );
  }
}
