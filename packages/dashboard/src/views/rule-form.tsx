import {
  BOT_DIFFICULTY_DEFAULT,
  BOT_DIFFICULTY_MAX,
  BOT_DIFFICULTY_MIN,
  blockBotOf,
  checkRuleValue,
  DOMAIN_ONLY_RULE_TYPES,
  isCidr,
  RATE_LIMIT_DEFAULT,
  RATE_LIMIT_MAX,
  RATE_LIMIT_MIN,
  rateLimitOf,
  RULE_TYPES,
  SERVER_WIDE_RULE_TYPES,
  WAF_DETECTORS,
  wafExceptionOf,
  type RuleType,
} from '@rampart/protocol';
import { useState } from 'preact/hooks';
import { api, errorText, ok, type AiBot, type Domain, type Rule } from '../api/client';
import { Options, SaveCancel } from '../components';
import { allCountries, countryName, Dialog, ErrorNote, Field, Switch } from '../ui';

export const RULE_TYPE_LABELS: Record<RuleType, string> = {
  block_ip: 'Block IP or range',
  allow_ip: 'Allow IP or range',
  block_country: 'Block country',
  rate_limit: 'Rate limit',
  block_bot: 'Bot protection',
  block_ai_bot: 'Block AI crawler',
  waf_exception: 'Detection exception',
};

/** A rule's value in words. */
export function ruleValueText(type: string, value: string): string {
  switch (type) {
    case 'block_country':
      return `${countryName(value)} (${value})`;
    case 'rate_limit':
      return `${rateLimitOf(value)} requests a minute per client`;
    case 'block_bot': {
      const b = blockBotOf(value);
      if (!b) return value;
      return `${b.enabled ? 'on' : 'off'}, difficulty ${b.difficulty} bits${b.paths ? `, paths ${b.paths.join(' ')}` : ', every path'}`;
    }
    case 'waf_exception': {
      const x = wafExceptionOf(value);
      if (!x) return value;
      return `${x.detector ?? 'every detector'} off in ${x.location ?? 'any location'} under ${x.path}`;
    }
    default:
      return value;
  }
}

interface Draft {
  ip: string;
  country: string;
  rpm: string;
  botOn: boolean;
  difficulty: string;
  paths: string;
  aiBot: string;
  exPath: string;
  exLocation: string;
  exDetector: string;
}

function draftOf(type: RuleType, value: string | undefined, aiBots: AiBot[]): Draft {
  const bot = value && type === 'block_bot' ? blockBotOf(value) : undefined;
  const ex = value && type === 'waf_exception' ? wafExceptionOf(value) : undefined;
  return {
    ip: value && (type === 'block_ip' || type === 'allow_ip') ? value : '',
    country: value && type === 'block_country' ? value : '',
    rpm: String(value && type === 'rate_limit' ? rateLimitOf(value) : RATE_LIMIT_DEFAULT),
    botOn: bot?.enabled ?? true,
    difficulty: String(bot?.difficulty ?? BOT_DIFFICULTY_DEFAULT),
    paths: bot?.paths?.join('\n') ?? '',
    aiBot: value && type === 'block_ai_bot' ? value : (aiBots[0]?.name ?? ''),
    exPath: ex?.path ?? '',
    exLocation: ex?.location ?? '',
    exDetector: ex?.detector ?? '',
  };
}

/** The value the API takes, from the draft; checked with the protocol's own rules before it is sent. */
function valueOf(type: RuleType, d: Draft): string {
  switch (type) {
    case 'block_ip':
    case 'allow_ip':
      return d.ip.trim();
    case 'block_country': {
      const m = /\(([A-Z]{2})\)\s*$/.exec(d.country) ?? /^\s*([A-Za-z]{2})\s*$/.exec(d.country);
      return m ? m[1]!.toUpperCase() : d.country.trim();
    }
    case 'rate_limit':
      return JSON.stringify({ requests_per_minute: Number(d.rpm) });
    case 'block_bot': {
      const paths = d.paths
        .split('\n')
        .map((p) => p.trim())
        .filter(Boolean);
      return JSON.stringify({ enabled: d.botOn, difficulty: Number(d.difficulty), ...(paths.length ? { paths } : {}) });
    }
    case 'block_ai_bot':
      return d.aiBot;
    case 'waf_exception':
      return JSON.stringify({ path: d.exPath.trim(), ...(d.exLocation.trim() ? { location: d.exLocation.trim() } : {}), ...(d.exDetector ? { detector: d.exDetector } : {}) });
  }
}

export function RuleForm(props: { rule?: Rule; initialType?: RuleType; domains: Domain[]; aiBots: AiBot[]; onSaved: (r: Rule) => void; onClose: () => void }) {
  const r = props.rule;
  const [type, setType] = useState<RuleType>((r?.rule_type as RuleType) ?? props.initialType ?? 'block_ip');
  const [scope, setScope] = useState<string>(r?.domain_id ?? '');
  const [priority, setPriority] = useState(String(r?.priority ?? 100));
  const [enabled, setEnabled] = useState(r?.enabled ?? true);
  const [draft, setDraft] = useState<Draft>(() => draftOf(type, r?.value, props.aiBots));
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const set = (patch: Partial<Draft>) => setDraft({ ...draft, ...patch });
  const serverWide = SERVER_WIDE_RULE_TYPES.includes(type);
  const domainOnly = DOMAIN_ONLY_RULE_TYPES.includes(type);
  const value = valueOf(type, draft);
  const check = checkRuleValue(type, value);
  const ipInvalid = (type === 'block_ip' || type === 'allow_ip') && draft.ip.trim() !== '' && !isCidr(draft.ip.trim()) ? 'Not an IPv4 or IPv6 address or range (e.g. 203.0.113.0/24)' : undefined;
  const effectiveScope = serverWide ? '' : scope;
  const scopeMissing = domainOnly && !effectiveScope;
  const save = async (e: Event) => {
    e.preventDefault();
    if (!check.ok) return setError(check.message);
    if (scopeMissing) return setError('Choose the domain this exception is for');
    setBusy(true);
    setError(undefined);
    try {
      const saved = r
        ? await ok(api.PUT('/api/waf/{id}', { params: { path: { id: r.id } }, body: { value: check.value, priority: Number(priority), enabled } }))
        : await ok(
            api.POST('/api/waf', {
              body: { rule_type: type, value: check.value, priority: Number(priority), enabled, ...(effectiveScope ? { domain_id: effectiveScope } : {}) },
            }),
          );
      props.onSaved(saved);
      props.onClose();
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };
  return (
    <Dialog title={r ? 'Edit rule' : 'Add rule'} onClose={props.onClose} wide>
      <form class="form" noValidate onSubmit={(e) => void save(e)}>
        <div class="row">
          <Field label="Rule type">
            {(id) => (
              <select
                id={id}
                value={type}
                disabled={!!r}
                onChange={(e) => {
                  const t = e.currentTarget.value as RuleType;
                  setType(t);
                  setDraft(draftOf(t, undefined, props.aiBots));
                }}
              >
                <Options values={RULE_TYPES} text={(t) => RULE_TYPE_LABELS[t]} />
              </select>
            )}
          </Field>
          <Field label="Scope" hint={serverWide ? 'Applies to the whole shield server: always global' : domainOnly ? 'An exception belongs to one domain' : undefined}>
            {(id, desc) => (
              <select id={id} value={effectiveScope} disabled={!!r || serverWide} aria-describedby={desc} onChange={(e) => setScope(e.currentTarget.value)}>
                {domainOnly ? <option value="">Choose a domain…</option> : <option value="">Global: every domain</option>}
                {props.domains.map((d) => (
                  <option key={d.id} value={d.id}>
                    {d.domain}
                  </option>
                ))}
              </select>
            )}
          </Field>
        </div>

        {type === 'block_ip' || type === 'allow_ip' ? (
          <Field label="Address or range" hint="IPv4 or IPv6, with an optional /prefix" invalid={ipInvalid}>
            {(id, desc) => (
              <input id={id} value={draft.ip} required aria-invalid={!!ipInvalid} aria-describedby={desc} placeholder="203.0.113.0/24" onInput={(e) => set({ ip: e.currentTarget.value })} />
            )}
          </Field>
        ) : null}

        {type === 'block_country' ? (
          <Field label="Country" hint="Type to search by name or code">
            {(id, desc) => (
              <>
                <input id={id} list={`${id}-list`} value={draft.country} required aria-describedby={desc} autocomplete="off" onInput={(e) => set({ country: e.currentTarget.value })} />
                <datalist id={`${id}-list`}>
                  {allCountries().map((c) => (
                    <option key={c.code} value={`${c.name} (${c.code})`} />
                  ))}
                </datalist>
              </>
            )}
          </Field>
        ) : null}

        {type === 'rate_limit' ? (
          <Field label="Requests per minute" hint={`Per client address, ${RATE_LIMIT_MIN} to ${RATE_LIMIT_MAX}; enforced at WAF level medium and high`}>
            {(id, desc) => (
              <input id={id} type="number" min={RATE_LIMIT_MIN} max={RATE_LIMIT_MAX} step={1} required value={draft.rpm} aria-describedby={desc} onInput={(e) => set({ rpm: e.currentTarget.value })} />
            )}
          </Field>
        ) : null}

        {type === 'block_bot' ? (
          <>
            <Switch label="Bot protection on" checked={draft.botOn} onChange={(v) => set({ botOn: v })} hint="Known bad user agents are refused; other browsers solve a proof-of-work challenge" />
            <Field label="Difficulty" hint={`Leading zero bits, ${BOT_DIFFICULTY_MIN} to ${BOT_DIFFICULTY_MAX} (default ${BOT_DIFFICULTY_DEFAULT}); each bit doubles the work`}>
              {(id, desc) => (
                <input
                  id={id}
                  type="number"
                  min={BOT_DIFFICULTY_MIN}
                  max={BOT_DIFFICULTY_MAX}
                  step={1}
                  value={draft.difficulty}
                  aria-describedby={desc}
                  onInput={(e) => set({ difficulty: e.currentTarget.value })}
                />
              )}
            </Field>
            <Field label="Paths (optional)" hint="One path prefix a line, e.g. /login; empty: every path">
              {(id, desc) => <textarea id={id} rows={2} value={draft.paths} aria-describedby={desc} onInput={(e) => set({ paths: e.currentTarget.value })} />}
            </Field>
          </>
        ) : null}

        {type === 'block_ai_bot' ? (
          <Field label="Crawler">
            {(id) => (
              <select id={id} value={draft.aiBot} onChange={(e) => set({ aiBot: e.currentTarget.value })}>
                {props.aiBots.map((b) => (
                  <option key={b.name} value={b.name}>
                    {b.name} ({b.operator})
                  </option>
                ))}
              </select>
            )}
          </Field>
        ) : null}

        {type === 'waf_exception' ? (
          <>
            <Field label="Path" hint="Requests whose path starts with this">
              {(id, desc) => <input id={id} value={draft.exPath} required placeholder="/comments" aria-describedby={desc} onInput={(e) => set({ exPath: e.currentTarget.value })} />}
            </Field>
            <div class="row">
              <Field label="Location (optional)" hint="path, or query:, body:, cookie:, header: and a name or *">
                {(id, desc) => <input id={id} value={draft.exLocation} placeholder="body:content" aria-describedby={desc} onInput={(e) => set({ exLocation: e.currentTarget.value })} />}
              </Field>
              <Field label="Detector">
                {(id) => (
                  <select id={id} value={draft.exDetector} onChange={(e) => set({ exDetector: e.currentTarget.value })}>
                    <option value="">every detector</option>
                    <Options values={WAF_DETECTORS} />
                  </select>
                )}
              </Field>
            </div>
          </>
        ) : null}

        <div class="row">
          <Field label="Priority" hint="Lower runs first">
            {(id, desc) => <input id={id} type="number" min={0} max={1000000} step={1} value={priority} aria-describedby={desc} onInput={(e) => setPriority(e.currentTarget.value)} />}
          </Field>
          <Switch label="Rule enabled" checked={enabled} onChange={setEnabled} />
        </div>
        {!check.ok && !ipInvalid && value !== '' && value !== '{"path":""}' ? <small class="hint">{check.message}</small> : null}
        <ErrorNote error={error} />
        <SaveCancel onCancel={props.onClose} disabled={busy} />
      </form>
    </Dialog>
  );
}
