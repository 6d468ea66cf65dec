import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, extname, join } from 'node:path';
import type { App } from './types.js';

// The web dashboard (@rampart/dashboard), built by Vite into packages/dashboard/dist: the page at
// /, its content-hashed scripts and styles under /dashboard/assets/, the favicon. The page talks to
// the API with the session cookie, so it is served from the same origin, under a strict CSP: no
// inline script or style, nothing from another origin, no framing.

export const DASHBOARD_CSP = [
  "default-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "object-src 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.json': 'application/json; charset=utf-8',
  '.woff2': 'font/woff2',
  '.png': 'image/png',
};

/** Hashed file names never change content: a year, immutable. The page and the favicon are revalidated. */
const IMMUTABLE = 'public, max-age=31536000, immutable';

/** The dashboard package's build output (dist/), wherever npm put the package. */
export function dashboardDir(): string {
  return join(dirname(createRequire(import.meta.url).resolve('@rampart/dashboard/package.json')), 'dist');
}

interface Asset {
  body: Buffer;
  type: string;
}

/** The built files, read once at start: index.html, assets/* (flat) and the root files (favicon). */
function readBuild(dir: string): { index?: Buffer; assets: Map<string, Asset>; root: Map<string, Asset> } {
  const assets = new Map<string, Asset>();
  const root = new Map<string, Asset>();
  if (!existsSync(join(dir, 'index.html'))) return { assets, root };
  const entries = (sub: string) => readdirSync(join(dir, sub), { withFileTypes: true }).filter((e) => e.isFile() && TYPES[extname(e.name)]);
  if (existsSync(join(dir, 'assets'))) {
    for (const e of entries('assets')) assets.set(e.name, { body: readFileSync(join(dir, 'assets', e.name)), type: TYPES[extname(e.name)]! });
  }
  for (const e of entries('.')) {
    if (e.name !== 'index.html') root.set(e.name, { body: readFileSync(join(dir, e.name)), type: TYPES[extname(e.name)]! });
  }
  return { index: readFileSync(join(dir, 'index.html')), assets, root };
}

export async function dashboardRoutes(app: App) {
  const build = readBuild(dashboardDir());
  const security = {
    'content-security-policy': DASHBOARD_CSP,
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
  };
  const notFound = { error: 'Not found' };
  const config = { public: true };
  const schema = { hide: true };

  app.get('/', { config, schema }, async (_req, reply) => {
    if (!build.index) {
      // The API works without the dashboard (e.g. while generating the OpenAPI document for it).
      return reply.code(503).headers(security).send({ error: 'the dashboard is not built: run npm run build' });
    }
    return reply.headers({ ...security, 'content-type': TYPES['.html']!, 'cache-control': 'no-cache' }).send(build.index);
  });
  app.get<{ Params: { file: string } }>('/dashboard/assets/:file', { config, schema }, async (req, reply) => {
    const asset = build.assets.get(req.params.file);
    if (!asset) return reply.code(404).send(notFound);
    return reply.headers({ ...security, 'content-type': asset.type, 'cache-control': IMMUTABLE }).send(asset.body);
  });
  app.get<{ Params: { file: string } }>('/dashboard/:file', { config, schema }, async (req, reply) => {
    const asset = build.root.get(req.params.file);
    if (!asset) return reply.code(404).send(notFound);
    return reply.headers({ ...security, 'content-type': asset.type, 'cache-control': 'no-cache' }).send(asset.body);
  });
}
