import { realpathSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The repository's root, with a trailing slash. `npm test` runs compiled copies of the tests from a
 * mirror whose other files link here (scripts/build-tests.mjs), so the root is where package.json
 * really is, not the folder above this module.
 */
export const ROOT = `${dirname(realpathSync(fileURLToPath(new URL('../../package.json', import.meta.url))))}/`;
