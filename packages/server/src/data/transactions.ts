import { sql, type Insertable, type Selectable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { TransactionsTable } from '../db/schema.js';

// The ledger (docs/billing.md, "The ledger"): every charge, deposit and adjustment is one row of
// `transactions`, and an account's balance is the sum of its rows' delta_cents (a confirmed row's
// signed effect; 0 while pending or failed). accounts.balance_cents is that sum, cached: it only
// moves together with a ledger row, in the same transaction, through postEntry (one row) or
// chargeDueAccounts (the monthly charge of many accounts in one statement).

export type TransactionRow = Selectable<TransactionsTable>;

/** A row with no effect on the balance: a pending deposit, a failed charge. */
export function insertTransaction(db: Database | Tx, row: Insertable<TransactionsTable> & { delta_cents?: 0 }) {
  return db.insertInto('transactions').values(row).returningAll().executeTakeFirstOrThrow();
}

/**
 * One ledger entry: either a new row (a charge, an adjustment, a deposit credited as it arrives)
 * or a pending deposit settled (confirmed with what arrived). The row carries its signed delta.
 */
export type LedgerEntry =
  | { insert: Insertable<TransactionsTable> & { delta_cents: number } }
  | {
      settle: {
        id: string;
        amount_cents: number;
        tx_hash: string | null;
        chain: string | null;
        log_index: number | null;
        confirmed_at: Date;
        description?: string | null | undefined;
      };
    };

const CHARGE_PER_PERIOD = sql`(account_id, period_start) where kind = 'charge' and status = 'confirmed'`;

/**
 * The one way a single row changes a balance: writes the ledger row and moves the account's
 * cached balance by its delta, in the caller's transaction. A charge for a period already charged
 * is not written (the unique index transactions_one_charge_per_period): undefined, nothing
 * changed. A settle of a deposit that is neither pending nor expired: undefined, nothing changed. A delta
 * that would take the balance below 0 throws (services check first, so this is a bug guard), and
 * the caller's transaction rolls back with it.
 */
export async function postEntry(tx: Tx, entry: LedgerEntry): Promise<{ row: TransactionRow; balanceCents: number } | undefined> {
  let row: TransactionRow | undefined;
  if ('insert' in entry) {
    const r = entry.insert;
    row = await tx
      .insertInto('transactions')
      .values(r)
      .$if(r.kind === 'charge' && r.status === 'confirmed' && r.period_start != null, (q) =>
        q.onConflict((oc) => oc.columns(['account_id', 'period_start']).where('kind', '=', sql.lit('charge')).where('status', '=', sql.lit('confirmed')).doNothing()),
      )
      .returningAll()
      .executeTakeFirst();
  } else {
    const s = entry.settle;
    row = await tx
      .updateTable('transactions')
      .set({
        status: 'confirmed',
        amount_cents: s.amount_cents,
        delta_cents: s.amount_cents,
        tx_hash: s.tx_hash,
        chain: s.chain,
        log_index: s.log_index,
        confirmed_at: s.confirmed_at,
        ...(s.description !== undefined ? { description: s.description } : {}),
      })
      .where('id', '=', s.id)
      .where('kind', '=', 'deposit')
      .where('status', 'in', ['pending', 'expired'])
      .returningAll()
      .executeTakeFirst();
  }
  if (!row) return undefined;
  const delta = Number(row.delta_cents);
  const account = await tx
    .updateTable('accounts')
    .set({ balance_cents: sql<number>`balance_cents + ${delta}` })
    .where('id', '=', row.account_id)
    .where(sql<boolean>`balance_cents + ${delta} >= 0`)
    .returning('balance_cents')
    .executeTakeFirst();
  if (!account) throw new Error(`ledger: ${row.kind} ${row.id} of ${delta} cents would take account ${row.account_id}'s balance below 0`);
  return { row, balanceCents: Number(account.balance_cents) };
}

export interface DueCharge {
  id: string;
  /** Whether the price was debited; false: the balance was short and the account is frozen now. */
  charged: boolean;
  plan: string;
  /** The balance after the run. */
  balance_cents: number;
  price_cents: number;
}

/**
 * The monthly charge of up to `limit` active accounts whose charge is due, in one statement: for
 * each, a balance of at least its plan's price is debited with a confirmed charge row for the
 * period starting at its due date, and the due date moves one month on (one month from now when
 * that is already past); a shorter balance records a failed charge row and freezes the account.
 * Accounts another transaction holds are skipped (the next run takes them). A period already
 * charged is never charged again (the unique index): the account's due date just moves on.
 * Month arithmetic is calendar months in UTC, as addMonth in services/billing.ts.
 */
export async function chargeDueAccounts(tx: Tx, o: { now: Date; limit: number; plans: readonly { plan: string; priceCents: number; description: string }[] }): Promise<DueCharge[]> {
  const prices = sql.join(o.plans.map((p) => sql`(${p.plan}::text, ${p.priceCents}::bigint, ${p.description}::text)`));
  const now = sql`${o.now.toISOString()}::timestamptz`;
  const nextMonth = (t: ReturnType<typeof sql>) => sql`((${t} at time zone 'UTC') + interval '1 month') at time zone 'UTC'`;
  const { rows } = await sql<DueCharge>`
    with prices (plan, price, description) as (values ${prices}),
    picked as (
      select a.id, a.plan, a.balance_cents, a.next_charge_at, p.price, p.description
      from accounts a join prices p on p.plan = a.plan
      where a.state = 'active' and a.next_charge_at <= ${now}
      limit ${o.limit}
      for update of a skip locked
    ),
    charged as (
      insert into transactions (id, account_id, kind, amount_cents, delta_cents, status, period_start, description, created_at, confirmed_at)
      select gen_random_uuid(), id, 'charge', price, -price, 'confirmed', next_charge_at, description, ${now}, ${now}
      from picked where balance_cents >= price
      on conflict ${CHARGE_PER_PERIOD} do nothing
      returning account_id, amount_cents
    ),
    failed as (
      insert into transactions (id, account_id, kind, amount_cents, delta_cents, status, period_start, description, created_at)
      select gen_random_uuid(), id, 'charge', price, 0, 'failed', next_charge_at, description, ${now}
      from picked where balance_cents < price
      returning account_id
    )
    update accounts a set
      balance_cents = a.balance_cents - coalesce(c.amount_cents, 0),
      state = case when p.balance_cents >= p.price then 'active' else 'frozen' end,
      next_charge_at = case
        when p.balance_cents < p.price then a.next_charge_at
        when ${nextMonth(sql`p.next_charge_at`)} > ${now} then ${nextMonth(sql`p.next_charge_at`)}
        else ${nextMonth(now)}
      end
    from picked p left join charged c on c.account_id = p.id
    where a.id = p.id
    returning a.id, p.balance_cents >= p.price as charged, a.plan, a.balance_cents, p.price as price_cents
  `.execute(tx);
  return rows.map((r) => ({ ...r, balance_cents: Number(r.balance_cents), price_cents: Number(r.price_cents) }));
}

/** A deposit, unlocked: what a confirmation checks before it asks the chain. */
export function findDeposit(db: Database | Tx, depositId: string) {
  return db.selectFrom('transactions').selectAll().where('id', '=', depositId).where('kind', '=', 'deposit').executeTakeFirst();
}

/** A deposit, locked for the rest of the transaction (confirming it twice must not credit twice). */
export function lockDeposit(db: Database | Tx, depositId: string) {
  return db.selectFrom('transactions').selectAll().where('id', '=', depositId).where('kind', '=', 'deposit').forUpdate().executeTakeFirst();
}

/**
 * What a credit is keyed by: an on-chain transfer (its chain, transaction hash and log index), or
 * an off-chain payment id (chain and log index null). One credit per key (transactions_transfer,
 * transactions_payment).
 */
export interface PaymentKey {
  chain: string | null;
  txHash: string;
  logIndex: number | null;
}

/** The row that credited this payment, if any. */
export function findCredit(db: Database | Tx, key: PaymentKey) {
  return db
    .selectFrom('transactions')
    .select(['id', 'account_id', 'kind'])
    .where('tx_hash', '=', key.txHash)
    .$if(key.chain === null, (q) => q.where('chain', 'is', null))
    .$if(key.chain !== null, (q) => q.where('chain', '=', key.chain!).where('log_index', '=', key.logIndex!))
    .executeTakeFirst();
}

/** The deposit handed out with this address (addresses are unique: transactions_address). */
export function findDepositByAddress(db: Database | Tx, address: string) {
  return db.selectFrom('transactions').select(['id', 'account_id', 'status']).where('address', '=', address).where('kind', '=', 'deposit').executeTakeFirst();
}

/**
 * The addresses the chain watcher looks for payments to: those of unpaid deposits (pending, or
 * expired) that expire after `expiresAfter`, and those of deposits confirmed since
 * `confirmedSince` (a second payment to an address is credited too). Abandoned deposits drop out
 * once expired long enough, however many there are.
 */
export async function watchedDepositAddresses(db: Database | Tx, o: { expiresAfter: Date; confirmedSince: Date }): Promise<string[]> {
  const unpaid = db
    .selectFrom('transactions')
    .select('address')
    .where('kind', '=', 'deposit')
    .where('address', 'is not', null)
    .where('status', 'in', ['pending', 'expired'])
    .where('expires_at', '>', o.expiresAfter);
  const paid = db
    .selectFrom('transactions')
    .select('address')
    .where('kind', '=', 'deposit')
    .where('address', 'is not', null)
    .where('status', '=', 'confirmed')
    .where('confirmed_at', '>=', o.confirmedSince);
  const rows = await unpaid.unionAll(paid).execute();
  return rows.map((r) => r.address!);
}

/** How many of the account's deposits are open: pending and not expired at `now`. */
export async function openDepositCount(db: Database | Tx, accountId: string, now: Date): Promise<number> {
  const r = await db
    .selectFrom('transactions')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('account_id', '=', accountId)
    .where('kind', '=', 'deposit')
    .where('status', '=', 'pending')
    .where('expires_at', '>', now)
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

/** Pending deposits whose time ran out by `now` become `expired`; how many did. */
export async function expireDeposits(db: Database | Tx, now: Date): Promise<number> {
  const r = await db.updateTable('transactions').set({ status: 'expired' }).where('kind', '=', 'deposit').where('status', '=', 'pending').where('expires_at', '<=', now).executeTakeFirst();
  return Number(r.numUpdatedRows);
}

/** The next deposit address index (the sequence deposit_address_index: unique, never reused). */
export async function nextDepositAddressIndex(db: Database | Tx): Promise<number> {
  const { rows } = await sql<{ n: string | number }>`select nextval('deposit_address_index') as n`.execute(db);
  return Number(rows[0]!.n);
}

/** One of the account's ledger rows, by id: where a page continues. */
export function transactionCursor(db: Database | Tx, accountId: string, id: string) {
  return db.selectFrom('transactions').select('id').where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
}

/**
 * The account's ledger, newest first (created_at, then id, both descending): at most `limit` rows,
 * those after the row `beforeId` (one of the account's, see transactionCursor) when given.
 */
export function transactionsPage(db: Database | Tx, accountId: string, limit: number, beforeId?: string) {
  return (
    db
      .selectFrom('transactions')
      .selectAll()
      .where('account_id', '=', accountId)
      // Compared in the database: its times have microseconds, JavaScript's only milliseconds.
      .$if(beforeId !== undefined, (q) => q.where(sql<boolean>`(created_at, id) < (select t.created_at, t.id from transactions t where t.id = ${beforeId!})`))
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .execute()
  );
}
