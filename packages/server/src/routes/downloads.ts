import { createReadStream, existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { App } from './types.js';

// The control plane serves its own Debian package, so a shield server needs nothing but the
// control plane and Debian's packages (docs/operations.md): GET /downloads/rampart_<version>_all.deb,
// and /downloads/rampart_all.deb for the newest one there. The files are whatever the operator put
// in RAMPART_DOWNLOADS_DIR (the unit's /var/lib/rampart/downloads); nothing else of that directory
// is reachable. The package holds no secret: no authentication.

/** The file names npm run package writes; nothing else is served. */
const PACKAGE = /^rampart_[0-9][A-Za-z0-9.+~]*_all\.deb$/;
/** The stable name the dashboard's install command uses. */
export const LATEST_PACKAGE = 'rampart_all.deb';

/** The newest package in dir (by modification time), or undefined. */
function newestPackage(dir: string): string | undefined {
  const files = readdirSync(dir)
    .filter((f) => PACKAGE.test(f))
    .map((f) => ({ f, mtime: statSync(join(dir, f)).mtimeMs }))
    .sort((a, b) => b.mtime - a.mtime || b.f.localeCompare(a.f));
  return files[0]?.f;
}

export function downloadRoutes(app: App, opts: { dir?: string | undefined }): void {
  const options = { config: { public: true }, schema: { hide: true } };
  app.get<{ Params: { file: string } }>('/downloads/:file', options, async (req, reply) => {
    const { dir } = opts;
    const wanted = req.params.file;
    const name = !dir || !existsSync(dir) ? undefined : wanted === LATEST_PACKAGE ? newestPackage(dir) : PACKAGE.test(wanted) ? wanted : undefined;
    const path = name && join(dir!, name);
    if (!path || !existsSync(path)) {
      return reply.code(404).send({ error: `Not found: no package ${wanted} on this control plane (its RAMPART_DOWNLOADS_DIR, docs/operations.md)` });
    }
    return reply
      .headers({
        'content-type': 'application/vnd.debian.binary-package',
        'content-disposition': `attachment; filename="${name}"`,
        'content-length': String(statSync(path).size),
        'cache-control': wanted === LATEST_PACKAGE ? 'no-cache' : 'public, max-age=3600',
        'x-content-type-options': 'nosniff',
      })
      .send(createReadStream(path));
  });
}
