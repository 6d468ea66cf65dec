import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { Agent } from 'node:https';
import { after, before, describe, test } from 'node:test';
import acme from 'acme-client';
import { startPebble, type Pebble } from '../support/pebble.js';

// Smoke test of the Pebble harness itself: a plain acme-client, no Rampart code involved.
describe('Pebble + challtestsrv harness', () => {
  let pebble: Pebble;
  let challengeServer: Server;
  let client: acme.Client;
  const keyAuthorizations = new Map<string, string>(); // token → key authorization

  before(async () => {
    pebble = await startPebble();
    acme.axios.defaults.httpsAgent = new Agent({ ca: readFileSync(pebble.caFile) });
    // What Pebble's validator fetches: http://<name>:<httpPort>/.well-known/acme-challenge/<token>
    challengeServer = createServer((req, res) => {
      const token = req.url?.replace('/.well-known/acme-challenge/', '') ?? '';
      res.statusCode = keyAuthorizations.has(token) ? 200 : 404;
      res.end(keyAuthorizations.get(token) ?? 'unknown token');
    });
    challengeServer.listen(pebble.httpPort, '127.0.0.1');
    await once(challengeServer, 'listening');
    // Poll every 100-500 ms instead of acme-client's default 5-30 s.
    client = new acme.Client({ directoryUrl: pebble.directoryUrl, accountKey: await acme.crypto.createPrivateKey(), backoffMin: 100, backoffMax: 500, backoffAttempts: 30 });
    await client.createAccount({ termsOfServiceAgreed: true });
  });
  after(async () => {
    challengeServer?.closeAllConnections();
    challengeServer?.close();
    await pebble?.stop();
  });

  const order = async (name: string) => {
    const [, csr] = await acme.crypto.createCsr({ commonName: name });
    return client.auto({
      csr,
      termsOfServiceAgreed: true,
      challengePriority: ['http-01'],
      skipChallengeVerification: true, // acme-client would resolve the name with the system resolver
      challengeCreateFn: async (_authz, challenge, keyAuthorization) => void keyAuthorizations.set(challenge.token, keyAuthorization),
      challengeRemoveFn: async (_authz, challenge) => void keyAuthorizations.delete(challenge.token),
    });
  };

  test('challtestsrv resolves the names we set, and only those', async () => {
    await pebble.setA('dns.rampart.test', ['127.0.0.9']);
    const resolver = new Resolver();
    resolver.setServers([pebble.resolver]);
    assert.deepEqual(await resolver.resolve4('dns.rampart.test'), ['127.0.0.9']);
    await pebble.setA('dns.rampart.test', ['127.0.0.10']); // replaces, does not append
    assert.deepEqual(await resolver.resolve4('dns.rampart.test'), ['127.0.0.10']);
    await pebble.clearA('dns.rampart.test');
    await assert.rejects(resolver.resolve4('dns.rampart.test'), { code: 'ENODATA' });
    await assert.rejects(resolver.resolve6('never-set.rampart.test'), { code: 'ENODATA' });
  });

  test('issues a certificate by HTTP-01 that chains to issuerRoots()', async () => {
    await pebble.setA('smoke.rampart.test', ['127.0.0.1']);
    const pem = await order('smoke.rampart.test');
    const [leaf, ...intermediates] = pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g)!.map((c) => new X509Certificate(c));
    assert.equal(leaf!.subjectAltName, 'DNS:smoke.rampart.test');
    assert.ok(intermediates.length >= 1, 'the chain includes the intermediate');

    const root = new X509Certificate(await pebble.issuerRoots());
    const chain = [leaf!, ...intermediates, root];
    for (let i = 0; i + 1 < chain.length; i++) {
      assert.ok(chain[i]!.checkIssued(chain[i + 1]!), `${chain[i]!.subject} is issued by ${chain[i + 1]!.subject}`);
      assert.ok(chain[i]!.verify(chain[i + 1]!.publicKey), `${chain[i]!.subject} is signed by ${chain[i + 1]!.subject}`);
    }
    assert.equal(keyAuthorizations.size, 0, 'challenges were cleaned up');
  });

  test('a name without an A record fails validation', async () => {
    // Pebble's error: Get "http://nowhere.rampart.test:<port>/...": could not resolve URL "..."
    await assert.rejects(order('nowhere.rampart.test'), /could not resolve URL "http:\/\/nowhere\.rampart\.test:/);
  });
});
