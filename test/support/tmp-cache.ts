// Test fixtures that are slow to make and the same for every test process (a migrated embedded
// database), made once per version of what they are made from and kept in the temporary directory.
import { randomBytes, createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The path of `<tmpdir>/<prefix><hash><suffix>`, where the hash is of the contents of `sources`;
 * `make` builds it (a file or a directory) at a path of its own when it is missing. Test processes
 * running at once may both make it: each builds aside and renames into place, so the path only
 * ever holds a whole one. Copies for other hashes older than an hour go.
 */
export async function cachedInTmp(prefix: string, suffix: string, sources: (string | URL)[], make: (path: string) => Promise<void>): Promise<string> {
  const hash = createHash('sha256');
  for (const source of sources) hash.update(readFileSync(source));
  const path = join(tmpdir(), `${prefix}${hash.digest('hex').slice(0, 16)}${suffix}`);
  if (existsSync(path)) return path;
  const building = `${path}.building-${randomBytes(6).toString('hex')}`;
  try {
    await make(building);
    renameSync(building, path); // a file replaces another whole one; a directory fails if one is there
  } catch (err) {
    if (!existsSync(path)) throw err;
  } finally {
    rmSync(building, { recursive: true, force: true });
  }
  for (const name of readdirSync(tmpdir())) {
    const other = join(tmpdir(), name);
    if (name.startsWith(prefix) && other !== path && Date.now() - statSync(other).mtimeMs > 3_600_000) rmSync(other, { recursive: true, force: true });
  }
  return path;
}
