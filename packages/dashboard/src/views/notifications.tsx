import { useEffect, useState } from 'preact/hooks';
import { api, errorText, ok, page, type Notification, type NotificationSettings } from '../api/client';
import { subscribe } from '../api/stream';
import { CardTable, LoadMore } from '../components';
import { Empty, ErrorNote, Field, fmtDate, fmtTime, PageHead, Pending, type ViewProps, useLoad } from '../ui';

type ChannelStatus = NonNullable<NotificationSettings['webhookStatus']>;

/** How a channel's deliveries go, when not plainly well (docs/notifications.md "Failing endpoints"). */
function ChannelState({ status }: { status: ChannelStatus | null }) {
  if (!status || status.state === 'ok') return null;
  const last = status.lastError ? ` Last error: ${status.lastError}` : '';
  const text =
    status.state === 'disabled'
      ? `Disabled on ${fmtDate(status.disabledAt)}: every attempt failed for 3 days. Make the receiver work, then save to turn it back on.${last}`
      : status.state === 'paused'
        ? `Paused until ${fmtDate(status.pausedUntil)} after ${status.consecutiveFailures} failed attempts in a row; one is tried then.${last}`
        : `The last ${status.consecutiveFailures} attempt(s) failed.${last}`;
  return (
    <p role="status" class={status.state === 'failing' ? 'muted' : 'error'}>
      {text}
    </p>
  );
}

/** Whether the address is confirmed, and a new confirmation e-mail on request. */
function EmailConfirmation({ s, onChange }: { s: NotificationSettings; onChange: (s: NotificationSettings) => void }) {
  const [error, setError] = useState<string>();
  if (!s.email || s.emailConfirmed) return null;
  const resend = async () => {
    setError(undefined);
    try {
      onChange(await ok(api.POST('/api/settings/notifications/email/confirmation')));
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <div>
      <p role="status" class="muted">
        {s.email} is not confirmed: nothing is sent to it until the link of its confirmation e-mail is opened
        {s.emailConfirmationSentAt ? ` (sent ${fmtDate(s.emailConfirmationSentAt)})` : ''}.
      </p>
      <ErrorNote error={error} />
      <button type="button" onClick={() => void resend()}>
        Send a new confirmation e-mail
      </button>
    </div>
  );
}

function DeliverySettings() {
  const settings = useLoad(() => ok(api.GET('/api/settings/notifications')));
  return settings.data ? <DeliveryForm initial={settings.data} /> : <ErrorNote error={settings.error} />;
}

function DeliveryForm({ initial }: { initial: NotificationSettings }) {
  const [s, setS] = useState(initial);
  const [url, setUrl] = useState(initial.webhookUrl ?? '');
  const [secret, setSecret] = useState('');
  const [email, setEmail] = useState(initial.email ?? '');
  const [kinds, setKinds] = useState(initial.kinds.join(', '));
  const [error, setError] = useState<string>();
  const [saved, setSaved] = useState(false);
  const save = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setSaved(false);
    const kindList = kinds
      .split(',')
      .map((k) => k.trim())
      .filter(Boolean);
    try {
      const next = await ok(
        api.PUT('/api/settings/notifications', {
          body: {
            webhookUrl: url.trim() || null,
            ...(secret ? { webhookSecret: secret } : url.trim() ? {} : { webhookSecret: null }),
            email: email.trim() || null,
            kinds: kindList,
          },
        }),
      );
      setS(next);
      setSecret('');
      setSaved(true);
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <form class="form panel" onSubmit={(e) => void save(e)}>
      <h2>Delivery</h2>
      <Field label="Webhook URL" hint="Each notification is POSTed here, signed with the secret">
        {(id, desc) => <input id={id} type="url" value={url} aria-describedby={desc} placeholder="https://hooks.example.com/rampart" onInput={(e) => setUrl(e.currentTarget.value)} />}
      </Field>
      <Field label="Webhook secret" hint={s.webhookSecretSet ? 'A secret is set (never shown); type a new one to replace it' : '16 to 200 characters; required with a webhook'}>
        {(id, desc) => <input id={id} type="password" autocomplete="new-password" value={secret} aria-describedby={desc} onInput={(e) => setSecret(e.currentTarget.value)} />}
      </Field>
      <ChannelState status={s.webhookStatus} />
      <Field label="E-mail address" hint="A new address gets a confirmation e-mail first">
        {(id, desc) => <input id={id} type="email" value={email} aria-describedby={desc} onInput={(e) => setEmail(e.currentTarget.value)} />}
      </Field>
      <ChannelState status={s.emailStatus} />
      <EmailConfirmation s={s} onChange={setS} />
      <Field label="Kinds" hint="Comma-separated notification kinds to deliver; empty: every kind">
        {(id, desc) => <input id={id} value={kinds} aria-describedby={desc} onInput={(e) => setKinds(e.currentTarget.value)} />}
      </Field>
      <ErrorNote error={error} />
      {saved ? (
        <p role="status" class="success">
          Saved.
        </p>
      ) : null}
      <div class="actions">
        <button type="submit" class="primary">
          Save delivery settings
        </button>
      </div>
    </form>
  );
}

function DeliveryLog() {
  const log = useLoad(() => page(api.GET('/api/notifications/deliveries', { params: { query: { limit: '20' } } })));
  return (
    <div class="panel">
      <h2>Delivery log</h2>
      <ErrorNote error={log.error} />
      <Pending of={log} lines={2} />
      {log.data && log.data.items.length === 0 ? <Empty>Nothing delivered yet.</Empty> : null}
      {log.data?.items.length ? (
        <CardTable columns={['When', 'Kind', 'To', 'State']}>
          {log.data.items.map((d) => (
            <tr key={d.id}>
              <td data-label="When">{fmtDate(d.createdAt)}</td>
              <td data-label="Kind">{d.kind}</td>
              <td data-label="To" class="wrap">
                {d.channel}: {d.target}
              </td>
              <td data-label="State">
                {d.status === 'delivered' ? 'delivered' : d.status === 'pending' ? `pending (${d.attempts} attempts)` : 'given up'}
                {d.lastError ? <small class="text-bad block">{d.lastError}</small> : null}
              </td>
            </tr>
          ))}
        </CardTable>
      ) : null}
    </div>
  );
}

export function Notifications({ onUnreadChange }: ViewProps) {
  const first = useLoad(() => page(api.GET('/api/notifications')));
  const [items, setItems] = useState<Notification[]>([]);
  const [next, setNext] = useState<string>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    if (first.data) {
      setItems(first.data.items);
      setNext(first.data.next);
    }
  }, [first.data]);
  useEffect(() => subscribe('notification', (n) => setItems((list) => [n, ...list.filter((x) => x.id !== n.id)])), []);
  useEffect(() => subscribe('resync', first.reload), []);
  const markRead = async (ids: string[]) => {
    setError(undefined);
    try {
      const r = await ok(api.POST('/api/notifications/read', { body: { ids } }));
      setItems((list) => list.map((n) => (ids.includes(n.id) ? { ...n, read: true } : n)));
      onUnreadChange(-r.marked);
    } catch (err) {
      setError(errorText(err));
    }
  };
  const unread = items.filter((n) => !n.read);
  return (
    <section>
      <PageHead title="Notifications">
        <button type="button" disabled={unread.length === 0} onClick={() => void markRead(unread.slice(0, 200).map((n) => n.id))}>
          Mark all read
        </button>
      </PageHead>
      <ErrorNote error={first.error ?? error} />
      <Pending of={first} />
      {first.data && items.length === 0 ? <Empty>No notifications. Server errors, certificate problems and billing events show up here.</Empty> : null}
      <ul class="notes">
        {items.map((n) => (
          <li key={n.id} class={n.read ? 'note' : 'note unread'}>
            <div class="note-head">
              {n.read ? null : <span class="badge warn">new</span>}
              <strong>{n.kind.replace(/_/g, ' ')}</strong>
              <span class="muted">
                {fmtTime(n.updatedAt)}
                {n.count > 1 ? ` · ${n.count} times` : ''}
              </span>
            </div>
            <p>{n.message}</p>
            {n.read ? null : (
              <button type="button" class="small" onClick={() => void markRead([n.id])}>
                Mark read
              </button>
            )}
          </li>
        ))}
      </ul>
      <LoadMore
        next={next}
        label="Load older notifications"
        onError={(err) => err !== undefined && setError(err)}
        load={async (before) => {
          const p = await page(api.GET('/api/notifications', { params: { query: { before } } }));
          setItems((list) => [...list, ...p.items]);
          setNext(p.next);
        }}
      />
      <div class="two-col">
        <DeliverySettings />
        <DeliveryLog />
      </div>
    </section>
  );
}
