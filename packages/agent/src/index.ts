export * from './agent.js';
export * from './apply.js';
export * from './backoff.js';
export * from './haproxy.js';
export * from './events.js';
export * from './geo.js';
export * from './certificates/index.js';
export * from './crawlers.js';
