import { canonicalCidr } from '@rampart/protocol';
import { sql, type Kysely, type Migration, type MigrationProvider } from 'kysely';

// One dialect (PostgreSQL), one list of migrations, for PGlite and PostgreSQL alike. Append only.
const migrations: Record<string, Migration> = {
  '0001_initial': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('accounts')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('email', 'text', (c) => c.notNull().unique())
        .addColumn('password_hash', 'text')
        .addColumn('plan', 'text', (c) => c.notNull())
        .addColumn('balance_cents', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('state', 'text', (c) => c.notNull().defaultTo('active'))
        .addColumn('bot_secret', 'text', (c) => c.notNull())
        .addColumn('next_charge_at', 'timestamptz', (c) => c.notNull())
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .execute();

      await db.schema
        .createTable('sessions')
        .addColumn('token_hash', 'text', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
        .execute();

      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('key_hash', 'text', (c) => c.notNull().unique())
        .addColumn('key_prefix', 'text', (c) => c.notNull())
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addColumn('last_used_at', 'timestamptz')
        .execute();
      await db.schema.createIndex('api_keys_account').on('api_keys').column('account_id').execute();

      await db.schema
        .createTable('servers')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('token_hash', 'text', (c) => c.unique())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('ip', 'text')
        .addColumn('last_seen_at', 'timestamptz')
        .addColumn('desired_revision', 'bigint', (c) => c.notNull().defaultTo(1))
        .addColumn('applied_revision', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .execute();
      await db.schema.createIndex('servers_account').on('servers').column('account_id').execute();

      await db.schema
        .createTable('domains')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('domain', 'text', (c) => c.notNull())
        .addColumn('origins', 'jsonb', (c) => c.notNull())
        .addColumn('ssl_enabled', 'boolean', (c) => c.notNull())
        .addColumn('waf_enabled', 'boolean', (c) => c.notNull().defaultTo(true))
        .addColumn('waf_level', 'text', (c) => c.notNull().defaultTo('medium'))
        .addColumn('status', 'text', (c) => c.notNull().defaultTo('pending'))
        .addColumn('ssl_expires', 'timestamptz')
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addUniqueConstraint('domains_account_domain', ['account_id', 'domain'])
        .execute();

      await db.schema
        .createTable('domain_servers')
        .addColumn('domain_id', 'uuid', (c) => c.notNull().references('domains.id').onDelete('cascade'))
        .addColumn('server_id', 'uuid', (c) => c.notNull().references('servers.id').onDelete('cascade'))
        .addPrimaryKeyConstraint('domain_servers_pk', ['domain_id', 'server_id'])
        .execute();
      await db.schema.createIndex('domain_servers_server').on('domain_servers').column('server_id').execute();

      await db.schema
        .createTable('waf_rules')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('domain_id', 'uuid', (c) => c.references('domains.id').onDelete('cascade'))
        .addColumn('rule_type', 'text', (c) => c.notNull())
        .addColumn('value', 'text', (c) => c.notNull())
        .addColumn('enabled', 'boolean', (c) => c.notNull().defaultTo(true))
        .addColumn('priority', 'integer', (c) => c.notNull().defaultTo(100))
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .execute();
      await db.schema.createIndex('waf_rules_account').on('waf_rules').columns(['account_id', 'priority']).execute();

      await db.schema
        .createTable('waf_events')
        .addColumn('id', 'bigserial', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('server_id', 'uuid', (c) => c.references('servers.id').onDelete('set null'))
        .addColumn('domain', 'text', (c) => c.notNull())
        .addColumn('source_ip', 'text', (c) => c.notNull())
        .addColumn('reason', 'text', (c) => c.notNull())
        .addColumn('rule_id', 'uuid')
        .addColumn('occurred_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('waf_events_account_time').on('waf_events').columns(['account_id', 'occurred_at']).execute();

      await db.schema
        .createTable('notifications')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('message', 'text', (c) => c.notNull())
        .addColumn('server_id', 'uuid', (c) => c.references('servers.id').onDelete('set null'))
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .execute();
      await db.schema.createIndex('notifications_account_time').on('notifications').columns(['account_id', 'created_at']).execute();

      await db.schema
        .createTable('transactions')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('amount_cents', 'bigint', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('tx_hash', 'text')
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addColumn('confirmed_at', 'timestamptz')
        .execute();
      await db.schema.createIndex('transactions_account_time').on('transactions').columns(['account_id', 'created_at']).execute();
    },
  },
  '0002_waf_version': {
    // Bumped with every change to an account's rules, so a serialized rule list can be cached by
    // (account, version) and served with no query beyond authentication.
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('accounts')
        .addColumn('waf_version', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
    },
  },
  '0003_waf_events_by_server': {
    async up(db: Kysely<unknown>) {
      await db.schema.createIndex('waf_events_server_time').on('waf_events').columns(['server_id', 'occurred_at']).execute();
    },
  },
  '0004_server_public_ip': {
    // The address DNS points at for a server when it is not the one its agent connects from.
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('servers').addColumn('public_ip', 'text').execute();
    },
  },
  '0005_certificates': {
    // Certificates are ordered by the agents (ACME HTTP-01); the service keeps each server's report,
    // the domain's summary, and the orders it granted (the authority caps them per registered domain).
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('domains')
        .addColumn('ssl_status', 'text', (c) => c.notNull().defaultTo('pending'))
        .addColumn('ssl_error', 'text')
        // The ssl_expires value an ssl_expiring notification was raised for (one per certificate).
        .addColumn('ssl_expiring_notified_for', 'timestamptz')
        .execute();
      // No certificate existed before: an SSL domain is pending (and so is its status) until its servers report.
      await sql`update domains set ssl_status = 'off', ssl_expires = null where not ssl_enabled`.execute(db);
      await sql`update domains set status = 'pending', ssl_expires = null where ssl_enabled`.execute(db);
      await db.schema
        .alterTable('domains')
        .alterColumn('ssl_status', (c) => c.dropDefault())
        .execute();

      await db.schema
        .createTable('domain_certificates')
        .addColumn('domain_id', 'uuid', (c) => c.notNull().references('domains.id').onDelete('cascade'))
        .addColumn('server_id', 'uuid', (c) => c.notNull().references('servers.id').onDelete('cascade'))
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('expires_at', 'timestamptz')
        .addColumn('message', 'text')
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
        .addPrimaryKeyConstraint('domain_certificates_pk', ['domain_id', 'server_id'])
        .execute();
      await db.schema.createIndex('domain_certificates_server').on('domain_certificates').column('server_id').execute();

      // Orders outlive their account and server: the authority keeps counting them.
      await db.schema
        .createTable('certificate_orders')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('registered_domain', 'text', (c) => c.notNull())
        .addColumn('domain', 'text', (c) => c.notNull())
        .addColumn('server_id', 'uuid', (c) => c.references('servers.id').onDelete('set null'))
        .addColumn('account_id', 'uuid', (c) => c.references('accounts.id').onDelete('set null'))
        .addColumn('created_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('certificate_orders_registered_time').on('certificate_orders').columns(['registered_domain', 'created_at']).execute();
    },
  },
  '0006_waf_mode_and_event_details': {
    // A domain's WAF mode (block, or detect: detections are logged, not blocked), and each event's
    // request details. Existing domains keep blocking; existing events were all blocks and have no details.
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('domains')
        .addColumn('waf_mode', 'text', (c) => c.notNull().defaultTo('block'))
        .execute();
      await db.schema
        .alterTable('waf_events')
        .addColumn('method', 'text')
        .addColumn('path', 'text')
        .addColumn('location', 'text')
        .addColumn('matched', 'text')
        .addColumn('blocked', 'boolean', (c) => c.notNull().defaultTo(true))
        .execute();
    },
  },
  '0007_agent_channel': {
    async up(db: Kysely<unknown>) {
      // The daily event cap counts by the time the service received an event, not the time the
      // event carries. Events stored before have none (null) and count toward no day's cap.
      await db.schema.alterTable('waf_events').addColumn('received_at', 'timestamptz').execute();
      await db.schema.createIndex('waf_events_server_received').on('waf_events').columns(['server_id', 'received_at']).execute();

      // Identical notifications from one server within a minute are one row with a count.
      await db.schema
        .alterTable('notifications')
        .addColumn('count', 'integer', (c) => c.notNull().defaultTo(1))
        // The last occurrence folded into the row; null: only the first (created_at).
        .addColumn('updated_at', 'timestamptz')
        .execute();
      await db.schema.createIndex('notifications_server_kind_time').on('notifications').columns(['server_id', 'kind', 'created_at']).execute();

      // The live agent connection of each server, whichever control-plane process holds it: a
      // server is active while its row has a recent heartbeat.
      await db.schema
        .createTable('agent_connections')
        .addColumn('server_id', 'uuid', (c) => c.primaryKey().references('servers.id').onDelete('cascade'))
        .addColumn('connection_id', 'uuid', (c) => c.notNull())
        .addColumn('process_id', 'text', (c) => c.notNull())
        .addColumn('ip', 'text', (c) => c.notNull())
        .addColumn('connected_at', 'timestamptz', (c) => c.notNull())
        .addColumn('last_heartbeat_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('agent_connections_heartbeat').on('agent_connections').column('last_heartbeat_at').execute();
      await db.schema.createIndex('agent_connections_process').on('agent_connections').column('process_id').execute();
      // No connection is recorded yet: every agent says hello again after the upgrade.
      await sql`update servers set status = 'offline' where status = 'active'`.execute(db);
    },
  },
  '0008_ledger_notifications_health': {
    async up(db: Kysely<unknown>) {
      // The ledger: a row's delta is its signed effect on the balance (0 while pending or failed),
      // so an account's balance is the sum of its deltas. Rows from before get theirs, and each
      // account an opening adjustment for whatever its balance held beyond them (admin credits).
      await db.schema
        .alterTable('transactions')
        .addColumn('delta_cents', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('period_start', 'timestamptz') // charges: the start of the period paid for
        .addColumn('description', 'text')
        .addColumn('address', 'text') // deposits: where to pay
        .addColumn('address_index', 'integer')
        .addColumn('network', 'text')
        .addColumn('token', 'text')
        .execute();
      await sql`update transactions set delta_cents = case when kind = 'charge' then -amount_cents else amount_cents end where status = 'confirmed'`.execute(db);
      await sql`insert into transactions (id, account_id, kind, amount_cents, delta_cents, status, description, created_at, confirmed_at)
        select gen_random_uuid(), a.id, 'adjustment', a.balance_cents - coalesce(t.sum, 0), a.balance_cents - coalesce(t.sum, 0), 'confirmed', 'Opening balance', now(), now()
        from accounts a left join (select account_id, sum(delta_cents) as sum from transactions group by account_id) t on t.account_id = a.id
        where a.balance_cents <> coalesce(t.sum, 0)`.execute(db);
      // One charge per account and period, whatever the number of processes or retries.
      await sql`create unique index transactions_one_charge_per_period on transactions (account_id, period_start) where kind = 'charge' and status = 'confirmed'`.execute(db);
      // One credit per on-chain transaction, and one deposit per address.
      await sql`create unique index transactions_tx_hash on transactions (tx_hash) where tx_hash is not null`.execute(db);
      await sql`create unique index transactions_address on transactions (address) where address is not null`.execute(db);
      await sql`create sequence deposit_address_index minvalue 0 start 0`.execute(db);
      // A payment processor's webhook events, each applied once.
      await db.schema
        .createTable('payment_events')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('deposit_id', 'uuid')
        .addColumn('received_at', 'timestamptz', (c) => c.notNull())
        .execute();

      await db.schema.alterTable('notifications').addColumn('read_at', 'timestamptz').addColumn('domain_id', 'uuid').execute();
      await db.schema
        .createTable('notification_settings')
        .addColumn('account_id', 'uuid', (c) => c.primaryKey().references('accounts.id').onDelete('cascade'))
        .addColumn('webhook_url', 'text')
        .addColumn('webhook_secret_enc', 'text') // encrypted with RAMPART_SECRET_KEY: it signs, so it is kept, never shown
        .addColumn('email', 'text')
        .addColumn('kinds', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`)) // empty: every kind
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('notification_deliveries')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('notification_id', 'uuid', (c) => c.notNull().references('notifications.id').onDelete('cascade'))
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('channel', 'text', (c) => c.notNull()) // webhook | email
        .addColumn('target', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull()) // pending | delivered | given_up
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('next_attempt_at', 'timestamptz')
        .addColumn('last_status', 'integer')
        .addColumn('last_error', 'text')
        .addColumn('created_at', 'timestamptz', (c) => c.notNull())
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('notification_deliveries_due').on('notification_deliveries').columns(['status', 'next_attempt_at']).execute();
      await db.schema.createIndex('notification_deliveries_account_time').on('notification_deliveries').columns(['account_id', 'created_at']).execute();

      // Health: what the agent reports (its HTTP port for the probe, whether HAProxy serves) and
      // what the last cycle decided.
      await db.schema
        .alterTable('servers')
        .addColumn('http_port', 'integer')
        .addColumn('proxy_serving', 'boolean')
        .addColumn('healthy', 'boolean')
        .addColumn('health_error', 'text')
        .addColumn('health_checked_at', 'timestamptz')
        .execute();

      // DNS failover: the account's provider (credentials encrypted) and, per domain, the switch
      // and the addresses last published.
      await db.schema
        .createTable('dns_settings')
        .addColumn('account_id', 'uuid', (c) => c.primaryKey().references('accounts.id').onDelete('cascade'))
        .addColumn('provider', 'text', (c) => c.notNull())
        .addColumn('credentials_enc', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema
        .alterTable('domains')
        .addColumn('dns_failover', 'boolean', (c) => c.notNull().defaultTo(false))
        .addColumn('dns_addresses', 'jsonb')
        .addColumn('dns_error', 'text')
        .execute();

      // Small state of the periodic jobs (the chain watcher's block cursor).
      await db.schema
        .createTable('job_state')
        .addColumn('name', 'text', (c) => c.primaryKey())
        .addColumn('value', 'text', (c) => c.notNull())
        .execute();
    },
  },
  '0009_event_folding': {
    // Identical events (same server, source, domain, reason and rule) within 60 s are one row with
    // a count. last_seen_at: the last occurrence folded in (null: only the first, occurred_at);
    // request_id: the proxy's id of the first occurrence's request (agents from before send none).
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('waf_events')
        .addColumn('count', 'integer', (c) => c.notNull().defaultTo(1))
        .addColumn('last_seen_at', 'timestamptz')
        .addColumn('request_id', 'text')
        .execute();
      // Finds the row an event folds into.
      await db.schema.createIndex('waf_events_fold').on('waf_events').columns(['server_id', 'source_ip', 'domain', 'reason', 'occurred_at']).execute();
      // The per-server daily cap counts rate-limit and challenge rows apart.
      await db.schema.createIndex('waf_events_server_received_reason').on('waf_events').columns(['server_id', 'received_at', 'reason']).execute();
    },
  },
  '0010_bot_key_rotation': {
    // Bot protection keys carry an id and rotate (docs/bots.md): bot_secret is the current key,
    // bot_key_id its id, bot_key_created_at when it began signing; the key it replaced stays
    // accepted (bot_prev_*) until bot_prev_until, one pass-cookie lifetime after the rotation.
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('accounts')
        .addColumn('bot_key_id', 'text', (c) => c.notNull().defaultTo('0'))
        .addColumn('bot_key_created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addColumn('bot_prev_key_id', 'text')
        .addColumn('bot_prev_secret', 'text')
        .addColumn('bot_prev_until', 'timestamptz')
        .execute();
      await db.schema.createIndex('accounts_bot_key_created_at').on('accounts').column('bot_key_created_at').execute();
    },
  },
  '0011_analytics': {
    // Traffic analytics (docs/analytics.md): what the shield servers counted, summed per domain
    // and UTC minute (kept 48 h), and per hour, rolled up from the minutes by a job (kept 30 days).
    // blocked: {"<WAF reason>": n}; updated_at: the last batch added to a minute (what the rollup
    // job looks for).
    async up(db: Kysely<unknown>) {
      for (const [table, time] of [
        ['analytics_minute', 'minute'],
        ['analytics_hour', 'hour'],
      ] as const) {
        let t = db.schema
          .createTable(table)
          .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
          .addColumn('domain_id', 'uuid', (c) => c.notNull().references('domains.id').onDelete('cascade'))
          .addColumn(time, 'timestamptz', (c) => c.notNull());
        for (const col of ['requests', 's1xx', 's2xx', 's3xx', 's4xx', 's5xx', 's_other', 'bytes_in', 'bytes_out']) {
          t = t.addColumn(col, 'bigint', (c) => c.notNull().defaultTo(0));
        }
        await t
          .addColumn('blocked', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
          .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
          .addPrimaryKeyConstraint(`${table}_pkey`, ['account_id', 'domain_id', time])
          .execute();
        await db.schema.createIndex(`${table}_${time}`).on(table).column(time).execute();
      }
      await db.schema.createIndex('analytics_minute_updated').on('analytics_minute').column('updated_at').execute();
    },
  },
  '0012_canonical_ip_rules': {
    // block_ip and allow_ip values are stored in canonical form since this version (IPv6 lowercased
    // and shortened as RFC 5952 writes it, a full-length prefix dropped), so that a repeated rule is
    // found by equality: the values stored before are rewritten the same way.
    async up(db: Kysely<{ waf_rules: { id: string; rule_type: string; value: string } }>) {
      const rows = await db.selectFrom('waf_rules').select(['id', 'value']).where('rule_type', 'in', ['block_ip', 'allow_ip']).execute();
      for (const r of rows) {
        const canonical = canonicalCidr(r.value);
        if (canonical !== undefined && canonical !== r.value) await db.updateTable('waf_rules').set({ value: canonical }).where('id', '=', r.id).execute();
      }
    },
  },
  '0013_compressed_bodies': {
    // What level high does with a compressed request body (protocol COMPRESSED_BODY_POLICIES):
    // every domain refuses one until its owner allows it.
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('domains')
        .addColumn('waf_compressed_bodies', 'text', (c) => c.notNull().defaultTo('refuse'))
        .execute();
    },
  },
  '0014_deposit_transfers': {
    // Every credit is keyed by what paid it (docs/billing.md, "Confirming deposits"): an on-chain
    // transfer by its chain (CAIP-2, `eip155:<chain id>`), transaction hash and log index; an
    // off-chain payment by the processor's payment id (tx_hash, chain null). Rows credited before
    // named an on-chain transfer `<hash>` or `<hash>:<logIndex>`: they are split under the chain
    // 'legacy' (the chain id was not kept, and a bare hash's log index, -1 here, is unknown). The
    // watcher never reads their blocks again (its cursor only moves on), so no new key meets them.
    // Deposits expire (expires_at): pending ones get 24 hours from the upgrade.
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('transactions').addColumn('chain', 'text').addColumn('log_index', 'integer').addColumn('expires_at', 'timestamptz').execute();
      await sql`drop index transactions_tx_hash`.execute(db);
      await sql`update transactions set chain = 'legacy',
          log_index = case when tx_hash like '%:%' then split_part(tx_hash, ':', 2)::integer else -1 end,
          tx_hash = split_part(tx_hash, ':', 1)
        where tx_hash is not null and network is not null`.execute(db);
      await sql`create unique index transactions_transfer on transactions (chain, tx_hash, log_index) where chain is not null`.execute(db);
      await sql`create unique index transactions_payment on transactions (tx_hash) where chain is null and tx_hash is not null`.execute(db);
      await sql`update transactions set expires_at = now() + interval '24 hours' where kind = 'deposit' and status = 'pending'`.execute(db);
      // The cap of open deposits per account, and the addresses the chain watcher looks for.
      await sql`create index transactions_open_deposits on transactions (account_id, expires_at) where kind = 'deposit' and status = 'pending'`.execute(db);
      await sql`create index transactions_unpaid_addresses on transactions (expires_at) where kind = 'deposit' and address is not null and status in ('pending', 'expired')`.execute(db);
      await sql`create index transactions_paid_addresses on transactions (confirmed_at) where kind = 'deposit' and address is not null and status = 'confirmed'`.execute(db);
    },
  },
  '0015_notification_endpoints': {
    // Fair delivery and a circuit breaker per delivery endpoint (an account's webhook, its e-mail
    // address; docs/notifications.md "Delivery runs" and "Failing endpoints"), and the e-mail
    // address's confirmation. An address set before this version is unconfirmed: nothing is sent
    // to it until its owner confirms it.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('notification_endpoints')
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('channel', 'text', (c) => c.notNull()) // webhook | email
        .addColumn('busy_until', 'timestamptz') // an attempt is under way (its lease)
        .addColumn('last_turn', 'bigint', (c) => c.notNull().defaultTo(0)) // endpoints take turns, least recently served first
        .addColumn('consecutive_failures', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('failing_since', 'timestamptz')
        .addColumn('paused_until', 'timestamptz') // the circuit is open until then
        .addColumn('disabled_at', 'timestamptz')
        .addColumn('last_error', 'text')
        .addPrimaryKeyConstraint('notification_endpoints_pk', ['account_id', 'channel'])
        .execute();
      await sql`create sequence notification_endpoint_turns`.execute(db);
      await sql`insert into notification_endpoints (account_id, channel)
        select distinct account_id, channel from notification_deliveries where status = 'pending'`.execute(db);
      await db.schema.createIndex('notification_deliveries_endpoint_due').on('notification_deliveries').columns(['account_id', 'channel', 'status', 'next_attempt_at']).execute();
      await db.schema
        .alterTable('notification_settings')
        .addColumn('email_confirmed_at', 'timestamptz')
        .addColumn('email_token_hash', 'text') // SHA-256 of the single-use confirmation token
        .addColumn('email_token_expires_at', 'timestamptz')
        .addColumn('email_token_sent_at', 'timestamptz')
        .execute();
      await db.schema.createIndex('notification_settings_email_token').on('notification_settings').column('email_token_hash').execute();
    },
  },
  '0017_signup_invitations': {
    // RAMPART_SIGNUP=invite (docs/api.md "Sign-up"): single-use invitations the operator issues,
    // stored by the SHA-256 of their token; account_id is the account the invitation created.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('invitations')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('token_hash', 'text', (c) => c.notNull().unique())
        .addColumn('email', 'text')
        .addColumn('created_at', 'timestamptz', (c) => c.notNull())
        .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
        .addColumn('used_at', 'timestamptz')
        .addColumn('account_id', 'uuid', (c) => c.references('accounts.id').onDelete('set null'))
        .execute();
    },
  },
  '0018_crawler_address_lists': {
    // The search crawlers' published address lists (docs/bots.md "Verified crawlers"), one row per
    // crawler, as the crawler-ranges job last fetched them; agents get them through the hub.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('crawler_address_lists')
        .addColumn('crawler_id', 'text', (c) => c.primaryKey())
        .addColumn('prefixes', 'text', (c) => c.notNull())
        .addColumn('sources', 'text', (c) => c.notNull())
        .addColumn('fetched_at', 'timestamptz', (c) => c.notNull())
        .execute();
    },
  },
  '0020_agent_version': {
    // The version each server's agent said in its last hello, and why the last one was refused
    // (a protocol this control plane cannot speak; null once an agent is accepted).
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('servers').addColumn('agent_version', 'text').addColumn('agent_refused', 'text').execute();
    },
  },
  '0016_event_request_ids': {
    // The request ids of each WAF event: its first occurrence's and those folded into it, the
    // first AGENT_LIMITS.requestIdsPerEvent (32), so GET /api/waf/events?requestId= finds the
    // event of any of them. Rows already stored bring their one id.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('waf_event_requests')
        .addColumn('event_id', 'bigint', (c) => c.notNull().references('waf_events.id').onDelete('cascade'))
        .addColumn('account_id', 'uuid', (c) => c.notNull())
        .addColumn('request_id', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('waf_event_requests_pk', ['event_id', 'request_id'])
        .execute();
      await db.schema.createIndex('waf_event_requests_account_request').on('waf_event_requests').columns(['account_id', 'request_id']).execute();
      await sql`insert into waf_event_requests (event_id, account_id, request_id) select id, account_id, request_id from waf_events where request_id is not null`.execute(db);
    },
  },
  '0021_custom_rules': {
    // Custom rules (docs/rules.md): an expression of the rule language, an action, a scope (a
    // domain, or null: every domain of the account), a priority (lower first) and a switch.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('custom_rules')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('domain_id', 'uuid', (c) => c.references('domains.id').onDelete('cascade'))
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('expression', 'text', (c) => c.notNull())
        .addColumn('action', 'text', (c) => c.notNull())
        .addColumn('enabled', 'boolean', (c) => c.notNull().defaultTo(true))
        .addColumn('priority', 'integer', (c) => c.notNull().defaultTo(100))
        .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
        .execute();
      await db.schema.createIndex('custom_rules_account').on('custom_rules').columns(['account_id', 'priority']).execute();
    },
  },
  '0021_custom_rules_rate_limit': {
    // A rate-limiting custom rule's settings (JSON: requests, period, characteristics, mitigation,
    // duration); null for the other actions.
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('custom_rules').addColumn('rate_limit', 'text').execute();
    },
  },
  '0022_custom_rule_hits': {
    // Hits of custom rules (docs/rules.md "Hits"): requests each rule acted on, per UTC minute
    // (kept 25 hours) and per UTC hour (kept 8 days), as the agents report them.
    async up(db: Kysely<unknown>) {
      for (const [table, column] of [
        ['custom_rule_hits_minute', 'minute'],
        ['custom_rule_hits_hour', 'hour'],
      ] as const) {
        await db.schema
          .createTable(table)
          .addColumn('rule_id', 'uuid', (c) => c.notNull().references('custom_rules.id').onDelete('cascade'))
          .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
          .addColumn(column, 'timestamptz', (c) => c.notNull())
          .addColumn('hits', 'bigint', (c) => c.notNull())
          .addPrimaryKeyConstraint(`${table}_pkey`, ['rule_id', column])
          .execute();
        await db.schema.createIndex(`${table}_account`).on(table).columns(['account_id', column]).execute();
        await db.schema.createIndex(`${table}_${column}`).on(table).column(column).execute();
      }
    },
  },
  '0030_event_query': {
    // The first occurrence's query string excerpt (its first 192 bytes, credential-like values
    // redacted by the agent); null when the request had none, and for events of older agents.
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('waf_events').addColumn('query', 'text').execute();
    },
  },
  '0040_staged_rollout': {
    // Staged rollout (docs/architecture.md "Staged rollout"): the account's mode and bake time,
    // the servers flagged canary with the snapshot each last received as released (what it keeps
    // while a change bakes or after a halt), and the rollouts with their state per server.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('rollout_settings')
        .addColumn('account_id', 'uuid', (c) => c.primaryKey().references('accounts.id').onDelete('cascade'))
        .addColumn('mode', 'text', (c) => c.notNull().defaultTo('immediate'))
        .addColumn('bake_seconds', 'integer', (c) => c.notNull().defaultTo(60))
        .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
        .execute();
      await db.schema
        .alterTable('servers')
        .addColumn('canary', 'boolean', (c) => c.notNull().defaultTo(false))
        .execute();
      await db.schema.alterTable('servers').addColumn('released_snapshot', 'text').execute();
      await db.schema
        .createTable('rollouts')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('holding', 'boolean', (c) => c.notNull())
        .addColumn('change', 'text', (c) => c.notNull())
        .addColumn('bake_seconds', 'integer', (c) => c.notNull())
        .addColumn('started_at', 'timestamptz', (c) => c.notNull())
        .addColumn('bake_until', 'timestamptz', (c) => c.notNull())
        .addColumn('ended_at', 'timestamptz')
        .addColumn('signal', 'text')
        .addColumn('detail', 'text')
        .execute();
      await db.schema.createIndex('rollouts_account').on('rollouts').columns(['account_id', 'started_at']).execute();
      await db.schema
        .createTable('rollout_servers')
        .addColumn('rollout_id', 'uuid', (c) => c.notNull().references('rollouts.id').onDelete('cascade'))
        .addColumn('server_id', 'uuid', (c) => c.notNull().references('servers.id').onDelete('cascade'))
        .addColumn('canary', 'boolean', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('base_requests', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('base_blocked', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('base_errors', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('requests', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('blocked', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('errors', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('last_report_at', 'timestamptz')
        .addPrimaryKeyConstraint('rollout_servers_pkey', ['rollout_id', 'server_id'])
        .execute();
      await db.schema.createIndex('rollout_servers_server').on('rollout_servers').column('server_id').execute();
    },
  },
  '0041_latency': {
    // Staged rollout's p99 signal (docs/api.md "Rollout"): sampled requests by latency bucket
    // (LATENCY_BUCKETS_MS), per domain and minute, and per canary before and during a bake.
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('analytics_minute')
        .addColumn('latency', sql`bigint[]`)
        .execute();
      await db.schema
        .alterTable('rollout_servers')
        .addColumn('base_latency', sql`bigint[]`)
        .execute();
      await db.schema
        .alterTable('rollout_servers')
        .addColumn('latency', sql`bigint[]`)
        .execute();
    },
  },
  '0060_audit_log': {
    // The audit log (docs/api.md "Audit log"): every change to an account's configuration, keys,
    // settings and billing, who made it and the fields before and after (secrets never). Kept 90
    // days (the event-retention job); no API changes or deletes an entry.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('audit_log')
        .addColumn('id', 'uuid', (c) => c.primaryKey())
        .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('created_at', 'timestamptz', (c) => c.notNull())
        .addColumn('actor_type', 'text', (c) => c.notNull())
        .addColumn('actor_name', 'text')
        .addColumn('actor_key_prefix', 'text')
        .addColumn('object_type', 'text', (c) => c.notNull())
        .addColumn('object_id', 'text')
        .addColumn('action', 'text', (c) => c.notNull())
        .addColumn('changed', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
        .addColumn('before', 'jsonb')
        .addColumn('after', 'jsonb')
        .execute();
      await db.schema.createIndex('audit_log_account').on('audit_log').columns(['account_id', 'created_at', 'id']).execute();
      await db.schema.createIndex('audit_log_created').on('audit_log').column('created_at').execute();
    },
  },
};

export const migrationProvider: MigrationProvider = {
  getMigrations() {
    return Promise.resolve(migrations);
  },
};
