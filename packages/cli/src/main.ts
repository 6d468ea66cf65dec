#!/usr/bin/env node
import { adminCommand } from './admin.js';
import { agentCommand } from './agent.js';
import { applyCommand, exportCommand } from './config-command.js';
import { initCommand } from './init.js';
import { rekeyCommand } from './rekey.js';
import { RAMPART_VERSION } from '@rampart/protocol/version';
import { scrubText } from '@rampart/server';
import { UsageError } from './args.js';
import { restoreCommand } from './restore.js';
import { serveCommand } from './serve.js';
import { upCommand } from './up.js';

const HELP = `rampart — self-hostable edge proxy and web application firewall

Usage: rampart <command> [options]

Commands:
  up       everything on one machine for a first look (embedded database, demo account)
  serve    the control plane: API, dashboard and agent WebSocket
  agent    a shield server's agent (owns HAProxy)
  init     configure an installed package: init server, init agent (writes /etc/rampart, starts the unit)
  admin    operator verbs: create-account, charge, confirm-deposit, backup
  restore  a backup into an empty database (embedded or PostgreSQL)
  rekey    every stored secret under a new RAMPART_SECRET_KEY (control plane stopped)
  export   the account's configuration as YAML (servers, domains, rules, notification settings)
  apply    a configuration file to the account: prints the plan, then carries it out

Run 'rampart <command> --help' for the options of a command; 'rampart --version' prints the version.
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'serve':
      await serveCommand(rest);
      return -1;
    case 'up':
      await upCommand(rest);
      return -1;
    case 'agent':
      await agentCommand(rest);
      return -1;
    case 'admin':
      return adminCommand(rest);
    case 'init':
      return initCommand(rest);
    case 'restore':
      return restoreCommand(rest);
    case 'rekey':
      return rekeyCommand(rest);
    case 'export':
      return exportCommand(rest);
    case 'apply':
      return applyCommand(rest);
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
  (err: unknown) => {
    if (err instanceof UsageError) {
      process.stderr.write(`rampart: ${err.message}\nRun 'rampart --help' for usage.\n`);
      process.exitCode = 2;
    } else {
      // A fatal error can quote a configured URL (an RPC provider's, with its key): scrubbed as log lines are.
      process.stderr.write(`rampart: ${scrubText(err instanceof Error ? err.message : String(err))}\n`);
      process.exitCode = 1;
    }
  },
);
