import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { buildSnapshots } from '../src/services/snapshot.js';
import { call, makeTestApp, newAccount, type TestApp } from './helpers.js';

// One app for the whole file. Created at top level rather than in before(): makeTestApp registers
// after(close), which inside a before() hook would run as soon as that hook ends.
const t: TestApp = await makeTestApp();

const ORIGINS = [{ ip: '192.0.2.10', port: 80 }];

async function server(key: string, name = 'edge') {
  const r = await call(t.app, 'POST', '/api/servers', { key, body: { name } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id as string;
}

async function domain(key: string, name: string, serverIds: string[] = []) {
  const r = await call(t.app, 'POST', '/api/domains', { key, body: { domain: name, origins: ORIGINS, serverIds } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id as string;
}

async function rule(key: string, body: Record<string, unknown>) {
  const r = await call(t.app, 'POST', '/api/waf', { key, body });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body;
}

async function revisions(key: string): Promise<Record<string, number>> {
  const r = await call(t.app, 'GET', '/api/servers', { key });
  assert.equal(r.status, 200);
  return Object.fromEntries(r.body.map((s: { id: string; desiredRevision: number }) => [s.id, s.desiredRevision]));
}

async function rules(key: string) {
  const r = await call(t.app, 'GET', '/api/waf', { key });
  assert.equal(r.status, 200);
  return r.body as { id: string; rule_type: string; value: string; domain_id: string | null; enabled: boolean; priority: number }[];
}

function expect400(r: { status: number; body: any }, field: string, label = '') {
  assert.equal(r.status, 400, `${label} ${JSON.stringify(r.body)}`);
  assert.equal(typeof r.body.error, 'string');
  assert.ok(r.body.error.includes(field), `${label}: error ${JSON.stringify(r.body.error)} should name ${field}`);
}

describe('POST /api/waf', () => {
  test('creates a global rule of each of the six types with defaults', async () => {
    const { key } = await newAccount(t.app);
    const cases: [string, string, string][] = [
      ['block_ip', '203.0.113.0/24', '203.0.113.0/24'],
      ['allow_ip', '198.51.100.7', '198.51.100.7'],
      ['block_country', 'CN', 'CN'],
      ['rate_limit', '{"requests_per_minute":120}', '{"requests_per_minute":120}'],
      ['block_bot', '{"enabled":true}', '{"enabled":true}'],
      ['block_ai_bot', 'gptbot', 'GPTBot'],
    ];
    for (const [rule_type, value, stored] of cases) {
      const r = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type, value } });
      assert.equal(r.status, 201, `${rule_type}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.id, /^[0-9a-f-]{36}$/);
      assert.equal(r.body.rule_type, rule_type);
      assert.equal(r.body.value, stored);
      assert.equal(r.body.domain_id, null);
      assert.equal(r.body.enabled, true);
      assert.equal(r.body.priority, 100);
    }
    assert.equal((await rules(key)).length, 6);
  });

  test('a repeated rule (same type, canonical value and scope) is refused with 409 and nothing is stored; another scope or value is not a repeat', async () => {
    const { key } = await newAccount(t.app);
    const domain = await call(t.app, 'POST', '/api/domains', { key, body: { domain: 'repeat.example.com', origins: [{ ip: '10.0.0.1', port: 80 }] } });
    assert.equal(domain.status, 201, JSON.stringify(domain.body));
    const first = await rule(key, { rule_type: 'block_ai_bot', value: 'GPTBot' });
    for (const [what, body] of [
      ['the same value in another case (canonical GPTBot)', { rule_type: 'block_ai_bot', value: 'gptbot' }],
      ['the same JSON in another spelling', { rule_type: 'rate_limit', value: '{ "requests_per_minute": 60 }', seed: '{}' }],
    ] as const) {
      if ('seed' in body) assert.equal((await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: body.rule_type, value: body.seed } })).status, 201);
      const again = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: body.rule_type, value: body.value } });
      assert.equal(again.status, 409, `${what}: ${JSON.stringify(again.body)}`);
      assert.match(again.body.error, /already exists/);
    }
    assert.equal((await rules(key)).length, 2, 'nothing stored');
    const scoped = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ai_bot', value: 'GPTBot', domain_id: domain.body.id } });
    assert.equal(scoped.status, 201, 'the same value on one domain is another rule');
    const other = await rule(key, { rule_type: 'block_ai_bot', value: 'ClaudeBot' });
    // Changing a rule's value into a repeat is refused too, and the rule keeps its value.
    const put = await call(t.app, 'PUT', `/api/waf/${other.id}`, { key, body: { value: 'gptbot' } });
    assert.equal(put.status, 409, JSON.stringify(put.body));
    assert.ok(put.body.error.includes(first.id), 'the answer names the rule it repeats');
    assert.equal((await rules(key)).find((r: any) => r.id === other.id).value, 'ClaudeBot');
    assert.equal((await call(t.app, 'PUT', `/api/waf/${other.id}`, { key, body: { value: 'ClaudeBot', priority: 5 } })).status, 200, 'its own value is no repeat');
    // Another account may have the same rule.
    const { key: key2 } = await newAccount(t.app);
    assert.equal((await call(t.app, 'POST', '/api/waf', { key: key2, body: { rule_type: 'block_ai_bot', value: 'GPTBot' } })).status, 201);
  });

  test('attack: the same address spelled otherwise (case, zeros, compression, a full-length prefix) is a repeat; two identical POSTs at once store one', async () => {
    const { key } = await newAccount(t.app);
    const first = await rule(key, { rule_type: 'block_ip', value: '2001:db8::1' });
    assert.equal(first.value, '2001:db8::1');
    for (const value of ['2001:DB8::1', '2001:0db8:0000::0001', '2001:db8:0:0:0:0:0:1', '2001:db8::1/128']) {
      const again = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value } });
      assert.equal(again.status, 409, `${value}: ${JSON.stringify(again.body)}`);
    }
    const v4 = await rule(key, { rule_type: 'allow_ip', value: '198.51.100.7/32' });
    assert.equal(v4.value, '198.51.100.7', 'a /32 is the address itself');
    assert.equal((await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'allow_ip', value: '198.51.100.7' } })).status, 409);
    const net6 = await rule(key, { rule_type: 'block_ip', value: '2001:DB8:0:0::/48' });
    assert.equal(net6.value, '2001:db8::/48');
    // A race: two identical creations at once are serialized by the account lock.
    const both = await Promise.all([0, 1].map(() => call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_country', value: 'KP' } })));
    assert.deepEqual(both.map((r) => r.status).sort(), [201, 409]);
    assert.equal((await rules(key)).length, 4);
  });

  test('rate_limit without requests_per_minute defaults to 60', async () => {
    const { key } = await newAccount(t.app);
    const r = await rule(key, { rule_type: 'rate_limit', value: '{}' });
    assert.equal(r.value, '{"requests_per_minute":60}');
  });

  test('per-domain rules, explicit enabled and priority are kept', async () => {
    const { key } = await newAccount(t.app);
    const d = await domain(key, 'perdomain.example.com');
    for (const rule_type of ['block_ip', 'allow_ip']) {
      const r = await rule(key, { rule_type, value: '10.0.0.0/8', domain_id: d, enabled: false, priority: 7 });
      assert.equal(r.domain_id, d);
      assert.equal(r.enabled, false);
      assert.equal(r.priority, 7);
    }
    assert.equal((await rule(key, { rule_type: 'block_country', value: 'RU', domain_id: d })).domain_id, d);
    assert.equal((await rule(key, { rule_type: 'block_ai_bot', value: 'CCBot', domain_id: d })).domain_id, d);
    assert.equal((await rule(key, { rule_type: 'block_ip', value: '1.2.3.4', priority: 0 })).priority, 0);
  });

  test('invalid values answer 400 naming value, and nothing is stored', async () => {
    const { key } = await newAccount(t.app);
    const cases: [string, string][] = [
      ['block_ip', '1.2.3.4/33'],
      ['block_ip', '1.2.3'],
      ['block_ip', 'abc'],
      ['block_ip', '1.2.3.4 #x'],
      ['allow_ip', '1.2.3.4/33'],
      ['allow_ip', '1.2.3.4\nbad'],
      ['block_country', 'us'],
      ['block_country', 'USA'],
      ['block_country', 'U1'],
      ['rate_limit', '{"requests_per_minute":0}'],
      ['rate_limit', '{"requests_per_minute":10001}'],
      ['rate_limit', '{"requests_per_minute":1.5}'],
      ['rate_limit', '{"requests_per_minute":"60"}'],
      ['rate_limit', 'not json'],
      ['rate_limit', '[]'],
      ['block_bot', '{}'],
      ['block_bot', '{"enabled":"yes"}'],
      ['block_ai_bot', 'NotABot'],
    ];
    for (const [rule_type, value] of cases) {
      expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type, value } }), 'value', `${rule_type} ${value}`);
    }
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '' } }), 'value', 'empty value');
    assert.deepEqual(await rules(key), []);
  });

  test("domain_id on rate_limit or block_bot is 400, even with the account's own domain", async () => {
    const { key } = await newAccount(t.app);
    const d = await domain(key, 'serverwide.example.com');
    for (const [rule_type, value] of [
      ['rate_limit', '{"requests_per_minute":10}'],
      ['block_bot', '{"enabled":true}'],
    ]) {
      for (const domain_id of [d, randomUUID()]) {
        expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type, value, domain_id } }), 'domain_id', rule_type);
      }
    }
    assert.deepEqual(await rules(key), []);
  });

  test('domain_id of another account or of no domain is 404, with the same body', async () => {
    const a = await newAccount(t.app);
    const b = await newAccount(t.app);
    const dA = await domain(a.key, 'owned-by-a.example.com');
    const other = await call(t.app, 'POST', '/api/waf', { key: b.key, body: { rule_type: 'block_ip', value: '1.2.3.4', domain_id: dA } });
    const missing = await call(t.app, 'POST', '/api/waf', { key: b.key, body: { rule_type: 'block_ip', value: '1.2.3.4', domain_id: randomUUID() } });
    const garbage = await call(t.app, 'POST', '/api/waf', { key: b.key, body: { rule_type: 'block_ip', value: '1.2.3.4', domain_id: 'not-a-uuid' } });
    assert.equal(other.status, 404);
    assert.deepEqual(other.body, { error: 'Domain not found' });
    assert.deepEqual(missing.body, other.body);
    assert.equal(missing.status, 404);
    assert.equal(garbage.status, 404);
    assert.deepEqual(garbage.body, other.body);
    assert.deepEqual(await rules(b.key), []);
    assert.deepEqual(await rules(a.key), []);
  });

  test('type errors and missing fields name the field', async () => {
    const { key } = await newAccount(t.app);
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '1.2.3.4', enabled: 'true' } }), 'enabled');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '1.2.3.4', enabled: 1 } }), 'enabled');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '1.2.3.4', priority: 1.5 } }), 'priority');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '1.2.3.4', priority: '5' } }), 'priority');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '1.2.3.4', priority: -1 } }), 'priority');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: 12 } }), 'value');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '1.2.3.4', domain_id: 5 } }), 'domain_id');
    const unknownType = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_everything', value: 'x' } });
    expect400(unknownType, 'rule_type');
    assert.match(unknownType.body.error, /block_ip/, 'the message lists the allowed types');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip' } }), 'value');
    expect400(await call(t.app, 'POST', '/api/waf', { key, body: { value: '1.2.3.4' } }), 'rule_type');
    const unknown = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '1.2.3.4', action: 'drop' } });
    expect400(unknown, 'action');
    assert.deepEqual(await rules(key), []);
  });
});

describe('waf_exception rules', () => {
  const EXAMPLE = '{"path":"/comments","location":"body:content","detector":"xss"}';

  test('created on a domain, stored in canonical form (key order, lowercased header name) and listed', async () => {
    const { key } = await newAccount(t.app);
    const d = await domain(key, 'exceptions.example.com');
    const full = await rule(key, { rule_type: 'waf_exception', value: EXAMPLE, domain_id: d });
    assert.deepEqual([full.rule_type, full.value, full.domain_id, full.enabled, full.priority], ['waf_exception', EXAMPLE, d, true, 100]);
    const reordered = await rule(key, { rule_type: 'waf_exception', value: ' { "detector": "sqli", "location": "header:X-Search", "path": "/search" } ', domain_id: d });
    assert.equal(reordered.value, '{"path":"/search","location":"header:x-search","detector":"sqli"}');
    assert.equal((await rule(key, { rule_type: 'waf_exception', value: '{"path":"/upload"}', domain_id: d, enabled: false })).value, '{"path":"/upload"}');
    assert.equal((await rule(key, { rule_type: 'waf_exception', value: '{"path":"/a","location":"path"}', domain_id: d })).value, '{"path":"/a","location":"path"}');
    assert.equal((await rule(key, { rule_type: 'waf_exception', value: '{"path":"/a","location":"cookie:*"}', domain_id: d })).value, '{"path":"/a","location":"cookie:*"}');
    const listed = (await rules(key)).filter((r) => r.rule_type === 'waf_exception');
    assert.equal(listed.length, 5);
    assert.ok(listed.every((r) => r.domain_id === d));
  });

  test('without domain_id it is 400 naming domain_id, and nothing is stored', async () => {
    const { key } = await newAccount(t.app);
    const r = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'waf_exception', value: EXAMPLE } });
    expect400(r, 'domain_id');
    assert.equal(r.body.error, 'domain_id: is required for waf_exception rules, which apply to one domain');
    // A bad value too: both problems at once.
    const both = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'waf_exception', value: '{"path":"x"}' } });
    expect400(both, 'domain_id');
    assert.match(both.body.error, /value has an invalid path/);
    assert.deepEqual(await rules(key), []);
  });

  test('invalid values are 400 naming value and saying what is wrong; nothing is stored', async () => {
    const { key } = await newAccount(t.app);
    const d = await domain(key, 'bad-exceptions.example.com');
    const cases: [string, RegExp][] = [
      ['not json', /^value must be a JSON object with a path/],
      ['"/comments"', /^value must be a JSON object/],
      ['{}', /^value needs a path/],
      ['{"path":"comments"}', /^value has an invalid path: it must be a string that starts with \/ and has 1 to 256 printable ASCII characters, no spaces$/],
      ['{"path":"/a b"}', /^value has an invalid path/],
      ['{"path":"/caf\u00e9"}', /^value has an invalid path/],
      [JSON.stringify({ path: `/${'a'.repeat(256)}` }), /^value has an invalid path/],
      ['{"path":"/","location":"query:a b"}', /^value has an invalid location: it must be path, or query:, body:, cookie:, header: followed by \* or a name of 1 to 64 characters/],
      ['{"path":"/","location":"args:id"}', /^value has an invalid location/],
      [JSON.stringify({ path: '/', location: `body:${'n'.repeat(65)}` }), /^value has an invalid location/],
      ['{"path":"/","detector":"rce"}', /^value has an invalid detector: it must be one of sqli, xss, cmdi, traversal, ssrf, xxe, injection, upload$/],
      ['{"path":"/","detector":null}', /^value has an invalid detector/],
      ['{"path":"/","action":"allow"}', /^value has an unknown field: action$/],
    ];
    for (const [value, re] of cases) {
      const r = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'waf_exception', value, domain_id: d } });
      expect400(r, 'value', value);
      assert.match(r.body.error, re, value);
    }
    assert.deepEqual(await rules(key), []);
  });

  test('domain_id of another account or of no domain is 404', async () => {
    const a = await newAccount(t.app);
    const b = await newAccount(t.app);
    const dA = await domain(a.key, 'exception-owner.example.com');
    for (const domain_id of [dA, randomUUID(), 'not-a-uuid']) {
      const r = await call(t.app, 'POST', '/api/waf', { key: b.key, body: { rule_type: 'waf_exception', value: EXAMPLE, domain_id } });
      assert.equal(r.status, 404);
      assert.deepEqual(r.body, { error: 'Domain not found' });
    }
    assert.deepEqual(await rules(b.key), []);
  });

  test('PUT re-validates the value as a waf_exception and canonicalizes it', async () => {
    const { key } = await newAccount(t.app);
    const d = await domain(key, 'put-exception.example.com');
    const r = await rule(key, { rule_type: 'waf_exception', value: EXAMPLE, domain_id: d });
    const bad = await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { value: '{"path":"/","location":"header:"}' } });
    expect400(bad, 'value');
    assert.match(bad.body.error, /^value: has an invalid location/);
    expect400(await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { value: '1.2.3.4' } }), 'value');
    const good = await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { value: '{"detector":"cmdi","path":"/run","location":"header:X-Cmd"}' } });
    assert.equal(good.status, 200, JSON.stringify(good.body));
    assert.equal(good.body.value, '{"path":"/run","location":"header:x-cmd","detector":"cmdi"}');
    assert.equal(good.body.domain_id, d);
  });

  test('reaches only the servers of its domain, in the snapshot with its domainId; domains carry wafMode', async () => {
    const { key } = await newAccount(t.app);
    const s1 = await server(key, 'exc-1');
    const s2 = await server(key, 'exc-2');
    const d1 = await domain(key, 'exc-one.example.com', [s1]);
    await domain(key, 'exc-two.example.com', [s2]);
    assert.equal((await call(t.app, 'PUT', `/api/domains/${d1}`, { key, body: { wafMode: 'detect', wafLevel: 'high' } })).status, 200);
    const before = await revisions(key);
    const exc = await rule(key, { rule_type: 'waf_exception', value: EXAMPLE, domain_id: d1 });
    await rule(key, { rule_type: 'waf_exception', value: '{"path":"/off"}', domain_id: d1, enabled: false });
    const after = await revisions(key);
    assert.equal(after[s1], before[s1]! + 2, "the domain's server is bumped");
    assert.equal(after[s2], before[s2], "another domain's server is not");

    const { snapshots } = await buildSnapshots(t.ctx.db, [s1, s2]);
    const one = snapshots.get(s1)!;
    const two = snapshots.get(s2)!;
    assert.deepEqual(
      one.domains.map((d) => [d.domain, d.wafLevel, d.wafMode]),
      [['exc-one.example.com', 'high', 'detect']],
    );
    assert.deepEqual(
      two.domains.map((d) => [d.domain, d.wafMode]),
      [['exc-two.example.com', 'block']],
    );
    assert.deepEqual(
      one.rules.filter((r) => r.type === 'waf_exception'),
      [{ id: exc.id, type: 'waf_exception', value: EXAMPLE, domainId: d1, priority: 100 }],
      'enabled exceptions only',
    );
    assert.deepEqual(
      two.rules.filter((r) => r.type === 'waf_exception'),
      [],
    );
    // What the hub sends passes the agent's own parser.
    const { parseServiceMessage } = await import('@rampart/protocol');
    const parsed = parseServiceMessage(JSON.stringify({ type: 'config/snapshot', payload: one }));
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.error);
  });
});

describe('GET /api/waf', () => {
  test('lists every rule of the caller, lower priority first', async () => {
    const { key } = await newAccount(t.app);
    const other = await newAccount(t.app);
    await rule(other.key, { rule_type: 'block_ip', value: '9.9.9.9', priority: 1 });
    const made = [];
    for (const [i, priority] of [500, 3, 100, 42, 0].entries()) made.push(await rule(key, { rule_type: 'block_ip', value: `10.0.0.${i}`, priority }));
    made.push(await rule(key, { rule_type: 'block_country', value: 'FR' })); // default 100
    const list = await rules(key);
    assert.equal(list.length, 6);
    assert.deepEqual(
      list.map((r) => r.priority),
      [0, 3, 42, 100, 100, 500],
    );
    assert.deepEqual(new Set(list.map((r) => r.id)), new Set(made.map((r) => r.id)));
    assert.ok(!list.some((r) => r.value === '9.9.9.9'));
  });
});

describe('PUT /api/waf/:id', () => {
  test('changes value, enabled and priority; fields left out stay', async () => {
    const { key } = await newAccount(t.app);
    const r = await rule(key, { rule_type: 'block_ip', value: '1.2.3.4', priority: 10 });
    let u = await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { value: '5.6.7.0/24' } });
    assert.equal(u.status, 200, JSON.stringify(u.body));
    assert.deepEqual([u.body.id, u.body.rule_type, u.body.value, u.body.enabled, u.body.priority, u.body.domain_id], [r.id, 'block_ip', '5.6.7.0/24', true, 10, null]);
    u = await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { enabled: false } });
    assert.equal(u.status, 200);
    assert.deepEqual([u.body.value, u.body.enabled, u.body.priority], ['5.6.7.0/24', false, 10]);
    u = await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { priority: 1 } });
    assert.equal(u.status, 200);
    assert.deepEqual([u.body.value, u.body.enabled, u.body.priority], ['5.6.7.0/24', false, 1]);
    const [listed] = await rules(key);
    assert.deepEqual([listed!.id, listed!.value, listed!.enabled, listed!.priority], [r.id, '5.6.7.0/24', false, 1]);
  });

  test("re-validates the value against the rule's own type and canonicalizes it", async () => {
    const { key } = await newAccount(t.app);
    const country = await rule(key, { rule_type: 'block_country', value: 'DE' });
    expect400(await call(t.app, 'PUT', `/api/waf/${country.id}`, { key, body: { value: 'de' } }), 'value');
    expect400(await call(t.app, 'PUT', `/api/waf/${country.id}`, { key, body: { value: '1.2.3.4' } }), 'value');
    const ip = await rule(key, { rule_type: 'block_ip', value: '1.2.3.4' });
    expect400(await call(t.app, 'PUT', `/api/waf/${ip.id}`, { key, body: { value: 'DE' } }), 'value');
    expect400(await call(t.app, 'PUT', `/api/waf/${ip.id}`, { key, body: { value: '1.2.3.4/33' } }), 'value');
    const rl = await rule(key, { rule_type: 'rate_limit', value: '{"requests_per_minute":5}' });
    expect400(await call(t.app, 'PUT', `/api/waf/${rl.id}`, { key, body: { value: '{"requests_per_minute":0}' } }), 'value');
    const rl2 = await call(t.app, 'PUT', `/api/waf/${rl.id}`, { key, body: { value: '{ "requests_per_minute": 10000 }' } });
    assert.equal(rl2.status, 200);
    assert.equal(rl2.body.value, '{"requests_per_minute":10000}');
    const ai = await rule(key, { rule_type: 'block_ai_bot', value: 'ClaudeBot' });
    const ai2 = await call(t.app, 'PUT', `/api/waf/${ai.id}`, { key, body: { value: 'bytespider' } });
    assert.equal(ai2.status, 200);
    assert.equal(ai2.body.value, 'Bytespider');
    const list = await rules(key);
    assert.equal(list.find((r) => r.id === country.id)!.value, 'DE');
    assert.equal(list.find((r) => r.id === ip.id)!.value, '1.2.3.4');
  });

  test('rule_type, domain_id, unknown fields, wrong types and an empty body are refused', async () => {
    const { key } = await newAccount(t.app);
    const d = await domain(key, 'put-fixed.example.com');
    const r = await rule(key, { rule_type: 'block_ip', value: '1.2.3.4' });
    expect400(await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { rule_type: 'allow_ip' } }), 'rule_type');
    expect400(await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { domain_id: d } }), 'domain_id');
    expect400(await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { value: '1.2.3.5', domain_id: null } }), 'domain_id');
    expect400(await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { enabled: 'false' } }), 'enabled');
    expect400(await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: { priority: 1.5 } }), 'priority');
    const empty = await call(t.app, 'PUT', `/api/waf/${r.id}`, { key, body: {} });
    assert.equal(empty.status, 400);
    const [after] = await rules(key);
    assert.deepEqual([after!.rule_type, after!.value, after!.domain_id, after!.enabled, after!.priority], ['block_ip', '1.2.3.4', null, true, 100]);
  });

  test("unknown or another account's rule answers 404 on PUT and DELETE", async () => {
    const a = await newAccount(t.app);
    const b = await newAccount(t.app);
    const r = await rule(a.key, { rule_type: 'block_ip', value: '1.2.3.4' });
    for (const id of [r.id, randomUUID(), 'nope']) {
      const put = await call(t.app, 'PUT', `/api/waf/${id}`, { key: b.key, body: { enabled: false } });
      assert.equal(put.status, 404);
      assert.deepEqual(put.body, { error: 'WAF rule not found' });
      const del = await call(t.app, 'DELETE', `/api/waf/${id}`, { key: b.key });
      assert.equal(del.status, 404);
      assert.deepEqual(del.body, { error: 'WAF rule not found' });
    }
    const [still] = await rules(a.key);
    assert.deepEqual([still!.id, still!.enabled], [r.id, true]);
  });
});

describe('DELETE /api/waf/:id', () => {
  test('removes the rule from the list; a second delete is 404', async () => {
    const { key } = await newAccount(t.app);
    const keep = await rule(key, { rule_type: 'block_country', value: 'KP' });
    const gone = await rule(key, { rule_type: 'block_ip', value: '1.2.3.4' });
    const del = await call(t.app, 'DELETE', `/api/waf/${gone.id}`, { key });
    assert.equal(del.status, 200);
    assert.equal(del.body.success, true);
    assert.deepEqual(
      (await rules(key)).map((r) => r.id),
      [keep.id],
    );
    const again = await call(t.app, 'DELETE', `/api/waf/${gone.id}`, { key });
    assert.equal(again.status, 404);
    assert.deepEqual(again.body, { error: 'WAF rule not found' });
    assert.equal((await call(t.app, 'PUT', `/api/waf/${gone.id}`, { key, body: { enabled: false } })).status, 404);
  });
});

describe('GET /api/waf/events', () => {
  test('is empty for a fresh account', async () => {
    const { key } = await newAccount(t.app);
    const r = await call(t.app, 'GET', '/api/waf/events', { key });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, []);
  });

  test('returns exactly the 50 newest events, newest first', async () => {
    const { key, accountId } = await newAccount(t.app);
    const other = await newAccount(t.app);
    const ruleId = randomUUID();
    const base = Date.parse('2030-01-01T00:00:00.000Z');
    const rows = Array.from({ length: 60 }, (_, i) => ({
      account_id: accountId,
      server_id: null,
      domain: `d${i}.example.com`,
      source_ip: `10.0.0.${i}`,
      reason: i % 2 ? 'ip_blocked' : 'rate_limited',
      rule_id: i % 2 ? ruleId : null,
      occurred_at: new Date(base + i * 60_000),
    }));
    // Odd minutes first, then even ones, so that insertion order cannot stand in for time order.
    const shuffled = [...rows.filter((_, i) => i % 2), ...rows.filter((_, i) => i % 2 === 0)];
    await t.ctx.db.insertInto('waf_events').values(shuffled).execute();
    await t.ctx.db
      .insertInto('waf_events')
      .values({ account_id: other.accountId, server_id: null, domain: 'other.example.com', source_ip: '6.6.6.6', reason: 'ip_blocked', rule_id: null, occurred_at: new Date(base + 3_600_000 * 24) })
      .execute();
    const r = await call(t.app, 'GET', '/api/waf/events', { key });
    assert.equal(r.status, 200);
    assert.equal(r.body.length, 50);
    const expected = rows.slice(10).reverse();
    r.body.forEach((e: Record<string, unknown>, i: number) => {
      const x = expected[i]!;
      assert.equal(e.timestamp, x.occurred_at.toISOString());
      assert.equal(e.source_ip, x.source_ip);
      assert.equal(e.domain, x.domain);
      assert.equal(e.reason, x.reason);
      assert.equal(e.rule_id, x.rule_id);
      for (const f of ['timestamp', 'source_ip', 'domain', 'reason', 'rule_id']) assert.ok(f in e, `event has ${f}`);
    });
    const otherEvents = await call(t.app, 'GET', '/api/waf/events', { key: other.key });
    assert.deepEqual(
      otherEvents.body.map((e: { source_ip: string }) => e.source_ip),
      ['6.6.6.6'],
    );
  });
});

describe('OpenAPI', () => {
  test('documents wafMode on domains, waf_exception, and the event fields', async () => {
    const doc = (await call(t.app, 'GET', '/api/openapi.json')).body;
    const json = (op: any) => op.requestBody.content['application/json'].schema;
    const ok = (op: any, status: string) => op.responses[status].content['application/json'].schema;
    const modes = (s: any) => (s.anyOf ?? []).map((x: any) => x.const ?? x.enum?.[0]);
    assert.deepEqual(modes(json(doc.paths['/api/domains'].post).properties.wafMode), ['block', 'detect']);
    assert.deepEqual(modes(json(doc.paths['/api/domains/{id}'].put).properties.wafMode), ['block', 'detect']);
    assert.ok(ok(doc.paths['/api/domains'].get, '200').items.properties.wafMode, 'the domain record has wafMode');
    assert.ok(modes(json(doc.paths['/api/waf'].post).properties.rule_type).includes('waf_exception'));
    const event = ok(doc.paths['/api/waf/events'].get, '200').items;
    for (const f of ['timestamp', 'source_ip', 'domain', 'reason', 'rule_id', 'server_id', 'method', 'path', 'location', 'matched', 'blocked']) {
      assert.ok(event.properties[f], `event field ${f}`);
      assert.ok(event.required.includes(f), `event field ${f} is always present`);
    }
    assert.equal(event.properties.blocked.type, 'boolean');
  });
});

describe('GET /api/waf/ai-bots', () => {
  test('lists the major AI crawlers and every listed name is a valid block_ai_bot value', async () => {
    const { key } = await newAccount(t.app);
    const r = await call(t.app, 'GET', '/api/waf/ai-bots', { key });
    assert.equal(r.status, 200);
    const names: string[] = r.body.map((b: { name: string }) => b.name);
    for (const n of ['GPTBot', 'ClaudeBot', 'CCBot', 'Google-Extended', 'PerplexityBot', 'Bytespider', 'Amazonbot', 'Applebot-Extended', 'Meta-ExternalAgent']) {
      assert.ok(names.includes(n), `${n} is listed`);
    }
    assert.equal(new Set(names.map((n) => n.toLowerCase())).size, names.length, 'names are unique');
    for (const name of names) {
      const created = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ai_bot', value: name } });
      assert.equal(created.status, 201, `${name}: ${JSON.stringify(created.body)}`);
      assert.equal(created.body.value, name);
    }
    assert.equal((await rules(key)).length, names.length);
  });

  test('needs authentication', async () => {
    const r = await call(t.app, 'GET', '/api/waf/ai-bots');
    assert.equal(r.status, 401);
  });
});

describe('configuration revisions', () => {
  test("global rules bump every live server of the account; per-domain rules only the domain's servers", async () => {
    const { key } = await newAccount(t.app);
    const other = await newAccount(t.app);
    const s1 = await server(key, 's1');
    const s2 = await server(key, 's2');
    const s3 = await server(key, 's3');
    const gone = await server(key, 'gone');
    const foreign = await server(other.key, 'foreign');
    assert.equal((await call(t.app, 'DELETE', `/api/servers/${gone}`, { key })).status, 200);
    const d = await domain(key, 'revs.example.com', [s1]);
    const d2 = await domain(key, 'revs2.example.com', [s1, s2]);
    const before0 = await revisions(key);
    const foreign0 = await revisions(other.key);

    const bumped = (b: Record<string, number>, a: Record<string, number>) =>
      Object.keys(a)
        .filter((id) => a[id] !== b[id])
        .sort();
    const step = async (fn: () => Promise<unknown>, expected: string[], label: string) => {
      const b = await revisions(key);
      await fn();
      const a = await revisions(key);
      assert.deepEqual(bumped(b, a), [...expected].sort(), label);
      for (const id of expected) assert.equal(a[id], b[id]! + 1, `${label}: ${id} bumped once`);
    };

    let global: any;
    await step(async () => (global = await rule(key, { rule_type: 'block_ip', value: '1.1.1.1' })), [s1, s2, s3], 'create global');
    await step(async () => assert.equal((await call(t.app, 'PUT', `/api/waf/${global.id}`, { key, body: { enabled: false } })).status, 200), [s1, s2, s3], 'update global');
    await step(async () => assert.equal((await call(t.app, 'DELETE', `/api/waf/${global.id}`, { key })).status, 200), [s1, s2, s3], 'delete global');
    await step(async () => rule(key, { rule_type: 'rate_limit', value: '{"requests_per_minute":30}' }), [s1, s2, s3], 'create server-wide');

    let local: any;
    await step(async () => (local = await rule(key, { rule_type: 'block_country', value: 'CN', domain_id: d })), [s1], 'create per-domain');
    await step(async () => assert.equal((await call(t.app, 'PUT', `/api/waf/${local.id}`, { key, body: { value: 'RU' } })).status, 200), [s1], 'update per-domain');
    await step(async () => assert.equal((await call(t.app, 'DELETE', `/api/waf/${local.id}`, { key })).status, 200), [s1], 'delete per-domain');
    await step(async () => rule(key, { rule_type: 'block_ai_bot', value: 'GPTBot', domain_id: d2 }), [s1, s2], 'create on a two-server domain');

    await step(async () => assert.equal((await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: 'bad' } })).status, 400), [], 'a refused rule bumps nothing');

    const after0 = await revisions(key);
    assert.equal(after0[gone], before0[gone], 'a decommissioned server is never bumped');
    assert.deepEqual(await revisions(other.key), foreign0, "another account's servers are never bumped");
    assert.ok(foreign in foreign0);
  });
});
