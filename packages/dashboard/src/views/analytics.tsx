import { useState } from 'preact/hooks';
import { fetchAnalytics, RANGES, type RangeId } from '../api/analytics';
import { api, ok } from '../api/client';
import { ErrorNote, Field, PageHead, useLoad, type ViewProps } from '../ui';
import { Traffic } from './traffic';

export function Analytics(_: ViewProps) {
  const [domain, setDomain] = useState('');
  const [range, setRange] = useState<RangeId>('24h');
  const domains = useLoad(() => ok(api.GET('/api/domains')));
  const data = useLoad(() => fetchAnalytics(domain, range), [domain, range]);
  return (
    <section>
      <PageHead title="Analytics" />
      <div class="filters">
        <Field label="Domain">
          {(id) => (
            <select id={id} value={domain} onChange={(e) => setDomain(e.currentTarget.value)}>
              <option value="">All domains</option>
              {(domains.data ?? []).map((d) => (
                <option key={d.id} value={d.id}>
                  {d.domain}
                </option>
              ))}
            </select>
          )}
        </Field>
        <Field label="Period">
          {(id) => (
            <select id={id} value={range} onChange={(e) => setRange(e.currentTarget.value as RangeId)}>
              {RANGES.map((r) => (
                <option key={r.id} value={r.id}>
                  {r.label}
                </option>
              ))}
            </select>
          )}
        </Field>
      </div>
      <ErrorNote error={data.error} />
      {data.error ? null : <Traffic data={data.loading && data.data === undefined ? undefined : (data.data ?? null)} />}
    </section>
  );
}
