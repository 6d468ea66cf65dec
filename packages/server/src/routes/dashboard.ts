import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, extname, join } from 'node:path';
import { promisify } from 'node:util';
import { brotliCompress, constants as zlib, gzip } from 'node:zlib';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from './types.js';

// The web dashboard (@rampart/dashboard), built by Vite into packages/dashboard/dist: the page at
// /, its content-hashed scripts and styles under /dashboard/assets/, the favicon. The page talks to
// the API with the session cookie, so it is served from the same origin, under a strict CSP: no
// inline script or style, nothing from another origin, no framing.

export const DASHBOARD_CSP = ["default-src 'self'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'", "object-src 'none'"].join('; ');

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
  /** Text files only: the encodings a browser that accepts them is sent, compressed on first use. */
  compressible: boolean;
  br?: Promise<Buffer>;
  gzip?: Promise<Buffer>;
}

const COMPRESSIBLE = new Set(['.html', '.js', '.css', '.svg', '.json']);
const brotli = promisify(brotliCompress);
const gzipAsync = promisify(gzip);

/**
 * Files already read, by path, size and modification time: a process that builds the app more than
 * once (the tests build many) reads each file, and compresses it, once.
 */
const readAssets = new Map<string, Asset>();

function readAsset(file: string): Asset {
  const { size, mtimeMs } = statSync(file);
  const key = `${file}\0${size}\0${mtimeMs}`;
  const known = readAssets.get(key);
  if (known) return known;
  const ext = extname(file);
  const asset: Asset = { body: readFileSync(file), type: TYPES[ext]!, compressible: COMPRESSIBLE.has(ext) };
  readAssets.set(key, asset);
  return asset;
}

/**
 * The file compressed at the highest level, once per process, when a client first asks for that
 * encoding: about 0.3 s of CPU for the whole build, on libuv's thread pool rather than the event
 * loop, and not at all in a process no browser visits (a control plane only agents talk to).
 */
function encoded(a: Asset, encoding: 'br' | 'gzip'): Promise<Buffer> {
  if (encoding === 'br') {
    return (a.br ??= brotli(a.body, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11, [zlib.BROTLI_PARAM_SIZE_HINT]: a.body.length } }));
  }
  return (a.gzip ??= gzipAsync(a.body, { level: 9 }));
}

/** The smallest encoding the client accepts (brotli, gzip, none), with Vary set either way. */
async function send(req: FastifyRequest, reply: FastifyReply, a: Asset, headers: Record<string, string>) {
  const accepts = String(req.headers['accept-encoding'] ?? '');
  const encoding = !a.compressible ? undefined : /\bbr\b/.test(accepts) ? 'br' : /\bgzip\b/.test(accepts) ? 'gzip' : undefined;
  reply.headers({ ...headers, 'content-type': a.type, vary: 'accept-encoding' });
  if (!encoding) return reply.send(a.body);
  reply.header('content-encoding', encoding);
  return reply.send(await encoded(a, encoding));
}

/** The built files, read once at start: index.html, assets/* (flat) and the root files (favicon). */
function readBuild(dir: string): { index?: Asset; assets: Map<string, Asset>; root: Map<string, Asset> } {
  const assets = new Map<string, Asset>();
  const root = new Map<string, Asset>();
  if (!existsSync(join(dir, 'index.html'))) return { assets, root };
  const entries = (sub: string) => readdirSync(join(dir, sub), { withFileTypes: true }).filter((e) => e.isFile() && TYPES[extname(e.name)]);
  if (existsSync(join(dir, 'assets'))) {
    for (const e of entries('assets')) assets.set(e.name, readAsset(join(dir, 'assets', e.name)));
  }
  for (const e of entries('.')) {
    if (e.name !== 'index.html') root.set(e.name, readAsset(join(dir, e.name)));
  }
  return { index: readAsset(join(dir, 'index.html')), assets, root };
}

export function dashboardRoutes(app: App): void {
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

  app.get('/', { config, schema }, async (req, reply) => {
    if (!build.index) {
      // The API works without the dashboard (e.g. while generating the OpenAPI document for it).
      return reply.code(503).headers(security).send({ error: 'the dashboard is not built: run npm run build' });
    }
    return send(req, reply, build.index, { ...security, 'cache-control': 'no-cache' });
  });
  app.get<{ Params: { file: string } }>('/dashboard/assets/:file', { config, schema }, async (req, reply) => {
    const asset = build.assets.get(req.params.file);
    if (!asset) return reply.code(404).send(notFound);
    return send(req, reply, asset, { ...security, 'cache-control': IMMUTABLE });
  });
  app.get<{ Params: { file: string } }>('/dashboard/:file', { config, schema }, async (req, reply) => {
    const asset = build.root.get(req.params.file);
    if (!asset) return reply.code(404).send(notFound);
    return send(req, reply, asset, { ...security, 'cache-control': 'no-cache' });
  });
}
