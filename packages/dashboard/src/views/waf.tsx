import type { RuleType } from '@rampart/protocol';
import { useState } from 'preact/hooks';
import { api, errorText, ok, type Rule } from '../api/client';
import { CardTable } from '../components';
import { Confirm, Empty, ErrorNote, fmtDate, PageHead, Pending, type ViewProps, useLoad } from '../ui';
import { RULE_TYPE_LABELS, RuleForm, ruleValueText } from './rule-form';

function RuleTable(props: { rules: Rule[]; domainName: (id: string | null) => string; onEdit: (r: Rule) => void; onDelete: (r: Rule) => void; onToggle: (r: Rule) => void; caption: string }) {
  return (
    <CardTable caption={props.caption} columns={['Rule', 'Value', 'Scope', 'Priority', 'On']} action="Actions">
      {props.rules.map((r) => {
        const label = `${RULE_TYPE_LABELS[r.rule_type as RuleType] ?? r.rule_type}: ${ruleValueText(r.rule_type, r.value)}`;
        return (
          <tr key={r.id} class={r.enabled ? undefined : 'disabled'}>
            <td data-label="Rule">{RULE_TYPE_LABELS[r.rule_type as RuleType] ?? r.rule_type}</td>
            <td data-label="Value">{ruleValueText(r.rule_type, r.value)}</td>
            <td data-label="Scope">{props.domainName(r.domain_id)}</td>
            <td data-label="Priority">{r.priority}</td>
            <td data-label="On">
              <input type="checkbox" role="switch" class="switch" checked={r.enabled} aria-label={`Enabled: ${label}`} onChange={() => props.onToggle(r)} />
            </td>
            <td class="row-actions">
              <button type="button" class="small" onClick={() => props.onEdit(r)}>
                Edit<span class="sr-only"> {label}</span>
              </button>
              <button type="button" class="small danger" onClick={() => props.onDelete(r)}>
                Delete<span class="sr-only"> {label}</span>
              </button>
            </td>
          </tr>
        );
      })}
    </CardTable>
  );
}

export function Waf(_: ViewProps) {
  const rules = useLoad(() => ok(api.GET('/api/waf')));
  const domains = useLoad(() => ok(api.GET('/api/domains')));
  const aiBots = useLoad(() => ok(api.GET('/api/waf/ai-bots')));
  const [editing, setEditing] = useState<{ rule?: Rule; type?: RuleType } | null>(null);
  const [deleting, setDeleting] = useState<Rule | null>(null);
  const [error, setError] = useState<string>();
  const [rotated, setRotated] = useState<string>();
  const domainName = (id: string | null) => (id === null ? 'Global' : (domains.data?.find((d) => d.id === id)?.domain ?? 'a deleted domain'));
  const replace = (saved: Rule) =>
    rules.set((list) => {
      const next = list?.some((x) => x.id === saved.id) ? list.map((x) => (x.id === saved.id ? saved : x)) : [...(list ?? []), saved];
      return next.sort((a, b) => a.priority - b.priority);
    });
  const all = rules.data ?? [];
  const main = all.filter((r) => r.rule_type !== 'waf_exception');
  const exceptions = all.filter((r) => r.rule_type === 'waf_exception');
  const onToggle = async (r: Rule) => {
    setError(undefined);
    try {
      replace(await ok(api.PUT('/api/waf/{id}', { params: { path: { id: r.id } }, body: { enabled: !r.enabled } })));
    } catch (err) {
      setError(errorText(err));
    }
  };
  const rotateBotKey = async () => {
    setError(undefined);
    try {
      const r = await ok(api.POST('/api/waf/bot-secret/rotate'));
      setRotated(`Rotated: key ${r.key_id} signs from now on${r.previous_valid_until ? `; the previous one is accepted until ${fmtDate(r.previous_valid_until)}` : ''}.`);
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <section>
      <PageHead title="WAF">
        <button type="button" class="primary" onClick={() => setEditing({})}>
          Add rule
        </button>
      </PageHead>
      <ErrorNote error={rules.error ?? error} />
      <h2>Rules</h2>
      <Pending of={rules} />
      {rules.data && main.length === 0 ? <Empty>No rules yet. Rules block addresses, countries and crawlers, limit request rates and turn bot protection on.</Empty> : null}
      {main.length ? <RuleTable caption="Rules" rules={main} domainName={domainName} onEdit={(r) => setEditing({ rule: r })} onDelete={setDeleting} onToggle={(r) => void onToggle(r)} /> : null}
      <div class="section-head">
        <h2>Exceptions</h2>
        <button type="button" class="small" onClick={() => setEditing({ type: 'waf_exception' })}>
          Add exception
        </button>
      </div>
      <p class="muted">An exception turns one attack detector off for one field of one path of a domain. Events offer the narrowest one for a false positive.</p>
      {rules.data && exceptions.length === 0 ? <Empty>No exceptions.</Empty> : null}
      {exceptions.length ? (
        <RuleTable caption="Exceptions" rules={exceptions} domainName={domainName} onEdit={(r) => setEditing({ rule: r })} onDelete={setDeleting} onToggle={(r) => void onToggle(r)} />
      ) : null}
      <h2>Bot protection key</h2>
      <p class="muted">Signs challenges and pass cookies. It rotates on a schedule; rotate it now if it may have leaked. Visitors who already passed are not challenged again.</p>
      <button type="button" onClick={() => void rotateBotKey()}>
        Rotate bot key
      </button>
      {rotated ? (
        <p role="status" class="success">
          {rotated}
        </p>
      ) : null}
      {editing && domains.data && aiBots.data ? (
        <RuleForm rule={editing.rule} initialType={editing.type} domains={domains.data} aiBots={aiBots.data} onSaved={replace} onClose={() => setEditing(null)} />
      ) : null}
      {deleting ? (
        <Confirm
          title="Delete rule"
          message={`Delete the rule ${RULE_TYPE_LABELS[deleting.rule_type as RuleType] ?? deleting.rule_type}: ${ruleValueText(deleting.rule_type, deleting.value)}?`}
          action="Delete"
          onClose={() => setDeleting(null)}
          onConfirm={async () => {
            await ok(api.DELETE('/api/waf/{id}', { params: { path: { id: deleting.id } } }));
            rules.set((list) => list?.filter((x) => x.id !== deleting.id));
          }}
        />
      ) : null}
    </section>
  );
}
