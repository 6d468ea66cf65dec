import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { AI_BOTS, checkRuleValue, isCidr, isCountryCode, isHostname, isIP, isPort, RATE_LIMIT_MAX, RATE_LIMIT_MIN, RULE_TYPES, WAF_DETECTORS, WAF_LEVELS, WAF_MODES } from '@rampart/protocol';
import { call, makeTestApp, newAccount, type CallOptions, type TestApp } from './helpers.js';

// One app for the whole file. Created at top level rather than in before(): makeTestApp registers
// after(close), which inside a before() hook would run as soon as that hook ends.
const t: TestApp = await makeTestApp();

const NUM_RUNS = Number(process.env.RAMPART_FUZZ_RUNS ?? 150);
const CONTROL = /\p{Cc}/u;

// ---------- arbitraries ----------

const HOSTILE_PIECES = [
  '\r\n',
  '\n',
  '\r',
  '#',
  '"',
  "'",
  '\\',
  '\u0000',
  '%',
  '%00',
  '%0d%0a',
  '{',
  '}',
  ' ',
  '\t',
  ';',
  '`',
  '$',
  '\u001b',
  '\u007f',
  '\u0085',
  '\u2028',
  '\ud800',
  '[',
  ']',
  '/',
  ':',
  '..',
  '<script>',
];
const VALID_PIECES = ['a', 'example', '.', 'com', '-', '1', '2', '255', '0', '.0', '::', ':', 'ff', '/', '24', '32', 'US', 'GPTBot', 'xn--'];
// Line breaks, NUL and other control characters are what break generated files and databases: more of them.
const hostilePiece = fc.oneof(fc.constantFrom(...HOSTILE_PIECES), fc.constantFrom('\u0000', '\r\n', '\n', '\u0001', '\u001b', '\u0085', '\u009b'));
/** A good string with one hostile piece spliced in somewhere. */
const spliced = (good: fc.Arbitrary<string>) => fc.tuple(good, fc.nat(), hostilePiece).map(([s, i, h]) => s.slice(0, i % (s.length + 1)) + h + s.slice(i % (s.length + 1)));

/** Strings that are nearly valid for every field here, with hostile characters mixed in. */
const hostileString: fc.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.array(fc.oneof(hostilePiece, fc.constantFrom(...VALID_PIECES)), { maxLength: 16 }).map((a) => a.join('')),
  spliced(fc.constantFrom('example.com', 'a.example.org', '192.0.2.1', '10.0.0.0/8', '2001:db8::1', '::ffff:1.2.3.4', 'GPTBot', 'US', '{"requests_per_minute":60}', '{"enabled":true}', 'edge-1')),
  fc.tuple(fc.integer({ min: 90, max: 300_000 }), fc.option(hostilePiece)).map(([n, h]) => 'a'.repeat(n) + (h ?? '')),
);

const hostileNumber: fc.Arbitrary<number> = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -0, -1, 1, 65535, 65536, 10_000, 10_001, 1_000_000, 1_000_001, 1e21, 0.5, 1.5, 0.001, 1e-9, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2, 1e308, -1e308),
);

const hostileValue: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { weight: 4, arbitrary: hostileString },
    { weight: 2, arbitrary: hostileNumber },
    { weight: 1, arbitrary: fc.boolean() },
    { weight: 1, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: fc.array(tie('value'), { maxLength: 3, depthIdentifier: 'v' }) },
    { weight: 1, arbitrary: fc.dictionary(fc.oneof(hostileString, fc.constantFrom('__proto__', 'constructor', 'prototype')), tie('value'), { maxKeys: 3, depthIdentifier: 'v' }) },
  ),
})).value;

/** Mostly a value of the right kind, sometimes anything hostile. */
const field = <T>(good: fc.Arbitrary<T>) => fc.oneof({ weight: 3, arbitrary: good }, { weight: 2, arbitrary: hostileValue });

const hostname = fc.oneof(
  fc.domain(),
  fc.domain().map((d) => d.toUpperCase() + '.'),
  hostileString,
);
const ip = fc.oneof(fc.ipV4(), fc.ipV6(), fc.ipV4Extended(), hostileString);
const port = fc.oneof(fc.integer({ min: 1, max: 65535 }), hostileNumber);
const originArb = fc.oneof({ weight: 5, arbitrary: fc.record({ ip: field(ip), port: field(port) }, { requiredKeys: [] }) }, { weight: 1, arbitrary: hostileValue });
const cidr = fc.oneof(
  fc.ipV4(),
  fc.tuple(fc.ipV4(), fc.integer({ min: -1, max: 40 })).map(([a, n]) => `${a}/${n}`),
  fc.tuple(fc.ipV6(), fc.integer({ min: 0, max: 140 })).map(([a, n]) => `${a}/${n}`),
  fc.ipV4Extended(),
  hostileString,
);
const ruleValue = fc.oneof(
  cidr,
  fc.constantFrom('US', 'DE', 'us', 'USA', 'U1', 'ZZ'),
  hostileNumber.map((n) => JSON.stringify({ requests_per_minute: n })),
  fc.dictionary(hostileString, hostileValue, { maxKeys: 2 }).map((o) => JSON.stringify(o)),
  fc.boolean().map((b) => JSON.stringify({ enabled: b })),
  fc.constantFrom('{"enabled":"yes"}', '{"enabled":true,"x":1}', '{}', '[]', 'null', 'not json'),
  fc.constantFrom(...AI_BOTS.map((b) => b.name)).chain((n) => fc.constantFrom(n, n.toLowerCase(), n.toUpperCase(), ` ${n}`, `${n}\n`)),
  fc.record({ path: fc.oneof(fc.constantFrom('/', '/comments', 'comments'), hostileString), location: hostileValue, detector: hostileValue }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
  hostileString,
);
/** Mostly valid waf_exception values, some with a hostile piece in the path or the location name. */
const exceptionValue = fc
  .record(
    {
      path: fc.oneof(
        fc.constantFrom('/', '/comments', '/api/v1/items'),
        spliced(fc.constant('/search')),
        fc.string({ maxLength: 20 }).map((s) => `/${s}`),
      ),
      location: fc.oneof(
        fc.constant('path'),
        fc.tuple(fc.constantFrom('query', 'body', 'cookie', 'header'), fc.oneof(fc.constantFrom('*', 'id', 'Content', 'X-Forwarded-For', 'a[0]'), hostileString)).map(([k, n]) => `${k}:${n}`),
        hostileString,
      ),
      detector: fc.oneof(fc.constantFrom(...WAF_DETECTORS), hostileString),
    },
    { requiredKeys: ['path'] },
  )
  .map((o) => JSON.stringify(o));
const ruleType = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...RULE_TYPES) }, { weight: 1, arbitrary: hostileString });
const email = fc.oneof({ weight: 1, arbitrary: fc.emailAddress() }, { weight: 1, arbitrary: hostileString }, { weight: 3, arbitrary: spliced(fc.emailAddress()) });
const password = fc.oneof(fc.string({ minLength: 8, maxLength: 30 }), hostileString);

/**
 * A request body: anything at all, raw JSON text, a valid body of the endpoint, a valid body with one
 * field replaced by a hostile value, the endpoint's own fields all with hostile values, or a valid
 * body with one extra hostile field.
 */
type Body = { body: unknown } | { rawBody: string };
function bodies(valid: fc.Arbitrary<Record<string, unknown>>, fields: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<Body> {
  const mutated = fc.tuple(valid, fc.nat(), hostileValue).map(([o, i, v]) => {
    const keys = Object.keys(o);
    return keys.length ? { ...o, [keys[i % keys.length]!]: v } : o;
  });
  const withExtra = fc.tuple(valid, hostileString, hostileValue).map(([o, k, v]) => ({ ...o, [k]: v }));
  return fc.oneof(
    { weight: 1, arbitrary: fc.anything().map((body) => ({ body })) },
    { weight: 1, arbitrary: fc.json().map((rawBody) => ({ rawBody })) },
    { weight: 2, arbitrary: valid.map((body) => ({ body })) },
    { weight: 3, arbitrary: mutated.map((body) => ({ body })) },
    { weight: 2, arbitrary: fields.map((body) => ({ body })) },
    { weight: 1, arbitrary: withExtra.map((body) => ({ body })) },
  );
}

const validName = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 60 });
const hostileName = fc.oneof(hostileString, spliced(validName));
const validOrigin = fc.record({ ip: fc.oneof(fc.ipV4(), fc.ipV6()), port: fc.integer({ min: 1, max: 65535 }) });
const validRule = fc.constantFrom(...RULE_TYPES).chain((rule_type) => {
  const value: fc.Arbitrary<string> = {
    block_ip: cidr,
    allow_ip: cidr,
    block_country: fc.stringMatching(/^[A-Z]{2}$/),
    rate_limit: fc.option(fc.integer({ min: 0, max: 10_001 })).map((n) => JSON.stringify(n === null ? {} : { requests_per_minute: n })),
    block_bot: fc.boolean().map((enabled) => JSON.stringify({ enabled })),
    block_ai_bot: fc.constantFrom(...AI_BOTS.map((b) => b.name)).map((n) => n.toLowerCase()),
    waf_exception: exceptionValue,
  }[rule_type];
  // A waf_exception needs its domain (the fixture domains, below); the other per-domain types may have one.
  const domainId = rule_type === 'waf_exception' ? { domain_id: fc.constantFrom(...domains) } : {};
  return fc.record(
    { rule_type: fc.constant(rule_type), value, enabled: fc.boolean(), priority: fc.integer({ min: 0, max: 1000 }), ...domainId },
    { requiredKeys: rule_type === 'waf_exception' ? ['rule_type', 'value', 'domain_id'] : ['rule_type', 'value'] },
  );
});

// ---------- fixtures ----------

const owner = await newAccount(t.app, 'pro', 1000);
const KEY = owner.key;
const ok = async (method: string, url: string, body?: unknown) => {
  const r = await call(t.app, method, url, { key: KEY, ...(body !== undefined ? { body } : {}) });
  assert.ok(r.status === 200 || r.status === 201, `${method} ${url}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
};
const servers: string[] = [];
for (let i = 0; i < 4; i++) servers.push((await ok('POST', '/api/servers', { name: `fixture-${i}` })).id);
const domains: string[] = [];
for (let i = 0; i < 3; i++) domains.push((await ok('POST', '/api/domains', { domain: `fixture${i}.example.com`, origins: [{ ip: '192.0.2.1', port: 80 }], serverIds: servers.slice(0, 2) })).id);
const rules: string[] = [];
for (const [rule_type, value] of [
  ['block_ip', '192.0.2.0/24'],
  ['allow_ip', '2001:db8::/32'],
  ['block_country', 'CN'],
  ['rate_limit', '{"requests_per_minute":60}'],
  ['block_bot', '{"enabled":true}'],
  ['block_ai_bot', 'GPTBot'],
]) {
  rules.push((await ok('POST', '/api/waf', { rule_type, value })).id);
}
rules.push((await ok('POST', '/api/waf', { rule_type: 'waf_exception', value: '{"path":"/comments","detector":"xss"}', domain_id: domains[0] })).id);
const spareKeys: string[] = [];
for (let i = 0; i < 3; i++) spareKeys.push((await ok('POST', '/api/settings/api-keys', { name: `spare-${i}` })).id);

/** encodeURIComponent, which throws on lone surrogates; those become '?' first. */
function safeEncode(s: string): string {
  try {
    return encodeURIComponent(s);
  } catch {
    return encodeURIComponent(s.replace(/[\ud800-\udfff]/g, '?'));
  }
}

const idArb = (real: string[]) =>
  fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...real) },
    { weight: 2, arbitrary: fc.uuid() },
    { weight: 2, arbitrary: hostileString.map((s) => safeEncode(s.slice(0, 120))) },
    { weight: 1, arbitrary: fc.constantFrom('%', '%zz', '%00', '%0d%0a', '..%2f..%2f', '%E0%A4%A', '%ED%A0%80', '%u0000') },
  );

// ---------- endpoints ----------

interface FuzzCase {
  name: string;
  arb: fc.Arbitrary<{ url: string; payload: Body }>;
  auth: Pick<CallOptions, 'key' | 'admin'>;
  method: string;
}

const fixedUrl = (url: string, b: fc.Arbitrary<Body>) => b.map((payload) => ({ url, payload }));
const idUrl = (prefix: string, real: string[], suffix: string, b: fc.Arbitrary<Body>) => fc.tuple(idArb(real), b).map(([id, payload]) => ({ url: `${prefix}${id}${suffix}`, payload }));

const domainFields = {
  origins: field(fc.array(originArb, { maxLength: 4 })),
  serverIds: field(fc.array(fc.oneof(fc.constantFrom(...servers), fc.uuid(), hostileString), { maxLength: 3 })),
  sslEnabled: field(fc.boolean()),
  wafEnabled: field(fc.boolean()),
  wafLevel: field(fc.constantFrom(...WAF_LEVELS, 'HIGH', 'off')),
  wafMode: field(fc.constantFrom(...WAF_MODES, 'DETECT', 'log')),
};
const validDomainFields = {
  origins: fc.array(validOrigin, { minLength: 1, maxLength: 3 }),
  serverIds: fc.subarray(servers.slice(0, 3)),
  sslEnabled: fc.boolean(),
  wafEnabled: fc.boolean(),
  wafLevel: fc.constantFrom(...WAF_LEVELS),
  wafMode: fc.constantFrom(...WAF_MODES),
};
const priority = fc.oneof(fc.integer({ min: 0, max: 1000 }), hostileNumber);
const money = fc.integer({ min: 1, max: 1_000_000 }).map((c) => c / 100);
const noBody = bodies(fc.constant({}), fc.dictionary(hostileString, hostileValue, { maxKeys: 3 }));
const nameBody = bodies(fc.record({ name: validName }), fc.record({ name: field(hostileName) }, { requiredKeys: [] }));

const CASES: FuzzCase[] = [
  { name: 'POST /api/settings/api-keys', method: 'POST', auth: { key: KEY }, arb: fixedUrl('/api/settings/api-keys', nameBody) },
  {
    name: 'DELETE /api/settings/api-keys?id=',
    method: 'DELETE',
    auth: { key: KEY },
    arb: fc.tuple(idArb(spareKeys), noBody).map(([id, payload]) => ({ url: `/api/settings/api-keys?id=${id}`, payload })),
  },
  { name: 'POST /api/servers', method: 'POST', auth: { key: KEY }, arb: fixedUrl('/api/servers', nameBody) },
  { name: 'POST /api/servers/:id/token', method: 'POST', auth: { key: KEY }, arb: idUrl('/api/servers/', servers, '/token', noBody) },
  // Only the last fixture server may be decommissioned, so the others keep serving the domain cases.
  { name: 'DELETE /api/servers/:id', method: 'DELETE', auth: { key: KEY }, arb: idUrl('/api/servers/', servers.slice(3), '', noBody) },
  {
    name: 'POST /api/domains',
    method: 'POST',
    auth: { key: KEY },
    arb: fixedUrl(
      '/api/domains',
      bodies(fc.record({ domain: fc.domain(), ...validDomainFields }, { requiredKeys: ['domain', 'origins'] }), fc.record({ domain: field(hostname), ...domainFields }, { requiredKeys: [] })),
    ),
  },
  {
    name: 'PUT /api/domains/:id',
    method: 'PUT',
    auth: { key: KEY },
    arb: idUrl('/api/domains/', domains, '', bodies(fc.record(validDomainFields, { requiredKeys: [] }), fc.record(domainFields, { requiredKeys: [] }))),
  },
  { name: 'DELETE /api/domains/:id', method: 'DELETE', auth: { key: KEY }, arb: idUrl('/api/domains/', domains.slice(2), '', noBody) },
  {
    name: 'POST /api/waf',
    method: 'POST',
    auth: { key: KEY },
    arb: fixedUrl(
      '/api/waf',
      bodies(
        fc.tuple(validRule, fc.option(fc.constantFrom(...domains))).map(([r, d]) => (d && !['rate_limit', 'block_bot'].includes(r.rule_type as string) ? { ...r, domain_id: d } : r)),
        fc.record(
          {
            rule_type: field(ruleType),
            value: field(ruleValue),
            domain_id: field(fc.oneof(fc.constantFrom(...domains), fc.uuid(), hostileString)),
            enabled: field(fc.boolean()),
            priority: field(priority),
          },
          { requiredKeys: [] },
        ),
      ),
    ),
  },
  {
    name: 'PUT /api/waf/:id',
    method: 'PUT',
    auth: { key: KEY },
    arb: idUrl(
      '/api/waf/',
      rules,
      '',
      bodies(
        validRule.map(({ rule_type: _t, ...rest }) => {
          const { domain_id: _d, ...body } = rest as Record<string, unknown>; // both fixed at creation
          return body;
        }),
        fc.record({ value: field(ruleValue), enabled: field(fc.boolean()), priority: field(priority), rule_type: ruleType, domain_id: fc.uuid() }, { requiredKeys: [] }),
      ),
    ),
  },
  { name: 'DELETE /api/waf/:id', method: 'DELETE', auth: { key: KEY }, arb: idUrl('/api/waf/', rules.slice(4), '', noBody) },
  {
    name: 'POST /api/billing/deposits',
    method: 'POST',
    auth: { key: KEY },
    arb: fixedUrl('/api/billing/deposits', bodies(fc.record({ amount: money }), fc.record({ amount: field(fc.oneof(hostileNumber, money)) }, { requiredKeys: [] }))),
  },
  {
    name: 'POST /api/auth/register',
    method: 'POST',
    auth: {},
    arb: fixedUrl(
      '/api/auth/register',
      bodies(fc.record({ email: fc.emailAddress(), password: fc.string({ minLength: 8, maxLength: 30 }) }), fc.record({ email: field(email), password: field(password) }, { requiredKeys: [] })),
    ),
  },
  {
    name: 'POST /api/auth/login',
    method: 'POST',
    auth: {},
    arb: fixedUrl(
      '/api/auth/login',
      bodies(
        fc.record({ email: fc.oneof(fc.emailAddress(), fc.constant(owner.email)), password: fc.string({ minLength: 8, maxLength: 30 }) }),
        fc.record({ email: field(fc.oneof(email, fc.constant(owner.email))), password: field(password) }, { requiredKeys: [] }),
      ),
    ),
  },
  {
    name: 'POST /admin/accounts',
    method: 'POST',
    auth: { admin: true },
    arb: fixedUrl(
      '/admin/accounts',
      bodies(
        fc.record(
          { email: fc.emailAddress(), password: fc.string({ minLength: 8, maxLength: 30 }), plan: fc.constantFrom('free', 'pro', 'enterprise'), balance: fc.oneof(fc.constant(0), money) },
          { requiredKeys: ['email', 'plan'] },
        ),
        fc.record(
          {
            email: field(email),
            password: field(password),
            plan: field(fc.constantFrom('free', 'pro', 'enterprise', 'gold', 'PRO')),
            balance: field(fc.oneof(hostileNumber, money)),
          },
          { requiredKeys: [] },
        ),
      ),
    ),
  },
];

describe('fuzz: no request body ever causes a 5xx', () => {
  for (const c of CASES) {
    test(c.name, async () => {
      await fc.assert(
        fc.asyncProperty(c.arb, async ({ url, payload }) => {
          const r = await call(t.app, c.method, url, { ...c.auth, ...payload });
          assert.ok(r.status >= 200 && r.status < 500, `${c.method} ${url} -> ${r.status} ${JSON.stringify(r.body)}`);
          if (r.status >= 400) assert.equal(typeof r.body?.error, 'string', `error body of ${r.status}`);
        }),
        { numRuns: NUM_RUNS },
      );
    });
  }
});

// ---------- what is stored afterwards ----------

describe('fuzz: everything stored is well-formed', () => {
  test('the fuzzing actually stored objects (the invariants below are not vacuous)', async () => {
    const count = async (table: 'domains' | 'waf_rules' | 'servers' | 'api_keys' | 'accounts') =>
      Number(
        (
          await t.ctx.db
            .selectFrom(table)
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    assert.ok((await count('domains')) > domains.length, 'some fuzzed domains were accepted');
    assert.ok((await count('waf_rules')) > rules.length, 'some fuzzed rules were accepted');
    assert.ok((await count('servers')) > servers.length, 'some fuzzed servers were accepted');
    assert.ok((await count('accounts')) > 1, 'some fuzzed accounts were accepted');
  });

  test('every stored domain is a hostname; every origin is an IP address and a port 1..65535', async () => {
    const rows = await t.ctx.db.selectFrom('domains').select(['domain', 'origins', 'waf_level', 'waf_mode']).execute();
    const bad: unknown[] = [];
    for (const r of rows) {
      if (!isHostname(r.domain)) bad.push({ domain: r.domain });
      const origins = typeof r.origins === 'string' ? JSON.parse(r.origins) : r.origins;
      if (!Array.isArray(origins) || origins.length === 0) bad.push({ domain: r.domain, origins });
      for (const o of origins as { ip: unknown; port: unknown }[]) {
        if (typeof o.ip !== 'string' || !isIP(o.ip) || !isPort(o.port) || Object.keys(o).sort().join() !== 'ip,port') bad.push({ domain: r.domain, origin: o });
      }
      if (!(WAF_LEVELS as readonly string[]).includes(r.waf_level)) bad.push({ domain: r.domain, waf_level: r.waf_level });
      if (!(WAF_MODES as readonly string[]).includes(r.waf_mode)) bad.push({ domain: r.domain, waf_mode: r.waf_mode });
    }
    assert.deepEqual(bad, []);
  });

  test('every stored rule value is valid for its type', async () => {
    const rows = await t.ctx.db.selectFrom('waf_rules').select(['rule_type', 'value', 'domain_id', 'priority']).execute();
    const names = new Set(AI_BOTS.map((b) => b.name));
    const bad: unknown[] = [];
    for (const r of rows) {
      let good: boolean;
      switch (r.rule_type) {
        case 'block_ip':
        case 'allow_ip':
          good = isCidr(r.value);
          break;
        case 'block_country':
          good = isCountryCode(r.value);
          break;
        case 'rate_limit': {
          let v: unknown;
          try {
            v = JSON.parse(r.value);
          } catch {
            v = undefined;
          }
          const rpm = (v as { requests_per_minute?: unknown } | undefined)?.requests_per_minute;
          good =
            typeof v === 'object' &&
            v !== null &&
            Object.keys(v).join() === 'requests_per_minute' &&
            Number.isInteger(rpm) &&
            (rpm as number) >= RATE_LIMIT_MIN &&
            (rpm as number) <= RATE_LIMIT_MAX &&
            r.domain_id === null;
          break;
        }
        case 'block_bot':
          good = (r.value === '{"enabled":true}' || r.value === '{"enabled":false}') && r.domain_id === null;
          break;
        case 'block_ai_bot':
          good = names.has(r.value);
          break;
        case 'waf_exception': {
          // Stored canonical (checking it again gives it back unchanged), printable ASCII path, on a domain.
          const checked = checkRuleValue('waf_exception', r.value);
          good = checked.ok && checked.value === r.value && /^\/[\x21-\x7e]{0,255}$/.test(JSON.parse(r.value).path) && r.domain_id !== null;
          break;
        }
        default:
          good = false;
      }
      if (!good || !Number.isInteger(r.priority) || r.priority < 0) bad.push(r);
    }
    assert.deepEqual(bad, []);
  });

  test('every stored name and email is free of control characters', async () => {
    const keys = await t.ctx.db.selectFrom('api_keys').select('name').execute();
    const srv = await t.ctx.db.selectFrom('servers').select('name').execute();
    const accts = await t.ctx.db.selectFrom('accounts').select('email').execute();
    const bad = [
      ...keys.filter((k) => CONTROL.test(k.name) || k.name.length < 1 || k.name.length > 100).map((k) => ({ apiKeyName: k.name })),
      ...srv.filter((s) => CONTROL.test(s.name) || s.name.length < 1 || s.name.length > 100).map((s) => ({ serverName: s.name })),
      ...accts.filter((a) => CONTROL.test(a.email) || /\s/.test(a.email)).map((a) => ({ email: a.email })),
    ];
    assert.deepEqual(bad, []);
  });

  test('every stored deposit is a positive number of cents', async () => {
    const rows = await t.ctx.db.selectFrom('transactions').select(['kind', 'amount_cents']).where('kind', '=', 'deposit').execute();
    assert.ok(rows.length > 0);
    const bad = rows.filter((r) => !Number.isInteger(Number(r.amount_cents)) || Number(r.amount_cents) <= 0);
    assert.deepEqual(bad, []);
  });

  test('the fixture account still works and has at most 10 keys', async () => {
    const r = await call(t.app, 'GET', '/api/settings/api-keys', { key: KEY });
    assert.equal(r.status, 200);
    assert.ok(r.body.length <= 10);
  });
});
