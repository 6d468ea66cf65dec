import { parseFlags, UsageError } from './args.js';

export const ADMIN_HELP = `Usage: rampart admin <verb> [--url http://127.0.0.1:8080] [--admin-token T] [options]

Operator verbs over the operator API; each prints the JSON answer.

Verbs:
  create-account --email E --plan free|pro|enterprise [--balance DOLLARS] [--password P]
  charge [--account-id ID]        run the monthly charge now (one account, or every account due)
  confirm-deposit --id ID [--tx-hash H]

Options:
  --url URL           the control plane (default http://127.0.0.1:8080, env RAMPART_URL)
  --admin-token T     the operator token (env RAMPART_ADMIN_TOKEN)
`;

export async function adminCommand(args: string[]): Promise<number> {
  const [verb, ...rest] = args;
  if (!verb || verb === '--help' || verb === '-h' || verb === 'help') {
    process.stdout.write(ADMIN_HELP);
    return verb ? 0 : 2;
  }
  const flags = parseFlags(rest, ['url', 'admin-token', 'email', 'plan', 'balance', 'password', 'account-id', 'id', 'tx-hash']);
  if (flags.help) {
    process.stdout.write(ADMIN_HELP);
    return 0;
  }
  const base = (flags.url ?? process.env.RAMPART_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
  const token = flags['admin-token'] ?? process.env.RAMPART_ADMIN_TOKEN ?? '';
  let path: string;
  let body: Record<string, unknown>;
  switch (verb) {
    case 'create-account': {
      if (!flags.email || !flags.plan) throw new UsageError('create-account needs --email and --plan');
      const balance = flags.balance === undefined ? undefined : Number(flags.balance);
      if (balance !== undefined && !Number.isFinite(balance)) throw new UsageError('--balance must be a number of dollars');
      path = '/admin/accounts';
      body = { email: flags.email, plan: flags.plan, ...(balance !== undefined ? { balance } : {}), ...(flags.password ? { password: flags.password } : {}) };
      break;
    }
    case 'charge':
      path = '/admin/billing/charge';
      body = flags['account-id'] ? { accountId: flags['account-id'] } : {};
      break;
    case 'confirm-deposit':
      if (!flags.id) throw new UsageError('confirm-deposit needs --id');
      path = `/admin/deposits/${encodeURIComponent(flags.id)}/confirm`;
      body = flags['tx-hash'] ? { txHash: flags['tx-hash'] } : {};
      break;
    default:
      throw new UsageError(`unknown admin verb: ${verb}`);
  }
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  return res.ok ? 0 : 1;
}
