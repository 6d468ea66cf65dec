export * from './validate.js';
export * from './waf.js';
