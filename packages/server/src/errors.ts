// One registry of coded errors, each with its status. Services throw these (or return them);
// only the error handler in app.ts turns them into HTTP answers.

export const ERRORS = {
  unauthorized: { status: 401, message: 'Invalid or missing API key' },
  account_frozen: { status: 403, message: 'account is frozen, renew the plan to make changes' },
  api_key_limit: { status: 403, message: 'Maximum 10 API keys allowed' },
  plan_no_api_keys: { status: 403, message: 'API keys are available on the Pro and Enterprise plans only' },
  api_key_not_found: { status: 404, message: 'API key not found' },
  server_not_found: { status: 404, message: 'Server not found' },
  domain_not_found: { status: 404, message: 'Domain not found' },
  rule_not_found: { status: 404, message: 'WAF rule not found' },
  custom_rule_not_found: { status: 404, message: 'Rule not found' },
  rollout_not_found: { status: 404, message: 'Rollout not found' },
  rollout_not_halted: { status: 409, message: 'Rollout is not halted: only the newest halted rollout can be resumed or rolled back' },
  deposit_not_found: { status: 404, message: 'Deposit not found' },
  account_not_found: { status: 404, message: 'Account not found' },
  invalid_body: { status: 400, message: 'Invalid request body' },
  invalid_credentials: { status: 401, message: 'Invalid email or password' },
  email_taken: { status: 409, message: 'An account with this email already exists' },
  domain_exists: { status: 409, message: 'Domain already exists in this account' },
  rule_exists: { status: 409, message: 'A rule of this type with this value already exists for this scope' },
  server_decommissioned: { status: 409, message: 'Server is decommissioned' },
  deposit_not_pending: { status: 409, message: 'Deposit is not pending' },
  tx_hash_used: { status: 409, message: 'txHash: this transaction was already credited' },
  transfer_not_final: { status: 409, message: 'txHash: the transaction is not deep enough in the chain yet' },
  deposit_limit: { status: 409, message: 'Maximum 5 open deposits: pay one, or ask again once one has expired (24 hours after it was made)' },
  plan_usage: { status: 409, message: 'plan: the account uses more than the new plan allows' },
  balance_negative: { status: 409, message: 'amount: the adjustment would take the balance below 0' },
  insufficient_balance: { status: 402, message: 'The balance does not cover this charge' },
  payment_signature: { status: 401, message: 'X-Rampart-Payment-Signature: does not match the body' },
  payment_webhook_off: { status: 503, message: 'The payment webhook is not configured on this server (RAMPART_PAYMENT_WEBHOOK_SECRET)' },
  chain_unavailable: { status: 503, message: 'The payment network cannot be reached right now, try again' },
  rule_limit: { status: 403, message: 'Maximum 10000 WAF rules allowed' },
  custom_rule_limit: { status: 403, message: "Maximum custom rules of the account's plan reached" },
  domain_limit: { status: 403, message: 'Maximum 1000 domains allowed' },
  server_limit: { status: 403, message: "Maximum servers of the account's plan reached" },
  plan_no_dns_failover: { status: 403, message: 'DNS failover requires the Pro or Enterprise plan' },
  dns_provider_in_use: { status: 409, message: 'DNS failover is on for domains of this account; turn dnsFailover off on them first' },
  signup_closed: { status: 403, message: 'Sign-up is closed on this server: its operator creates accounts' },
  invitation_required: { status: 403, message: 'invitation: required, sign-up on this server is by invitation only' },
  invitation_invalid: { status: 403, message: 'invitation: unknown, already used, expired or for another email' },
  too_many_logins: { status: 429, message: 'Too many failed sign-ins, try again later' },
  hashing_busy: { status: 503, message: 'Too many password checks at once, try again in a moment' },
  shutting_down: { status: 503, message: 'The server is shutting down, try again' },
  email_token_invalid: { status: 400, message: 'token: this confirmation link is unknown, used or expired; ask for a new one in the notification settings' },
  email_confirmation_spacing: { status: 429, message: 'email: a confirmation e-mail was sent less than a minute ago; try again later' },
  email_unavailable: { status: 503, message: 'email: the confirmation e-mail could not be sent' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Sent as the Retry-After header (429 and 503 answers). */
  readonly retryAfterSeconds: number | undefined;

  constructor(code: ErrorCode, message?: string, options?: { retryAfterSeconds?: number }) {
    super(message ?? ERRORS[code].message);
    this.name = 'AppError';
    this.code = code;
    this.status = ERRORS[code].status;
    this.retryAfterSeconds = options?.retryAfterSeconds;
  }
}

/** A 400 whose message names the field at fault, e.g. invalidField('origins[0].ip', 'must be an IPv4 or IPv6 address'). */
export function invalidField(field: string, problem: string): AppError {
  return new AppError('invalid_body', `${field}: ${problem}`);
}
