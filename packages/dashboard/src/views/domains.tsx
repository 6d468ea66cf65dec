import { isIP, isOriginHost, isPort, normalizeHostname, isHostname, WAF_LEVELS, WAF_MODES, formatHostPort, type OriginAddress, type WafLevel } from '@rampart/protocol';
import { useState } from 'preact/hooks';
import { api, errorText, ok, type Domain, type DomainUpdate, type Server } from '../api/client';
import { CardTable, Options, SaveCancel } from '../components';
import { Confirm, Dialog, Empty, ErrorNote, Field, fmtDate, PageHead, Pending, Switch, type ViewProps, useLoad } from '../ui';

/** An origin as the list and the form show it: address:port ([v6]:port) or name:port. */
export function originText(o: { ip?: string | undefined; host?: string | undefined; port: number }): string {
  return formatHostPort(o.ip ?? o.host ?? '', o.port);
}

/** Origins as typed, one `address:port` or `name:port` a line (IPv6 in brackets): the list, or the first line at fault. */
export function parseOrigins(text: string): { ok: true; origins: OriginAddress[] } | { ok: false; message: string } {
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  if (lines.length === 0) return { ok: false, message: 'Give at least one origin, as address:port' };
  const origins: OriginAddress[] = [];
  for (const [i, line] of lines.entries()) {
    const m = /^\[([^\]]+)\]:(\d+)$/.exec(line) ?? /^([^:]+):(\d+)$/.exec(line);
    const ip = m?.[1];
    const port = m ? Number(m[2]) : NaN;
    const host = ip && !isIP(ip) ? normalizeHostname(ip) : undefined;
    if (!ip || (host !== undefined && !isOriginHost(host)) || !isPort(port)) {
      return { ok: false, message: `Line ${i + 1} is not address:port or name:port (e.g. 192.0.2.10:8080, [2001:db8::10]:8080 or origin.example.com:8080)` };
    }
    origins.push(host !== undefined ? { host, port } : { ip, port });
  }
  return { ok: true, origins };
}

/** What each WAF level does, one sentence each (SPEC.md's table), shown beside the choice. */
export const WAF_LEVEL_TEXT: Record<WafLevel, string> = {
  low: 'Blocks only the addresses and countries on your block lists.',
  medium: 'Also enforces your rate limits: a client over its limit is refused for a while.',
  high: 'Also detects attacks (SQL injection, cross-site scripting, command injection, path traversal and more) in every request and blocks them.',
};
/** The level the Add-domain form starts at: the strongest (the API's own default stays medium). */
export const NEW_DOMAIN_WAF_LEVEL: WafLevel = 'high';

export function certificateText(d: Domain): string {
  switch (d.sslStatus) {
    case 'off':
      return 'HTTPS off';
    case 'pending':
      return 'Certificate pending';
    case 'active':
      return d.sslExpires ? `Certificate valid until ${fmtDate(d.sslExpires)}` : 'Certificate active';
    case 'error':
      return `Certificate error${d.sslError ? `: ${d.sslError}` : ''}`;
  }
}

function DomainForm(props: { domain?: Domain; servers: Server[]; onSaved: (d: Domain) => void; onClose: () => void }) {
  const d = props.domain;
  const [name, setName] = useState(d?.domain ?? '');
  const [origins, setOrigins] = useState(d ? d.origins.map(originText).join('\n') : '');
  const [serverIds, setServerIds] = useState<string[]>(d?.serverIds ?? []);
  const [sslEnabled, setSsl] = useState(d?.sslEnabled ?? true);
  const [wafEnabled, setWaf] = useState(d?.wafEnabled ?? true);
  const [wafLevel, setLevel] = useState<string>(d?.wafLevel ?? NEW_DOMAIN_WAF_LEVEL);
  const [wafMode, setMode] = useState<string>(d?.wafMode ?? 'block');
  const [compressed, setCompressed] = useState(d?.wafCompressedBodies === 'allow');
  const [dnsFailover, setDnsFailover] = useState(d?.dnsFailover ?? false);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const parsed = parseOrigins(origins);
  const nameInvalid = name && !isHostname(normalizeHostname(name)) ? 'Not a valid host name' : undefined;
  const live = props.servers.filter((s) => s.status !== 'decommissioned');
  const save = async (e: Event) => {
    e.preventDefault();
    if (!parsed.ok) return setError(parsed.message);
    setBusy(true);
    setError(undefined);
    const body = {
      origins: parsed.origins,
      serverIds,
      sslEnabled,
      wafEnabled,
      wafLevel: wafLevel as DomainUpdate['wafLevel'],
      wafMode: wafMode as DomainUpdate['wafMode'],
      wafCompressedBodies: compressed ? ('allow' as const) : ('refuse' as const),
    };
    try {
      const saved = d
        ? await ok(api.PUT('/api/domains/{id}', { params: { path: { id: d.id } }, body: { ...body, dnsFailover } }))
        : await ok(api.POST('/api/domains', { body: { domain: name.trim(), ...body } }));
      props.onSaved(saved);
      props.onClose();
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };
  return (
    <Dialog title={d ? `Edit ${d.domain}` : 'Add domain'} onClose={props.onClose} wide>
      <form class="form" onSubmit={(e) => void save(e)}>
        <Field label="Domain name" invalid={nameInvalid} hint={d ? 'A domain keeps its name; add a new one to use another.' : 'e.g. www.example.com'}>
          {(id, desc) => <input id={id} value={name} required readOnly={!!d} aria-describedby={desc} aria-invalid={!!nameInvalid} onInput={(e) => setName(e.currentTarget.value)} />}
        </Field>
        <Field
          label="Origins"
          hint="One address:port or name:port a line, e.g. 192.0.2.10:8080, [2001:db8::10]:8080 or origin.example.com:8080"
          invalid={origins && !parsed.ok ? parsed.message : undefined}
        >
          {(id, desc) => <textarea id={id} rows={3} required value={origins} aria-describedby={desc} aria-invalid={!!origins && !parsed.ok} onInput={(e) => setOrigins(e.currentTarget.value)} />}
        </Field>
        <fieldset class="field">
          <legend>Shield servers</legend>
          {live.length === 0 ? <small class="hint">No servers yet: register one under Servers.</small> : null}
          <div class="checks">
            {live.map((s) => (
              <label key={s.id} class="check">
                <input type="checkbox" checked={serverIds.includes(s.id)} onChange={(e) => setServerIds(e.currentTarget.checked ? [...serverIds, s.id] : serverIds.filter((x) => x !== s.id))} />
                {s.name}
              </label>
            ))}
          </div>
        </fieldset>
        <fieldset class="field levels">
          <legend>WAF level</legend>
          {WAF_LEVELS.map((level) => (
            <label key={level} class="level">
              <input type="radio" name="wafLevel" value={level} checked={wafLevel === level} onChange={() => setLevel(level)} aria-describedby={`level-${level}`} />
              <span>
                <strong>{level}</strong>
                {level === NEW_DOMAIN_WAF_LEVEL ? <span class="badge good">recommended</span> : null}
                <small id={`level-${level}`} class="hint block">
                  {WAF_LEVEL_TEXT[level]}
                </small>
              </span>
            </label>
          ))}
        </fieldset>
        <div class="row">
          <Field label="WAF mode" hint="detect: attacks are logged and let through">
            {(id, desc) => (
              <select id={id} value={wafMode} aria-describedby={desc} onChange={(e) => setMode(e.currentTarget.value)}>
                <Options values={WAF_MODES} />
              </select>
            )}
          </Field>
        </div>
        <Switch label="WAF on" checked={wafEnabled} onChange={setWaf} />
        {wafLevel === 'high' ? (
          <Switch
            label="Allow compressed request bodies"
            checked={compressed}
            onChange={setCompressed}
            hint="Attack detection reads gzip and deflate bodies; one it cannot read (br, several codings, corrupt): off, refused; on, passes with its raw bytes inspected"
          />
        ) : null}
        <Switch label="HTTPS with a Let's Encrypt certificate" checked={sslEnabled} onChange={setSsl} />
        {d ? <Switch label="DNS failover" checked={dnsFailover} onChange={setDnsFailover} hint="Pro and Enterprise, at least 2 servers and a DNS provider (Settings)" /> : null}
        <ErrorNote error={error} />
        <SaveCancel onCancel={props.onClose} disabled={busy} />
      </form>
    </Dialog>
  );
}

export function Domains(_: ViewProps) {
  const domains = useLoad(() => ok(api.GET('/api/domains')));
  const servers = useLoad(() => ok(api.GET('/api/servers')));
  const [editing, setEditing] = useState<Domain | 'new' | null>(null);
  const [deleting, setDeleting] = useState<Domain | null>(null);
  const serverName = (id: string) => servers.data?.find((s) => s.id === id)?.name ?? id.slice(0, 8);
  return (
    <section>
      <PageHead title="Domains">
        <button type="button" class="primary" onClick={() => setEditing('new')}>
          Add domain
        </button>
      </PageHead>
      <ErrorNote error={domains.error} />
      <Pending of={domains} />
      {domains.data && domains.data.length === 0 ? <Empty>No domains yet. Add one to put it behind your shield servers.</Empty> : null}
      {domains.data && domains.data.length > 0 ? (
        <CardTable columns={['Domain', 'Origins', 'Servers', 'HTTPS', 'WAF', 'DNS failover']} action="Actions">
          {domains.data.map((d) => (
            <tr key={d.id}>
              <td data-label="Domain">
                <strong>{d.domain}</strong>
                <div>
                  <span class={`badge ${d.status === 'active' ? 'good' : d.status === 'error' ? 'bad' : 'warn'}`}>{d.status}</span>
                </div>
                {d.warnings.map((w) => (
                  <div key={w} class="text-warn" role="note">
                    {w}
                  </div>
                ))}
              </td>
              <td data-label="Origins">
                {d.origins.map((o) => (
                  <div key={originText(o)}>
                    <code>{originText(o)}</code>
                  </div>
                ))}
              </td>
              <td data-label="Servers">{d.serverIds.length ? d.serverIds.map(serverName).join(', ') : <span class="muted">none</span>}</td>
              <td data-label="HTTPS">
                <span class={d.sslStatus === 'error' ? 'text-bad' : d.sslStatus === 'pending' ? 'text-warn' : undefined}>{certificateText(d)}</span>
              </td>
              <td data-label="WAF">{d.wafEnabled ? `${d.wafLevel}, ${d.wafMode}` : 'off'}</td>
              <td data-label="DNS failover">{d.dnsFailover ? d.dnsError ? <span class="text-bad">{d.dnsError}</span> : (d.dnsAddresses ?? []).join(', ') || 'on' : 'off'}</td>
              <td class="row-actions">
                <a class="button small" href={`#/rules?domain=${encodeURIComponent(d.id)}`}>
                  Rules<span class="sr-only"> of {d.domain}</span>
                </a>
                <button type="button" class="small" aria-describedby={`dn-${d.id}`} onClick={() => setEditing(d)}>
                  Edit
                </button>
                <button type="button" class="small danger" onClick={() => setDeleting(d)}>
                  Delete<span class="sr-only"> {d.domain}</span>
                </button>
                <span id={`dn-${d.id}`} class="sr-only">
                  {d.domain}
                </span>
              </td>
            </tr>
          ))}
        </CardTable>
      ) : null}
      {editing ? (
        <DomainForm
          domain={editing === 'new' ? undefined : editing}
          servers={servers.data ?? []}
          onClose={() => setEditing(null)}
          onSaved={(saved) => domains.set((list) => (list?.some((x) => x.id === saved.id) ? list.map((x) => (x.id === saved.id ? saved : x)) : [...(list ?? []), saved]))}
        />
      ) : null}
      {deleting ? (
        <Confirm
          title="Delete domain"
          message={`Delete ${deleting.domain}? Its shield servers stop serving it.`}
          action="Delete"
          onClose={() => setDeleting(null)}
          onConfirm={async () => {
            await ok(api.DELETE('/api/domains/{id}', { params: { path: { id: deleting.id } } }));
            domains.set((list) => list?.filter((x) => x.id !== deleting.id));
          }}
        />
      ) : null}
    </section>
  );
}
