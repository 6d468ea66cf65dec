#!/usr/bin/env node
import { RAMPART_VERSION } from '@rampart/protocol/version';
import { UsageError } from './args.js';

// Each command's module is loaded when it runs: the control plane's (@rampart/server) takes
// seconds to load, and `rampart apply`, `export` or `--version` need none of it.

const HELP = `rampart — self-hostable edge proxy and web application firewall

Usage: rampart <command> [options]

Commands:
  up       everything on one machine for a first look (embedded database, demo account)
  serve    the control plane: API, dashboard and agent WebSocket
  agent    a shield server's agent (owns HAProxy)
  init     configure an installed package: init server, init agent (writes /etc/rampart, starts the unit)
  admin    operator verbs: create-account, charge, confirm-deposit, create-invitation, backup
  restore  a backup into an empty database (embedded or PostgreSQL)
  rekey    every stored secret under a new RAMPART_SECRET_KEY (control plane stopped)
  export   the account's configuration as YAML (servers, domains, rules, notification settings)
  apply    a configuration file to the account: prints the plan, then carries it out

Run 'rampart <command> --help' for the options of a command; 'rampart --version' prints the version.
Every command, flag and environment variable: docs/cli.md.
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'serve':
      await (await import('./serve.js')).serveCommand(rest);
      return -1;
    case 'up':
      await (await import('./up.js')).upCommand(rest);
      return -1;
    case 'agent':
      await (await import('./agent.js')).agentCommand(rest);
      return -1;
    case 'admin':
      return (await import('./admin.js')).adminCommand(rest);
    case 'init':
      return (await import('./init.js')).initCommand(rest);
    case 'restore':
      return (await import('./restore.js')).restoreCommand(rest);
    case 'rekey':
      return (await import('./rekey.js')).rekeyCommand(rest);
    case 'export':
      return (await import('./config-command.js')).exportCommand(rest);
    case 'apply':
      return (await import('./config-command.js')).applyCommand(rest);
    case '--version':
    case 'version':
      process.stdout.write(`${RAMPART_VERSION}\n`);
      return 0;
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(HELP);
      return command === undefined ? 2 : 0;
    default:
      throw new UsageError(`unknown command: ${command}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  async (err: unknown) => {
    if (err instanceof UsageError) {
      process.stderr.write(`rampart: ${err.message}\nRun 'rampart --help' for usage.\n`);
      process.exitCode = 2;
    } else {
      // A fatal error can quote a configured URL (an RPC provider's, with its key): scrubbed as log lines are.
      const { scrubText } = await import('@rampart/server');
      process.stderr.write(`rampart: ${scrubText(err instanceof Error ? err.message : String(err))}\n`);
      process.exitCode = 1;
    }
  },
);
