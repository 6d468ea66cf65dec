import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { call, makeTestApp, newAccount, type CallOptions, type Reply, type TestApp } from './helpers.js';

// One app for the whole file. Created at top level rather than in before(): makeTestApp registers
// after(close), which inside a before() hook would run as soon as that hook ends.
const t: TestApp = await makeTestApp();

/** Every request of this file goes through here: whatever else is expected, never a 5xx. */
async function req(method: string, url: string, opts: CallOptions = {}): Promise<Reply> {
  const r = await call(t.app, method, url, opts);
  assert.ok(r.status < 500, `${method} ${url} ${opts.rawBody?.slice(0, 80) ?? JSON.stringify(opts.body)?.slice(0, 80)} answered ${r.status} ${JSON.stringify(r.body)}`);
  return r;
}

function expectError(r: Reply, status: number, mentions: (string | RegExp)[], label: string) {
  assert.equal(r.status, status, `${label}: ${r.status} ${JSON.stringify(r.body)}`);
  assert.equal(typeof r.body?.error, 'string', `${label}: error body`);
  for (const m of mentions) {
    if (typeof m === 'string') assert.ok(r.body.error.includes(m), `${label}: ${JSON.stringify(r.body.error)} should mention ${m}`);
    else assert.match(r.body.error, m, label);
  }
}

// The fixture account and its objects, which the endpoints below refer to.
const owner = await newAccount(t.app, 'pro', 100);
const KEY = owner.key;
const SERVER = (await call(t.app, 'POST', '/api/servers', { key: KEY, body: { name: 'fixture' } })).body.id as string;
const DOMAIN = (await call(t.app, 'POST', '/api/domains', { key: KEY, body: { domain: 'fixture.example.com', origins: [{ ip: '192.0.2.1', port: 80 }], serverIds: [SERVER] } })).body.id as string;
const RULE = (await call(t.app, 'POST', '/api/waf', { key: KEY, body: { rule_type: 'block_ip', value: '192.0.2.99' } })).body.id as string;
const ALLOW = (await call(t.app, 'POST', '/api/waf', { key: KEY, body: { rule_type: 'allow_ip', value: '192.0.2.98' } })).body.id as string;
const API_KEY_ID = (await call(t.app, 'GET', '/api/settings/api-keys', { key: KEY })).body[0].id as string;
const EXISTING_EMAIL = (await newAccount(t.app, 'free', 0, 'a good password')).email;
assert.ok(SERVER && DOMAIN && RULE && ALLOW && API_KEY_ID);

/** Everything the fixture account can read, and the number of accounts: what "nothing stored" means. */
async function state() {
  const get = async (url: string) => (await req('GET', url, { key: KEY })).body;
  const accounts = await t.ctx.db
    .selectFrom('accounts')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .executeTakeFirstOrThrow();
  return {
    keys: await get('/api/settings/api-keys'),
    servers: await get('/api/servers'),
    domains: await get('/api/domains'),
    rules: await get('/api/waf'),
    account: await get('/api/account'),
    transactions: await get('/api/billing/transactions'),
    accounts: Number(accounts.n),
  };
}

interface Endpoint {
  method: string;
  url: string;
  auth: Pick<CallOptions, 'key' | 'admin'>;
  /** A body the endpoint accepts (absent for body-less endpoints). */
  valid?: Record<string, unknown>;
  /** [field name as it must appear in the message, body] */
  wrongTypes?: [string, Record<string, unknown>][];
}

const origin = { ip: '192.0.2.50', port: 8080 };
const creds = { email: 'fresh-user@example.com', password: 'long enough password' };
const ENDPOINTS: Endpoint[] = [
  {
    method: 'POST',
    url: '/api/settings/api-keys',
    auth: { key: KEY },
    valid: { name: 'ci' },
    wrongTypes: [
      ['name', { name: 5 }],
      ['name', { name: null }],
      ['name', { name: ['ci'] }],
      ['name', { name: '' }],
      ['name', { name: 'x'.repeat(101) }],
    ],
  },
  { method: 'DELETE', url: `/api/settings/api-keys?id=${randomUUID()}`, auth: { key: KEY } },
  {
    method: 'POST',
    url: '/api/servers',
    auth: { key: KEY },
    valid: { name: 'edge-2' },
    wrongTypes: [
      ['name', { name: true }],
      ['name', { name: {} }],
      ['name', { name: '' }],
      ['name', { name: 'x'.repeat(101) }],
    ],
  },
  { method: 'POST', url: `/api/servers/${randomUUID()}/token`, auth: { key: KEY } },
  { method: 'DELETE', url: `/api/servers/${randomUUID()}`, auth: { key: KEY } },
  {
    method: 'POST',
    url: '/api/domains',
    auth: { key: KEY },
    valid: { domain: 'new.example.com', origins: [origin] },
    wrongTypes: [
      ['domain', { domain: 5, origins: [origin] }],
      ['origins', { domain: 'new.example.com', origins: 'x' }],
      ['origins', { domain: 'new.example.com', origins: [] }],
      ['origins', { domain: 'new.example.com', origins: {} }],
      ['origins[0]', { domain: 'new.example.com', origins: [null] }],
      ['origins[0]', { domain: 'new.example.com', origins: [[]] }],
      ['origins[0].ip', { domain: 'new.example.com', origins: [{ ip: 1, port: 80 }] }],
      ['origins[0].port', { domain: 'new.example.com', origins: [{ ip: '192.0.2.1', port: '80' }] }],
      ['origins[0].port', { domain: 'new.example.com', origins: [{ ip: '192.0.2.1', port: 0 }] }],
      ['origins[0].port', { domain: 'new.example.com', origins: [{ ip: '192.0.2.1', port: 65536 }] }],
      ['origins[0].port', { domain: 'new.example.com', origins: [{ ip: '192.0.2.1', port: 80.5 }] }],
      ['origins[0].port', { domain: 'new.example.com', origins: [{ ip: '192.0.2.1' }] }],
      ['serverIds', { domain: 'new.example.com', origins: [origin], serverIds: SERVER }],
      ['serverIds[0]', { domain: 'new.example.com', origins: [origin], serverIds: [5] }],
      ['sslEnabled', { domain: 'new.example.com', origins: [origin], sslEnabled: 'true' }],
      ['wafEnabled', { domain: 'new.example.com', origins: [origin], wafEnabled: 1 }],
      ['wafLevel', { domain: 'new.example.com', origins: [origin], wafLevel: 'extreme' }],
      ['wafMode', { domain: 'new.example.com', origins: [origin], wafMode: 'log' }],
      ['wafMode', { domain: 'new.example.com', origins: [origin], wafMode: true }],
    ],
  },
  {
    method: 'PUT',
    url: `/api/domains/${DOMAIN}`,
    auth: { key: KEY },
    valid: { sslEnabled: false },
    wrongTypes: [
      ['origins', { origins: 'x' }],
      ['origins', { origins: [] }],
      ['origins[0].ip', { origins: [{ ip: false, port: 80 }] }],
      ['origins[0].port', { origins: [{ ip: '192.0.2.1', port: -1 }] }],
      ['serverIds', { serverIds: {} }],
      ['sslEnabled', { sslEnabled: 'false' }],
      ['wafEnabled', { wafEnabled: null }],
      ['wafLevel', { wafLevel: 'HIGH' }],
      ['wafMode', { wafMode: 'DETECT' }],
      ['wafMode', { wafMode: null }],
      ['domain', { domain: 'renamed.example.com' }],
    ],
  },
  { method: 'DELETE', url: `/api/domains/${randomUUID()}`, auth: { key: KEY } },
  {
    method: 'POST',
    url: '/api/waf',
    auth: { key: KEY },
    valid: { rule_type: 'block_country', value: 'CN' },
    wrongTypes: [
      ['rule_type', { rule_type: 5, value: 'CN' }],
      ['rule_type', { rule_type: 'BLOCK_IP', value: '1.2.3.4' }],
      ['value', { rule_type: 'block_ip', value: 5 }],
      ['value', { rule_type: 'rate_limit', value: { requests_per_minute: 60 } }],
      ['domain_id', { rule_type: 'block_ip', value: '1.2.3.4', domain_id: 5 }],
      ['enabled', { rule_type: 'block_ip', value: '1.2.3.4', enabled: 'true' }],
      ['priority', { rule_type: 'block_ip', value: '1.2.3.4', priority: '5' }],
      ['priority', { rule_type: 'block_ip', value: '1.2.3.4', priority: 1.5 }],
    ],
  },
  {
    method: 'PUT',
    url: `/api/waf/${RULE}`,
    auth: { key: KEY },
    valid: { enabled: false },
    wrongTypes: [
      ['value', { value: 5 }],
      ['enabled', { enabled: 'yes' }],
      ['priority', { priority: 1.5 }],
      ['priority', { priority: [] }],
      ['rule_type', { rule_type: 'allow_ip' }],
    ],
  },
  { method: 'DELETE', url: `/api/waf/${randomUUID()}`, auth: { key: KEY } },
  {
    method: 'POST',
    url: '/api/billing/deposits',
    auth: { key: KEY },
    valid: { amount: 10 },
    wrongTypes: [
      ['amount', { amount: '10' }],
      ['amount', { amount: 0 }],
      ['amount', { amount: -5 }],
      ['amount', { amount: 1.234 }],
      ['amount', { amount: null }],
    ],
  },
  {
    method: 'POST',
    url: '/api/auth/register',
    auth: {},
    valid: creds,
    wrongTypes: [
      ['email', { email: 5, password: creds.password }],
      ['password', { email: creds.email, password: 12345678 }],
      ['email', { email: 'no-at-sign', password: creds.password }],
      ['password', { email: creds.email, password: 'short' }],
    ],
  },
  {
    method: 'POST',
    url: '/api/auth/login',
    auth: {},
    valid: creds,
    wrongTypes: [
      ['email', { email: [], password: creds.password }],
      ['password', { email: creds.email, password: {} }],
    ],
  },
  {
    method: 'POST',
    url: '/admin/accounts',
    auth: { admin: true },
    valid: { email: 'admin-made@example.com', plan: 'pro' },
    wrongTypes: [
      ['email', { email: 5, plan: 'pro' }],
      ['plan', { email: 'admin-made@example.com', plan: 'gold' }],
      ['balance', { email: 'admin-made@example.com', plan: 'pro', balance: '5' }],
      ['balance', { email: 'admin-made@example.com', plan: 'pro', balance: -1 }],
      ['password', { email: 'admin-made@example.com', plan: 'pro', password: 5 }],
    ],
  },
];

const label = (e: Endpoint) => `${e.method} ${e.url.replace(/[0-9a-f-]{36}/g, ':id')}`;
const MALFORMED = ['{', '{"name":}', "{'name':'x'}", '{"name":"x",}', '{"a":1}}', 'NaN', '{"a":1} trailing', '\u0000'];

describe('malformed, oversized and mistyped bodies', () => {
  for (const e of ENDPOINTS) {
    test(`${label(e)}: malformed JSON is 400, over 1 MiB is 413`, async () => {
      const before = await state();
      for (const raw of MALFORMED) {
        expectError(await req(e.method, e.url, { ...e.auth, rawBody: raw }), 400, ['body', 'JSON'], `malformed ${JSON.stringify(raw)}`);
      }
      const big = JSON.stringify({ ...(e.valid ?? {}), pad: 'x'.repeat(1024 * 1024) });
      expectError(await req(e.method, e.url, { ...e.auth, rawBody: big }), 413, ['body'], 'over 1 MiB');
      const bigString = JSON.stringify({ name: 'y'.repeat(1024 * 1024 + 1) });
      expectError(await req(e.method, e.url, { ...e.auth, rawBody: bigString }), 413, ['body'], 'over 1 MiB in one field');
      assert.deepEqual(await state(), before, 'nothing stored');
    });

    if (!e.valid) continue;

    test(`${label(e)}: wrong Content-Type is 415`, async () => {
      const before = await state();
      const json = JSON.stringify(e.valid);
      const wrong: string[] = [];
      for (const ct of ['application/x-www-form-urlencoded', 'application/xml', 'multipart/form-data; boundary=x', 'text/plain', 'text/plain; charset=utf-8']) {
        const r = await req(e.method, e.url, { ...e.auth, rawBody: json, headers: { 'content-type': ct } });
        if (r.status !== 415 || !String(r.body?.error).includes('Content-Type')) wrong.push(`${ct} -> ${r.status} ${JSON.stringify(r.body)}`);
      }
      assert.deepEqual(wrong, [], 'every non-JSON Content-Type is 415');
      assert.deepEqual(await state(), before, 'nothing stored');
    });

    test(`${label(e)}: empty, array, null and scalar bodies are 400`, async () => {
      const before = await state();
      expectError(await req(e.method, e.url, { ...e.auth, rawBody: '' }), 400, ['body'], 'empty JSON body');
      expectError(await req(e.method, e.url, { ...e.auth }), 400, ['body'], 'no body at all');
      for (const raw of ['[]', '[{}]', `[${JSON.stringify(e.valid)}]`, 'null', '"text"', '42', 'true']) {
        expectError(await req(e.method, e.url, { ...e.auth, rawBody: raw }), 400, ['body'], `body ${raw.slice(0, 40)}`);
      }
      assert.deepEqual(await state(), before, 'nothing stored');
    });

    test(`${label(e)}: unknown fields and wrong types are 400 naming the field`, async () => {
      const before = await state();
      for (const extra of ['extra', 'id', 'created_at', 'isAdmin']) {
        const r = await req(e.method, e.url, { ...e.auth, body: { ...e.valid, [extra]: 'x' } });
        expectError(r, 400, ['unknown field', extra], `unknown field ${extra}`);
      }
      for (const [field, body] of e.wrongTypes ?? []) {
        expectError(await req(e.method, e.url, { ...e.auth, body }), 400, [field], `${field} in ${JSON.stringify(body).slice(0, 80)}`);
      }
      assert.deepEqual(await state(), before, 'nothing stored');
    });

    test(`${label(e)}: __proto__ and constructor keys are refused`, async () => {
      const before = await state();
      const v = JSON.stringify(e.valid).slice(1, -1);
      for (const raw of [
        `{${v},"__proto__":{"isAdmin":true}}`,
        `{"__proto__":{"plan":"enterprise"},${v}}`,
        `{${v},"constructor":{"prototype":{"isAdmin":true}}}`,
        `{${v},"origins":[{"ip":"192.0.2.1","port":80,"__proto__":{"port":"x"}}]}`,
      ]) {
        const r = await req(e.method, e.url, { ...e.auth, rawBody: raw });
        assert.ok(r.status >= 400 && r.status < 500, `${raw.slice(0, 80)}: ${r.status} ${JSON.stringify(r.body)}`);
      }
      assert.equal(({} as Record<string, unknown>).isAdmin, undefined, 'Object.prototype untouched');
      assert.deepEqual(await state(), before, 'nothing stored');
    });
  }

  test('the valid bodies used above are really accepted (control)', async () => {
    // Run last in this suite so the earlier "nothing stored" comparisons are not disturbed.
    for (const e of ENDPOINTS) {
      if (!e.valid) continue;
      const r = await req(e.method, e.url, { ...e.auth, body: e.valid });
      assert.ok(r.status === 200 || r.status === 201, `${label(e)}: ${r.status} ${JSON.stringify(r.body)}`);
    }
  });
});

describe('hostile strings where a hostname or an address belongs', () => {
  const HOSTILE_SUFFIXES = ['\r\n', '\r\nX-Injected: 1', '\n', '#', ' #comment', '"', "'", '\\', '\u0000', '\t', ' ', '{', '}', '%', ';', '`', '\u0085', '\u2028'];
  const inject = (s: string) => [...HOSTILE_SUFFIXES.map((h) => s + h), ...HOSTILE_SUFFIXES.map((h) => h + s), ...HOSTILE_SUFFIXES.map((h) => s.slice(0, 3) + h + s.slice(3))];

  test('domain on POST /api/domains', async () => {
    const before = await state();
    for (const domain of [...inject('evil.example.com'), 'evil.example.com%0d%0a', 'evil.example.com:80', 'http://evil.example.com', '*.example.com']) {
      const r = await req('POST', '/api/domains', { key: KEY, body: { domain, origins: [origin] } });
      expectError(r, 400, ['domain'], JSON.stringify(domain));
      assert.ok(!r.body.error.includes('origins'), `${JSON.stringify(domain)}: only the domain is at fault: ${r.body.error}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  test('origins[].ip on POST and PUT /api/domains', async () => {
    const before = await state();
    const ips = [...inject('192.0.2.10'), ...inject('2001:db8::1'), 'fe80::1%eth0', '[::1]', '192.0.2.10:80', 'localhost', '0x7f.0.0.1'];
    for (const ip of ips) {
      const post = await req('POST', '/api/domains', { key: KEY, body: { domain: 'ok.example.com', origins: [origin, { ip, port: 80 }] } });
      expectError(post, 400, ['origins[1].ip'], `POST ${JSON.stringify(ip)}`);
      const put = await req('PUT', `/api/domains/${DOMAIN}`, { key: KEY, body: { origins: [{ ip, port: 80 }] } });
      expectError(put, 400, ['origins[0].ip'], `PUT ${JSON.stringify(ip)}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  test('block_ip / allow_ip values on POST and PUT /api/waf', async () => {
    const before = await state();
    const values = [...inject('192.0.2.10'), ...inject('10.0.0.0/8'), ...inject('2001:db8::/32'), '10.0.0.0/8/8', '10.0.0.0/08'];
    for (const value of values) {
      for (const rule_type of ['block_ip', 'allow_ip']) {
        expectError(await req('POST', '/api/waf', { key: KEY, body: { rule_type, value } }), 400, ['value'], `POST ${rule_type} ${JSON.stringify(value)}`);
      }
      expectError(await req('PUT', `/api/waf/${RULE}`, { key: KEY, body: { value } }), 400, ['value'], `PUT block_ip ${JSON.stringify(value)}`);
      expectError(await req('PUT', `/api/waf/${ALLOW}`, { key: KEY, body: { value } }), 400, ['value'], `PUT allow_ip ${JSON.stringify(value)}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  test('names on POST /api/settings/api-keys and /api/servers', async () => {
    const before = await state();
    for (const name of ['a\r\nb', 'a\nb', 'a\u0000b', 'a\u001bb', 'a\u007fb', '\t']) {
      expectError(await req('POST', '/api/settings/api-keys', { key: KEY, body: { name } }), 400, ['name'], `key name ${JSON.stringify(name)}`);
      expectError(await req('POST', '/api/servers', { key: KEY, body: { name } }), 400, ['name'], `server name ${JSON.stringify(name)}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  const emailEndpoints = (email: string) =>
    [
      ['POST', '/api/auth/register', { body: { email, password: 'a good password' } }],
      ['POST', '/api/auth/login', { body: { email, password: 'a good password' } }],
      ['POST', '/admin/accounts', { admin: true, body: { email, plan: 'free' } }],
    ] as const;

  test('an email with CR/LF or spaces is 400 naming email', async () => {
    const before = await state();
    for (const email of ['ab@example.com\r\nBcc: x@y.z', 'a b@example.com', 'ab@exa mple.com', 'ab@example.com\n']) {
      for (const [method, url, opts] of emailEndpoints(email)) expectError(await req(method, url, opts), 400, ['email'], `${url} ${JSON.stringify(email)}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  test('an email with NUL is 400 naming email, not a 500 from the database', async () => {
    const before = await state();
    for (const email of ['a\u0000b@example.com', 'ab@example.com\u0000', 'ab@exa\u0000mple.com', `${EXISTING_EMAIL}\u0000`]) {
      for (const [method, url, opts] of emailEndpoints(email)) {
        const r = await call(t.app, method, url, opts);
        expectError(r, 400, ['email'], `${url} ${JSON.stringify(email)}`);
      }
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  test('an email with other control characters is 400 naming email, and is not stored', async () => {
    const before = await state();
    for (const email of ['a\u0001b@example.com', 'a\u001bb@example.com', 'a\u007fb@example.com', 'ab@example.com\u0085']) {
      for (const [method, url, opts] of emailEndpoints(email)) expectError(await req(method, url, opts), 400, ['email'], `${url} ${JSON.stringify(email)}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });
});

describe('ill-formed Unicode', () => {
  // JSON may carry lone surrogates as \uD800 escapes. The embedded database (PGlite) mis-sizes such
  // strings: some combinations fail with "invalid byte sequence for encoding UTF8" (a 500), the
  // others are silently stored as U+FFFD. Either way they must be refused at the edge.
  const ILL_FORMED = ['\ud803\u0085\udf74', 'a\ud800b', '\udc00', 'x\ud83d', '\ud803\u00e9\udf74'];

  test('lone surrogates in names are 400 naming the field', async () => {
    const before = await state();
    for (const name of ILL_FORMED) {
      expectError(await call(t.app, 'POST', '/api/servers', { key: KEY, body: { name } }), 400, ['name'], `server name ${JSON.stringify(name)}`);
      expectError(await call(t.app, 'POST', '/api/settings/api-keys', { key: KEY, body: { name } }), 400, ['name'], `key name ${JSON.stringify(name)}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  test('lone surrogates in an email are 400 naming email', async () => {
    const before = await state();
    for (const bad of ILL_FORMED) {
      const email = `a${bad}b@example.com`;
      expectError(await call(t.app, 'POST', '/api/auth/register', { body: { email, password: 'a good password' } }), 400, ['email'], `register ${JSON.stringify(email)}`);
      expectError(await call(t.app, 'POST', '/admin/accounts', { admin: true, body: { email, plan: 'free' } }), 400, ['email'], `admin ${JSON.stringify(email)}`);
    }
    assert.deepEqual(await state(), before, 'nothing stored');
  });
});

describe('amounts', () => {
  test('a deposit amount that rounds to zero cents is refused', async () => {
    const before = await state();
    for (const amount of [1e-9, 0.000001, 0.004, Number.MIN_VALUE]) {
      expectError(await req('POST', '/api/billing/deposits', { key: KEY, body: { amount } }), 400, ['amount'], `amount ${amount}`);
    }
    expectError(await req('POST', '/api/billing/deposits', { key: KEY, body: { amount: 1_000_001 } }), 400, ['amount'], 'amount over the maximum');
    assert.deepEqual(await state(), before, 'nothing stored');
  });
});

describe('ids in paths and queries', () => {
  test('non-uuid, overlong, encoded and hostile ids are 404 or 400, never 5xx', async () => {
    const before = await state();
    const ids = ['x', '1', "1' OR '1'='1", '%00', '%0d%0a', '..%2f..%2fetc', encodeURIComponent('é'), 'a'.repeat(100), `${randomUUID()}%00`, randomUUID().toUpperCase()];
    for (const id of ids) {
      for (const [method, url, body] of [
        ['POST', `/api/servers/${id}/token`, undefined],
        ['DELETE', `/api/servers/${id}`, undefined],
        ['PUT', `/api/domains/${id}`, { sslEnabled: true }],
        ['DELETE', `/api/domains/${id}`, undefined],
        ['PUT', `/api/waf/${id}`, { enabled: true }],
        ['DELETE', `/api/waf/${id}`, undefined],
        ['DELETE', `/api/settings/api-keys?id=${id}`, undefined],
      ] as const) {
        const r = await req(method, url, { key: KEY, ...(body ? { body } : {}) });
        assert.equal(r.status, 404, `${method} ${url}: ${r.status} ${JSON.stringify(r.body)}`);
      }
    }
    expectError(await req('DELETE', '/api/settings/api-keys', { key: KEY }), 400, ['id'], 'missing id');
    expectError(await req('DELETE', `/api/settings/api-keys?id=${randomUUID()}&x=1`, { key: KEY }), 400, ['x'], 'unknown query field');
    assert.deepEqual(await state(), before, 'nothing stored');
  });

  test('an id longer than any real one is a 4xx with the usual { error } body', async () => {
    const long = 'a'.repeat(101);
    for (const [method, url] of [
      ['DELETE', `/api/waf/${long}`],
      ['PUT', `/api/domains/${long}`],
      ['POST', `/api/servers/${long}/token`],
    ] as const) {
      const r = await req(method, url, { key: KEY, ...(method === 'PUT' ? { body: { sslEnabled: true } } : {}) });
      assert.ok(r.status >= 400 && r.status < 500, `${method} ${url}: ${r.status}`);
      assert.deepEqual(Object.keys(r.body ?? {}), ['error'], `${method} overlong id: body ${JSON.stringify(r.body)}`);
    }
  });
});
