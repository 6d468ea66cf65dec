import { CUSTOM_RULE_NAME_MAX, CUSTOM_RULE_ACTIONS, parseRuleExpression, rateLimitProblem, RULE_LIMITS, RULE_RATE_LIMITS, type CustomRuleAction, type RuleRateLimit } from '@rampart/protocol';
import { useEffect, useState } from 'preact/hooks';
import { api, errorText, ok, type CustomRule, type CustomRuleBody, type Domain } from '../api/client';
import { CardTable, Options, SaveCancel } from '../components';
import { Confirm, count, Dialog, Empty, ErrorNote, Field, PageHead, Pending, Switch, type ViewProps, useLoad } from '../ui';
import {
  BUILDER_FIELDS,
  BUILDER_OP_LABELS,
  fitRow,
  fnAllowed,
  isKeyed,
  moveRule,
  newRow,
  OPS_BY_TYPE,
  rowType,
  rowsFromText,
  rowsToText,
  runOrder,
  splitAt,
  type BuilderFn,
  type BuilderRow,
} from './rule-builder';

// Custom rules (/api/rules, docs/rules.md): the account's rules in run order, or one domain's
// (its own and the account-wide ones) at #/rules?domain=<id>; the editor has a builder and the
// expression text side by side, checked as you type by the parser the server runs.

const ACTION_LABELS: Record<CustomRuleAction, string> = {
  block: 'Block',
  challenge: 'Challenge',
  allow: 'Allow (skip later checks)',
  log: 'Log',
  rate_limit: 'Rate limit',
};

type Counting = 'ip' | 'ip,path' | 'header';
const COUNTING_LABELS: Record<Counting, string> = { ip: 'client address', 'ip,path': 'client address and path', header: 'a header’s value' };

function actionText(r: CustomRule): string {
  if (r.action !== 'rate_limit' || !r.rateLimit) return ACTION_LABELS[r.action as CustomRuleAction] ?? r.action;
  const rl = r.rateLimit;
  const c = rl.characteristics;
  const per = c[0]?.startsWith('header:') ? `value of the header ${c[0].slice('header:'.length)}` : (COUNTING_LABELS[c.join(',') as Counting] ?? c.join(', '));
  return `Rate limit: ${count(rl.requests)} per ${count(rl.period)} s per ${per}, then ${rl.mitigation} for ${count(rl.duration)} s`;
}

function hitsText({ hits: h }: CustomRule): string {
  return `${count(h.hour)} / ${count(h.day)} / ${count(h.week)}`;
}

/** The domain of #/rules?domain=<id>, or '' for every rule. */
function hashDomain(): string {
  return new URLSearchParams(location.hash.split('?')[1] ?? '').get('domain') ?? '';
}

export function Rules(_: ViewProps) {
  const rules = useLoad(() => ok(api.GET('/api/rules')) as Promise<CustomRule[]>);
  const domains = useLoad(() => ok(api.GET('/api/domains')));
  const [domain, setDomain] = useState(hashDomain());
  const [editing, setEditing] = useState<CustomRule | 'new' | null>(null);
  const [deleting, setDeleting] = useState<CustomRule | null>(null);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    const onHash = () => setDomain(hashDomain());
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  const domainName = (id: string | null) => (id === null ? 'All domains' : (domains.data?.find((d) => d.id === id)?.domain ?? 'a deleted domain'));
  const all = runOrder(rules.data ?? []);
  const shown = domain ? all.filter((r) => r.domainId === null || r.domainId === domain) : all;
  const replace = (saved: CustomRule) => rules.set((list) => (list?.some((x) => x.id === saved.id) ? list.map((x) => (x.id === saved.id ? saved : x)) : [...(list ?? []), saved]));
  const act = async (fn: () => Promise<unknown>) => {
    setError(undefined);
    setBusy(true);
    try {
      await fn();
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  const move = (r: CustomRule, direction: -1 | 1) =>
    act(async () => {
      const changes = moveRule(
        all,
        shown.map((x) => x.id),
        r.id,
        direction,
      );
      try {
        // One by one: each answer is the rule as saved.
        for (const c of changes) replace(await ok(api.PUT('/api/rules/{id}', { params: { path: { id: c.id } }, body: { priority: c.priority } })));
      } finally {
        if (changes.length > 1) rules.reload();
      }
    });
  const toggle = (r: CustomRule) => act(async () => replace(await ok(api.PUT('/api/rules/{id}', { params: { path: { id: r.id } }, body: { enabled: !r.enabled } }))));
  const chosen = domains.data?.find((d) => d.id === domain);
  return (
    <section>
      <PageHead title="Custom rules">
        <button type="button" class="primary" onClick={() => setEditing('new')}>
          Add custom rule
        </button>
      </PageHead>
      <p class="muted">
        Rules in Cloudflare’s expression language with an action, run after the IP and country lists and before bot protection, in this order (lower priority first; the same priority: the older rule
        first). The first block, challenge or allow that matches decides.
      </p>
      <div class="inline-form rules-filter">
        <Field label="Show rules for" hint={chosen ? `The rules that run on ${chosen.domain}: its own and those of every domain` : undefined}>
          {(id, desc) => (
            <select
              id={id}
              value={domain}
              aria-describedby={desc}
              onChange={(e) => {
                const d = e.currentTarget.value;
                setDomain(d);
                history.replaceState(null, '', d ? `#/rules?domain=${encodeURIComponent(d)}` : '#/rules');
              }}
            >
              <option value="">Every domain</option>
              {(domains.data ?? []).map((d) => (
                <option key={d.id} value={d.id}>
                  {d.domain}
                </option>
              ))}
            </select>
          )}
        </Field>
      </div>
      <ErrorNote error={rules.error ?? domains.error ?? error} />
      <Pending of={rules} />
      {rules.data && shown.length === 0 ? (
        <Empty>No custom rules{chosen ? ` run on ${chosen.domain}` : ''} yet. A rule blocks, challenges, allows, logs or rate-limits the requests its expression matches.</Empty>
      ) : null}
      {shown.length ? (
        <CardTable caption="Custom rules in run order" class="custom-rules" columns={['#', 'Rule', 'Action', 'Scope', 'Priority', 'Hits 1h / 24h / 7d', 'On']} action="Actions">
          {shown.map((r, i) => (
            <tr key={r.id} class={r.enabled ? undefined : 'disabled'}>
              <td data-label="#">{i + 1}</td>
              <td data-label="Rule">
                <div class="rule-cell">
                  <strong>{r.name}</strong>
                  <code class="expr-cell">{r.expression}</code>
                </div>
              </td>
              <td data-label="Action">{actionText(r)}</td>
              <td data-label="Scope">{domainName(r.domainId)}</td>
              <td data-label="Priority">{r.priority}</td>
              <td data-label="Hits 1h / 24h / 7d" class="num">
                {hitsText(r)}
              </td>
              <td data-label="On">
                <input type="checkbox" role="switch" class="switch" checked={r.enabled} disabled={busy} aria-label={`Enabled: ${r.name}`} onChange={() => void toggle(r)} />
              </td>
              <td class="row-actions">
                <button type="button" class="small" disabled={busy || i === 0} onClick={() => void move(r, -1)}>
                  ↑<span class="sr-only"> Move {r.name} up</span>
                </button>
                <button type="button" class="small" disabled={busy || i === shown.length - 1} onClick={() => void move(r, 1)}>
                  ↓<span class="sr-only"> Move {r.name} down</span>
                </button>
                <button type="button" class="small" onClick={() => setEditing(r)}>
                  Edit<span class="sr-only"> {r.name}</span>
                </button>
                <button type="button" class="small danger" onClick={() => setDeleting(r)}>
                  Delete<span class="sr-only"> {r.name}</span>
                </button>
              </td>
            </tr>
          ))}
        </CardTable>
      ) : null}
      {editing && domains.data ? <CustomRuleForm rule={editing === 'new' ? undefined : editing} domain={domain} domains={domains.data} onSaved={replace} onClose={() => setEditing(null)} /> : null}
      {deleting ? (
        <Confirm
          title="Delete custom rule"
          message={`Delete the rule “${deleting.name}”?`}
          action="Delete"
          onClose={() => setDeleting(null)}
          onConfirm={async () => {
            await ok(api.DELETE('/api/rules/{id}', { params: { path: { id: deleting.id } } }));
            rules.set((list) => list?.filter((x) => x.id !== deleting.id));
          }}
        />
      ) : null}
    </section>
  );
}

/** The field select's value: the function and the field, `len:http.cookie`. */
const operandKey = (r: Pick<BuilderRow, 'fn' | 'field'>) => `${r.fn}:${r.field}`;
const TEXT_FIELDS = BUILDER_FIELDS.filter(fnAllowed);

function valuePlaceholder(r: BuilderRow): string {
  const type = rowType(r);
  const list = r.op === 'in' || r.op === 'not_in';
  if (type === 'ip') return list ? '192.0.2.0/24, 2001:db8::/32' : '192.0.2.0/24';
  if (type === 'int') return list ? '1, 2, 3' : 'a whole number';
  if (list) return r.field === 'ip.src.country' ? 'CN, RU' : 'values, commas apart';
  return r.op.endsWith('matches') ? '^/api/v[0-9]+/' : r.field === 'ip.src.country' ? 'CN' : 'text';
}

/** The builder: one row a condition, joined with and/or; every change writes the expression text. */
function Builder(props: { rows: BuilderRow[]; onChange: (rows: BuilderRow[]) => void }) {
  const { rows } = props;
  const set = (i: number, patch: Partial<BuilderRow>) => props.onChange(rows.map((r, k) => (k === i ? fitRow({ ...r, ...patch }) : r)));
  return (
    <>
      {rows.length === 0 ? <p class="muted">No conditions.</p> : null}
      {rows.map((r, i) => {
        const type = rowType(r);
        const label = `Condition ${i + 1}`;
        return (
          <div class="builder-row" role="group" aria-label={label} key={i}>
            {i === 0 ? (
              <span class="builder-join">When</span>
            ) : (
              <select class="builder-join" aria-label="And or or" value={r.join} onChange={(e) => set(i, { join: e.currentTarget.value as 'and' | 'or' })}>
                <option value="and">and</option>
                <option value="or">or</option>
              </select>
            )}
            <select
              class="builder-field"
              aria-label="Field"
              value={operandKey(r)}
              onChange={(e) => {
                const [fn, field] = e.currentTarget.value.split(':') as [BuilderFn, BuilderRow['field']];
                set(i, { fn, field });
              }}
            >
              <optgroup label="Fields">
                {BUILDER_FIELDS.map((f) => (
                  <option key={f} value={`:${f}`}>
                    {f}
                  </option>
                ))}
              </optgroup>
              <optgroup label="Lowercase">
                {TEXT_FIELDS.map((f) => (
                  <option key={f} value={`lower:${f}`}>
                    lower({f})
                  </option>
                ))}
              </optgroup>
              <optgroup label="Length">
                {TEXT_FIELDS.map((f) => (
                  <option key={f} value={`len:${f}`}>
                    len({f})
                  </option>
                ))}
              </optgroup>
            </select>
            {isKeyed(r.field) ? (
              <input
                class="builder-key"
                aria-label={r.field === 'http.request.headers' ? 'Header name' : 'Argument name'}
                placeholder={r.field === 'http.request.headers' ? 'header name' : 'argument name'}
                value={r.key}
                onInput={(e) => set(i, { key: e.currentTarget.value })}
              />
            ) : null}
            <select class="builder-op" aria-label="Operator" value={r.op} onChange={(e) => set(i, { op: e.currentTarget.value as BuilderRow['op'] })}>
              {OPS_BY_TYPE[type].map((op) => (
                <option key={op} value={op}>
                  {BUILDER_OP_LABELS[op]}
                </option>
              ))}
            </select>
            {type === 'bool' ? null : <input class="builder-value" aria-label="Value" placeholder={valuePlaceholder(r)} value={r.value} onInput={(e) => set(i, { value: e.currentTarget.value })} />}
            <button type="button" class="small ghost builder-remove" onClick={() => props.onChange(rows.filter((_, k) => k !== i))}>
              ×<span class="sr-only"> Remove {label.toLowerCase()}</span>
            </button>
          </div>
        );
      })}
      <button type="button" class="small" onClick={() => props.onChange([...rows, newRow('and')])}>
        Add condition
      </button>
    </>
  );
}

interface RateDraft {
  requests: string;
  period: string;
  counting: Counting;
  header: string;
  mitigation: 'block' | 'challenge';
  duration: string;
}

function rateDraftOf(rl: RuleRateLimit | null | undefined): RateDraft {
  const c = rl?.characteristics ?? ['ip'];
  const header = c[0]?.startsWith('header:') ? c[0].slice('header:'.length) : '';
  return {
    requests: String(rl?.requests ?? 100),
    period: String(rl?.period ?? 60),
    counting: header ? 'header' : c.length === 2 ? 'ip,path' : 'ip',
    header,
    mitigation: rl?.mitigation ?? 'block',
    duration: String(rl?.duration ?? 300),
  };
}

function rateLimitOf(d: RateDraft): RuleRateLimit {
  const characteristics = d.counting === 'header' ? [`header:${d.header.trim().toLowerCase()}`] : d.counting === 'ip,path' ? ['ip', 'path'] : ['ip'];
  return { requests: Number(d.requests), period: Number(d.period), characteristics, mitigation: d.mitigation, duration: Number(d.duration) };
}

function CustomRuleForm(props: { rule?: CustomRule; domain: string; domains: Domain[]; onSaved: (r: CustomRule) => void; onClose: () => void }) {
  const r = props.rule;
  const [name, setName] = useState(r?.name ?? '');
  const [action, setAction] = useState<CustomRuleAction>((r?.action as CustomRuleAction) ?? 'block');
  const [scope, setScope] = useState(r ? (r.domainId ?? '') : props.domain);
  const [priority, setPriority] = useState(String(r?.priority ?? 100));
  const [enabled, setEnabled] = useState(r?.enabled ?? true);
  const [rate, setRate] = useState<RateDraft>(() => rateDraftOf(r?.rateLimit));
  // The text is the source of truth; the rows are its builder view, or null (and why) when the
  // builder cannot show it. A builder change rewrites the text; typing in the text re-reads the rows.
  const [text, setText] = useState(() => r?.expression ?? rowsToText([newRow()]));
  const [view, setView] = useState(() => rowsFromText(text));
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const parsed = parseRuleExpression(text);
  const rateLimit = rateLimitOf(rate);
  const rateProblem = action === 'rate_limit' ? rateLimitProblem(rateLimit) : undefined;
  const nameMissing = name.trim() === '';
  const mark = parsed.ok ? undefined : splitAt(text, parsed.position);
  const setRows = (rows: BuilderRow[]) => {
    setView({ ok: true, rows });
    setText(rowsToText(rows));
  };
  const setR = (patch: Partial<RateDraft>) => setRate({ ...rate, ...patch });
  const [rq, pd, du] = [RULE_RATE_LIMITS.requests, RULE_RATE_LIMITS.period, RULE_RATE_LIMITS.duration];
  const save = async (e: Event) => {
    e.preventDefault();
    if (nameMissing) return setError('Give the rule a name');
    if (!parsed.ok) return setError(`Expression: ${parsed.message}`);
    if (rateProblem) return setError(rateProblem);
    setBusy(true);
    setError(undefined);
    const body: CustomRuleBody = { name: name.trim(), expression: text, action, rateLimit: action === 'rate_limit' ? rateLimit : null, domainId: scope || null, priority: Number(priority), enabled };
    try {
      const saved = r ? await ok(api.PUT('/api/rules/{id}', { params: { path: { id: r.id } }, body })) : await ok(api.POST('/api/rules', { body }));
      props.onSaved(saved);
      props.onClose();
    } catch (err) {
      // The server checks more (catastrophic backtracking of regular expressions, the plan's limit): its message as it is.
      setError(errorText(err));
      setBusy(false);
    }
  };
  return (
    <Dialog title={r ? `Edit ${r.name}` : 'Add custom rule'} onClose={props.onClose} wide="extra">
      <form class="form" noValidate onSubmit={(e) => void save(e)}>
        <div class="row">
          <Field label="Name" invalid={error && nameMissing ? 'Required' : undefined}>
            {(id, desc) => <input id={id} value={name} required maxLength={CUSTOM_RULE_NAME_MAX} aria-describedby={desc} onInput={(e) => setName(e.currentTarget.value)} />}
          </Field>
          <Field label="Action">
            {(id) => (
              <select id={id} value={action} onChange={(e) => setAction(e.currentTarget.value as CustomRuleAction)}>
                <Options values={CUSTOM_RULE_ACTIONS} text={(a) => ACTION_LABELS[a]} />
              </select>
            )}
          </Field>
          <Field label="Scope">
            {(id) => (
              <select id={id} value={scope} onChange={(e) => setScope(e.currentTarget.value)}>
                <option value="">All domains</option>
                {props.domains.map((d) => (
                  <option key={d.id} value={d.id}>
                    {d.domain}
                  </option>
                ))}
              </select>
            )}
          </Field>
        </div>

        <div class="rule-editor">
          <fieldset class="builder">
            <legend>Builder</legend>
            {view.ok ? (
              <Builder rows={view.rows} onChange={setRows} />
            ) : (
              <p class="builder-note" role="status">
                {parsed.ok
                  ? `The builder cannot show this expression (${view.reason}); it is kept as written: edit it in the text.`
                  : 'The builder shows the expression again once it reads: fix it in the text.'}
              </p>
            )}
          </fieldset>
          <Field
            label="Expression"
            class="expr-field"
            invalid={parsed.ok ? undefined : parsed.message}
            hint={`Fields, operators and functions: docs/rules.md; at most ${count(RULE_LIMITS.expression)} characters and ${RULE_LIMITS.conditions} conditions`}
          >
            {(id, desc) => (
              <>
                <textarea
                  id={id}
                  class="expr-text"
                  rows={7}
                  spellcheck={false}
                  value={text}
                  aria-invalid={!parsed.ok}
                  aria-describedby={desc}
                  onInput={(e) => {
                    const t = e.currentTarget.value;
                    setText(t);
                    setView(rowsFromText(t));
                  }}
                />
                {mark ? (
                  <pre class="expr-mark" aria-hidden="true">
                    {mark.before}
                    <mark>{mark.at || ' '}</mark>
                    {mark.after}
                  </pre>
                ) : null}
              </>
            )}
          </Field>
        </div>

        {action === 'rate_limit' ? (
          <fieldset class="field rate-settings">
            <legend>Rate limit</legend>
            <div class="row">
              <Field label="Requests" hint={`${count(rq[0])} to ${count(rq[1])} in the period`}>
                {(id, desc) => (
                  <input id={id} type="number" min={rq[0]} max={rq[1]} step={1} value={rate.requests} aria-describedby={desc} onInput={(e) => setR({ requests: e.currentTarget.value })} />
                )}
              </Field>
              <Field label="Period (seconds)" hint={`${count(pd[0])} to ${count(pd[1])}`}>
                {(id, desc) => <input id={id} type="number" min={pd[0]} max={pd[1]} step={1} value={rate.period} aria-describedby={desc} onInput={(e) => setR({ period: e.currentTarget.value })} />}
              </Field>
              <Field label="Count per">
                {(id) => (
                  <select id={id} value={rate.counting} onChange={(e) => setR({ counting: e.currentTarget.value as Counting })}>
                    <Options values={['ip', 'ip,path', 'header'] as const} text={(c) => COUNTING_LABELS[c]} />
                  </select>
                )}
              </Field>
              {rate.counting === 'header' ? (
                <Field label="Header" hint="e.g. x-api-key; a request without it is not counted">
                  {(id, desc) => <input id={id} value={rate.header} aria-describedby={desc} onInput={(e) => setR({ header: e.currentTarget.value })} />}
                </Field>
              ) : null}
            </div>
            <div class="row">
              <Field label="Then" hint="block: 429 with Retry-After; challenge: the bot challenge">
                {(id, desc) => (
                  <select id={id} value={rate.mitigation} aria-describedby={desc} onChange={(e) => setR({ mitigation: e.currentTarget.value as 'block' | 'challenge' })}>
                    <Options values={['block', 'challenge'] as const} />
                  </select>
                )}
              </Field>
              <Field label="For (seconds)" hint={`${count(du[0])} to ${count(du[1])}`}>
                {(id, desc) => (
                  <input id={id} type="number" min={du[0]} max={du[1]} step={1} value={rate.duration} aria-describedby={desc} onInput={(e) => setR({ duration: e.currentTarget.value })} />
                )}
              </Field>
            </div>
            {rateProblem ? <small class="invalid">{rateProblem}</small> : null}
          </fieldset>
        ) : null}

        <div class="row">
          <Field label="Priority" hint="Lower runs first; the arrows of the list set it too">
            {(id, desc) => <input id={id} type="number" min={0} max={1000000} step={1} value={priority} aria-describedby={desc} onInput={(e) => setPriority(e.currentTarget.value)} />}
          </Field>
          <Switch label="Rule enabled" checked={enabled} onChange={setEnabled} />
        </div>
        <ErrorNote error={error} />
        <SaveCancel onCancel={props.onClose} disabled={busy} />
      </form>
    </Dialog>
  );
}
