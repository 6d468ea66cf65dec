import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { after, before, beforeEach, describe, test } from 'node:test';
import { DnsProviderError, dnsProvider, type DnsProvider } from '../src/dns/provider.js';

// The Cloudflare provider against recorded answers: a local server replays JSON shaped like
// Cloudflare v4's documented responses (fixtures/cloudflare) and records every request, and the
// tests check the requests the provider makes from those answers.

const TOKEN = 'cf-test-token-8d2e41';
const ZONE = '023e105f4ecef8ad9ca31a8372d0c353';
const NAME = 'www.shop.example.com';
const RECORDS = `/client/v4/zones/${ZONE}/dns_records`;

interface Recorded {
  method: string;
  path: string;
  query: Record<string, string>;
  body: unknown;
  auth: string | undefined;
}

/** A fixture's name, or a status and a fixture's name for an error answer. */
type Answer = string | { status: number; fixture: string };

function fixture(name: string): string {
  return readFileSync(new URL(`./fixtures/cloudflare/${name}.json`, import.meta.url), 'utf8');
}

/** The answers of an account whose only zone is example.com, with these A and AAAA records on NAME. */
function account(records: { A: string; AAAA: string }) {
  return (r: Recorded): Answer | undefined => {
    if (r.method === 'GET' && r.path === '/client/v4/zones') return r.query.name === 'example.com' ? 'zones-example-com' : 'zones-empty';
    if (r.method === 'GET' && r.path === RECORDS && r.query.name === NAME) return r.query.type === 'AAAA' ? records.AAAA : records.A;
    if ((r.method === 'POST' && r.path === RECORDS) || (r.method === 'PATCH' && r.path.startsWith(`${RECORDS}/`))) return 'dns-record';
    if (r.method === 'DELETE' && r.path.startsWith(`${RECORDS}/`)) return 'dns-record-deleted';
    return undefined;
  };
}

describe('Cloudflare provider', () => {
  let requests: Recorded[] = [];
  let route: (r: Recorded) => Answer | undefined = () => undefined;
  let provider: DnsProvider;
  const server = createServer((req, res) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (d) => (text += d));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      const recorded: Recorded = {
        method: req.method ?? '',
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        body: text ? JSON.parse(text) : undefined,
        auth: req.headers.authorization,
      };
      requests.push(recorded);
      const answer = route(recorded) ?? { status: 400, fixture: 'error-no-route' };
      const { status, fixture: name } = typeof answer === 'string' ? { status: 200, fixture: answer } : answer;
      res.writeHead(status, { 'content-type': 'application/json' }).end(fixture(name));
    });
  });

  before(async () => {
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as { port: number };
    provider = dnsProvider({ provider: 'cloudflare', apiToken: TOKEN, apiBase: `http://127.0.0.1:${port}/client/v4/` });
  });
  after(() => server.close());
  beforeEach(() => {
    requests = [];
  });

  const summary = () => requests.map((r) => `${r.method} ${r.path}${Object.keys(r.query).length ? `?${new URLSearchParams(r.query)}` : ''}`);

  test('walks up to the zone, rewrites, creates and deletes records so the name holds exactly the wanted addresses', async () => {
    route = account({ A: 'dns-records-a-mixed', AAAA: 'dns-records-empty' });

    await provider.setAddresses(NAME, ['192.0.2.3', '192.0.2.2', '192.0.2.1', '2001:DB8::1']);

    assert.deepEqual(summary(), [
      `GET /client/v4/zones?name=${NAME}`,
      'GET /client/v4/zones?name=shop.example.com',
      'GET /client/v4/zones?name=example.com',
      `GET ${RECORDS}?type=A&name=${NAME}`,
      `GET ${RECORDS}?type=AAAA&name=${NAME}`,
      // 192.0.2.1 stays but was proxied, 192.0.2.3 stays but had TTL 300; 198.51.100.7's record now holds 192.0.2.2
      `PATCH ${RECORDS}/372e67954025e0ba6aaa6d586b9e0b59`,
      `PATCH ${RECORDS}/b1c2d3e4f5a60718293a4b5c6d7e8f90`,
      `PATCH ${RECORDS}/6d1b1f0c0e4a4a55a8f2b0a3c1d9e8f7`,
      `POST ${RECORDS}`,
      // 198.51.100.8 goes last, after every wanted address is in place
      `DELETE ${RECORDS}/9a7806061c88ada191ed06f989cc3dac`,
    ]);
    const writes = requests.filter((r) => r.method === 'PATCH' || r.method === 'POST').map((r) => r.body);
    assert.deepEqual(writes, [
      { type: 'A', name: NAME, content: '192.0.2.1', ttl: 60, proxied: false },
      { type: 'A', name: NAME, content: '192.0.2.3', ttl: 60, proxied: false },
      { type: 'A', name: NAME, content: '192.0.2.2', ttl: 60, proxied: false },
      { type: 'AAAA', name: NAME, content: '2001:db8::1', ttl: 60, proxied: false },
    ]);
    assert.ok(
      requests.every((r) => r.auth === `Bearer ${TOKEN}`),
      'every request carries the API token',
    );
  });

  test('no IPv6 address deletes the AAAA records, and records already right are left alone', async () => {
    route = account({ A: 'dns-records-a-one', AAAA: 'dns-records-aaaa-one' });

    await provider.setAddresses(`${NAME}.`, ['192.0.2.1']);

    assert.deepEqual(summary().slice(3), [`GET ${RECORDS}?type=A&name=${NAME}`, `GET ${RECORDS}?type=AAAA&name=${NAME}`, `DELETE ${RECORDS}/4f1e2d3c4b5a69788796a5b4c3d2e1f0`]);
  });

  test('reads the published A and AAAA addresses, sorted', async () => {
    route = account({ A: 'dns-records-a-mixed', AAAA: 'dns-records-aaaa-one' });

    assert.deepEqual(await provider.getAddresses(NAME), ['192.0.2.1', '192.0.2.3', '198.51.100.7', '198.51.100.8', '2001:db8::1']);
    assert.ok(requests.every((r) => r.method === 'GET'));
  });

  test("an error answer is a DnsProviderError with Cloudflare's message and without the token", async () => {
    route = () => ({ status: 403, fixture: 'error-authentication' });

    await assert.rejects(provider.setAddresses(NAME, ['192.0.2.1']), (err: Error) => {
      assert.ok(err instanceof DnsProviderError, String(err));
      assert.match(err.message, /Authentication error \(code 10000\)/);
      assert.match(err.message, /403/);
      assert.ok(!err.message.includes(TOKEN), err.message);
      return true;
    });
    assert.equal(requests.length, 1, 'nothing after the refused zone lookup');
  });

  test('a refused write stops before any deletion, so the old addresses stay published', async () => {
    const accountAnswers = account({ A: 'dns-records-a-mixed', AAAA: 'dns-records-empty' });
    route = (r) => (r.method === 'POST' ? { status: 400, fixture: 'error-record-exists' } : accountAnswers(r));

    await assert.rejects(provider.setAddresses(NAME, ['192.0.2.1', '192.0.2.2', '2001:db8::1']), /An identical record already exists\. \(code 81058\)/);
    assert.equal(requests.filter((r) => r.method === 'DELETE').length, 0);
  });

  test('the envelope decides: success false is an error even with HTTP 200', async () => {
    const accountAnswers = account({ A: 'dns-records-a-one', AAAA: 'dns-records-empty' });
    route = (r) => (r.method === 'POST' ? 'error-record-exists' : accountAnswers(r));

    await assert.rejects(provider.setAddresses(NAME, ['192.0.2.1', '2001:db8::1']), (err: Error) => {
      assert.ok(err instanceof DnsProviderError, String(err));
      assert.match(err.message, /\(200\): An identical record already exists\./);
      return true;
    });
  });

  test('a name in no zone the token sees is a DnsProviderError naming the name', async () => {
    route = () => 'zones-empty';

    await assert.rejects(provider.getAddresses('www.elsewhere.org'), (err: Error) => {
      assert.ok(err instanceof DnsProviderError, String(err));
      assert.match(err.message, /www\.elsewhere\.org/);
      return true;
    });
    assert.deepEqual(summary(), ['GET /client/v4/zones?name=www.elsewhere.org', 'GET /client/v4/zones?name=elsewhere.org']);
  });

  test('an empty list or a non-address is refused before any request', async () => {
    route = account({ A: 'dns-records-a-one', AAAA: 'dns-records-empty' });

    await assert.rejects(provider.setAddresses(NAME, []), RangeError);
    await assert.rejects(provider.setAddresses(NAME, ['192.0.2.1', '192.0.2.300']), TypeError);
    await assert.rejects(provider.setAddresses('not a name', ['192.0.2.1']), TypeError);
    assert.equal(requests.length, 0);
  });
});
