export * from './backend.js';
export * from './export-template.js';
