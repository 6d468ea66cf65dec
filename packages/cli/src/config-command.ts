// `rampart export` and `rampart apply`: configuration as code (docs/config-as-code.md).
import { readFile, rename, writeFile } from 'node:fs/promises';
import { RAMPART_VERSION } from '@rampart/protocol/version';
import { parseFlags, UsageError, type Flags } from './args.js';
import { ConfigFileError, formatFileError, parseConfigFile, renderConfigFile } from './config-file.js';
import { ApiError, executePlan, FROZEN_MESSAGE, httpApi, makePlan, planProblems, readAccount, renderPlan, StepError, type Api } from './config-plan.js';

const CONNECTION = `Options:
  --url URL           the control plane (default http://127.0.0.1:8080, env RAMPART_URL)
  --api-key KEY       an API key of the account (env RAMPART_API_KEY; prefer the environment)
`;

export const EXPORT_HELP = `Usage: rampart export [-o FILE] [--url URL] [--api-key KEY]

Writes the account's configuration as YAML: shield servers by name, domains with their origins,
servers and WAF settings, WAF rules, custom rules and notification settings. No ids, tokens or
secrets. Without -o it goes to standard output.

  -o, --output FILE   write to FILE instead
${CONNECTION}`;

export const APPLY_HELP = `Usage: rampart apply -f FILE [--dry-run] [--prune] [--url URL] [--api-key KEY]

Makes the account's configuration what FILE says (a file of 'rampart export'): prints the plan
(+ created, ~ changed, - deleted) and carries it out through the API. A server FILE names and the
account lacks is created and its connection token printed once. Objects of the account FILE does
not name are kept unless --prune is given. An invalid FILE is refused whole, with each error's
line and field, and nothing is applied.

  -f, --file FILE     the configuration file (- for standard input)
  --dry-run           print the plan and change nothing
  --prune             delete what FILE does not name
${CONNECTION}
Environment: RAMPART_WEBHOOK_SECRET, the webhook's signing secret, when FILE sets a new
notifications.webhookUrl (the file never holds it).
`;

function connect(flags: Flags): Api {
  const base = (flags.url ?? process.env.RAMPART_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
  const key = flags['api-key'] ?? process.env.RAMPART_API_KEY ?? '';
  if (!key) throw new UsageError('an API key is needed: set RAMPART_API_KEY (or --api-key)');
  return httpApi(base, key);
}

/** -o and -f as short names of --output and --file. */
function expandShort(args: string[]): string[] {
  return args.map((a) => (a === '-o' ? '--output' : a === '-f' ? '--file' : a));
}

export async function exportCommand(args: string[]): Promise<number> {
  const flags = parseFlags(expandShort(args), ['url', 'api-key', 'output']);
  if (flags.help) {
    process.stdout.write(EXPORT_HELP);
    return 0;
  }
  const api = connect(flags);
  const current = await readAccount(api);
  const text = renderConfigFile(current.config, [
    `Rampart configuration, exported by rampart ${RAMPART_VERSION} on ${new Date().toISOString().slice(0, 10)}.`,
    'Apply it with: rampart apply -f FILE [--dry-run] [--prune]   (RAMPART_URL, RAMPART_API_KEY)',
    'Objects are named, never numbered; lists are sorted, so two exports diff line by line.',
    'No secrets: connection tokens, API keys, the webhook secret and DNS credentials are never written.',
    'Format: docs/config-as-code.md',
  ]);
  if (flags.output && flags.output !== '-') {
    await writeFile(`${flags.output}.partial`, text, { mode: 0o644 });
    await rename(`${flags.output}.partial`, flags.output);
    process.stderr.write(
      `Wrote ${flags.output}: ${current.config.servers.length} server(s), ${current.config.domains.length} domain(s), ${current.config.wafRules.length} WAF rule(s), ${current.config.customRules.length} custom rule(s).\n`,
    );
  } else process.stdout.write(text);
  return 0;
}

export async function applyCommand(args: string[]): Promise<number> {
  const flags = parseFlags(expandShort(args), ['url', 'api-key', 'file'], ['dry-run', 'prune']);
  if (flags.help) {
    process.stdout.write(APPLY_HELP);
    return 0;
  }
  if (!flags.file) throw new UsageError('apply needs -f FILE');
  const text = flags.file === '-' ? await readStdin() : await readFile(flags.file, 'utf8');
  // The plan's time: reading and checking the file, reading the account, comparing.
  const started = Date.now();
  let desired;
  try {
    desired = parseConfigFile(text);
  } catch (err) {
    if (!(err instanceof ConfigFileError)) throw err;
    process.stderr.write(`rampart: ${flags.file} is not a valid configuration (${err.errors.length} error(s)); nothing was applied:\n`);
    for (const e of err.errors) process.stderr.write(`  ${formatFileError(e)}\n`);
    return 1;
  }
  const api = connect(flags);
  const current = await readAccount(api);
  const plan = makePlan(current.config, desired, Boolean(flags.prune));
  const planMs = Date.now() - started;
  if (plan.steps.length === 0) {
    process.stdout.write(
      `No changes. The account matches ${flags.file} (planned in ${planMs} ms).${plan.kept > 0 ? ` (${plan.kept} object(s) not in the file are kept; --prune deletes them.)` : ''}\n`,
    );
    return 0;
  }
  process.stdout.write(`Rampart will do the following (planned in ${planMs} ms):\n\n${renderPlan(plan)}`);
  if (flags['dry-run']) {
    process.stdout.write('\nDry run: nothing was applied.\n');
    return 0;
  }
  const opts = { webhookSecret: process.env.RAMPART_WEBHOOK_SECRET || undefined };
  const problems = planProblems(plan, opts);
  if (current.state === 'frozen') problems.unshift(`${FROZEN_MESSAGE} (apply changes nothing on a frozen account; reads and exports work)`);
  if (problems.length > 0) {
    process.stderr.write(`rampart: the plan cannot be applied; nothing was applied:\n${problems.map((p) => `  ${p}\n`).join('')}`);
    return 1;
  }
  process.stdout.write('\n');
  let done = 0;
  try {
    await executePlan(api, current, plan, {
      ...opts,
      onDone(step, token) {
        done++;
        if (token) process.stdout.write(`Server ${step.label} created. Its connection token, shown only now (give it to the agent: rampart init agent):\n  ${token}\n`);
      },
    });
  } catch (err) {
    const frozen = err instanceof StepError && err.cause.status === 403 && err.cause.message === FROZEN_MESSAGE;
    const why = err instanceof StepError || err instanceof ApiError ? err.message : String(err);
    process.stderr.write(`rampart: ${frozen ? `${FROZEN_MESSAGE}: stopped` : `stopped at ${why}`}. ${done} of ${plan.steps.length} change(s) were applied before; run apply again once fixed.\n`);
    return 1;
  }
  const count = (op: string) => plan.steps.filter((s) => s.op === op).length;
  process.stdout.write(`Applied in ${((Date.now() - started) / 1000).toFixed(1)} s: ${count('create')} created, ${count('update')} changed, ${count('delete')} deleted.\n`);
  return 0;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
