export * from './backend.js';
export * from './export-template.js';
export * from './haproxy-config.js';
export * from './waf.js';
export * from './gate.js';
export { DETECT_LUA_FILES, DETECT_LUA_MODULES } from './detect-lua.js';
export * from './pow.js';
export {
  countryClasses,
  countryHolds,
  countryTestKey,
  countryTests,
  distinctCountryTests,
  HITS_TABLE,
  parseRuleHits,
  refusedCountries,
  rulesOfHitKey,
  type CountryRead,
  type CountryTest,
} from './custom-rules.js';
