export * from './validate.js';
export * from './waf.js';
export * from './messages.js';
export * from './event-log.js';
export * from './limits.js';
export * from './crawlers.js';
export * from './rule-language.js';
