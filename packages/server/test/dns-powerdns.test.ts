import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { after, before, describe, test } from 'node:test';
import { DnsProviderError, dnsProvider, type DnsProvider } from '../src/dns/provider.js';
import { startPdns, type Pdns } from '../../../test/support/pdns.js';
import { freePort } from '../../../test/support/processes.js';

// The PowerDNS provider against a real pdns_server: what the API answers and, more to the point,
// what the server then tells resolvers over DNS.

describe('PowerDNS provider', () => {
  let pdns: Pdns;
  let provider: DnsProvider;
  let resolver: Resolver;

  before(async () => {
    pdns = await startPdns({ zones: ['example.test', 'shop.example.test'] });
    provider = dnsProvider({ provider: 'powerdns', apiUrl: pdns.apiUrl, apiKey: pdns.apiKey, serverId: pdns.serverId });
    resolver = new Resolver({ timeout: 1_000, tries: 1 });
    resolver.setServers([`127.0.0.1:${pdns.dnsPort}`]);
  });
  after(() => pdns?.stop());

  test('publishes two IPv4 and one IPv6 address as A and AAAA records with TTL 60', async () => {
    await provider.setAddresses('www.example.test', ['192.0.2.2', '192.0.2.1', '2001:DB8:0::1']);

    assert.deepEqual(await provider.getAddresses('www.example.test'), ['192.0.2.1', '192.0.2.2', '2001:db8::1']);
    const a = await resolver.resolve4('www.example.test', { ttl: true });
    assert.deepEqual(
      a.sort((x, y) => x.address.localeCompare(y.address)),
      [
        { address: '192.0.2.1', ttl: 60 },
        { address: '192.0.2.2', ttl: 60 },
      ],
    );
    assert.deepEqual(await resolver.resolve6('www.example.test', { ttl: true }), [{ address: '2001:db8::1', ttl: 60 }]);
  });

  test('replacing with one IPv4 address removes the other and deletes the AAAA records', async () => {
    await provider.setAddresses('www.example.test', ['192.0.2.1', '192.0.2.2', '2001:db8::1']);
    assert.deepEqual(await pdns.query('www.example.test', 'AAAA'), ['2001:db8::1'], 'the AAAA record is served before the change');

    await provider.setAddresses('www.example.test', ['192.0.2.2']);

    assert.deepEqual(await provider.getAddresses('www.example.test'), ['192.0.2.2']);
    assert.deepEqual(await pdns.query('www.example.test', 'A'), ['192.0.2.2']);
    assert.deepEqual(await pdns.query('www.example.test', 'AAAA'), []);
  });

  test('an IPv6-only list deletes the A records', async () => {
    await provider.setAddresses('v6.example.test', ['192.0.2.7', '2001:db8::7']);
    await provider.setAddresses('v6.example.test', ['2001:db8::7']);

    assert.deepEqual(await provider.getAddresses('v6.example.test'), ['2001:db8::7']);
    assert.deepEqual(await pdns.query('v6.example.test', 'A'), []);
    assert.deepEqual(await pdns.query('v6.example.test', 'AAAA'), ['2001:db8::7']);
  });

  test('a name goes into the zone that is its longest suffix', async () => {
    // pdns answers www.shop.example.test from the shop.example.test zone only: a record written
    // into example.test instead would not be served at all.
    await provider.setAddresses('www.shop.example.test', ['198.51.100.4']);

    assert.deepEqual(await pdns.query('www.shop.example.test', 'A'), ['198.51.100.4']);
  });

  test('the name is taken in any case and with a trailing dot', async () => {
    await provider.setAddresses('Mixed.Example.Test.', ['192.0.2.9']);

    assert.deepEqual(await provider.getAddresses('mixed.example.test'), ['192.0.2.9']);
    assert.deepEqual(await pdns.query('mixed.example.test', 'A'), ['192.0.2.9']);
  });

  test('a name in no zone is a DnsProviderError naming the name', async () => {
    await assert.rejects(provider.setAddresses('www.elsewhere.test', ['192.0.2.1']), (err: Error) => {
      assert.ok(err instanceof DnsProviderError, String(err));
      assert.match(err.message, /www\.elsewhere\.test/);
      return true;
    });
  });

  test('a wrong API key is a DnsProviderError that does not contain the key', async () => {
    const wrongKey = 'not-the-key-5f2c9a';
    const wrong = dnsProvider({ provider: 'powerdns', apiUrl: pdns.apiUrl, apiKey: wrongKey, serverId: pdns.serverId });

    for (const attempt of [() => wrong.setAddresses('www.example.test', ['192.0.2.1']), () => wrong.getAddresses('www.example.test')]) {
      await assert.rejects(attempt, (err: Error) => {
        assert.ok(err instanceof DnsProviderError, String(err));
        assert.match(err.message, /401/);
        assert.ok(!err.message.includes(wrongKey), err.message);
        assert.ok(!err.message.includes(pdns.apiKey), err.message);
        return true;
      });
    }
  });

  test('an API nobody listens on is a DnsProviderError', async () => {
    const gone = dnsProvider({ provider: 'powerdns', apiUrl: `http://127.0.0.1:${await freePort()}`, apiKey: pdns.apiKey, serverId: 'localhost' });

    await assert.rejects(gone.getAddresses('www.example.test'), DnsProviderError);
  });

  test('an empty list or a non-address is refused and the records stay', async () => {
    await provider.setAddresses('keep.example.test', ['192.0.2.3']);

    await assert.rejects(provider.setAddresses('keep.example.test', []), RangeError);
    await assert.rejects(provider.setAddresses('keep.example.test', ['192.0.2.4', 'fe80::1%eth0']), TypeError);
    await assert.rejects(provider.setAddresses('keep.example.test', ['192.0.2.4', 'example.test']), TypeError);

    assert.deepEqual(await provider.getAddresses('keep.example.test'), ['192.0.2.3']);
    assert.deepEqual(await pdns.query('keep.example.test', 'A'), ['192.0.2.3']);
  });
});
