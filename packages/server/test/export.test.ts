import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md "Configuration export": headers and file name, the exact document shape, what is in it
// (servers without tokens, domains, ip_blacklist and rate_limit rules, the HAProxy template) and
// what never is (tokens, bot rules, other rule types, API keys, balance, transactions). It works
// with an API key, a session cookie, and for a frozen account.

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const TOP_FIELDS = ['domains', 'exported_at', 'exported_by', 'note', 'proxy_config_template', 'servers', 'waf_rules'];
const SERVER_FIELDS = ['ip', 'name', 'status'];
const DOMAIN_FIELDS = ['domain', 'origins', 'ssl_enabled', 'ssl_expires', 'status', 'waf_enabled', 'waf_level'];
const RULE_FIELDS = ['enabled', 'type', 'value'];

/** Every object key anywhere inside a JSON value. */
function allKeys(v: unknown): string[] {
  if (Array.isArray(v)) return v.flatMap(allKeys);
  if (v && typeof v === 'object') return Object.entries(v).flatMap(([k, x]) => [k, ...allKeys(x)]);
  return [];
}

/** HAProxy sections: a header line at column 0, then its indented lines. */
function sections(cfg: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const line of cfg.split('\n')) {
    if (line.trim() === '' || line.trim().startsWith('#')) continue;
    if (/^\S/.test(line)) {
      current = [];
      out.set(line.trim().replace(/\s+/g, ' '), current);
    } else if (current) {
      current.push(line.trim().replace(/\s+/g, ' '));
    }
  }
  return out;
}

describe('configuration export', async () => {
  const t = await makeTestApp();
  const app = t.app;
  const password = 'export-pass-123';
  const owner = await newAccount(app, 'pro', 100, password);
  const key = owner.key;

  // A full account: two servers (one decommissioned, one with a regenerated token), two domains
  // (one IPv6, in detect mode), every rule type, a deposit and an extra API key.
  const mustCreate = async (method: string, url: string, body?: unknown) => {
    const r = await call(app, method, url, { key, ...(body !== undefined ? { body } : {}) });
    assert.ok(r.status === 200 || r.status === 201, `${method} ${url}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const edge = await mustCreate('POST', '/api/servers', { name: 'edge-1' });
  const old = await mustCreate('POST', '/api/servers', { name: 'old-box' });
  const regenerated = await mustCreate('POST', `/api/servers/${edge.id}/token`);
  await mustCreate('DELETE', `/api/servers/${old.id}`);
  const tokens: string[] = [edge.connectionToken, old.connectionToken, regenerated.connectionToken];
  const shop = await mustCreate('POST', '/api/domains', {
    domain: 'shop.example.com',
    origins: [
      { ip: '10.0.0.1', port: 8080 },
      { ip: '10.0.0.2', port: 8081 },
    ],
    serverIds: [edge.id],
    sslEnabled: true,
  });
  await mustCreate('POST', '/api/domains', {
    domain: 'api.example.org',
    origins: [{ ip: '::1', port: 80 }],
    serverIds: [edge.id],
    sslEnabled: false,
    wafLevel: 'high',
    wafMode: 'detect',
  });
  await mustCreate('POST', '/api/waf', { rule_type: 'block_ip', value: '203.0.113.0/24' });
  await mustCreate('POST', '/api/waf', { rule_type: 'block_ip', value: '198.51.100.9', domain_id: shop.id, enabled: false });
  await mustCreate('POST', '/api/waf', { rule_type: 'rate_limit', value: JSON.stringify({ requests_per_minute: 120 }) });
  await mustCreate('POST', '/api/waf', { rule_type: 'allow_ip', value: '192.0.2.77' });
  await mustCreate('POST', '/api/waf', { rule_type: 'block_country', value: 'KP' });
  await mustCreate('POST', '/api/waf', { rule_type: 'block_bot', value: JSON.stringify({ enabled: true }) });
  await mustCreate('POST', '/api/waf', { rule_type: 'block_ai_bot', value: 'GPTBot' });
  await mustCreate('POST', '/api/waf', { rule_type: 'waf_exception', value: '{"path":"/exported-never","location":"body:content","detector":"xss"}', domain_id: shop.id });
  const extraKey = await mustCreate('POST', '/api/settings/api-keys', { name: 'exporter' });
  await mustCreate('POST', '/api/billing/deposits', { amount: 12.34 });

  const res = await call(app, 'GET', '/api/settings/export', { key });
  const raw = (await app.inject({ method: 'GET', url: '/api/settings/export', headers: { 'x-api-key': key } })).body;
  const doc = res.body;

  test('answers 200 as an application/json attachment named rampart-export-YYYY-MM-DD.json (UTC date)', () => {
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.match(String(res.headers['content-type']), /^application\/json(;|$)/);
    const day = t.clock.now().toISOString().slice(0, 10);
    assert.equal(res.headers['content-disposition'], `attachment; filename="rampart-export-${day}.json"`);
    assert.match(day, /^\d{4}-\d{2}-\d{2}$/);
    assert.doesNotThrow(() => JSON.parse(raw), 'the body is JSON');
  });

  test('the document has exactly the documented fields', () => {
    assert.deepEqual(Object.keys(doc).sort(), TOP_FIELDS);
    assert.equal(typeof doc.exported_at, 'string');
    assert.equal(new Date(doc.exported_at).toISOString(), doc.exported_at, 'exported_at is ISO 8601');
    assert.equal(doc.exported_at, t.clock.now().toISOString());
    assert.equal(typeof doc.exported_by, 'string');
    assert.ok(doc.exported_by.length > 0);
    assert.equal(typeof doc.note, 'string');
    assert.ok(doc.note.length > 0);
    assert.equal(typeof doc.proxy_config_template, 'string');
  });

  test('servers: name, ip (null before the first connection), status', () => {
    for (const s of doc.servers) assert.deepEqual(Object.keys(s).sort(), SERVER_FIELDS);
    const sorted = [...doc.servers].sort((a, b) => a.name.localeCompare(b.name));
    assert.deepEqual(sorted, [
      { name: 'edge-1', ip: null, status: 'offline' },
      { name: 'old-box', ip: null, status: 'decommissioned' },
    ]);
  });

  test('domains: origins as host:port strings ([::1]:80 for IPv6) and the documented fields', () => {
    for (const d of doc.domains) assert.deepEqual(Object.keys(d).sort(), DOMAIN_FIELDS);
    const sorted = [...doc.domains].sort((a, b) => a.domain.localeCompare(b.domain));
    assert.deepEqual(sorted, [
      {
        domain: 'api.example.org',
        origins: ['[::1]:80'],
        ssl_enabled: false,
        ssl_expires: null,
        waf_enabled: true,
        waf_level: 'high',
        status: 'pending',
      },
      {
        domain: 'shop.example.com',
        origins: ['10.0.0.1:8080', '10.0.0.2:8081'],
        ssl_enabled: true,
        ssl_expires: null,
        waf_enabled: true,
        waf_level: 'medium',
        status: 'pending',
      },
    ]);
  });

  test('waf_rules: only block_ip (as ip_blacklist) and rate_limit, with value and enabled', () => {
    for (const r of doc.waf_rules) assert.deepEqual(Object.keys(r).sort(), RULE_FIELDS);
    const byTypeValue = (r: { type: string; value: string }) => `${r.type} ${r.value}`;
    const sorted = [...doc.waf_rules].sort((a, b) => (byTypeValue(a) < byTypeValue(b) ? -1 : 1));
    assert.deepEqual(sorted, [
      { type: 'ip_blacklist', value: '198.51.100.9', enabled: false },
      { type: 'ip_blacklist', value: '203.0.113.0/24', enabled: true },
      { type: 'rate_limit', value: JSON.stringify({ requests_per_minute: 120 }), enabled: true },
    ]);
    // allow_ip, block_country, block_bot, block_ai_bot and waf_exception rules are absent, in any form.
    for (const absent of ['192.0.2.77', 'KP', 'GPTBot', '{\\"enabled\\":true}', 'allow_ip', 'block_country', 'block_bot', 'block_ai_bot', 'waf_exception', 'exported-never', 'body:content']) {
      assert.ok(!raw.includes(absent), `${absent} must not be exported`);
    }
  });

  test("a domain's wafMode is not exported (the export's domain fields are fixed)", () => {
    assert.ok(!raw.includes('wafMode') && !raw.includes('waf_mode') && !raw.includes('detect'), 'no wafMode in any form');
  });

  test('no connection token anywhere', () => {
    for (const token of tokens) {
      assert.ok(!raw.includes(token), 'a plaintext token leaked');
      assert.ok(!raw.includes(sha256(token)), 'a token hash leaked');
    }
    assert.ok(!raw.includes('rmps_'));
    for (const k of allKeys(doc)) assert.doesNotMatch(k, /token|hash|secret/i, `field ${k}`);
    // Apart from the free-text note (which may say that tokens are excluded), the word does not appear.
    const withoutNote = raw.replace(JSON.stringify(doc.note), '');
    assert.doesNotMatch(withoutNote, /token/i);
  });

  test('API keys, balance and transactions are not exported', () => {
    for (const k of [key, extraKey.key]) {
      assert.ok(!raw.includes(k), 'an API key leaked');
      assert.ok(!raw.includes(k.slice(0, 12)), 'an API key prefix leaked');
      assert.ok(!raw.includes(sha256(k)), 'an API key hash leaked');
    }
    assert.ok(!raw.includes('exporter'), 'key names are not exported');
    assert.ok(!raw.includes('12.34') && !raw.includes('1234'), 'the deposit is not exported');
    for (const k of allKeys(doc)) assert.doesNotMatch(k, /key|balance|transaction|deposit|amount|price|plan|email|account/i, `field ${k}`);
    const withoutNote = raw.replace(JSON.stringify(doc.note), '');
    assert.doesNotMatch(withoutNote, /balance|transaction|deposit|api.?key|@example\.com/i);
    assert.ok(!raw.includes(owner.email));
  });

  test('the template: frontend on port 80, one host route per domain, a 404 default backend', () => {
    const cfg: string = doc.proxy_config_template;
    const secs = sections(cfg);
    const frontends = [...secs.entries()].filter(([h]) => /^(frontend|listen) /.test(h));
    assert.equal(frontends.length, 1, 'one frontend');
    const [, fe] = frontends[0]!;
    assert.ok(fe.includes('bind *:80'), 'bind *:80');
    assert.equal(fe.filter((l) => l.startsWith('bind ')).length, 1, 'only port 80 is bound');
    const routes = fe.filter((l) => l.startsWith('use_backend '));
    assert.equal(routes.length, 2, 'one use_backend per domain');
    const shopRoute = routes.find((l) => l.startsWith('use_backend be_shop_example_com '));
    const apiRoute = routes.find((l) => l.startsWith('use_backend be_api_example_org '));
    assert.ok(shopRoute && /\bshop\.example\.com\b/.test(shopRoute) && /host/i.test(shopRoute), `host route for shop: ${shopRoute}`);
    assert.ok(apiRoute && /\bapi\.example\.org\b/.test(apiRoute) && /host/i.test(apiRoute), `host route for api: ${apiRoute}`);
    const def = fe.find((l) => l.startsWith('default_backend '));
    assert.ok(def, 'a default backend');
    const defName = def.split(' ')[1]!;
    const defBackend = secs.get(`backend ${defName}`);
    assert.ok(defBackend, `backend ${defName} exists`);
    assert.ok(
      defBackend.some((l) => /\b404\b/.test(l)),
      'the default backend answers 404',
    );
    assert.ok(!defBackend.some((l) => l.startsWith('server ')), 'the default backend has no servers');
  });

  test('the template: one be_ backend per domain with health check on /, headers and origin servers', () => {
    const cfg: string = doc.proxy_config_template;
    const secs = sections(cfg);
    const shop = secs.get('backend be_shop_example_com');
    assert.ok(shop, 'backend be_shop_example_com');
    assert.ok(
      shop.some((l) => l.startsWith('option httpchk')),
      'option httpchk',
    );
    assert.ok(
      shop.some((l) => /^option httpchk(\s+(GET|HEAD|OPTIONS))?\s+\/(\s|$)/.test(l) || /^http-check send .*\buri \/(\s|$)/.test(l)),
      'the health check asks for /',
    );
    assert.ok(shop.includes('http-request set-header X-Forwarded-Proto https'));
    assert.ok(shop.includes('http-request set-header X-Real-IP %[src]'));
    assert.ok(shop.includes('http-request set-header Host shop.example.com'));
    const serverLines = shop.filter((l) => l.startsWith('server '));
    assert.equal(serverLines.length, 2);
    assert.match(serverLines[0]!, /^server origin0 10\.0\.0\.1:8080( .*)? check\b/);
    assert.match(serverLines[1]!, /^server origin1 10\.0\.0\.2:8081( .*)? check\b/);

    const api = secs.get('backend be_api_example_org');
    assert.ok(api, 'backend be_api_example_org');
    assert.ok(api.includes('http-request set-header Host api.example.org'));
    const apiServers = api.filter((l) => l.startsWith('server '));
    assert.equal(apiServers.length, 1);
    assert.match(apiServers[0]!, /^server origin0 \S*::1\S* .*\bcheck\b/);
    assert.equal([...secs.keys()].filter((h) => h.startsWith('backend be_')).length, 2, 'one backend per domain');
  });

  test('the template: the documented timeouts, no 443, no certificates, no WAF or bot logic', () => {
    const cfg: string = doc.proxy_config_template;
    assert.match(cfg, /^\s*timeout connect 5000(ms)?\s*$/m);
    assert.match(cfg, /^\s*timeout client 50000(ms)?\s*$/m);
    assert.match(cfg, /^\s*timeout server 50000(ms)?\s*$/m);
    assert.ok(!cfg.includes(':443'), 'no port 443');
    assert.doesNotMatch(cfg, /crt/i, 'no certificates');
    assert.doesNotMatch(cfg, /\bssl\b/i, 'no TLS');
    assert.doesNotMatch(cfg, /lua/i, 'no Lua');
    assert.doesNotMatch(cfg, /203\.0\.113|198\.51\.100|192\.0\.2\.77|GPTBot|\bKP\b|challenge|deny|tarpit/i, 'no WAF or bot rules');
  });

  test('an account with nothing in it exports empty lists and a template with only the default backend', async () => {
    const empty = await newAccount(app);
    const r = await call(app, 'GET', '/api/settings/export', { key: empty.key });
    assert.equal(r.status, 200);
    assert.deepEqual(Object.keys(r.body).sort(), TOP_FIELDS);
    assert.deepEqual(r.body.servers, []);
    assert.deepEqual(r.body.domains, []);
    assert.deepEqual(r.body.waf_rules, []);
    const secs = sections(r.body.proxy_config_template);
    assert.ok(r.body.proxy_config_template.includes('bind *:80'));
    assert.ok(![...secs.values()].flat().some((l) => l.startsWith('use_backend ')));
    assert.equal([...secs.keys()].filter((h) => h.startsWith('backend be_')).length, 0);
  });

  test('another account never sees this account in its export', async () => {
    const other = await newAccount(app);
    const r = await call(app, 'GET', '/api/settings/export', { key: other.key });
    assert.equal(r.status, 200);
    const text = JSON.stringify(r.body);
    for (const s of ['shop.example.com', 'api.example.org', 'edge-1', '203.0.113.0/24']) assert.ok(!text.includes(s), s);
  });

  test('works with a session cookie and gives the same document', async () => {
    const login = await call(app, 'POST', '/api/auth/login', { body: { email: owner.email, password } });
    assert.equal(login.status, 200, JSON.stringify(login.body));
    const c = login.cookies.find((x) => x.name === 'rampart_session');
    assert.ok(c);
    const r = await call(app, 'GET', '/api/settings/export', { cookie: `rampart_session=${c.value}` });
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /^application\/json(;|$)/);
    assert.equal(r.headers['content-disposition'], res.headers['content-disposition']);
    assert.deepEqual(r.body, doc);
  });

  test('without credentials: 401', async () => {
    const r = await call(app, 'GET', '/api/settings/export');
    assert.equal(r.status, 401);
    assert.deepEqual(r.body, { error: 'Invalid or missing API key' });
  });

  test('works for a frozen account', async () => {
    const poor = await newAccount(app, 'pro', 1);
    const s = await call(app, 'POST', '/api/servers', { key: poor.key, body: { name: 'frozen-edge' } });
    assert.equal(s.status, 201);
    const d = await call(app, 'POST', '/api/domains', {
      key: poor.key,
      body: { domain: 'frozen.example.net', origins: [{ ip: '10.2.2.2', port: 80 }], serverIds: [s.body.id], sslEnabled: true },
    });
    assert.equal(d.status, 201);
    const charge = await call(app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId: poor.accountId } });
    assert.equal(charge.status, 200);
    assert.equal((await call(app, 'GET', '/api/account', { key: poor.key })).body.state, 'frozen');
    const r = await call(app, 'GET', '/api/settings/export', { key: poor.key });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(Object.keys(r.body).sort(), TOP_FIELDS);
    assert.deepEqual(r.body.servers, [{ name: 'frozen-edge', ip: null, status: 'offline' }]);
    assert.deepEqual(
      r.body.domains.map((x: { domain: string }) => x.domain),
      ['frozen.example.net'],
    );
    assert.ok(r.body.proxy_config_template.includes('backend be_frozen_example_net'));
    assert.ok(!JSON.stringify(r.body).includes(s.body.connectionToken));
  });
});
