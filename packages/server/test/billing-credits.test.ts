import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { HDKey } from '@scure/bip32';
import fc from 'fast-check';
import { sql } from 'kysely';
import type { ChainConfig } from '../src/chain/config.js';
import { toCents } from '../src/chain/config.js';
import type { ServiceContext } from '../src/context.js';
import { writeJobState } from '../src/data/job-state.js';
import { openDatabase } from '../src/db/database.js';
import { AppError } from '../src/errors.js';
import { applyPaymentEvent, confirmDepositByOperator, createDeposit } from '../src/services/billing-deposits.js';
import { CHAIN_CURSOR, pollChainDeposits } from '../src/services/billing-chain.js';
import { ledgerProblems } from './billing-support.js';
import { startFakeChain } from './fake-chain.js';
import { backends, makeTestApp, newAccount, postgresUrl } from './helpers.js';

// docs/billing.md, "Confirming deposits": every credit is keyed by the transfer that paid it
// (chain, transaction hash, log index), on every path. A property test: random interleavings of
// payments (multisends among them), blocks, reorganisations of the unconfirmed blocks, chain
// watcher looks, operator confirmations and webhook events naming transactions (right, wrong,
// shallow, dropped), from two control-plane processes (two service contexts on one database);
// after the chain is read to its end, the deposits credited are exactly the transfers on the
// chain, each once, and no deposit a transfer paid is left pending. The chain is a model behind a
// real JSON-RPC endpoint (test/fake-chain.ts): ganache cannot reorganise on demand, nor fast enough.

const CONFIRMATIONS = 3;
const DECIMALS = 6;
const CENT = 10n ** BigInt(DECIMALS - 2);

/** Refusals a random confirmation may meet (a wrong transaction, one not deep yet, one credited, the cap); anything else fails. */
async function refusedOr<T>(p: Promise<T>): Promise<T | AppError> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof AppError && [400, 404, 409].includes(err.status)) return err;
    throw err;
  }
}

type Op =
  | { op: 'deposit'; proc: number; account: number; cents: number }
  | { op: 'pay'; to: { deposit: number; cents: number }[] }
  | { op: 'mine'; blocks: number }
  | { op: 'reorg'; depth: number; keep: boolean[] }
  | { op: 'poll'; proc: number }
  | { op: 'operator'; proc: number; deposit: number; tx: number; logIndex: number | null }
  | { op: 'webhook'; proc: number; event: number; deposit: number; tx: number };

const ACCOUNTS = 2;
const proc = fc.nat(1);
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ op: fc.constant('deposit' as const), proc, account: fc.nat(ACCOUNTS - 1), cents: fc.integer({ min: 1, max: 5000 }) }), weight: 3 },
  // 0 cents: less than a cent arrives (credits nothing).
  { arbitrary: fc.record({ op: fc.constant('pay' as const), to: fc.array(fc.record({ deposit: fc.nat(30), cents: fc.integer({ min: 0, max: 5000 }) }), { minLength: 1, maxLength: 3 }) }), weight: 4 },
  { arbitrary: fc.record({ op: fc.constant('mine' as const), blocks: fc.integer({ min: 1, max: CONFIRMATIONS }) }), weight: 2 },
  { arbitrary: fc.record({ op: fc.constant('reorg' as const), depth: fc.integer({ min: 1, max: CONFIRMATIONS - 1 }), keep: fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }) }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('poll' as const), proc }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('operator' as const), proc, deposit: fc.nat(30), tx: fc.nat(30), logIndex: fc.option(fc.nat(2)) }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('webhook' as const), proc, event: fc.nat(4), deposit: fc.nat(30), tx: fc.nat(30) }), weight: 2 },
);
/** A step: up to three operations at once. */
const stepsArb = fc.array(fc.array(opArb, { minLength: 1, maxLength: 3 }), { minLength: 3, maxLength: 14 });

for (const backend of await backends()) {
  describe(`each transfer is credited once, whatever confirms it (${backend})`, async () => {
    const chain = await startFakeChain();
    after(() => chain.close());
    const t = await makeTestApp(backend);
    const config: ChainConfig = {
      rpcUrl: chain.rpcUrl,
      xpub: HDKey.fromMasterSeed(randomBytes(32)).derive("m/44'/60'/0'/0").publicExtendedKey,
      token: chain.token,
      symbol: 'USDC',
      decimals: DECIMALS,
      network: 'Testnet',
      confirmations: CONFIRMATIONS,
      pollMs: 1000,
    };
    t.ctx.billing = { chain: config, webhookSecret: 'whsec_property' };
    // The second control-plane process: its own connections to the same database (PGlite has one).
    const procs: ServiceContext[] = [t.ctx, t.ctx];
    before(async () => {
      const url = backend === 'postgres' ? await postgresUrl() : undefined;
      if (!url) return;
      const schema = (await sql<{ s: string }>`select current_schema() as s`.execute(t.ctx.db)).rows[0]!.s;
      const other = await openDatabase({ url, schema, poolSize: 4 });
      after(() => other.close());
      procs[1] = { ...t.ctx, db: other.db };
    });

    test('random payments, blocks, reorganisations, watcher looks, operator confirmations and webhooks from two processes: the ledger holds each transfer once', async () => {
      await fc.assert(
        fc.asyncProperty(stepsArb, async (steps) => {
          const accounts: string[] = [];
          for (let i = 0; i < ACCOUNTS; i++) accounts.push((await newAccount(t.app, 'pro', 0)).accountId);
          // This run reads the chain from where a watcher that read every block deep enough
          // stands: the newest such block. The blocks after it are not final (a reorganisation,
          // at most CONFIRMATIONS - 1 deep, may still rewrite them, a payment of this run landing
          // in one), so the cursor never passes them (it did: a transfer a reorganisation moved
          // below it was never read).
          await writeJobState(t.ctx.db, CHAIN_CURSOR, String(Math.max(0, chain.head() - CONFIRMATIONS + 1)));
          const deposits: { id: string; address: `0x${string}`; account: string }[] = [];
          const sent: `0x${string}`[] = [];
          const events = new Map<number, string>();
          const pick = <T>(list: T[], i: number): T | undefined => list[i % Math.max(list.length, 1)];
          const run = async (o: Op): Promise<unknown> => {
            switch (o.op) {
              case 'deposit': {
                const d = await refusedOr(createDeposit(procs[o.proc]!, accounts[o.account]!, o.cents));
                if (!(d instanceof AppError)) deposits.push({ id: d.id, address: d.address as `0x${string}`, account: accounts[o.account]! });
                return d;
              }
              case 'pay': {
                const to = o.to.flatMap((x) => {
                  const d = pick(deposits, x.deposit);
                  return d ? [{ to: d.address, amount: x.cents === 0 ? CENT - 1n : BigInt(x.cents) * CENT }] : [];
                });
                if (to.length > 0) sent.push(chain.send(to));
                return;
              }
              case 'mine':
                return chain.mine(o.blocks);
              case 'reorg':
                return chain.reorg(Math.min(o.depth, chain.head()), (hash) => o.keep[sent.indexOf(hash) % 3] ?? true);
              case 'poll':
                return pollChainDeposits(procs[o.proc]!, config);
              case 'operator': {
                const d = pick(deposits, o.deposit);
                const tx = pick(sent, o.tx) ?? `0x${'ab'.repeat(32)}`;
                return d && refusedOr(confirmDepositByOperator(procs[o.proc]!, d.id, { txHash: tx, logIndex: o.logIndex ?? undefined }));
              }
              case 'webhook': {
                const d = pick(deposits, o.deposit);
                if (!events.has(o.event)) events.set(o.event, `evt_${randomBytes(6).toString('hex')}`);
                return d && refusedOr(applyPaymentEvent(procs[o.proc]!, { id: events.get(o.event)!, type: 'deposit.confirmed', depositId: d.id, txHash: pick(sent, o.tx) }));
              }
            }
          };
          for (const step of steps) await Promise.all(step.map(run));

          // Every block deep enough, and read to its end by both processes.
          chain.mine(CONFIRMATIONS);
          await pollChainDeposits(procs[0]!, config);
          await pollChainDeposits(procs[1]!, config);

          const accountOf = new Map(deposits.map((d) => [d.address.toLowerCase(), d.account]));
          const expected = chain
            .transfers()
            .filter((x) => accountOf.has(x.to.toLowerCase()) && toCents(x.amount, DECIMALS) > 0)
            .map((x) => `${accountOf.get(x.to.toLowerCase())} ${x.txHash} ${x.logIndex} ${toCents(x.amount, DECIMALS)}`)
            .sort();
          const { rows } = await sql<{ account_id: string; tx_hash: string; log_index: number; delta_cents: string }>`
            select account_id, tx_hash, log_index, delta_cents from transactions
            where kind = 'deposit' and status = 'confirmed' and account_id in (${sql.join(accounts)})`.execute(t.ctx.db);
          const credited = rows.map((r) => `${r.account_id} ${r.tx_hash} ${r.log_index} ${Number(r.delta_cents)}`).sort();
          assert.deepEqual(credited, expected, 'the deposits credited are the transfers on the chain, each once');
          const paid = new Set(
            chain
              .transfers()
              .filter((x) => toCents(x.amount, DECIMALS) > 0)
              .map((x) => x.to.toLowerCase()),
          );
          const { rows: pending } = await sql<{ address: string }>`
            select address from transactions where kind = 'deposit' and status = 'pending' and account_id in (${sql.join(accounts)})`.execute(t.ctx.db);
          assert.deepEqual(
            pending.filter((p) => paid.has(p.address.toLowerCase())),
            [],
            'no deposit a transfer paid is left pending',
          );
          assert.deepEqual(await ledgerProblems(t, accounts), []);
        }),
        { numRuns: backend === 'pglite' ? 25 : 12 },
      );
    });
  });
}
