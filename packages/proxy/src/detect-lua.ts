import { readFileSync } from 'node:fs';

/**
 * The attack detectors' Lua modules (packages/proxy/lua), in the order rampart_detect.lua's
 * requires load them. rampart_detect.lua (the glue, loaded with `lua-load-per-thread`) loads them
 * with `require`, found through the `lua-prepend-path <config dir>/?.lua` rendered before it
 * (waf.ts); each is shipped into the configuration directory next to it. A module missing here
 * fails `haproxy -c` (the require in thread 1's state) and the test that compares this list with
 * the requires of the modules (detect-engine.test.ts).
 */
export const DETECT_LUA_MODULES = [
  'rampart_detect_base',
  'rampart_detect_decode',
  'rampart_detect_text',
  'rampart_detect_sqli',
  'rampart_detect_xss',
  'rampart_detect_cmdi',
  'rampart_detect_traversal',
  'rampart_detect_ssrf',
  'rampart_detect_xxe',
  'rampart_detect_injection',
  'rampart_detect_upload',
  'rampart_detect_structure',
  'rampart_detect_parts',
  'rampart_detect_inspect',
] as const;

/** Every file of the detection engine: the modules, then the glue. */
export const DETECT_LUA_FILES: readonly string[] = [...DETECT_LUA_MODULES.map((m) => `${m}.lua`), 'rampart_detect.lua'];

/** A file of the Lua engines as shipped (packages/proxy/lua/<name>, next to src/ and dist/). */
export const luaFileUrl = (name: string) => new URL(`../lua/${name}`, import.meta.url);

/**
 * The detection engine's source, every file of DETECT_LUA_FILES one after the other (what the
 * engine's lists are read from: gate.ts, the gate's tests). A file that cannot be read is left
 * out when `tolerant`, else the read fails.
 */
export function detectEngineSource(tolerant = false): string {
  const parts: string[] = [];
  for (const name of DETECT_LUA_FILES) {
    try {
      parts.push(readFileSync(luaFileUrl(name), 'utf8'));
    } catch (e) {
      if (!tolerant) throw e;
    }
  }
  return parts.join('\n');
}
