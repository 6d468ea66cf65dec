import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

export const SEPARATOR = '\n----------\n';

/**
 * Golden files: JSON input, a separator line, then the exact expected output. One test per file.
 * UPDATE_GOLDEN=1 rewrites the expected part from the current renderer (review the diff!).
 */
export function goldenSuite(dir: string, render: (input: any) => string): void {
  for (const name of readdirSync(dir)
    .filter((f) => f.endsWith('.golden'))
    .sort()) {
    test(`golden ${name}`, () => {
      const path = join(dir, name);
      const text = readFileSync(path, 'utf8');
      const at = text.indexOf(SEPARATOR);
      assert.ok(at > 0, `${name} has no separator line`);
      const input = JSON.parse(text.slice(0, at));
      const actual = render(input);
      if (process.env.UPDATE_GOLDEN) {
        writeFileSync(path, text.slice(0, at) + SEPARATOR + actual);
        return;
      }
      assert.equal(actual, text.slice(at + SEPARATOR.length));
    });
  }
}
