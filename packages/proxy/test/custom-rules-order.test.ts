import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { createConnection } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ServerSnapshot, SnapshotCustomRule, SnapshotRule } from '@rampart/protocol';
import { ADMIN_SOCKET, HITS_TABLE, parseRuleHits, passCookieMac, renderHaproxyConfig } from '../src/index.js';
import { freePort, startProcess, waitFor, type Proc } from '../../../test/support/processes.js';

// Custom rules in the processing order (docs/architecture.md "The WAF"), through a real HAProxy:
// after the blacklist and countries, before bot protection, by priority, the first decisive match
// winning; the actions block (403 custom_rule_blocked), allow (skips bot protection and the rate
// limit, never the blacklist), challenge (the bot challenge, passed with a valid cookie) and log
// (let through, logged as custom_rule_logged), each event line carrying the rule's id.

const HAPROXY = process.env.HAPROXY ?? 'haproxy';
const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const DOMAIN = id(1);
const HOST = 'shop.rules.test';
const KEY = { id: 'k1', secret: 'cd'.repeat(32) };
const UA = 'Mozilla/5.0 rules-test';
const BAD_UA = 'sqlmap/1.7';
const RATE = 3;
const R = {
  block: id(10),
  country: id(11),
  rate: id(12),
  bot: id(13),
  office: id(20),
  watch: id(21),
  admin: id(22),
  checkout: id(23),
  afterAdmin: id(24),
  login: id(25),
  api: id(26),
  shopHeader: id(27),
  shopPrivate: id(28),
};

function snapshot(botOn: boolean, originPort: number): ServerSnapshot {
  const r = (rid: string, type: SnapshotRule['type'], value: string): SnapshotRule => ({ id: rid, type, value, domainId: null, priority: 100 });
  const c = (rid: string, priority: number, action: SnapshotCustomRule['action'], expression: string): SnapshotCustomRule => ({
    id: rid,
    expression,
    action,
    domainId: priority === 3 ? DOMAIN : null,
    priority,
  });
  return {
    serverId: 'rules-order',
    revision: 1,
    botKeys: [KEY],
    domains: [{ id: DOMAIN, domain: HOST, origins: [{ ip: '127.0.0.1', port: originPort }], sslEnabled: false, wafEnabled: true, wafLevel: 'medium', wafMode: 'block', serverAddresses: [] }],
    rules: [
      r(R.block, 'block_ip', '127.0.10.0/24'),
      r(R.country, 'block_country', 'KP'),
      r(R.rate, 'rate_limit', JSON.stringify({ requests_per_minute: RATE })),
      ...(botOn ? [r(R.bot, 'block_bot', JSON.stringify({ enabled: true }))] : []),
    ],
    customRules: [
      c(R.office, 1, 'allow', 'starts_with(http.request.uri.path, "/office")'),
      c(R.watch, 2, 'log', 'http.request.uri.path contains "watch"'),
      c(R.admin, 3, 'block', 'lower(http.request.uri.path) contains "admin" and not ip.src eq 127.0.30.9'),
      c(R.checkout, 4, 'challenge', 'http.request.uri.path eq "/checkout"'),
      c(R.afterAdmin, 5, 'block', 'http.request.uri.path contains "admin"'),
      { ...c(R.login, 6, 'rate_limit', 'starts_with(http.request.uri.path, "/login")'), rateLimit: { requests: 2, period: 60, characteristics: ['ip', 'path'], mitigation: 'block', duration: 30 } },
      {
        ...c(R.api, 7, 'rate_limit', 'starts_with(http.request.uri.path, "/api")'),
        rateLimit: { requests: 1, period: 60, characteristics: ['header:x-api-key'], mitigation: 'challenge', duration: 30 },
      },
      // nested prefixes in the shared path lookup, the shorter one's rule needing more than its prefix
      c(R.shopHeader, 8, 'block', 'starts_with(http.request.uri.path, "/shop") and http.request.headers["x-t"] eq "1"'),
      c(R.shopPrivate, 9, 'block', 'starts_with(http.request.uri.path, "/shop/private") and http.request.headers["x-p"] eq "1"'),
    ],
  };
}

interface Seen {
  status: number;
  body: string;
  retryAfter?: string | undefined;
  reason?: string | undefined;
  rule?: string | undefined;
  action?: string | undefined;
  location?: string | undefined;
}

describe('custom rules in the processing order, natively in HAProxy', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rampart-rules-order-'));
  const procs: Proc[] = [];
  const events = createSocket('udp4');
  const lines: string[] = [];
  const origin = createServer((_req, res) => res.end('origin'));
  const ports: Record<string, number> = {};

  async function start(name: 'bots' | 'nobots'): Promise<void> {
    const port = await freePort();
    const configDir = join(tmp, name);
    mkdirSync(configDir);
    const snap = snapshot(name === 'bots', (origin.address() as AddressInfo).port);
    const { files } = renderHaproxyConfig(
      snap,
      { httpBind: { address: '127.0.0.1', port }, runDir: configDir, eventsPort: (events.address() as AddressInfo).port, countryMap: join(tmp, 'country.map'), nbthread: 1 },
      { configDir },
    );
    for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
    const proc = startProcess(HAPROXY, ['-f', join(configDir, 'haproxy.cfg')]);
    procs.push(proc);
    ports[name] = port;
    await waitFor(async () => {
      if (proc.child.exitCode !== null) throw new Error(`haproxy exited: ${proc.output()}`);
      return (await send(name, '127.0.20.1', '/office')).status === 200;
    }, `${name} HAProxy to answer`);
  }

  /**
   * One request on its own connection; the fields of its event line when it has one (the first
   * line not seen before with its source and path, which the native answer writes url-encoded and
   * the Lua engine with '/' as it is).
   */
  async function send(server: 'bots' | 'nobots', from: string, path: string, headers: Record<string, string> = {}, event = true): Promise<Seen> {
    const { status, body, retryAfter } = await new Promise<{ status: number; body: string; retryAfter: string | undefined }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: ports[server], path, headers: { 'user-agent': UA, ...headers, host: HOST }, agent: false, localAddress: from }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, retryAfter: res.headers['retry-after'] as string | undefined }));
      });
      req.on('error', reject);
      req.end();
    });
    if (!event || (body === 'origin' && !path.includes('watch'))) return { status, body, retryAfter };
    const bare = path.split('?')[0]!;
    const forms = [` ${bare} `, ` ${bare.replace(/\//g, '%2F')} `];
    const line = await waitFor(() => lines.find((l) => l.includes(` ${from} `) && forms.some((f) => l.includes(f)) && !seenLines.has(l)), `the event of ${path} from ${from}`, 5_000, 10);
    seenLines.add(line);
    const f = line.slice(line.indexOf('rampart-waf ')).split(' ');
    return { status, body, retryAfter, reason: f[4], rule: f[5], action: f[6], location: f[8] === undefined ? undefined : decodeURIComponent(f[8]) };
  }
  const seenLines = new Set<string>();
  /** The hits table of a server's HAProxy, read on its admin socket as the agent reads it. */
  const hits = (server: 'bots' | 'nobots') =>
    new Promise<Map<string, number>>((resolve, reject) => {
      let text = '';
      const socket = createConnection(join(tmp, server, ADMIN_SOCKET), () => socket.end(`show table ${HITS_TABLE}\n`));
      socket.on('data', (d) => (text += d));
      socket.on('end', () => resolve(parseRuleHits(text)));
      socket.on('error', reject);
    });
  const cookie = (ip: string) => {
    const expiry = Math.floor(Date.now() / 1000) + 3600;
    return `rampart_bot=${KEY.id}.${expiry}.${passCookieMac(KEY.secret, HOST, ip, UA, expiry)}`;
  };
  const brief = (s: Seen) => ({ status: s.status, reason: s.reason, rule: s.rule, action: s.action });

  before(async () => {
    // (the agent names the rule of a country_blocked event, not HAProxy: '-')
    writeFileSync(join(tmp, 'country.map'), '127.0.40.0/24 KP\n');
    events.on('message', (m) => lines.push(m.toString()));
    events.bind(0, '127.0.0.1');
    await once(events, 'listening');
    origin.listen(0, '127.0.0.1');
    await once(origin, 'listening');
    await start('bots');
    await start('nobots');
  });
  after(async () => {
    for (const p of procs) await p.stop();
    events.close();
    origin.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  test('the blacklist and countries run first: an allow rule never skips them', async () => {
    assert.deepEqual(brief(await send('nobots', '127.0.10.5', '/office')), { status: 403, reason: 'ip_blocked', rule: R.block, action: 'block' });
    assert.deepEqual(brief(await send('nobots', '127.0.40.5', '/admin')), { status: 403, reason: 'country_blocked', rule: '-', action: 'block' });
  });

  test('block: 403 custom_rule_blocked with the rule id, before bot protection; the first decisive match wins', async () => {
    assert.deepEqual(brief(await send('bots', '127.0.21.1', '/wp-ADMIN', { 'user-agent': BAD_UA })), { status: 403, reason: 'custom_rule_blocked', rule: R.admin, action: 'block' });
    // The domain rule excepts 127.0.30.9; the server-wide rule after it still matches.
    assert.deepEqual(brief(await send('nobots', '127.0.30.9', '/admin')), { status: 403, reason: 'custom_rule_blocked', rule: R.afterAdmin, action: 'block' });
    // A log rule decides nothing: the block after it is the request's answer and event.
    assert.deepEqual(brief(await send('nobots', '127.0.21.2', '/watch/admin')), { status: 403, reason: 'custom_rule_blocked', rule: R.admin, action: 'block' });
  });

  test('rules sharing a path lookup: a request under two of their prefixes reaches the rules of both', async () => {
    // The lookup answers with the longest prefix; its rules include those of every shorter one.
    const blocked = (rule: string) => ({ status: 403, reason: 'custom_rule_blocked', rule, action: 'block' });
    assert.deepEqual(brief(await send('nobots', '127.0.21.5', '/shop/private/x', { 'x-t': '1' })), blocked(R.shopHeader));
    assert.deepEqual(brief(await send('nobots', '127.0.21.6', '/shop/private/x', { 'x-p': '1' })), blocked(R.shopPrivate));
    assert.equal((await send('nobots', '127.0.21.7', '/shop/private/x', {}, false)).status, 200);
  });

  test('allow skips bot protection and the rate limit, and later rules', async () => {
    for (let i = 0; i < RATE + 2; i++) {
      const r = await send('bots', '127.0.22.1', '/office/admin', { 'user-agent': BAD_UA }, false);
      assert.deepEqual([r.status, r.body], [200, 'origin'], `request ${i}`);
    }
    // Without the rule, the same client is refused by bot protection.
    assert.deepEqual(brief(await send('bots', '127.0.22.1', '/shop', { 'user-agent': BAD_UA })), { status: 403, reason: 'bot_blocked', rule: R.bot, action: 'block' });
  });

  test('log: the request goes on, its event is custom_rule_logged with the rule id, let through', async () => {
    const r = await send('nobots', '127.0.23.1', '/watch/this');
    assert.equal(r.body, 'origin');
    assert.deepEqual(brief(r), { status: 200, reason: 'custom_rule_logged', rule: R.watch, action: 'detect' });
  });

  test('challenge: the bot challenge for the matching request only (no bot protection on the server); a valid pass cookie goes on', async () => {
    const ip = '127.0.24.1';
    const page = await send('nobots', ip, '/checkout');
    assert.deepEqual(brief(page), { status: 200, reason: 'bot_challenge', rule: R.checkout, action: 'block' });
    assert.match(page.body, /Checking your browser/);
    const other = await send('nobots', ip, '/cart', {}, false);
    assert.equal(other.body, 'origin', 'a request the rule does not match is not challenged');
    const passed = await send('nobots', ip, '/checkout', { cookie: cookie(ip) }, false);
    assert.equal(passed.body, 'origin', 'a valid pass cookie goes on');
    // The answer to the challenge reaches the engine although the rule does not match its path.
    const answer = await send('nobots', ip, '/.well-known/rampart/bot?c=x&n=1');
    assert.deepEqual(brief(answer), { status: 403, reason: 'bot_challenge', rule: R.checkout, action: 'block' });
  });

  test('rate_limit: past its requests in the period, the client (by address and path) gets 429 with Retry-After for the duration', async () => {
    const ip = '127.0.25.1';
    for (let i = 0; i < 2; i++) assert.equal((await send('nobots', ip, '/login', {}, false)).body, 'origin', `request ${i}`);
    const limited = await send('nobots', ip, '/login');
    assert.deepEqual(brief(limited), { status: 429, reason: 'rate_limited', rule: R.login, action: 'block' });
    const wait = Number(limited.retryAfter);
    assert.ok(wait > 0 && wait <= 30, `Retry-After ${limited.retryAfter}`);
    assert.equal((await send('nobots', ip, '/login-b', {}, false)).body, 'origin', 'another path is counted apart');
    assert.equal((await send('nobots', '127.0.25.2', '/login', {}, false)).body, 'origin', 'another client is counted apart');
    assert.equal((await send('nobots', ip, '/office/login', {}, false)).body, 'origin', 'a request the expression does not select is not limited');
  });

  test('rate_limit with the challenge: counted by a header, the client past the limit is challenged until it shows a pass cookie', async () => {
    const ip = '127.0.26.1';
    assert.equal((await send('nobots', ip, '/api/x', { 'x-api-key': 'k1' }, false)).body, 'origin');
    assert.deepEqual(brief(await send('nobots', ip, '/api/x', { 'x-api-key': 'k1' })), { status: 200, reason: 'bot_challenge', rule: R.api, action: 'block' });
    assert.equal((await send('nobots', ip, '/api/x', { 'x-api-key': 'k2' }, false)).body, 'origin', 'another key is counted apart');
    assert.equal((await send('nobots', ip, '/api/x', { 'x-api-key': 'k1', cookie: cookie(ip) }, false)).body, 'origin', 'a valid pass cookie goes on');
  });

  test('each request a custom rule acts on is counted once, under its first log rule and the rule that decided it', async () => {
    const before = await hits('nobots');
    await send('nobots', '127.0.27.1', '/watch/admin'); // logged, then blocked
    await send('nobots', '127.0.27.1', '/watch/x'); // logged only
    await send('nobots', '127.0.27.1', '/office/x', {}, false); // allowed
    await send('nobots', '127.0.27.2', '/checkout'); // challenged
    for (let i = 0; i < 3; i++) await send('nobots', '127.0.27.3', '/login', {}, i === 2); // the third is refused 429
    await send('nobots', '127.0.27.4', '/plain', {}, false); // no rule
    await send('nobots', '127.0.10.9', '/admin'); // blacklisted before any custom rule
    const after = await hits('nobots');
    // Each event's location is the fields of the rule that decided, else of the log rule.
    assert.equal((await send('nobots', '127.0.27.5', '/watch/admin')).location, 'http.request.uri.path,ip.src');
    assert.equal((await send('nobots', '127.0.27.5', '/watch/y')).location, 'http.request.uri.path');
    assert.equal((await send('nobots', '127.0.27.6', '/checkout')).location, 'http.request.uri.path');
    assert.equal((await send('nobots', '127.0.26.9', '/api/y', { 'x-api-key': 'k9' }, false)).body, 'origin');
    assert.equal((await send('nobots', '127.0.26.9', '/api/y', { 'x-api-key': 'k9' })).location, 'http.request.uri.path', "a rate limit's challenge");
    const added = Object.fromEntries([...after].map(([k, n]) => [k, n - (before.get(k) ?? 0)]).filter(([, n]) => n !== 0));
    assert.deepEqual(added, { [`${R.watch}|${R.admin}`]: 1, [R.watch]: 1, [`-|${R.office}`]: 1, [`-|${R.checkout}`]: 1, [`-|${R.login}`]: 1 });
  });
});
