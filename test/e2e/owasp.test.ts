import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { apiClient, ADMIN, settle, startAgent, startOrigin, viaProxy, type AgentProc, type ApiClient } from '../support/cluster.js';
import { freePort, startServe, waitFor } from '../support/processes.js';

// docs/architecture.md "The WAF", step 5, through a real control plane, agent and HAProxy: a domain at
// level high with no other rules lets ordinary URLs through (packages/proxy/test/fixtures/
// ordinary-urls.txt) and refuses every attack (fixtures/attacks.txt) with 403 and an event.

const fixture = (name: string) =>
  readFileSync(new URL(`../../packages/proxy/test/fixtures/${name}`, import.meta.url), 'utf8')
    .split('\n')
    .map((l) => l.replace(/\r$/, '').replace(/^[ \t]+/, ''))
    .filter((l) => l !== '' && !l.startsWith('#'));

/** Same rule as packages/proxy/test/owasp.test.ts: a line with a %XX escape is already encoded. */
const attackTarget = (payload: string) => '/search?q=' + (/%[0-9a-f]{2}/i.test(payload) ? payload : encodeURIComponent(payload));

describe('OWASP patterns through real HAProxy (level high)', () => {
  let serve: Awaited<ReturnType<typeof startServe>>;
  let api: ApiClient;
  let agent: AgentProc;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const HOST = 'owasp.waf.test';
  const get = (path: string, from: string) => viaProxy(agent.httpPort, HOST, path, {}, from);

  before(async () => {
    serve = await startServe({ port: await freePort(), adminToken: ADMIN });
    api = await apiClient(serve.url);
    origin = await startOrigin('origin');
    const srv = await api.call('POST', '/api/servers', { name: 'edge-owasp' });
    agent = await startAgent({ serverUrl: serve.url, token: srv.body.connectionToken });
    const d = await api.call('POST', '/api/domains', { domain: HOST, origins: [{ ip: '127.0.0.1', port: origin.port }], serverIds: [srv.body.id], sslEnabled: false, wafLevel: 'high' });
    assert.equal(d.status, 201, JSON.stringify(d.body));
    assert.deepEqual((await api.call('GET', '/api/waf')).body, [], 'no WAF rules: nothing but the OWASP patterns applies');
    await settle(api);
    await waitFor(async () => (await get('/', '127.0.30.1')).status === 200, 'the origin to be up');
  });
  after(async () => {
    await agent?.stop();
    await serve?.stop();
    await origin?.close();
  });

  test('every ordinary URL reaches the origin (none gets 403)', async () => {
    const urls = fixture('ordinary-urls.txt');
    assert.ok(urls.length >= 200);
    const refused: string[] = [];
    for (const url of urls) {
      const r = await get(url, '127.0.30.1');
      // The ACME challenge path belongs to the shield server's own responder (docs/architecture.md,
      // "HTTPS certificates"): never blocked, but not the origin's either.
      if (url.startsWith('/.well-known/acme-challenge/')) {
        if (r.status !== 404 || r.text !== 'Not Found') refused.push(`${r.status} ${url} (expected the agent's responder)`);
      } else if (r.status !== 200 || JSON.parse(r.text).origin !== 'origin') refused.push(`${r.status} ${url}`);
    }
    assert.deepEqual(refused, [], `ordinary URLs not forwarded:\n  ${refused.join('\n  ')}`);
  });

  test('every attack in the query string gets 403 from the WAF', async () => {
    const attacks = fixture('attacks.txt');
    assert.ok(attacks.length >= 40);
    const passed: string[] = [];
    for (const attack of attacks) {
      const target = attackTarget(attack);
      const r = await get(target, '127.0.30.2');
      if (r.status !== 403) passed.push(`${r.status} ${target}  (payload ${attack})`);
      else assert.match(r.text, /blocked by the web application firewall/i, target);
    }
    assert.deepEqual(passed, [], `attacks not refused:\n  ${passed.join('\n  ')}`);
  });

  test('the blocks are recorded as sqli_detected and xss_detected events', async () => {
    // The event list holds only the 50 newest blocks: one more of each kind from a fresh address
    // makes the check independent of the size and order of the attack corpus.
    const from = '127.0.30.3';
    assert.equal((await get(attackTarget("' OR '1'='1"), from)).status, 403);
    assert.equal((await get(attackTarget('<script>alert(1)</script>'), from)).status, 403);
    await waitFor(async () => {
      const list = (await api.call('GET', '/api/waf/events')).body as { reason: string; domain: string; source_ip: string }[];
      const mine = list.filter((e) => e.source_ip === from && e.domain === HOST);
      return ['sqli_detected', 'xss_detected'].every((reason) => mine.some((e) => e.reason === reason));
    }, 'sqli_detected and xss_detected events', 15_000, 100);
  });
});
