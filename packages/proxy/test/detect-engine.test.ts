import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

// The attack detectors' unit tests (test/lua/detect_test.lua) run by a plain Lua 5.3, the version
// HAProxy embeds: every detector against our corpora (test/corpus), each request part, the
// decoders, waf_exception matching, and a fuzz test that the cost stays linear in input size.

const LUA = process.env.RAMPART_LUA ?? 'lua5.3';
const script = fileURLToPath(new URL('./lua/detect_test.lua', import.meta.url));
const engine = fileURLToPath(new URL('../lua/rampart_detect.lua', import.meta.url));
const corpus = fileURLToPath(new URL('./corpus', import.meta.url));

test('the Lua detectors pass their unit tests under Lua 5.3', () => {
  const res = spawnSync(LUA, [script, engine, corpus], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(res.error, undefined, `could not run ${LUA}: ${res.error}`);
  const output = `${res.stdout}${res.stderr}`;
  assert.equal(res.status, 0, `${LUA} ${script} exited with ${res.status}:\n${output}`);
  assert.match(output.trim().split('\n').at(-1) ?? '', /^\d+ passed, 0 failed$/, output);
});
