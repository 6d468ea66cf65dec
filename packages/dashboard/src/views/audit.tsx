import { useEffect, useState } from 'preact/hooks';
import { api, page, type AuditEntry } from '../api/client';
import { CardTable, LoadMore, Options } from '../components';
import { Empty, ErrorNote, Field, fmtTime, PageHead, Pending, type ViewProps, useLoad } from '../ui';

// The audit log (GET /api/audit): who changed what, newest first, in pages. Read only.

const OBJECT_TYPES = ['server', 'domain', 'waf_rule', 'custom_rule', 'waf_settings', 'notification_settings', 'dns_settings', 'api_key', 'account', 'deposit', 'transaction'] as const;

interface Filters {
  objectType: string;
  action: string;
  actor: string;
  since: string;
  until: string;
}
const NO_FILTERS: Filters = { objectType: '', action: '', actor: '', since: '', until: '' };

function query(f: Filters, before?: string) {
  const q: Record<string, string> = {};
  if (f.objectType) q.objectType = f.objectType;
  if (f.action.trim()) q.action = f.action.trim();
  if (f.actor.trim()) q.actor = f.actor.trim();
  if (f.since) q.since = new Date(f.since).toISOString();
  if (f.until) q.until = new Date(f.until).toISOString();
  if (before) q.before = before;
  return q;
}

/** Who made a change, as a line of text: the key's name and prefix, the user's e-mail, or the operator. */
export function actorText(a: AuditEntry['actor']): string {
  if (a.type === 'api_key') return `API key ${a.name ?? '(deleted)'} (${a.keyPrefix ?? '?'}…)`;
  if (a.type === 'user') return a.name ?? 'Signed-in user';
  return a.type === 'operator' ? 'Operator' : 'System';
}

const objectText = (t: string) => t.replace(/_/g, ' ');
const valueText = (v: unknown) => (v === undefined ? '—' : typeof v === 'string' ? v : JSON.stringify(v));

/** Each changed field: before → after (created objects show what they were created with). */
export function changeText(e: AuditEntry): string[] {
  return e.changed.map((field) => {
    const before = e.before ? valueText(e.before[field]) : undefined;
    const after = e.after ? valueText(e.after[field]) : undefined;
    if (before === undefined) return `${field}: ${after}`;
    if (after === undefined) return `${field}: ${before} (removed)`;
    return `${field}: ${before} → ${after}`;
  });
}

export function Audit(_: ViewProps) {
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const [form, setForm] = useState<Filters>(NO_FILTERS);
  const [more, setMore] = useState<{ items: AuditEntry[]; next: string | undefined }>({ items: [], next: undefined });
  const [moreError, setMoreError] = useState<string>();
  const entries = useLoad(() => page(api.GET('/api/audit', { params: { query: query(filters) } })), [filters]);
  useEffect(() => setMore({ items: [], next: undefined }), [filters]);
  const list = [...(entries.data?.items ?? []), ...more.items];
  const next = more.next ?? (more.items.length ? undefined : entries.data?.next);
  return (
    <section>
      <PageHead title="Audit log">
        <button type="button" onClick={() => entries.reload()}>
          Refresh
        </button>
      </PageHead>
      <form
        class="filters"
        aria-label="Filter the audit log"
        onSubmit={(e) => {
          e.preventDefault();
          setFilters({ ...form });
        }}
      >
        <Field label="Object">
          {(id) => (
            <select id={id} value={form.objectType} onChange={(e) => setForm({ ...form, objectType: e.currentTarget.value })}>
              <option value="">All objects</option>
              <Options values={OBJECT_TYPES} text={objectText} />
            </select>
          )}
        </Field>
        <Field label="Action">{(id) => <input id={id} value={form.action} placeholder="create, update, delete…" onInput={(e) => setForm({ ...form, action: e.currentTarget.value })} />}</Field>
        <Field label="Who">{(id) => <input id={id} value={form.actor} placeholder="e-mail, key name or prefix" onInput={(e) => setForm({ ...form, actor: e.currentTarget.value })} />}</Field>
        <Field label="Since">{(id) => <input id={id} type="datetime-local" value={form.since} onInput={(e) => setForm({ ...form, since: e.currentTarget.value })} />}</Field>
        <Field label="Until">{(id) => <input id={id} type="datetime-local" value={form.until} onInput={(e) => setForm({ ...form, until: e.currentTarget.value })} />}</Field>
        <div class="filter-actions">
          <button type="submit">Apply</button>
          <button type="button" class="ghost" onClick={() => (setForm(NO_FILTERS), setFilters(NO_FILTERS))}>
            Clear
          </button>
        </div>
      </form>
      <ErrorNote error={entries.error ?? moreError} />
      <Pending of={entries} />
      {entries.data && list.length === 0 ? <Empty>No changes{filters === NO_FILTERS ? ' in the 90 days kept' : ' match these filters'}.</Empty> : null}
      {list.length ? (
        <CardTable class="audit" columns={['Time', 'Who', 'Object', 'Action', 'Changes']}>
          {list.map((e) => (
            <tr key={e.id}>
              <td data-label="Time">{fmtTime(e.at)}</td>
              <td data-label="Who">{actorText(e.actor)}</td>
              <td data-label="Object">
                {objectText(e.objectType)}
                {e.objectId ? <code class="muted"> {e.objectId.slice(0, 8)}</code> : null}
              </td>
              <td data-label="Action">{e.action}</td>
              <td data-label="Changes" class="wrap">
                {changeText(e).map((line) => (
                  <div key={line}>{line}</div>
                ))}
              </td>
            </tr>
          ))}
        </CardTable>
      ) : null}
      <LoadMore
        next={next}
        label="Load older changes"
        onError={setMoreError}
        load={async (before) => {
          const p = await page(api.GET('/api/audit', { params: { query: query(filters, before) } }));
          setMore({ items: [...more.items, ...p.items], next: p.next });
        }}
      />
    </section>
  );
}
