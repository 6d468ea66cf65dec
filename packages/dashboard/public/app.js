// Rampart dashboard: plain JavaScript, no build step, no dependencies.
// Every value from the API reaches the page as text (textContent / text nodes), never as HTML.
'use strict';

const REFRESH_MS = 20_000;
const SERVER_WIDE_RULES = new Set(['rate_limit', 'block_bot']);
const RULE_HINTS = {
  block_ip: ['203.0.113.0/24', 'An IPv4 or IPv6 address, optionally with a prefix length (203.0.113.7, 203.0.113.0/24, 2001:db8::/32).'],
  allow_ip: ['198.51.100.7', 'Whitelist: requests from this address or network skip every other WAF check. Same format as block_ip.'],
  block_country: ['KP', 'Two uppercase letters, the ISO 3166-1 country code.'],
  rate_limit: ['{"requests_per_minute": 120}', 'Server-wide (applies to every domain): {"requests_per_minute": 1..10000}; over the limit gets 429.'],
  block_bot: ['{"enabled": true}', 'Server-wide: blocks known bad bots and scanners.'],
  block_ai_bot: ['GPTBot', 'The name of an AI crawler (suggestions appear as you type).'],
};

const state = {
  signedIn: false,
  registerMode: false,
  account: null,
  servers: [],
  domains: [],
  rules: [],
  events: [],
  notifications: [],
  aiBots: null,
  timer: null,
};

// ---------------------------------------------------------------- helpers

const $ = (id) => document.getElementById(id);

/** Creates an element; string children become text nodes, so data is never parsed as HTML. */
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** A form control by name (form.elements, so a control named "name" cannot clash with form.name). */
function field(form, name) {
  return form.elements.namedItem(name);
}

function clear(el) {
  el.replaceChildren();
  return el;
}

function formatTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

function ago(iso) {
  if (!iso) return 'never';
  const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (!Number.isFinite(s)) return String(iso);
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function timeCell(iso, relative) {
  return h('time', { datetime: iso ?? undefined, title: iso ? formatTime(iso) : undefined }, relative ? ago(iso) : formatTime(iso));
}

function money(n) {
  return typeof n === 'number' ? `$${n.toFixed(2)}` : '—';
}

function badge(text, kind) {
  return h('span', { class: `badge ${kind ?? String(text)}` }, text);
}

function origin(o) {
  return String(o.ip).includes(':') ? `[${o.ip}]:${o.port}` : `${o.ip}:${o.port}`;
}

function emptyRow(table, cols, text) {
  table.append(h('tr', null, h('td', { colspan: cols, class: 'empty' }, text)));
}

function showError(el, err) {
  if (!el) return;
  el.textContent = err ? (err instanceof Error ? err.message : String(err)) : '';
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** One JSON request with the session cookie; errors carry the API's {"error": "..."} message. */
async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (method !== 'GET') {
    // The API takes JSON only; requests without a payload send an empty object.
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body ?? {});
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch {
    throw new ApiError(0, 'Cannot reach the Rampart server. Check the connection and try again.');
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) {
    const message = data && typeof data.error === 'string' ? data.error : `Request failed (HTTP ${res.status})`;
    if (res.status === 401 && state.signedIn && !path.startsWith('/api/auth/')) sessionEnded();
    throw new ApiError(res.status, message);
  }
  return data;
}

/** Runs a form's action with its submit button disabled and its error shown next to it. */
async function submitting(form, action) {
  const button = form.querySelector('button[type="submit"]');
  const errorEl = form.querySelector('[data-error]');
  showError(errorEl, null);
  if (button) button.disabled = true;
  try {
    await action();
  } catch (err) {
    showError(errorEl, err);
  } finally {
    if (button) button.disabled = false;
  }
}

// ---------------------------------------------------------------- sign in

function setRegisterMode(on) {
  state.registerMode = on;
  $('signin-title').textContent = on ? 'Create an account' : 'Sign in';
  $('signin-submit').textContent = on ? 'Create account' : 'Sign in';
  $('signin-switch-text').textContent = on ? 'Already have an account?' : 'No account yet?';
  $('signin-switch').textContent = on ? 'Sign in' : 'Create one';
  $('signin-password').setAttribute('autocomplete', on ? 'new-password' : 'current-password');
  $('signin-note').textContent = on ? 'New accounts start on the Free plan. Passwords need at least 8 characters.' : '';
  showError($('signin-form').querySelector('[data-error]'), null);
}

function showSignin(note) {
  state.signedIn = false;
  stopRefresh();
  $('app-view').hidden = true;
  $('who').hidden = true;
  $('signin-view').hidden = false;
  setRegisterMode(false);
  if (note) $('signin-note').textContent = note;
  $('signin-email').focus();
}

function sessionEnded() {
  showSignin('Your session has ended. Sign in again.');
}

async function onSignin(event) {
  event.preventDefault();
  const form = event.currentTarget;
  await submitting(form, async () => {
    const body = { email: field(form, 'email').value.trim(), password: field(form, 'password').value };
    const path = state.registerMode ? '/api/auth/register' : '/api/auth/login';
    await api('POST', path, body);
    field(form, 'password').value = '';
    await showApp();
  });
}

async function onSignout() {
  try {
    await api('POST', '/api/auth/logout');
  } catch {
    // Signed out locally either way.
  }
  state.account = null;
  showSignin('You are signed out.');
}

// ---------------------------------------------------------------- signed in

async function showApp() {
  state.signedIn = true;
  $('signin-view').hidden = true;
  $('app-view').hidden = false;
  $('who').hidden = false;
  showTab();
  await loadAll();
  startRefresh();
}

function startRefresh() {
  stopRefresh();
  state.timer = setInterval(() => {
    if (state.signedIn && document.visibilityState === 'visible') loadAll().catch(() => {});
  }, REFRESH_MS);
}

function stopRefresh() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

async function loadAll() {
  const paths = ['/api/account', '/api/servers', '/api/domains', '/api/waf', '/api/waf/events', '/api/notifications'];
  const results = await Promise.allSettled(paths.map((p) => api('GET', p)));
  if (!state.signedIn) return;
  const failed = results.find((r) => r.status === 'rejected');
  showError($('load-error'), failed ? failed.reason : null);
  const [account, servers, domains, rules, events, notifications] = results.map((r) => (r.status === 'fulfilled' ? r.value : undefined));
  if (account) state.account = account;
  if (servers) state.servers = servers;
  if (domains) state.domains = domains;
  if (rules) state.rules = rules;
  if (events) state.events = events;
  if (notifications) state.notifications = notifications;
  render();
  $('updated-at').textContent = `Updated ${new Date().toLocaleTimeString()}`;
}

function render() {
  renderAccount();
  renderServers();
  renderDomains();
  renderRules();
  renderEvents();
  renderNotifications();
}

function showTab() {
  const names = ['overview', 'servers', 'domains', 'waf', 'notifications'];
  const wanted = location.hash.slice(1);
  const current = names.includes(wanted) ? wanted : 'overview';
  for (const section of document.querySelectorAll('[data-view]')) section.hidden = section.dataset.view !== current;
  for (const link of document.querySelectorAll('[data-tab]')) {
    if (link.dataset.tab === current) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

// ---------------------------------------------------------------- account and overview

function renderAccount() {
  const a = state.account;
  if (!a) return;
  $('who-email').textContent = a.email;
  $('frozen-banner').hidden = a.state !== 'frozen';
  document.body.classList.toggle('is-frozen', a.state === 'frozen');

  const live = state.servers.filter((s) => s.status !== 'decommissioned');
  const active = live.filter((s) => s.status === 'active').length;
  const stat = (label, value, sub, kind) =>
    h('div', { class: `stat card${kind ? ` ${kind}` : ''}` }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value), sub ? h('div', { class: 'sub' }, sub) : null);
  clear($('account-stats')).append(
    stat('Plan', a.plan, `${money(a.price)} / month`),
    stat('Balance', money(a.balance), a.nextChargeAt ? `next charge ${new Date(a.nextChargeAt).toLocaleDateString()}` : null),
    stat('State', a.state, a.state === 'frozen' ? 'renew the plan to make changes' : 'changes allowed', a.state === 'frozen' ? 'bad' : 'good'),
    stat('Shield servers', `${active} / ${live.length}`, 'connected'),
    stat('Domains', String(state.domains.length), `${state.domains.filter((d) => d.status === 'active').length} active`),
    stat('WAF rules', String(state.rules.length), `${state.events.length} recent events`),
  );

  const list = clear($('overview-servers'));
  if (live.length === 0) list.append(h('p', { class: 'muted' }, 'No shield servers yet. Add one under Servers.'));
  else
    list.append(
      h('ul', { class: 'plain' }, live.map((s) => h('li', null, badge(s.status), ' ', h('strong', null, s.name), ' ', drift(s) ? badge(`drift: ${s.appliedRevision} / ${s.desiredRevision}`, 'drift') : h('span', { class: 'muted small' }, `rev ${s.appliedRevision}`)))),
    );

  const notes = clear($('overview-notifications'));
  const latest = state.notifications.slice(0, 5);
  if (latest.length === 0) notes.append(h('p', { class: 'muted' }, 'Nothing to report.'));
  else notes.append(h('ul', { class: 'plain' }, latest.map(notificationItem)));
}

// ---------------------------------------------------------------- servers

function drift(s) {
  return s.status !== 'decommissioned' && s.appliedRevision !== s.desiredRevision;
}

function renderServers() {
  const body = clear($('servers-body'));
  if (state.servers.length === 0) emptyRow(body, 6, 'No shield servers yet.');
  for (const s of state.servers) {
    const gone = s.status === 'decommissioned';
    const rev = drift(s)
      ? h('span', { class: 'drift-cell', title: 'The server does not run the latest configuration yet' }, `${s.appliedRevision} / ${s.desiredRevision}`, ' ', badge('drift', 'drift'))
      : h('span', null, `${s.appliedRevision} / ${s.desiredRevision}`);
    body.append(
      h(
        'tr',
        { class: gone ? 'dim' : drift(s) ? 'drifting' : undefined },
        h('td', null, h('strong', null, s.name)),
        h('td', null, badge(s.status)),
        h('td', null, h('code', null, s.ip ?? '—')),
        h('td', null, timeCell(s.lastSeenAt, true)),
        h('td', null, rev),
        h(
          'td',
          { class: 'actions' },
          gone
            ? null
            : [
                h('button', { type: 'button', class: 'ghost small', onclick: () => newToken(s) }, 'New token'),
                h('button', { type: 'button', class: 'danger small', onclick: () => decommission(s) }, 'Decommission'),
              ],
        ),
      ),
    );
  }
  renderServerChoices();
}

function showToken(server) {
  $('token-server').textContent = server.name;
  $('token-value').textContent = server.connectionToken;
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  $('token-command').textContent = `rampart agent --server ${scheme}://${location.host}/agent --token ${server.connectionToken}`;
  $('token-copy').textContent = 'Copy';
  $('token-box').hidden = false;
}

async function copyToken() {
  const value = $('token-value').textContent;
  try {
    await navigator.clipboard.writeText(value);
    $('token-copy').textContent = 'Copied';
  } catch {
    const range = document.createRange();
    range.selectNodeContents($('token-value'));
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    $('token-copy').textContent = 'Selected: press Ctrl+C';
  }
}

async function onAddServer(event) {
  event.preventDefault();
  const form = event.currentTarget;
  await submitting(form, async () => {
    const created = await api('POST', '/api/servers', { name: field(form, 'name').value.trim() });
    form.reset();
    showToken(created);
    await loadAll();
  });
}

async function newToken(s) {
  if (!confirm(`Generate a new connection token for "${s.name}"? The current token stops working at once.`)) return;
  try {
    showError($('servers-error'), null);
    showToken(await api('POST', `/api/servers/${encodeURIComponent(s.id)}/token`));
  } catch (err) {
    showError($('servers-error'), err);
  }
}

async function decommission(s) {
  if (!confirm(`Decommission "${s.name}"? This is final: its token is erased and it leaves every domain.`)) return;
  try {
    showError($('servers-error'), null);
    await api('DELETE', `/api/servers/${encodeURIComponent(s.id)}`);
    await loadAll();
  } catch (err) {
    showError($('servers-error'), err);
  }
}

/** The server checkboxes of the domain form, keeping what the user already ticked. */
function renderServerChoices() {
  const box = $('domain-servers');
  const checked = new Set([...box.querySelectorAll('input:checked')].map((i) => i.value));
  const live = state.servers.filter((s) => s.status !== 'decommissioned');
  clear(box);
  if (live.length === 0) box.append(h('span', { class: 'muted small' }, 'No shield servers yet: the domain stays pending until one runs it.'));
  for (const s of live) {
    box.append(h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'serverIds', value: s.id, checked: checked.has(s.id) }), ` ${s.name}`));
  }
}

// ---------------------------------------------------------------- domains

function serverName(id) {
  const s = state.servers.find((x) => x.id === id);
  return s ? s.name : id;
}

function renderDomains() {
  const body = clear($('domains-body'));
  if (state.domains.length === 0) emptyRow(body, 7, 'No domains yet.');
  for (const d of state.domains) {
    body.append(
      h(
        'tr',
        null,
        h('td', null, h('strong', null, d.domain)),
        h('td', null, d.origins.map((o) => h('code', { class: 'pill' }, origin(o)))),
        h('td', null, d.serverIds.length ? d.serverIds.map((id) => h('span', { class: 'pill' }, serverName(id))) : h('span', { class: 'muted' }, 'none')),
        h('td', null, d.sslEnabled ? badge('on', 'on') : badge('off', 'off'), d.sslEnabled && d.sslExpires ? h('div', { class: 'muted small' }, `until ${d.sslExpires}`) : null),
        // h() flattens one level of arrays: keep the children flat.
        h('td', null, d.wafEnabled ? [badge(d.wafLevel, 'on'), ...(d.wafMode === 'detect' ? [' ', badge('detect only', 'pending')] : [])] : badge('off', 'off')),
        h('td', null, badge(d.status)),
        h('td', { class: 'actions' }, h('button', { type: 'button', class: 'danger small', onclick: () => deleteDomain(d) }, 'Delete')),
      ),
    );
  }
  // The rule form's domain choices, keeping the current selection.
  const select = $('rule-domain');
  const selected = select.value;
  clear(select).append(h('option', { value: '' }, 'All domains'), ...state.domains.map((d) => h('option', { value: d.id }, d.domain)));
  select.value = state.domains.some((d) => d.id === selected) ? selected : '';
}

function parseOrigin(text) {
  const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(text) ?? /^([^:\s[\]]+):(\d{1,5})$/.exec(text);
  return m ? { ip: m[1], port: Number(m[2]) } : null;
}

async function onAddDomain(event) {
  event.preventDefault();
  const form = event.currentTarget;
  await submitting(form, async () => {
    const parsed = parseOrigin(field(form, 'origin').value.trim());
    if (!parsed) throw new Error('origin: write it as ip:port, e.g. 192.0.2.10:8080 or [2001:db8::10]:8080');
    const serverIds = [...form.querySelectorAll('input[name="serverIds"]:checked')].map((i) => i.value);
    await api('POST', '/api/domains', {
      domain: field(form, 'domain').value.trim(),
      origins: [parsed],
      serverIds,
      sslEnabled: field(form, 'sslEnabled').checked,
      wafLevel: field(form, 'wafLevel').value,
    });
    form.reset();
    await loadAll();
  });
}

async function deleteDomain(d) {
  if (!confirm(`Delete ${d.domain}? Its shield servers stop serving it.`)) return;
  try {
    showError($('domains-error'), null);
    await api('DELETE', `/api/domains/${encodeURIComponent(d.id)}`);
    await loadAll();
  } catch (err) {
    showError($('domains-error'), err);
  }
}

// ---------------------------------------------------------------- WAF

function ruleScope(r) {
  if (r.domain_id) {
    const d = state.domains.find((x) => x.id === r.domain_id);
    return d ? d.domain : r.domain_id;
  }
  return SERVER_WIDE_RULES.has(r.rule_type) ? 'server-wide' : 'all domains';
}

function renderRules() {
  const body = clear($('rules-body'));
  if (state.rules.length === 0) emptyRow(body, 6, 'No WAF rules yet.');
  for (const r of state.rules) {
    body.append(
      h(
        'tr',
        { class: r.enabled ? undefined : 'dim' },
        h('td', null, badge(r.rule_type, r.rule_type === 'allow_ip' ? 'on' : 'rule')),
        h('td', null, h('code', null, r.value)),
        h('td', null, r.domain_id ? ruleScope(r) : h('span', { class: 'muted' }, ruleScope(r))),
        h('td', null, String(r.priority)),
        h('td', null, r.enabled ? badge('yes', 'on') : badge('no', 'off')),
        h(
          'td',
          { class: 'actions' },
          h('button', { type: 'button', class: 'ghost small', onclick: () => toggleRule(r) }, r.enabled ? 'Disable' : 'Enable'),
          h('button', { type: 'button', class: 'danger small', onclick: () => deleteRule(r) }, 'Delete'),
        ),
      ),
    );
  }
}

/** A value from the request as text in a <code>, or a muted dash when there is none. */
function codeOrDash(text) {
  return text === null || text === undefined || text === '' ? h('span', { class: 'muted' }, '—') : h('code', { class: 'excerpt' }, text);
}

function renderEvents() {
  const body = clear($('events-body'));
  if (state.events.length === 0) emptyRow(body, 9, 'No WAF events recorded.');
  for (const e of state.events) {
    const rule = e.rule_id ? state.rules.find((r) => r.id === e.rule_id) : undefined;
    // blocked is false for a detection let through in detect mode; events from older agents have no details.
    const blocked = e.blocked !== false;
    body.append(
      h(
        'tr',
        { class: blocked ? undefined : 'detected' },
        h('td', null, timeCell(e.timestamp, false)),
        h('td', null, h('code', null, e.source_ip)),
        h('td', null, e.domain),
        h('td', null, e.method || e.path ? [e.method ? h('strong', null, e.method) : null, ' ', codeOrDash(e.path)] : h('span', { class: 'muted' }, '—')),
        h('td', null, badge(e.reason, 'rule')),
        h('td', null, codeOrDash(e.location)),
        h('td', null, codeOrDash(e.matched)),
        h('td', null, blocked ? badge('blocked', 'error') : badge('not blocked', 'pending')),
        h('td', null, rule ? h('code', null, `${rule.rule_type} ${rule.value}`) : e.rule_id ? h('code', null, e.rule_id) : h('span', { class: 'muted' }, '—')),
      ),
    );
  }
}

function updateRuleForm() {
  const type = $('rule-type').value;
  const value = $('rule-value');
  const [placeholder, hint] = RULE_HINTS[type] ?? ['', ''];
  value.placeholder = placeholder;
  $('rule-hint').textContent = hint;
  // JSON-valued rules get their usual value filled in; other types start empty.
  const defaults = new Set([RULE_HINTS.rate_limit[0], RULE_HINTS.block_bot[0]]);
  if (SERVER_WIDE_RULES.has(type)) value.value = placeholder;
  else if (defaults.has(value.value)) value.value = '';
  const domain = $('rule-domain');
  domain.disabled = SERVER_WIDE_RULES.has(type);
  if (domain.disabled) domain.value = '';
  if (type === 'block_ai_bot') {
    value.setAttribute('list', 'ai-bots');
    loadAiBots();
  } else value.removeAttribute('list');
}

async function loadAiBots() {
  if (state.aiBots) return;
  try {
    state.aiBots = await api('GET', '/api/waf/ai-bots');
    const list = h('datalist', { id: 'ai-bots' }, state.aiBots.map((b) => h('option', { value: b.name })));
    document.body.append(list);
  } catch {
    state.aiBots = null; // Suggestions only; the value can still be typed.
  }
}

async function onAddRule(event) {
  event.preventDefault();
  const form = event.currentTarget;
  await submitting(form, async () => {
    const body = { rule_type: field(form, 'rule_type').value, value: field(form, 'value').value.trim() };
    if (field(form, 'domain_id').value && !SERVER_WIDE_RULES.has(body.rule_type)) body.domain_id = field(form, 'domain_id').value;
    await api('POST', '/api/waf', body);
    field(form, 'value').value = '';
    updateRuleForm();
    await loadAll();
  });
}

async function toggleRule(r) {
  try {
    showError($('rules-error'), null);
    await api('PUT', `/api/waf/${encodeURIComponent(r.id)}`, { enabled: !r.enabled });
    await loadAll();
  } catch (err) {
    showError($('rules-error'), err);
  }
}

async function deleteRule(r) {
  if (!confirm(`Delete the ${r.rule_type} rule "${r.value}"?`)) return;
  try {
    showError($('rules-error'), null);
    await api('DELETE', `/api/waf/${encodeURIComponent(r.id)}`);
    await loadAll();
  } catch (err) {
    showError($('rules-error'), err);
  }
}

// ---------------------------------------------------------------- notifications

function notificationItem(n) {
  // Identical notifications within a minute come folded into one with a count (docs/api.md).
  const times = n.count > 1 ? h('span', { class: 'muted small' }, ` ×${n.count}, last `, timeCell(n.updatedAt, true)) : null;
  return h('li', null, badge(n.kind, 'rule'), ' ', h('span', null, n.message), ' ', h('span', { class: 'muted small' }, '· ', timeCell(n.createdAt, true)), times);
}

function renderNotifications() {
  const list = clear($('notifications-list'));
  const count = $('notif-count');
  count.textContent = String(state.notifications.length);
  count.hidden = state.notifications.length === 0;
  if (state.notifications.length === 0) {
    list.append(h('p', { class: 'muted' }, 'No notifications.'));
    return;
  }
  list.append(h('ul', { class: 'plain notifications' }, state.notifications.map(notificationItem)));
}

// ---------------------------------------------------------------- start

async function start() {
  $('signin-form').addEventListener('submit', onSignin);
  $('signin-switch').addEventListener('click', () => setRegisterMode(!state.registerMode));
  $('signout').addEventListener('click', onSignout);
  $('refresh').addEventListener('click', () => loadAll().catch(() => {}));
  $('server-form').addEventListener('submit', onAddServer);
  $('domain-form').addEventListener('submit', onAddDomain);
  $('rule-form').addEventListener('submit', onAddRule);
  $('rule-type').addEventListener('change', updateRuleForm);
  $('token-copy').addEventListener('click', copyToken);
  $('token-dismiss').addEventListener('click', () => {
    $('token-box').hidden = true;
    $('token-value').textContent = '';
    $('token-command').textContent = '';
  });
  window.addEventListener('hashchange', showTab);
  updateRuleForm();

  // Signed in already (the session cookie is HttpOnly, so ask the API)?
  try {
    state.account = await api('GET', '/api/account');
  } catch (err) {
    showSignin(err.status === 401 ? undefined : err.message);
    return;
  }
  await showApp();
}

start();
