import { WAF_REASONS } from '@rampart/protocol';
import { useEffect, useRef, useState } from 'preact/hooks';
import { pointSeconds, STATUS_CLASSES, type Analytics } from '../api/analytics';
import { bytes, count, countryName, Empty, reasonText, Skeleton } from '../ui';

// Charts and top lists of GET /api/analytics, shared by Overview and Analytics.

const STATUS_COLORS: Record<string, string> = { '1xx': '#64748b', '2xx': '#16a34a', '3xx': '#2563eb', '4xx': '#d97706', '5xx': '#dc2626', other: '#9333ea' };
const REASON_COLORS = ['#dc2626', '#ea580c', '#d97706', '#ca8a04', '#65a30d', '#0d9488', '#0891b2', '#2563eb', '#7c3aed', '#c026d3', '#db2777', '#475569', '#854d0e', '#166534'];

function Chart(props: { title: string; times: number[]; series: { label: string; values: number[]; color: string }[] }) {
  const ref = useRef<HTMLDivElement>(null);
  const [failed, setFailed] = useState(false);
  useEffect(() => {
    let stop: (() => void) | undefined;
    let alive = true;
    import('./chart').then(
      ({ drawChart }) => {
        if (alive && ref.current) stop = drawChart(ref.current, { ...props, width: ref.current.clientWidth || 600 });
      },
      () => setFailed(true),
    );
    return () => {
      alive = false;
      stop?.();
    };
  }, [props.times, props.series]);
  return (
    <figure class="chart">
      <div ref={ref} role="img" aria-label={`${props.title}: ${props.series.map((s) => `${s.label} ${count(s.values.reduce((a, b) => a + b, 0))}`).join(', ')}`} />
      {failed ? <figcaption>The chart could not be loaded.</figcaption> : null}
    </figure>
  );
}

function Top<T>(props: { title: string; rows: T[]; label: (r: T) => string; value: (r: T) => number }) {
  return (
    <div class="top">
      <h3>{props.title}</h3>
      {props.rows.length === 0 ? (
        <p class="muted">None</p>
      ) : (
        <ol>
          {props.rows.slice(0, 10).map((r, i) => (
            <li key={i}>
              <span class="top-label">{props.label(r)}</span> <span class="top-count">{count(props.value(r))}</span>
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}

export function Traffic({ data, ruleName }: { data: Analytics | null | undefined; ruleName?: (id: string) => string }) {
  if (data === undefined) return <Skeleton lines={2} />;
  if (data === null) return <Empty>Traffic analytics are not available on this control plane yet: charts appear once it collects them from the agents.</Empty>;
  const times = data.series.map((p) => pointSeconds(p.t));
  const total = data.series.reduce((a, p) => a + p.requests, 0);
  const blocked = data.series.reduce((a, p) => a + Object.values(p.blocked).reduce((x, y) => x + y, 0), 0);
  const bytesOut = data.series.reduce((a, p) => a + p.bytes_out, 0);
  const statusSeries = [
    { label: 'requests', values: data.series.map((p) => p.requests), color: '#0f766e' },
    ...STATUS_CLASSES.filter((c) => data.series.some((p) => (p.status[c] ?? 0) > 0)).map((c) => ({ label: c, values: data.series.map((p) => p.status[c] ?? 0), color: STATUS_COLORS[c]! })),
  ];
  const reasons = WAF_REASONS.filter((r) => data.series.some((p) => (p.blocked[r] ?? 0) > 0));
  const blockSeries = reasons.map((r) => ({ label: reasonText(r), values: data.series.map((p) => p.blocked[r] ?? 0), color: REASON_COLORS[WAF_REASONS.indexOf(r) % REASON_COLORS.length]! }));
  return (
    <div class="traffic">
      <div class="stats">
        <div class="stat">
          <span class="stat-value">{count(total)}</span>
          <span class="stat-label">requests</span>
        </div>
        <div class="stat">
          <span class="stat-value">{count(blocked)}</span>
          <span class="stat-label">blocked</span>
        </div>
        <div class="stat">
          <span class="stat-value">{bytes(bytesOut)}</span>
          <span class="stat-label">served</span>
        </div>
      </div>
      {total === 0 ? (
        <Empty>No traffic yet: charts appear once a shield server has served requests in this period.</Empty>
      ) : (
        <div class="charts">
          <Chart title="Requests by status" times={times} series={statusSeries} />
          {blockSeries.length ? <Chart title="Blocked by reason" times={times} series={blockSeries} /> : <p class="muted">Nothing blocked in this period.</p>}
        </div>
      )}
      <div class="tops">
        <Top title="Top addresses" rows={data.top.ips} label={(r) => r.ip} value={(r) => r.count} />
        <Top title="Top paths" rows={data.top.paths} label={(r) => r.path} value={(r) => r.count} />
        <Top title="Top countries" rows={data.top.countries} label={(r) => `${countryName(r.country)} (${r.country})`} value={(r) => r.count} />
        <Top title="Top rules" rows={data.top.rules} label={(r) => (ruleName ? ruleName(r.rule_id) : r.rule_id)} value={(r) => r.count} />
      </div>
    </div>
  );
}
