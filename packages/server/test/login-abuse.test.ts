import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { passwordHashing } from '../src/crypto.js';
import { addressKey, LOGIN_LIMITS, LoginLimiter } from '../src/login-limiter.js';
import { call, makeTestApp, newAccount, type TestApp } from './helpers.js';

// docs/api.md "Browser sessions": failed sign-ins are limited per account (10 in 15 minutes) and
// per source address (50 in 15 minutes); over a limit, 429 with Retry-After and { error }, decided
// before any password is hashed. The account's limit applies only to addresses that failed
// themselves: an address without failures, and one the account signed in from before (judged by
// its own failures only), reach the password check, so someone guessing elsewhere never locks the
// owner out. Behind a reverse proxy the address is X-Forwarded-For's, from trusted proxies only.

const PASSWORD = 'the right password';
const WINDOW_S = LOGIN_LIMITS.windowMs / 1000;
const TOO_MANY = 'Too many failed sign-ins, try again later';

interface Attempt {
  status: number;
  body: any;
  retryAfter: number | undefined;
}

async function login(t: TestApp, email: string, password: string, address: string, forwardedFor?: string): Promise<Attempt> {
  const res = await t.app.inject({
    method: 'POST',
    url: '/api/auth/login',
    remoteAddress: address,
    headers: { 'content-type': 'application/json', ...(forwardedFor ? { 'x-forwarded-for': forwardedFor } : {}) },
    payload: JSON.stringify({ email, password }),
  });
  const ra = res.headers['retry-after'];
  return { status: res.statusCode, body: JSON.parse(res.body), retryAfter: ra === undefined ? undefined : Number(ra) };
}

function assertLimited(a: Attempt, label: string): void {
  assert.equal(a.status, 429, `${label}: ${a.status} ${JSON.stringify(a.body)}`);
  assert.deepEqual(a.body, { error: TOO_MANY }, label);
  assert.ok(a.retryAfter !== undefined && Number.isInteger(a.retryAfter) && a.retryAfter >= 1 && a.retryAfter <= WINDOW_S, `${label}: Retry-After ${a.retryAfter}`);
}

/** `times` failed sign-ins, concurrently (attempts in progress count, so all of them fit a limit they fit one by one). */
async function fail(t: TestApp, email: string, address: string, times: number): Promise<void> {
  const results = await Promise.all(Array.from({ length: times }, (_, i) => login(t, email, `wrong password ${i}`, address)));
  results.forEach((r, i) => assert.equal(r.status, 401, `failure ${i + 1} from ${address}: ${r.status} ${JSON.stringify(r.body)}`));
}

describe('login abuse', () => {
  test('per account: the 11th attempt within 15 minutes is 429 with Retry-After, even with the right password, and hashes nothing', async () => {
    const t = await makeTestApp();
    const { email } = await newAccount(t.app, 'pro', 100, PASSWORD);
    await fail(t, email, '198.51.100.1', LOGIN_LIMITS.perAccount);

    const hashed = passwordHashing.stats.started;
    const refused = await login(t, email, PASSWORD, '198.51.100.1');
    assertLimited(refused, 'right password over the limit');
    assert.equal(refused.retryAfter, WINDOW_S, 'until the first failure leaves the 15-minute window');
    // The email in another case is the same account.
    assertLimited(await login(t, email.toUpperCase(), PASSWORD, '198.51.100.1'), 'upper-case email');
    assert.equal(passwordHashing.stats.started, hashed, 'a refused attempt hashes no password');
    // An address with a failure of its own (on any account) is held to the account's count too.
    assert.equal((await login(t, 'someone-else@example.com', 'a wrong password', '198.51.100.2')).status, 401);
    assertLimited(await login(t, email, PASSWORD, '198.51.100.2'), 'an address that failed on another account');

    // Retry-After counts down with the clock, and once the window has passed the account signs in again.
    t.clock.advance(5 * 60_000);
    assert.equal((await login(t, email, PASSWORD, '198.51.100.1')).retryAfter, WINDOW_S - 5 * 60);
    t.clock.advance(10 * 60_000);
    const again = await login(t, email, PASSWORD, '198.51.100.1');
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.retryAfter, undefined);

    // Other accounts were never affected.
    const other = await newAccount(t.app, 'pro', 100, PASSWORD);
    assert.equal((await login(t, other.email, PASSWORD, '198.51.100.3')).status, 200);
  });

  test('failures spread over many addresses: each failing address is stopped, an address without failures reaches the password check', async () => {
    const t = await makeTestApp();
    const { email } = await newAccount(t.app, 'pro', 100, PASSWORD);
    const home = '192.0.2.10';
    assert.equal((await login(t, email, PASSWORD, home)).status, 200, 'the owner signs in from home once');

    // Someone guesses from ten addresses, one attempt each: no address is near its own limit.
    await Promise.all(Array.from({ length: LOGIN_LIMITS.perAccount }, (_, i) => fail(t, email, `203.0.113.${i + 1}`, 1)));
    // Each of them has failed: over the account's count, their next guess is refused unchecked.
    for (let i = 1; i <= LOGIN_LIMITS.perAccount; i++) assertLimited(await login(t, email, 'another guess', `203.0.113.${i}`), `guessing address ${i} again`);
    // A new address gets one guess (then it is a failing address like the others)...
    assert.equal((await login(t, email, 'a guess from a new address', '203.0.113.200')).status, 401);
    assertLimited(await login(t, email, PASSWORD, '203.0.113.200'), 'the new address after its failure');
    // ...and the owner, from an address of its own without failures, signs in with the right password.
    assert.equal((await login(t, email, PASSWORD, '203.0.113.201')).status, 200, 'the right password from a new address');

    // The owner's address is judged by its own failures only.
    const ok = await login(t, email, PASSWORD, home);
    assert.equal(ok.status, 200, `home: ${ok.status} ${JSON.stringify(ok.body)}`);
    // A success does not reset the account's count for the failing addresses.
    assertLimited(await login(t, email, PASSWORD, '203.0.113.1'), 'a failing address after the owner signed in');
    // The home address has a limit of its own: 10 failures of its own.
    await fail(t, email, home, LOGIN_LIMITS.perAccount);
    assertLimited(await login(t, email, PASSWORD, home), 'home after 10 failures of its own');
  });

  test('per address: 50 failures over any emails stop that address for every account; other addresses are unaffected', async () => {
    const t = await makeTestApp();
    const victim = await newAccount(t.app, 'pro', 100, PASSWORD);
    const attacker = '198.18.0.1';
    // Five emails, ten failures each (each email just within its own limit): 50 from one address.
    await Promise.all(Array.from({ length: LOGIN_LIMITS.perAddress / LOGIN_LIMITS.perAccount }, (_, i) => fail(t, `nobody${i}@example.com`, attacker, LOGIN_LIMITS.perAccount)));
    assertLimited(await login(t, 'someone-else@example.com', 'whatever guess', attacker), 'a fresh email from the attacking address');
    assertLimited(await login(t, victim.email, PASSWORD, attacker), 'a real account with the right password, from that address');
    // The victim, elsewhere, never notices.
    assert.equal((await login(t, victim.email, PASSWORD, '198.18.0.2')).status, 200);
    // A success of the attacker's own account from that address does not reset the address.
    const own = await newAccount(t.app, 'pro', 100, PASSWORD);
    assertLimited(await login(t, own.email, PASSWORD, attacker), "the attacker's own account");
  });

  test('a burst of concurrent guesses at one account from one address: at most 10 are checked, the rest 429 at once', async () => {
    const t = await makeTestApp();
    const { email } = await newAccount(t.app, 'pro', 100, PASSWORD);
    // Thirty at once: all begin before the first one fails.
    const attempts = await Promise.all(Array.from({ length: 30 }, (_, i) => login(t, email, `wrong guess ${i}`, '100.64.0.1')));
    const statuses = attempts.map((a) => a.status).sort();
    assert.equal(statuses.filter((s) => s === 401).length, LOGIN_LIMITS.perAccount, statuses.join(','));
    assert.equal(statuses.filter((s) => s === 429).length, 30 - LOGIN_LIMITS.perAccount, statuses.join(','));
    for (const a of attempts.filter((x) => x.status === 429)) assertLimited(a, 'burst');
  });

  test('behind a trusted proxy: 50 failures with varying X-Forwarded-For lock out only their addresses; the owner signs in from a fresh one', async () => {
    const proxy = '10.0.0.5';
    const t = await makeTestApp('pglite', { trustProxy: [proxy] });
    const { email } = await newAccount(t.app, 'pro', 100, PASSWORD);
    const attackers = Array.from({ length: 50 }, (_, i) => `198.51.100.${i + 1}`);
    for (const a of attackers) {
      const r = await login(t, email, `guess from ${a}`, proxy, a);
      assert.ok(r.status === 401 || r.status === 429, `${a}: ${r.status}`);
    }
    // Every attacking address is held back; the proxy's own address is no one's.
    assertLimited(await login(t, email, PASSWORD, proxy, attackers[0]), 'an attacking address, even with the right password');
    const owner = await login(t, email, PASSWORD, proxy, '192.0.2.77');
    assert.equal(owner.status, 200, `the owner through the proxy: ${owner.status} ${JSON.stringify(owner.body)}`);
    // A chain: the right-most address the proxy did not add is the client (a forged left part is ignored).
    assertLimited(await login(t, email, PASSWORD, proxy, `192.0.2.77, ${attackers[1]}`), 'a forged entry before an attacking address');
    assert.equal((await login(t, email, PASSWORD, proxy, `${attackers[2]}, 192.0.2.78`)).status, 200, 'a forged attacking entry before a clean address');
  });

  test('X-Forwarded-For from a peer that is not a trusted proxy is ignored', async () => {
    const t = await makeTestApp('pglite', { trustProxy: ['10.0.0.5'] });
    const { email } = await newAccount(t.app, 'pro', 100, PASSWORD);
    const direct = '203.0.113.9';
    // An attacker connecting directly cannot pose as fresh addresses: its failures are its own address's.
    for (let i = 0; i < LOGIN_LIMITS.perAccount; i++) assert.equal((await login(t, email, `wrong guess ${i}`, direct, `192.0.2.${i + 1}`)).status, 401);
    assertLimited(await login(t, email, PASSWORD, direct, '192.0.2.200'), 'a new forged address');
    // Without any trusted proxy (the default), too.
    const plain = await makeTestApp();
    const other = await newAccount(plain.app, 'pro', 100, PASSWORD);
    for (let i = 0; i < LOGIN_LIMITS.perAccount; i++) assert.equal((await login(plain, other.email, `wrong guess ${i}`, direct, `192.0.2.${i + 1}`)).status, 401);
    assertLimited(await login(plain, other.email, PASSWORD, direct, '192.0.2.200'), 'no proxy trusted');
  });

  test('register and the management API are not limited by failed sign-ins', async () => {
    const t = await makeTestApp();
    const { email, key } = await newAccount(t.app, 'pro', 100, PASSWORD);
    await fail(t, email, '127.0.0.1', LOGIN_LIMITS.perAccount);
    assert.equal((await call(t.app, 'GET', '/api/account', { key })).status, 200);
    const reg = await call(t.app, 'POST', '/api/auth/register', { body: { email: 'fresh-after-failures@example.com', password: PASSWORD } });
    assert.equal(reg.status, 201);
  });
});

describe('LoginLimiter', () => {
  const limited = (fn: () => unknown) => assert.throws(fn, (err: any) => err.code === 'too_many_logins' && err.status === 429 && err.retryAfterSeconds >= 1);

  test('IPv6 addresses are counted by /64; IPv4-mapped addresses as IPv4', () => {
    const now = 1_000_000;
    const limiter = new LoginLimiter(() => now);
    for (let i = 0; i < LOGIN_LIMITS.perAddress; i++) limiter.begin(`v6-${i}@example.com`, `2001:db8:1:2::${(i + 1).toString(16)}`)('failure');
    limited(() => limiter.begin('victim@example.com', '2001:db8:1:2:ffff:ffff:ffff:ffff'));
    limiter.begin('victim@example.com', '2001:db8:1:3::1')('aborted'); // the next /64

    for (let i = 0; i < LOGIN_LIMITS.perAddress; i++) limiter.begin(`v4-${i}@example.com`, '::ffff:192.0.2.7')('failure');
    limited(() => limiter.begin('victim@example.com', '192.0.2.7'));

    assert.equal(addressKey('::ffff:192.0.2.7'), '192.0.2.7');
    assert.equal(addressKey('192.0.2.7'), '192.0.2.7');
    assert.equal(addressKey('2001:db8::1'), '2001:db8:0:0::/64');
    assert.equal(addressKey('2001:DB8:0:0:1::1'), '2001:db8:0:0::/64');
    assert.equal(addressKey('::1'), '0:0:0:0::/64');
    assert.equal(addressKey('fe80::1%eth0'), 'fe80:0:0:0::/64');
    assert.equal(addressKey(undefined), 'unknown');
  });

  test('Retry-After: until enough failures leave the window; attempts in progress alone ask for one second', () => {
    let now = 1_000_000;
    const limiter = new LoginLimiter(() => now);
    // One address, one failure a minute: 10 failures over 10 minutes.
    for (let i = 0; i < LOGIN_LIMITS.perAccount; i++) {
      limiter.begin('a@example.com', '192.0.2.1')('failure');
      now += 60_000;
    }
    // Now at +10 min: the first failure (at 0) leaves the window at +15 min.
    assert.throws(
      () => limiter.begin('a@example.com', '192.0.2.1'),
      (err: any) => err.retryAfterSeconds === 5 * 60,
    );
    now += 5 * 60_000;
    const end = limiter.begin('a@example.com', '192.0.2.1'); // one slot free, now taken by this attempt
    // The next failure (at +1 min) leaves the window at +16 min.
    assert.throws(
      () => limiter.begin('a@example.com', '192.0.2.1'),
      (err: any) => err.retryAfterSeconds === 60,
    );
    end('aborted');
    limiter.begin('a@example.com', '192.0.2.1')('aborted');

    // Ten attempts in progress from one address and no failure yet: the eleventh may retry in a second.
    const ends = Array.from({ length: LOGIN_LIMITS.perAccount }, () => limiter.begin('b@example.com', '192.0.2.2'));
    assert.throws(
      () => limiter.begin('b@example.com', '192.0.2.2'),
      (err: any) => err.retryAfterSeconds === 1,
    );
    for (const e of ends) e('success');
    limiter.begin('b@example.com', '192.0.2.2')('aborted');
  });

  test('an address without failures is never held to the account count; one with a failure (or an attempt in progress) is', () => {
    const now = 1_000_000;
    const limiter = new LoginLimiter(() => now);
    for (let i = 0; i < LOGIN_LIMITS.perAccount; i++) limiter.begin('a@example.com', `198.51.100.${i + 1}`)('failure');
    limiter.begin('a@example.com', '192.0.2.50')('success'); // a clean address
    limited(() => limiter.begin('a@example.com', '198.51.100.1'));
    const pending = limiter.begin('a@example.com', '192.0.2.51'); // clean, now in progress
    limited(() => limiter.begin('a@example.com', '192.0.2.51'));
    pending('aborted');
    limiter.begin('a@example.com', '192.0.2.51')('aborted');
  });

  test('an attempt that ends without a verdict (an error, a 503) does not count', () => {
    let now = 1_000_000;
    const limiter = new LoginLimiter(() => now);
    for (let i = 0; i < 100; i++) limiter.begin('a@example.com', '192.0.2.1')('aborted');
    limiter.begin('a@example.com', '192.0.2.1')('failure');
    now += 1;
    // Still allowed: one failure only.
    limiter.begin('a@example.com', '192.0.2.1')('failure');
  });

  test('the tables stay bounded', () => {
    let now = 0;
    const limiter = new LoginLimiter(() => now, { ...LOGIN_LIMITS, maxEntries: 100 });
    for (let i = 0; i < 10_000; i++) {
      now++;
      limiter.begin(`user${i}@example.com`, `10.0.${i >> 8}.${i & 255}`)('failure');
    }
    const sizes = limiter as unknown as Record<'byAddress' | 'byAccount' | 'byPair', { size: number }>;
    for (const k of ['byAddress', 'byAccount', 'byPair'] as const) assert.ok(sizes[k].size <= 100, `${k}: ${sizes[k].size}`);
  });
});

describe('the session cookie behind a proxy', () => {
  const secureOf = async (t: TestApp, remoteAddress: string, headers: Record<string, string>) => {
    const { email } = await newAccount(t.app, 'pro', 100, PASSWORD);
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/auth/login',
      remoteAddress,
      headers: { 'content-type': 'application/json', ...headers },
      payload: JSON.stringify({ email, password: PASSWORD }),
    });
    assert.equal(res.statusCode, 200, res.body);
    return /; Secure/.test(String(res.headers['set-cookie']));
  };

  test('Secure when the public URL is https, whatever the request says', async () => {
    const t = await makeTestApp('pglite', { publicUrl: new URL('https://rampart.example.com') });
    assert.equal(await secureOf(t, '203.0.113.1', {}), true);
  });

  test('without one: Secure only when X-Forwarded-Proto: https comes from a trusted proxy', async () => {
    const t = await makeTestApp('pglite', { trustProxy: ['10.0.0.5'] });
    assert.equal(await secureOf(t, '10.0.0.5', { 'x-forwarded-proto': 'https', 'x-forwarded-for': '203.0.113.2' }), true);
    assert.equal(await secureOf(t, '203.0.113.3', { 'x-forwarded-proto': 'https' }), false, 'an untrusted peer');
    assert.equal(await secureOf(t, '10.0.0.5', { 'x-forwarded-proto': 'http' }), false, 'plain HTTP at the proxy');
  });
});
