export { buildApp, BODY_LIMIT, type AppOptions } from './app.js';
export { openDatabase, dropSchema, type Database, type OpenDatabase } from './db/database.js';
export { BackupError, inspectBackup, restoreBackup, type BackupSummary } from './db/backup.js';
export { DEFAULT_PLANS, plansFromEnv, type PlanTable } from './plans.js';
export type { ServiceContext } from './context.js';
export { startServer, type ServerOptions, type RunningServer } from './serve.js';
export { createDemoAccount } from './services/accounts.js';
export { signupModeFrom, SIGNUP_MODES, type SignupMode } from './services/signup.js';
export { publicUrlFrom, trustProxyFrom } from './trust-proxy.js';
