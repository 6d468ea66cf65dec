export * from './issuer.js';
export * from './manager.js';
export * from './resolve.js';
export * from './responder.js';
export * from './store.js';
