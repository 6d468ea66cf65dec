import { ACCOUNT_LIMITS } from '@rampart/protocol';
import { useState } from 'preact/hooks';
import { api, ok, page, type Account, type ApiKeyCreated, type Body, type Deposit, type DnsSettings, type Transaction } from '../api/client';
import { CardTable, LoadMore, Options, submitting } from '../components';
import { Confirm, Dialog, Empty, ErrorNote, Field, fmtDate, MessageNote, money, PageHead, Pending, Secret, type ViewProps, useLoad, useMessage } from '../ui';
import { PaymentDetails } from './deposit';

type Plan = Body<'/api/account/plan', 'put'>['plan'];
// Checked against the API's own type: a plan it does not take fails to compile.
const PLANS = ['free', 'pro', 'enterprise'] as const satisfies readonly Plan[];
type Provider = Body<'/api/settings/dns', 'put'>['provider'];
const PROVIDERS = ['powerdns', 'cloudflare'] as const satisfies readonly Provider[];

function Billing({ initial }: { initial: Account }) {
  const [account, setAccount] = useState(initial);
  const [plan, setPlan] = useState<Plan>(initial.plan as Plan);
  const [amount, setAmount] = useState('');
  // One message at a time: the last action's (a success note goes by itself), or the deposit just announced.
  const [deposit, setDeposit] = useState<Deposit>();
  const [message, setMessage] = useMessage();
  const setError = (error: string | undefined) => {
    setMessage(error ? { kind: 'error', text: error } : undefined);
    if (error) setDeposit(undefined);
  };
  const [paying, setPaying] = useState<Transaction>();
  const tx = useLoad(() => page(api.GET('/api/billing/transactions', { params: { query: { limit: '20' } } })));
  const [more, setMore] = useState<{ items: Transaction[]; next: string | undefined }>();
  const rows = [...(tx.data?.items ?? []), ...(more?.items ?? [])];
  const next = more ? more.next : tx.data?.next;
  return (
    <div class="panel">
      <h2>Account and billing</h2>
      <dl class="details">
        <dt>Account</dt>
        <dd>{account.email}</dd>
        <dt>Plan</dt>
        <dd>
          {account.plan}, {money(account.price)} a month
        </dd>
        <dt>Balance</dt>
        <dd>{money(account.balance)}</dd>
        <dt>State</dt>
        <dd>{account.state === 'frozen' ? <span class="text-bad">frozen: deposit to renew the plan</span> : 'active'}</dd>
        <dt>Next charge</dt>
        <dd>{fmtDate(account.nextChargeAt)}</dd>
      </dl>
      <form
        class="inline-form"
        onSubmit={submitting(setError, async () => {
          setDeposit(undefined);
          const r = await ok(api.PUT('/api/account/plan', { body: { plan } }));
          setAccount(r.account);
          setMessage({
            kind: 'success',
            text: r.transaction ? `Plan changed; ${r.transaction.delta < 0 ? 'charged' : 'credited'} ${money(Math.abs(r.transaction.delta))} pro rata.` : 'Plan changed.',
          });
          tx.reload();
        })}
      >
        <Field label="Plan">
          {(id) => (
            <select id={id} value={plan} onChange={(e) => setPlan(e.currentTarget.value as Plan)}>
              <Options values={PLANS} />
            </select>
          )}
        </Field>
        <button type="submit" disabled={plan === account.plan}>
          Change plan
        </button>
      </form>
      <form
        class="inline-form"
        onSubmit={submitting(setError, async () => {
          setDeposit(await ok(api.POST('/api/billing/deposits', { body: { amount: Number(amount) } })));
          setAmount('');
          tx.reload();
        })}
      >
        <Field label="Deposit amount (USD)">{(id) => <input id={id} type="number" min="0.01" step="0.01" required value={amount} onInput={(e) => setAmount(e.currentTarget.value)} />}</Field>
        <button type="submit">Deposit</button>
      </form>
      {deposit ? (
        <div class="callout" role="status">
          <p>
            Deposit of {money(deposit.amount)} announced ({deposit.status}).
            {deposit.expiresAt ? ` Open until ${fmtDate(deposit.expiresAt)} (at most 5 deposits are open at once).` : null}
          </p>
          <PaymentDetails deposit={deposit} />
        </div>
      ) : null}
      <MessageNote message={message} />
      {message?.kind === 'error' ? null : <ErrorNote error={tx.error} />}
      <h3>Transactions</h3>
      <Pending of={tx} lines={2} />
      {tx.data && rows.length === 0 ? <Empty>No transactions yet.</Empty> : null}
      {rows.length ? (
        <CardTable columns={['When', 'What', 'Amount', 'State']} action="Pay">
          {rows.map((t) => (
            <tr key={t.id}>
              <td data-label="When">{fmtDate(t.createdAt)}</td>
              <td data-label="What">{t.description ?? t.kind}</td>
              <td data-label="Amount" class={t.delta < 0 ? 'text-bad' : undefined}>
                {money(t.delta !== 0 ? t.delta : t.amount)}
              </td>
              <td data-label="State">{t.status}</td>
              <td class="row-actions">
                {t.kind === 'deposit' && t.status === 'pending' && t.address ? (
                  <button type="button" class="small" onClick={() => setPaying(t)}>
                    How to pay<span class="sr-only"> the deposit of {money(t.amount)}</span>
                  </button>
                ) : null}
              </td>
            </tr>
          ))}
        </CardTable>
      ) : null}
      <LoadMore
        next={next}
        label="Load older transactions"
        load={async (before) => {
          const p = await page(api.GET('/api/billing/transactions', { params: { query: { limit: '20', before } } }));
          setMore({ items: [...(more?.items ?? []), ...p.items], next: p.next });
        }}
        onError={setError}
      />
      {paying ? (
        <Dialog title={`Deposit of ${money(paying.amount)}`} onClose={() => setPaying(undefined)}>
          <PaymentDetails deposit={paying} />
        </Dialog>
      ) : null}
    </div>
  );
}

function ApiKeys() {
  const keys = useLoad(() => ok(api.GET('/api/settings/api-keys')));
  const [name, setName] = useState('');
  const [created, setCreated] = useState<ApiKeyCreated>();
  const [deleting, setDeleting] = useState<{ id: string; name: string } | null>(null);
  const [error, setError] = useState<string>();
  return (
    <div class="panel">
      <h2>API keys</h2>
      <p class="muted">
        Send a key as the <code>x-api-key</code> header. Pro and Enterprise; at most {ACCOUNT_LIMITS.apiKeys}.
      </p>
      <form
        class="inline-form"
        onSubmit={submitting(setError, async () => {
          const k = await ok(api.POST('/api/settings/api-keys', { body: { name: name.trim() } }));
          setCreated(k);
          setName('');
          keys.reload();
        })}
      >
        <Field label="Key name">{(id) => <input id={id} value={name} required maxLength={100} onInput={(e) => setName(e.currentTarget.value)} />}</Field>
        <button type="submit">Create key</button>
      </form>
      {created ? (
        <div class="callout" role="status">
          <p>
            The key <strong>{created.name}</strong>, shown only now:
          </p>
          <Secret text={created.key} label="New API key" />
        </div>
      ) : null}
      <ErrorNote error={error ?? keys.error} />
      <Pending of={keys} lines={2} />
      {keys.data && keys.data.length === 0 ? <Empty>No API keys.</Empty> : null}
      {keys.data?.length ? (
        <CardTable columns={['Name', 'Key', 'Last used', 'Created']} action="Actions">
          {keys.data.map((k) => (
            <tr key={k.id}>
              <td data-label="Name">{k.name}</td>
              <td data-label="Key">
                <code class="nowrap">{k.keyPrefix}…</code>
              </td>
              <td data-label="Last used">{fmtDate(k.lastUsedAt)}</td>
              <td data-label="Created">{fmtDate(k.createdAt)}</td>
              <td class="row-actions">
                <button type="button" class="small danger" onClick={() => setDeleting(k)}>
                  Delete<span class="sr-only"> key {k.name}</span>
                </button>
              </td>
            </tr>
          ))}
        </CardTable>
      ) : null}
      {deleting ? (
        <Confirm
          title="Delete API key"
          message={`Delete the key ${deleting.name}? It stops working at once.`}
          action="Delete"
          onClose={() => setDeleting(null)}
          onConfirm={async () => {
            await ok(api.DELETE('/api/settings/api-keys', { params: { query: { id: deleting.id } } }));
            if (created?.id === deleting.id) setCreated(undefined);
            keys.set((list) => list?.filter((x) => x.id !== deleting.id));
          }}
        />
      ) : null}
    </div>
  );
}

function Dns({ initial }: { initial: DnsSettings }) {
  const [s, setS] = useState(initial);
  const [provider, setProvider] = useState<Provider>(initial.provider ?? 'powerdns');
  const [apiUrl, setApiUrl] = useState(initial.apiUrl ?? '');
  const [serverId, setServerId] = useState(initial.serverId ?? 'localhost');
  const [apiKey, setApiKey] = useState('');
  const [apiToken, setApiToken] = useState('');
  const [error, setError] = useState<string>();
  const [disconnecting, setDisconnecting] = useState(false);
  return (
    <div class="panel">
      <h2>DNS provider</h2>
      <p class="muted">
        For DNS failover: the domain's A/AAAA records follow its healthy servers. {s.connected ? `Connected: ${s.provider}${s.updatedAt ? `, since ${fmtDate(s.updatedAt)}` : ''}.` : 'Not connected.'}
      </p>
      {s.error ? <p class="text-bad">{s.error}</p> : null}
      <form
        class="form"
        onSubmit={submitting(setError, async () => {
          const body = provider === 'powerdns' ? { provider, apiUrl: apiUrl.trim(), serverId: serverId.trim(), apiKey } : { provider, apiToken };
          setS(await ok(api.PUT('/api/settings/dns', { body })));
          setApiKey('');
          setApiToken('');
        })}
      >
        <Field label="Provider">
          {(id) => (
            <select id={id} value={provider} onChange={(e) => setProvider(e.currentTarget.value as Provider)}>
              <Options values={PROVIDERS} text={(p) => (p === 'powerdns' ? 'PowerDNS' : 'Cloudflare')} />
            </select>
          )}
        </Field>
        {provider === 'powerdns' ? (
          <>
            <Field label="API URL" hint="The API webserver's base URL, without /api/v1">
              {(id, desc) => <input id={id} type="url" required value={apiUrl} aria-describedby={desc} onInput={(e) => setApiUrl(e.currentTarget.value)} />}
            </Field>
            <Field label="Server id">{(id) => <input id={id} required value={serverId} onInput={(e) => setServerId(e.currentTarget.value)} />}</Field>
            <Field label="API key" hint="Stored encrypted, never shown">
              {(id, desc) => <input id={id} type="password" autocomplete="off" required value={apiKey} aria-describedby={desc} onInput={(e) => setApiKey(e.currentTarget.value)} />}
            </Field>
          </>
        ) : (
          <Field label="API token" hint="Zone DNS Edit and Zone Read; stored encrypted, never shown">
            {(id, desc) => <input id={id} type="password" autocomplete="off" required value={apiToken} aria-describedby={desc} onInput={(e) => setApiToken(e.currentTarget.value)} />}
          </Field>
        )}
        <ErrorNote error={error} />
        <div class="actions">
          {s.provider ? (
            <button type="button" class="danger" onClick={() => setDisconnecting(true)}>
              Disconnect
            </button>
          ) : null}
          <button type="submit" class="primary">
            Connect
          </button>
        </div>
      </form>
      {disconnecting ? (
        <Confirm
          title="Disconnect DNS provider"
          message="Disconnect the DNS provider? Refused while a domain has DNS failover on."
          action="Disconnect"
          onClose={() => setDisconnecting(false)}
          onConfirm={async () => {
            await ok(api.DELETE('/api/settings/dns'));
            setS(await ok(api.GET('/api/settings/dns')));
          }}
        />
      ) : null}
    </div>
  );
}

function DnsPanel() {
  const dns = useLoad(() => ok(api.GET('/api/settings/dns')));
  return dns.data ? <Dns initial={dns.data} /> : <ErrorNote error={dns.error} />;
}

export function Settings({ account }: ViewProps) {
  return (
    <section>
      <PageHead title="Settings" />
      <div class="two-col">
        <Billing initial={account} />
        <div>
          <ApiKeys />
          <div class="panel">
            <h2>Export</h2>
            <p class="muted">Every domain, server and rule of the account as portable JSON, with a plain HAProxy configuration. Works while frozen.</p>
            <a class="button" href="/api/settings/export" download>
              Download export
            </a>
          </div>
          <DnsPanel />
        </div>
      </div>
    </section>
  );
}
