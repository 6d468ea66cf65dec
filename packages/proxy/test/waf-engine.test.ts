import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

// The Lua WAF engine's own unit tests (test/lua/waf_engine_test.lua) run by a plain Lua 5.3, the
// version HAProxy embeds: the processing order, levels and rate limiter rules of docs/architecture.md
// "The WAF" against the pure functions of lua/rampart_waf.lua.

const LUA = process.env.RAMPART_LUA ?? 'lua5.3';
const script = fileURLToPath(new URL('./lua/waf_engine_test.lua', import.meta.url));
const engine = fileURLToPath(new URL('../lua/rampart_waf.lua', import.meta.url));

test('the Lua WAF engine passes its unit tests under Lua 5.3', () => {
  const res = spawnSync(LUA, [script, engine], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(res.error, undefined, `could not run ${LUA}: ${res.error}`);
  const output = `${res.stdout}${res.stderr}`;
  assert.equal(res.status, 0, `${LUA} ${script} ${engine} exited with ${res.status}:\n${output}`);
  assert.match(output.trim().split('\n').at(-1) ?? '', /^\d+ passed, 0 failed$/, output);
});
