export * from './backend.js';
export * from './export-template.js';
export * from './haproxy-config.js';
export * from './waf.js';
export * from './gate.js';
export { DETECT_LUA_FILES, DETECT_LUA_MODULES } from './detect-lua.js';
export * from './pow.js';
export { countryClasses, countryComparisons, HITS_TABLE, parseRuleHits, rulesOfHitKey, type CountryComparison, type CountryRead } from './custom-rules.js';
