import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// The product's version, written in one place: the root package.json (packages/protocol/{src,dist}
// sit two folders below it, in a checkout as in the installed tree). A subpath of its own
// (@rampart/protocol/version) keeps node:fs out of the dashboard's bundle.

function rootVersion(): string {
  const url = new URL('../../../package.json', import.meta.url);
  const pkg = JSON.parse(readFileSync(url, 'utf8')) as { name?: unknown; version?: unknown };
  if (pkg.name !== 'rampart' || typeof pkg.version !== 'string') throw new Error(`${fileURLToPath(url)} is not rampart's package.json`);
  return pkg.version;
}

export const RAMPART_VERSION = rootVersion();
