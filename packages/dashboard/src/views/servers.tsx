import { isIP } from '@rampart/protocol';
import { useState } from 'preact/hooks';
import { api, ok, type Server, type ServerWithToken } from '../api/client';
import { CardTable, SaveCancel, submitting } from '../components';
import { Confirm, Dialog, Empty, ErrorNote, Field, fmtAgo, PageHead, Pending, Secret, type ViewProps, useLoad } from '../ui';

/** Where the server is, in words. */
export function connectionText(s: Server): { text: string; tone: 'good' | 'warn' | 'bad' | 'muted' } {
  if (s.status === 'decommissioned') return { text: 'decommissioned', tone: 'muted' };
  if (s.status === 'offline' && s.agentRefused) return { text: `agent refused: ${s.agentRefused}`, tone: 'bad' };
  if (!s.lastSeenAt && !s.ip) return { text: 'never connected', tone: 'muted' };
  if (s.status === 'offline') return { text: `offline, last seen ${fmtAgo(s.lastSeenAt)}`, tone: 'bad' };
  return { text: 'online', tone: 'good' };
}

/** Whether the server runs the configuration it should, in words. */
export function revisionText(s: Server): { text: string; tone: 'good' | 'warn' | 'bad' | 'muted' } {
  if (s.status === 'decommissioned') return { text: '—', tone: 'muted' };
  if (!s.lastSeenAt && !s.ip) return { text: 'never connected', tone: 'muted' };
  if (s.appliedRevision >= s.desiredRevision) return { text: 'up to date', tone: 'good' };
  if (s.status === 'offline') return { text: 'behind: applies when the agent reconnects', tone: 'warn' };
  return { text: 'applying', tone: 'warn' };
}

/**
 * What connects a new shield server: the package this control plane serves (GET
 * /downloads/rampart_all.deb), then `rampart init agent` with the token on standard input, never
 * on a command line. The token line starts with a space: shells that ignore such lines (Debian's
 * bash: HISTCONTROL=ignoreboth) keep it out of their history.
 */
export function installCommands(token: string, page: { protocol: string; host: string; hostname: string }): { text: string; insecure: boolean } {
  const secure = page.protocol === 'https:';
  const loopback = /^(localhost|127\.[0-9.]+|\[::1\])$/.test(page.hostname);
  const insecure = !secure && !loopback;
  const text = [
    `curl -fsSLo /tmp/rampart_all.deb ${page.protocol}//${page.host}/downloads/rampart_all.deb`,
    'sudo apt-get install -y /tmp/rampart_all.deb',
    ` echo '${token}' | sudo rampart init agent --server ${secure ? 'wss' : 'ws'}://${page.host}/agent${insecure ? ' --insecure' : ''}`,
  ].join('\n');
  return { text, insecure };
}

function TokenShown({ server, onClose }: { server: ServerWithToken; onClose: () => void }) {
  const commands = installCommands(server.connectionToken, location);
  return (
    <Dialog title={`Connect ${server.name}`} onClose={onClose} wide>
      <p>
        Run these on the shield server (Debian 12 with Node.js 20, or Debian 13): they install Rampart from this control plane and connect it as {server.name}. The token is shown only now; a new one
        can be made later, which disconnects the old.
      </p>
      <Secret text={commands.text} label="Install and connect commands" />
      {commands.insecure ? (
        <p class="text-warn">This dashboard is not served over HTTPS, so the agent would send its token in clear (hence --insecure). Put the control plane behind TLS first: see docs/operations.md.</p>
      ) : null}
      <div class="actions">
        <button type="button" class="primary" onClick={onClose}>
          Done
        </button>
      </div>
    </Dialog>
  );
}

function ServerForm(props: { server?: Server; onSaved: (s: Server | ServerWithToken) => void; onClose: () => void }) {
  const s = props.server;
  const [name, setName] = useState(s?.name ?? '');
  const [publicIp, setPublicIp] = useState(s?.publicIp ?? '');
  const [error, setError] = useState<string>();
  const ipInvalid = publicIp && !isIP(publicIp.trim()) ? 'Not an IPv4 or IPv6 address' : undefined;
  return (
    <Dialog title={s ? `Edit ${s.name}` : 'Add server'} onClose={props.onClose}>
      <form
        class="form"
        onSubmit={submitting(setError, async () => {
          const saved = s
            ? await ok(api.PUT('/api/servers/{id}', { params: { path: { id: s.id } }, body: { name: name.trim(), publicIp: publicIp.trim() || null } }))
            : await ok(api.POST('/api/servers', { body: { name: name.trim() } }));
          props.onSaved(saved);
        })}
      >
        <Field label="Server name">{(id) => <input id={id} value={name} required maxLength={100} onInput={(e) => setName(e.currentTarget.value)} />}</Field>
        {s ? (
          <Field label="Public address" hint="The address DNS points at; empty: the address its agent connects from" invalid={ipInvalid}>
            {(id, desc) => <input id={id} value={publicIp} aria-describedby={desc} aria-invalid={!!ipInvalid} onInput={(e) => setPublicIp(e.currentTarget.value)} />}
          </Field>
        ) : null}
        <ErrorNote error={error} />
        <SaveCancel onCancel={props.onClose} disabled={!!ipInvalid} />
      </form>
    </Dialog>
  );
}

export function Servers(_: ViewProps) {
  const servers = useLoad(() => ok(api.GET('/api/servers')));
  const [editing, setEditing] = useState<Server | 'new' | null>(null);
  const [token, setToken] = useState<ServerWithToken | null>(null);
  const [regen, setRegen] = useState<Server | null>(null);
  const [decom, setDecom] = useState<Server | null>(null);
  const [showOld, setShowOld] = useState(false);
  const replace = (saved: Server) => servers.set((list) => (list?.some((x) => x.id === saved.id) ? list.map((x) => (x.id === saved.id ? saved : x)) : [...(list ?? []), saved]));
  const list = (servers.data ?? []).filter((s) => showOld || s.status !== 'decommissioned');
  const decommissioned = (servers.data ?? []).filter((s) => s.status === 'decommissioned').length;
  return (
    <section>
      <PageHead title="Servers">
        <button type="button" onClick={servers.reload}>
          Refresh
        </button>
        <button type="button" class="primary" onClick={() => setEditing('new')}>
          Add server
        </button>
      </PageHead>
      <ErrorNote error={servers.error} />
      <Pending of={servers} />
      {servers.data && list.length === 0 ? <Empty>No shield servers yet. Add one and run the command it gives on the host.</Empty> : null}
      {list.length > 0 ? (
        <CardTable columns={['Server', 'Connection', 'Configuration', 'Health', 'Address', 'Agent']} action="Actions">
          {list.map((s) => {
            const c = connectionText(s);
            const r = revisionText(s);
            return (
              <tr key={s.id}>
                <td data-label="Server">
                  <strong>{s.name}</strong>
                </td>
                <td data-label="Connection">
                  <span class={`dot ${c.tone}`} aria-hidden="true" /> {c.text}
                </td>
                <td data-label="Configuration">
                  <span class={`text-${r.tone}`}>{r.text}</span>
                  {s.status !== 'decommissioned' ? (
                    <small class="muted block">
                      revision {s.appliedRevision} of {s.desiredRevision}
                    </small>
                  ) : null}
                </td>
                <td data-label="Health">{s.healthy === null ? <span class="muted">not checked yet</span> : s.healthy ? 'healthy' : <span class="text-bad">{s.healthError ?? 'unhealthy'}</span>}</td>
                <td data-label="Address">
                  {s.publicIp ?? s.ip ?? <span class="muted">—</span>}
                  {s.publicIp ? <small class="muted block">public address</small> : null}
                </td>
                <td data-label="Agent">{s.agentVersion ?? <span class="muted">—</span>}</td>
                <td class="row-actions">
                  {s.status !== 'decommissioned' ? (
                    <>
                      <button type="button" class="small" onClick={() => setEditing(s)}>
                        Edit<span class="sr-only"> {s.name}</span>
                      </button>
                      <button type="button" class="small" onClick={() => setRegen(s)}>
                        New token<span class="sr-only"> for {s.name}</span>
                      </button>
                      <button type="button" class="small danger" onClick={() => setDecom(s)}>
                        Decommission<span class="sr-only"> {s.name}</span>
                      </button>
                    </>
                  ) : null}
                </td>
              </tr>
            );
          })}
        </CardTable>
      ) : null}
      {decommissioned > 0 ? (
        <button type="button" class="ghost" onClick={() => setShowOld(!showOld)}>
          {showOld ? 'Hide' : 'Show'} {decommissioned} decommissioned
        </button>
      ) : null}
      {editing ? (
        <ServerForm
          server={editing === 'new' ? undefined : editing}
          onClose={() => setEditing(null)}
          onSaved={(saved) => {
            replace(saved);
            setEditing(null);
            if ('connectionToken' in saved) setToken(saved);
          }}
        />
      ) : null}
      {token ? <TokenShown server={token} onClose={() => setToken(null)} /> : null}
      {regen ? (
        <Confirm
          title="New connection token"
          message={`The current token of ${regen.name} stops working at once and its agent is disconnected until it runs with the new one.`}
          action="Make a new token"
          onClose={() => setRegen(null)}
          onConfirm={async () => {
            const s = await ok(api.POST('/api/servers/{id}/token', { params: { path: { id: regen.id } } }));
            replace(s);
            setToken(s);
          }}
        />
      ) : null}
      {decom ? (
        <Confirm
          title="Decommission server"
          message={`Decommission ${decom.name}? Its agent is disconnected for good and its domains are served by their other servers. This cannot be undone.`}
          action="Decommission"
          onClose={() => setDecom(null)}
          onConfirm={async () => replace(await ok(api.DELETE('/api/servers/{id}', { params: { path: { id: decom.id } } })))}
        />
      ) : null}
    </section>
  );
}
