import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { DETECT_LUA_FILES, DETECT_LUA_MODULES } from '../src/detect-lua.js';

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

test("the engine's modules: what rampart_detect.lua requires is exactly what the renderer ships, each named and described", () => {
  const dir = fileURLToPath(new URL('../lua/', import.meta.url));
  // only the engine's own directory on the path, as HAProxy's lua-prepend-path puts it first
  const probe = [
    `package.path = ${JSON.stringify(`${dir}?.lua`)}; package.cpath = ""; core = nil`,
    `dofile(${JSON.stringify(engine)})`,
    'local names = {}',
    'for name in pairs(package.loaded) do if name:find("^rampart") then names[#names + 1] = name end end',
    'table.sort(names); print(table.concat(names, " "))',
  ].join('\n');
  const res = spawnSync(LUA, ['-e', probe], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(res.status, 0, `${res.stdout}${res.stderr}`);
  assert.deepEqual(res.stdout.trim().split(' '), [...DETECT_LUA_MODULES].sort(), 'the modules the glue loads');
  const onDisk = readdirSync(dir)
    .filter((f) => /^rampart_detect.*\.lua$/.test(f))
    .sort();
  assert.deepEqual(onDisk, [...DETECT_LUA_FILES].sort(), 'every rampart_detect*.lua file is shipped');
  for (const file of DETECT_LUA_FILES) {
    // prefixed, so no system Lua module of the same name can stand in for it
    assert.match(file, /^rampart_detect(_[a-z]+)?\.lua$/);
    assert.match(readFileSync(`${dir}${file}`, 'utf8'), /^-- \S/, `${file} starts with a comment saying what it owns`);
  }
});
