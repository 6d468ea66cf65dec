import { fetchAnalytics } from '../api/analytics';
import { api, ok } from '../api/client';
import { count, ErrorNote, money, PageHead, useLoad, type ViewProps } from '../ui';
import { connectionText, revisionText } from './servers';
import { Traffic } from './traffic';

export function Overview({ account }: ViewProps) {
  const domains = useLoad(() => ok(api.GET('/api/domains')));
  const servers = useLoad(() => ok(api.GET('/api/servers')));
  const rules = useLoad(() => ok(api.GET('/api/waf')));
  const traffic = useLoad(() => fetchAnalytics('', '24h'));
  const live = (servers.data ?? []).filter((s) => s.status !== 'decommissioned');
  const online = live.filter((s) => connectionText(s).text === 'online').length;
  const behind = live.filter((s) => revisionText(s).tone === 'warn').length;
  const certErrors = (domains.data ?? []).filter((d) => d.sslStatus === 'error').length;
  const ruleName = (id: string) => {
    const r = rules.data?.find((x) => x.id === id);
    return r ? `${r.rule_type} ${r.value}` : id;
  };
  return (
    <section>
      <PageHead title="Overview" />
      <ErrorNote error={domains.error ?? servers.error ?? rules.error} />
      <div class="stats">
        <a class="stat" href="#/domains">
          <span class="stat-value">{domains.data ? count(domains.data.length) : '…'}</span>
          <span class="stat-label">domains{certErrors ? `, ${certErrors} with a certificate error` : ''}</span>
        </a>
        <a class="stat" href="#/servers">
          <span class="stat-value">{servers.data ? `${online}/${live.length}` : '…'}</span>
          <span class="stat-label">servers online{behind ? `, ${behind} applying` : ''}</span>
        </a>
        <a class="stat" href="#/waf">
          <span class="stat-value">{rules.data ? count(rules.data.filter((r) => r.enabled).length) : '…'}</span>
          <span class="stat-label">rules on</span>
        </a>
        <a class="stat" href="#/settings">
          <span class="stat-value">{money(account.balance)}</span>
          <span class="stat-label">
            balance, {account.plan} plan{account.state === 'frozen' ? ' (frozen)' : ''}
          </span>
        </a>
      </div>
      <h2>Traffic, last 24 hours</h2>
      <ErrorNote error={traffic.error} />
      {traffic.error ? null : <Traffic data={traffic.loading && traffic.data === undefined ? undefined : (traffic.data ?? null)} ruleName={ruleName} />}
    </section>
  );
}
