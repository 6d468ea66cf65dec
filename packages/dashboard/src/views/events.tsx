import { checkRuleValue, WAF_DETECTORS, WAF_REASONS } from '@rampart/protocol';
import { useEffect, useState } from 'preact/hooks';
import { api, errorText, ok, page, type Domain, type WafEvent } from '../api/client';
import { isLive, subscribe } from '../api/stream';
import { CardTable, LoadMore, Options } from '../components';
import { Dialog, Empty, ErrorNote, Field, fmtDate, fmtTime, PageHead, Pending, reasonText, type ViewProps, useLoad } from '../ui';

interface Filters {
  domain: string;
  reason: string;
  ip: string;
  since: string;
  until: string;
  requestId: string;
}
const NO_FILTERS: Filters = { domain: '', reason: '', ip: '', since: '', until: '', requestId: '' };

function query(f: Filters, before?: string) {
  const q: Record<string, string> = {};
  if (f.domain) q.domain = f.domain;
  if (f.reason) q.reason = f.reason;
  if (f.ip.trim()) q.ip = f.ip.trim();
  if (f.since) q.since = new Date(f.since).toISOString();
  if (f.until) q.until = new Date(f.until).toISOString();
  if (f.requestId.trim()) q.requestId = f.requestId.trim();
  if (before) q.before = before;
  return q;
}

function matches(e: WafEvent, f: Filters): boolean {
  if (f.domain && e.domain.toLowerCase() !== f.domain.toLowerCase()) return false;
  if (f.reason && e.reason !== f.reason) return false;
  if (f.ip.trim() && e.source_ip !== f.ip.trim()) return false;
  if (f.until) return false; // a bounded window: new events are after it
  if (f.requestId.trim()) return false; // one event, already listed
  return true;
}

/**
 * The request as an event shows it: method, path and the query excerpt as sent
 * (GET /articles?q=%3Cscript%3E, credential-like values redacted by the agent). An event from an
 * agent that sends no query shows the query as far as a detector matched in it. Text only, never HTML.
 */
export function requestText(e: WafEvent): string {
  const name = e.location?.startsWith('query:') ? e.location.slice('query:'.length) : undefined;
  const query = e.query ? `?${e.query}` : name !== undefined && e.matched ? `?${name}=${e.matched}` : '';
  return `${e.method ?? ''} ${e.domain}${e.path ?? ''}${query}`.trim();
}

/** Blocked, or logged and not blocked (a detection in detect mode, a challenge page served). */
export function actionText(e: WafEvent): string {
  if (e.blocked) return 'Blocked';
  return e.reason === 'bot_challenge' ? 'Logged (challenge shown)' : 'Logged (let through)';
}

/** The detector of a detection reason (sqli_detected -> sqli, upload_blocked -> upload), if it is one. */
export function detectorOf(reason: string): string | undefined {
  const name = reason.replace(/_(detected|blocked)$/, '');
  return (WAF_DETECTORS as readonly string[]).includes(name) ? name : undefined;
}

/** The narrowest waf_exception for an event: its path, location and detector. Undefined when the event is not a detection. */
export function exceptionFor(e: WafEvent): string | undefined {
  const detector = detectorOf(e.reason);
  if (!detector || !e.path) return undefined;
  const path = e.path.split('?')[0]!;
  const value = JSON.stringify({ path, ...(e.location ? { location: e.location } : {}), detector });
  const checked = checkRuleValue('waf_exception', value);
  return checked.ok ? checked.value : undefined;
}

function EventDetail(props: { event: WafEvent; domains: Domain[]; onClose: () => void }) {
  const e = props.event;
  const [done, setDone] = useState<string>();
  const [error, setError] = useState<string>();
  const exception = exceptionFor(e);
  const domain = props.domains.find((d) => d.domain.toLowerCase() === e.domain.toLowerCase());
  const act = async (what: 'exception' | 'block') => {
    setError(undefined);
    try {
      if (what === 'exception' && exception && domain) {
        await ok(api.POST('/api/waf', { body: { rule_type: 'waf_exception', value: exception, domain_id: domain.id } }));
        setDone(`Exception added: ${detectorOf(e.reason)} is off in ${e.location ?? 'any location'} under ${e.path?.split('?')[0]} on ${domain.domain}.`);
      } else {
        await ok(api.POST('/api/waf', { body: { rule_type: 'block_ip', value: e.source_ip } }));
        setDone(`${e.source_ip} is blocked on every domain.`);
      }
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <Dialog title="Event" onClose={props.onClose} wide>
      <dl class="details">
        <dt>When</dt>
        <dd>
          {fmtDate(e.timestamp)}
          {e.count > 1 ? ` (${e.count} times, last ${fmtDate(e.last_seen_at)})` : ''}
        </dd>
        <dt>Reason</dt>
        <dd>
          {reasonText(e.reason)} <code>{e.reason}</code>
        </dd>
        <dt>Action</dt>
        <dd>{e.blocked ? 'Blocked' : <span class="badge warn">{actionText(e)}</span>}</dd>
        <dt>Source</dt>
        <dd>
          <code>{e.source_ip}</code>
        </dd>
        <dt>Request</dt>
        <dd>
          <code>{requestText(e) || '—'}</code>
        </dd>
        <dt>Request id</dt>
        <dd>
          {e.request_id ? <code>{e.request_id}</code> : '—'}
          {e.count > 1 ? <span class="muted"> (the first; the ids of the first 32 occurrences find this event)</span> : null}
        </dd>
        <dt>Field</dt>
        <dd>{e.location ? <code>{e.location}</code> : '—'}</dd>
        <dt>Excerpt</dt>
        <dd>{e.matched ? <code class="excerpt">{e.matched}</code> : '—'}</dd>
        <dt>Rule</dt>
        <dd>
          {e.ruleName ? <strong>{e.ruleName} </strong> : null}
          {e.rule_id ? <code>{e.rule_id}</code> : '—'}
        </dd>
      </dl>
      {done ? (
        <p role="status" class="success">
          {done}
        </p>
      ) : null}
      <ErrorNote error={error} />
      <div class="actions">
        {exception && domain ? (
          <button type="button" disabled={!!done} onClick={() => void act('exception')}>
            Add exception
          </button>
        ) : null}
        <button type="button" class="danger" disabled={!!done} onClick={() => void act('block')}>
          Block {e.source_ip}
        </button>
        <button type="button" class="primary" onClick={props.onClose}>
          Close
        </button>
      </div>
    </Dialog>
  );
}

export function Events(_: ViewProps) {
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const [form, setForm] = useState<Filters>(NO_FILTERS);
  const [more, setMore] = useState<{ items: WafEvent[]; next: string | undefined }>({ items: [], next: undefined });
  const [live, setLive] = useState(isLive());
  const [fresh, setFresh] = useState<WafEvent[]>([]);
  const [open, setOpen] = useState<WafEvent | null>(null);
  const [moreError, setMoreError] = useState<string>();
  const domains = useLoad(() => ok(api.GET('/api/domains')));
  const events = useLoad(() => page(api.GET('/api/waf/events', { params: { query: query(filters) } })), [filters]);
  useEffect(() => {
    setFresh([]);
    setMore({ items: [], next: undefined });
  }, [filters]);
  useEffect(() => subscribe('state', setLive), []);
  useEffect(() => subscribe('resync', () => (setFresh([]), events.reload())), []);
  useEffect(
    () =>
      subscribe('waf_event', (e) => {
        if (matches(e, filters)) setFresh((list) => [e, ...list.filter((x) => x.id !== e.id)]);
      }),
    [filters],
  );
  const seen = new Set<string>();
  const list = [...fresh, ...(events.data?.items ?? []), ...more.items].filter((e) => !seen.has(e.id) && seen.add(e.id));
  const next = more.next ?? (more.items.length ? undefined : events.data?.next);
  return (
    <section>
      <PageHead title="Events">
        <span class={live ? 'live on' : 'live'} role="status">
          {live ? 'Live' : 'Not live'}
        </span>
        <button type="button" onClick={() => (setFresh([]), events.reload())}>
          Refresh
        </button>
      </PageHead>
      <form
        class="filters"
        aria-label="Filter events"
        onSubmit={(e) => {
          e.preventDefault();
          setFilters({ ...form });
        }}
      >
        <Field label="Domain">
          {(id) => (
            <select id={id} value={form.domain} onChange={(e) => setForm({ ...form, domain: e.currentTarget.value })}>
              <option value="">All domains</option>
              {(domains.data ?? []).map((d) => (
                <option key={d.id} value={d.domain}>
                  {d.domain}
                </option>
              ))}
            </select>
          )}
        </Field>
        <Field label="Reason">
          {(id) => (
            <select id={id} value={form.reason} onChange={(e) => setForm({ ...form, reason: e.currentTarget.value })}>
              <option value="">All reasons</option>
              <Options values={WAF_REASONS} text={reasonText} />
            </select>
          )}
        </Field>
        <Field label="Source IP">{(id) => <input id={id} value={form.ip} onInput={(e) => setForm({ ...form, ip: e.currentTarget.value })} />}</Field>
        <Field label="Since">{(id) => <input id={id} type="datetime-local" value={form.since} onInput={(e) => setForm({ ...form, since: e.currentTarget.value })} />}</Field>
        <Field label="Until">{(id) => <input id={id} type="datetime-local" value={form.until} onInput={(e) => setForm({ ...form, until: e.currentTarget.value })} />}</Field>
        <Field label="Request id">{(id) => <input id={id} value={form.requestId} maxLength={64} onInput={(e) => setForm({ ...form, requestId: e.currentTarget.value })} />}</Field>
        <div class="filter-actions">
          <button type="submit">Apply</button>
          <button type="button" class="ghost" onClick={() => (setForm(NO_FILTERS), setFilters(NO_FILTERS))}>
            Clear
          </button>
        </div>
      </form>
      <ErrorNote error={events.error ?? moreError} />
      <Pending of={events} />
      {events.data && list.length === 0 ? <Empty>No events{filters === NO_FILTERS ? ' in the 7 days kept' : ' match these filters'}.</Empty> : null}
      {list.length ? (
        <CardTable class="events" columns={['Time', 'Reason', 'Source', 'Request', 'Field', 'Action']} action="Details">
          {list.map((e) => (
            <tr key={e.id}>
              <td data-label="Time">
                {fmtTime(e.timestamp)}
                {e.count > 1 ? <span class="muted"> ×{e.count}</span> : null}
              </td>
              <td data-label="Reason">{reasonText(e.reason)}</td>
              <td data-label="Source">
                <code>{e.source_ip}</code>
              </td>
              <td data-label="Request" class="wrap">
                {requestText(e)}
              </td>
              <td data-label="Field">{e.location ? <code>{e.location}</code> : '—'}</td>
              <td data-label="Action">{e.blocked ? 'Blocked' : <span class="badge warn">{actionText(e)}</span>}</td>
              <td class="row-actions">
                <button type="button" class="small" onClick={() => setOpen(e)}>
                  Details
                  <span class="sr-only">
                    {' '}
                    of {reasonText(e.reason)} from {e.source_ip}
                  </span>
                </button>
              </td>
            </tr>
          ))}
        </CardTable>
      ) : null}
      <LoadMore
        next={next}
        label="Load older events"
        onError={setMoreError}
        load={async (before) => {
          const p = await page(api.GET('/api/waf/events', { params: { query: query(filters, before) } }));
          setMore({ items: [...more.items, ...p.items], next: p.next });
        }}
      />
      {open ? <EventDetail event={open} domains={domains.data ?? []} onClose={() => setOpen(null)} /> : null}
    </section>
  );
}
