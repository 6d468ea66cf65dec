// The command line as a user meets it: every flag a command's --help names is in the README's
// command table (and the other way round), and bad flag values are refused with the flag named.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { CLI, ROOT } from '../support/processes.js';

const run = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 20_000 });
const flagsIn = (text: string) => new Set([...text.matchAll(/(?<![\w-])--[a-z][a-z-]*[a-z]/g)].map((m) => m[0]).filter((f) => f !== '--help'));

describe('rampart command line', () => {
  const readme = readFileSync(`${ROOT}README.md`, 'utf8');
  for (const command of ['up', 'serve', 'agent', 'admin', 'restore']) {
    test(`README's row for \`rampart ${command}\` names exactly the flags of its --help`, () => {
      const help = run(command, '--help');
      assert.equal(help.status, 0, help.stderr);
      const row = readme.split('\n').find((l) => l.startsWith(`| \`rampart ${command} `));
      assert.ok(row, `README has a row for rampart ${command}`);
      assert.deepEqual([...flagsIn(row)].sort(), [...flagsIn(help.stdout)].sort());
    });
  }

  const refused: [string[], RegExp][] = [
    [['--nbthread', '0'], /--nbthread must be a whole number from 1 to 64/],
    [['--renew-before-days', 'x'], /--renew-before-days must be a whole number from 1 to 3650/],
    [['--resolver', '8.8.8.8'], /--resolver must be IP:PORT/],
    [['--acme-directory', 'ftp://x'], /--acme-directory must be an http\(s\) URL/],
    [['--acme-email', 'not an email'], /--acme-email must be an email address/],
  ];
  for (const [args, message] of refused) {
    test(`agent ${args.join(' ')} is refused, naming the flag`, () => {
      const r = run('agent', '--server', 'ws://127.0.0.1:9/agent', '--token', 't', ...args);
      assert.equal(r.status, 2);
      assert.match(r.stderr, message);
    });
  }
});
