import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DEFAULTS_SECTION, renderWaf } from '@rampart/proxy';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startProcess, startServe, waitFor, type Proc } from '../support/processes.js';

// docs/architecture.md "The WAF", step 4, through real HAProxy: the rate limiter's window is fixed
// (60 s from an address's first request; refused requests do not extend it), counted per address
// in a stick table that every thread shares. The test takes a minute: it waits for the window.

describe('the rate limiter window through real HAProxy (two threads)', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const HOST = 'window.waf.test';
  const get = (from: string) => viaProxy(agent.httpPort, HOST, '/', {}, from);

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-window' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken, nbthread: 2 });
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false, wafLevel: 'medium' });
    assert.equal(d.status, 201);
    assert.equal((await api.call('POST', '/api/waf', { rule_type: 'rate_limit', value: JSON.stringify({ requests_per_minute: 3 }) })).status, 201);
    await settle(api);
    await waitFor(async () => (await get('127.0.50.1')).status === 200, 'the origin to be up');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('3 per minute: the 4th is refused until 60 s after the first, however many are refused meanwhile', async () => {
    const from = '127.0.50.2';
    const start = Date.now();
    // new connections each time: they land on either thread, and the count is the address's
    for (let i = 0; i < 3; i++) assert.equal((await get(from)).status, 200, `request ${i + 1}`);
    const limited = await get(from);
    assert.equal(limited.status, 429);
    assert.match(limited.text, /rate limit/i);
    assert.equal((await get('127.0.50.3')).status, 200, 'another address has its own count');
    // Polled once a second: every refused request counts, none moves the window.
    let refused = 0;
    await waitFor(
      async () => {
        const r = await get(from);
        if (r.status === 429) refused++;
        return r.status === 200;
      },
      'the window to end',
      75_000,
      1000,
    );
    const elapsed = (Date.now() - start) / 1000;
    assert.ok(elapsed >= 59 && elapsed < 66, `a new window after ${elapsed.toFixed(1)} s`);
    assert.ok(refused >= 50, `${refused} refused requests while waiting`);
    // the new window starts with that request: two more, then 429 again
    assert.equal((await get(from)).status, 200);
    assert.equal((await get(from)).status, 200);
    assert.equal((await get(from)).status, 429);
  });
});

// The rate limiter counts an IPv6 client by its /64. This host has one IPv6 loopback address (::1),
// so the sources are forged: a TEST-ONLY configuration, rendered here and never by the product,
// sets the source from an X-Test-Src header and then runs the product's own rendered WAF lines
// (rate limiter, Lua engine) unchanged; a request let through echoes the counted key.
describe('the rate limiter counts an IPv6 /64 as one client (real HAProxy, forged sources)', () => {
  let haproxy: Proc;
  let port: number;
  let dir: string;
  const DOMAIN = { id: '00000000-0000-4000-8000-000000000001', domain: 'six.waf.test', origins: [{ ip: '127.0.0.1', port: 9 }], sslEnabled: false, wafEnabled: true, wafLevel: 'medium' as const };
  const RULE = '00000000-0000-4000-8000-000000000002';
  const from = async (src: string) => {
    const r = await fetch(`http://127.0.0.1:${port}/`, { headers: { host: DOMAIN.domain, 'x-test-src': src } });
    return { status: r.status, text: await r.text(), retryAfter: r.headers.get('retry-after') };
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rampart-rate64-'));
    port = await freePort();
    const waf = renderWaf({ serverId: 'srv', revision: 1, domains: [DOMAIN], rules: [{ id: RULE, type: 'rate_limit', value: '{"requests_per_minute":2}', domainId: null, priority: 1 }] }, dir, {});
    for (const [name, content] of Object.entries(waf.files)) writeFileSync(join(dir, name), content);
    const cfg =
      [
        ['global', ...waf.global].join('\n'),
        DEFAULTS_SECTION.join('\n'),
        ...waf.sections,
        ['frontend test_in', `    bind 127.0.0.1:${port}`, '    http-request set-src hdr(x-test-src)', ...waf.frontend, '    default_backend test_domain'].join('\n'),
        ['backend test_domain', ...waf.backend(DOMAIN), '    http-request return status 200 content-type text/plain lf-string "counted %[src,ipmask(32,64)] %[sc_get_gpc0(0)]"'].join('\n'),
      ].join('\n\n') + '\n';
    writeFileSync(join(dir, 'haproxy.cfg'), cfg);
    haproxy = startProcess('haproxy', ['-db', '-f', join(dir, 'haproxy.cfg')]);
    await waitFor(async () => (await from('192.0.2.200').catch(() => undefined))?.status === 200, `HAProxy to answer (${haproxy.output()})`);
  });
  after(async () => {
    await haproxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('two addresses of one /64 share a count; another /64 and IPv4 addresses have their own', async () => {
    const a = await from('2001:db8:1:2::1');
    assert.equal(a.status, 200);
    assert.equal(a.text, 'counted 2001:db8:1:2:: 1', 'the key is the /64');
    assert.equal((await from('2001:db8:1:2:ffff:ffff:ffff:fffe')).text, 'counted 2001:db8:1:2:: 2', 'another address, same /64');
    const limited = await from('2001:db8:1:2:abcd::7');
    assert.equal(limited.status, 429, 'a third address of the /64 is over the limit of 2');
    assert.ok(Number(limited.retryAfter) >= 1 && Number(limited.retryAfter) <= 60, `Retry-After ${limited.retryAfter}`);
    assert.equal((await from('2001:db8:1:3::1')).text, 'counted 2001:db8:1:3:: 1', 'the next /64 is another client');
    // IPv4 stays per address (/32)
    assert.equal((await from('198.51.100.7')).text, 'counted 198.51.100.7 1');
    assert.equal((await from('198.51.100.7')).text, 'counted 198.51.100.7 2');
    assert.equal((await from('198.51.100.8')).text, 'counted 198.51.100.8 1', 'the neighbouring IPv4 address is counted on its own');
    assert.equal((await from('198.51.100.7')).status, 429);
  });
});
