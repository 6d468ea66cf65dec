import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { ServerSnapshot } from '@rampart/protocol';
import { CertificateManager, type CertStatusReport } from '../src/certificates/manager.js';
import { ChallengeResponder, MAX_CHALLENGES } from '../src/certificates/responder.js';
import { CertificateStore } from '../src/certificates/store.js';
import { selfSignedCertificate } from '../../../test/support/certificates.js';
import { waitFor } from '../../../test/support/processes.js';
import { FakeClock } from './fake-clock.js';

// The HTTP-01 responder against a hostile peer (a compromised server sharing a domain, whose
// challenges the service relays here) and hostile requests (what HAProxy forwards from anyone
// for /.well-known/acme-challenge/, on any host).

const KA = (token: string) => `${token}.${'a'.repeat(43)}`;
const tmpDirs: string[] = [];
after(async () => Promise.all(tmpDirs.map((d) => rm(d, { recursive: true, force: true }))));

/** Bytes as written, on one connection; the answer's status and body (the responder closes after Connection: close). */
function raw(port: number, request: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(request, 'latin1'));
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => (text += d));
    socket.on('error', reject);
    socket.on('close', () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const body = text.slice(text.indexOf('\r\n\r\n') + 4);
      // The responder's bodies are short and chunked: one chunk, then the last.
      const chunked = /^([0-9a-f]+)\r\n([\s\S]*?)\r\n0\r\n\r\n$/.exec(body);
      resolve({ status, body: chunked ? chunked[2]! : body });
    });
  });
}

const get = (port: number, path: string, host: string | undefined, method = 'GET') =>
  raw(port, `${method} ${path} HTTP/1.1\r\n${host === undefined ? '' : `Host: ${host}\r\n`}Connection: close\r\n\r\n`);

async function withResponder<T>(fn: (r: ChallengeResponder, port: number) => Promise<T>, now?: () => number): Promise<T> {
  const r = new ChallengeResponder(now);
  const port = await r.listen(0);
  try {
    return await fn(r, port);
  } finally {
    await r.close();
  }
}

describe('ChallengeResponder under attack', () => {
  test("a flood of relayed challenges is bounded, and never crowds out this server's own", async () => {
    await withResponder(async (r, port) => {
      for (let i = 0; i < MAX_CHALLENGES + 500; i++) r.add('shared.example.com', `flood-${i}`, KA(`flood-${i}`), 'peer');
      assert.equal(r.size, MAX_CHALLENGES, 'what a flood can hold');
      assert.equal((await get(port, `/.well-known/acme-challenge/flood-${MAX_CHALLENGES}`, 'shared.example.com')).status, 404, 'past the bound: dropped');
      // An honest peer's challenge for another domain waits for room, but this server's own order is answered.
      r.add('mine.example.com', 'own-token', KA('own-token'), 'own');
      assert.deepEqual(await get(port, '/.well-known/acme-challenge/own-token', 'mine.example.com'), { status: 200, body: KA('own-token') });
      assert.deepEqual(await get(port, '/.well-known/acme-challenge/own-token', 'shared.example.com'), { status: 404, body: 'Not Found' }, 'never for another host');
      r.remove('mine.example.com', 'own-token', 'own');
      assert.equal((await get(port, '/.well-known/acme-challenge/own-token', 'mine.example.com')).status, 404);
    });
  });

  test('relayed challenges are forgotten after 30 minutes, which frees room a flood took', async () => {
    let t = Date.UTC(2026, 0, 1);
    await withResponder(
      async (r, port) => {
        for (let i = 0; i < MAX_CHALLENGES; i++) r.add('shared.example.com', `flood-${i}`, KA(`flood-${i}`), 'peer');
        r.add('other.example.com', 'honest', KA('honest'), 'peer');
        assert.equal((await get(port, '/.well-known/acme-challenge/honest', 'other.example.com')).status, 404, 'no room yet');
        t += 30 * 60_000 + 1;
        assert.equal((await get(port, '/.well-known/acme-challenge/flood-0', 'shared.example.com')).status, 404, 'expired');
        r.add('other.example.com', 'honest', KA('honest'), 'peer');
        assert.equal(r.size, 1);
        assert.equal((await get(port, '/.well-known/acme-challenge/honest', 'other.example.com')).status, 200);
      },
      () => t,
    );
  });

  test("a peer can neither replace nor withdraw this server's own challenge, even knowing its token", async () => {
    await withResponder(async (r, port) => {
      r.add('shared.example.com', 'tok', KA('tok'), 'own');
      r.add('shared.example.com', 'tok', `tok.${'x'.repeat(43)}`, 'peer');
      r.add('evil.example.com', 'tok', `tok.${'x'.repeat(43)}`, 'peer');
      r.remove('shared.example.com', 'tok', 'peer');
      assert.deepEqual(await get(port, '/.well-known/acme-challenge/tok', 'shared.example.com'), { status: 200, body: KA('tok') });
      assert.equal((await get(port, '/.well-known/acme-challenge/tok', 'evil.example.com')).status, 404);
      // A peer's own challenge is still its to withdraw, and only for its domain.
      r.add('shared.example.com', 'peer-tok', KA('peer-tok'), 'peer');
      r.remove('evil.example.com', 'peer-tok', 'peer');
      assert.equal((await get(port, '/.well-known/acme-challenge/peer-tok', 'shared.example.com')).status, 200);
      r.remove('shared.example.com', 'peer-tok', 'peer');
      assert.equal((await get(port, '/.well-known/acme-challenge/peer-tok', 'shared.example.com')).status, 404);
    });
  });

  test('a token is answered only for its host and its exact path, whatever the request spells', async () => {
    await withResponder(async (r, port) => {
      r.add('www.example.com', 'tok', KA('tok'), 'peer');
      r.add('other.example.com', 'other', KA('other'), 'peer');
      const path = '/.well-known/acme-challenge/tok';
      // The same host: case, port, the FQDN's trailing dot; a query string is not part of the path.
      for (const host of ['www.example.com', 'WWW.EXAMPLE.COM', 'www.example.com:80', 'www.example.com.', 'www.example.com.:8080']) {
        assert.deepEqual(await get(port, path, host), { status: 200, body: KA('tok') }, host);
      }
      assert.equal((await get(port, `${path}?x=1`, 'www.example.com')).status, 200);
      // Another host, or something that only contains or resembles it.
      for (const host of ['other.example.com', 'evil.com', 'www.example.com@evil.com', 'evil.com@www.example.com', 'www.example.com.evil.com', 'xwww.example.com', 'www.example.com..', '', '[::1]']) {
        assert.equal((await get(port, path, host)).status, 404, JSON.stringify(host));
      }
      assert.equal((await get(port, path, undefined).catch(() => ({ status: 400 }))).status !== 200, true, 'no Host at all');
      assert.equal((await raw(port, `GET ${path} HTTP/1.0\r\n\r\n`)).status, 404, 'HTTP/1.0 without Host');
      // Another path: traversal, encodings, suffixes, another method.
      for (const p of [
        '/.well-known/acme-challenge/../acme-challenge/tok',
        '/.well-known/acme-challenge/./tok',
        '/.well-known/acme-challenge/%74ok',
        '/.well-known/acme-challenge/tok/',
        '/.well-known/acme-challenge/tok%00',
        '/.well-known/acme-challenge//tok',
        '//.well-known/acme-challenge/tok',
        '/.WELL-KNOWN/ACME-CHALLENGE/tok',
        '/.well-known/acme-challenge/other',
        'http://www.example.com/.well-known/acme-challenge/other',
      ]) {
        assert.equal((await get(port, p, 'www.example.com')).status, 404, p);
      }
      for (const method of ['POST', 'PUT', 'DELETE']) assert.equal((await get(port, path, 'www.example.com', method)).status, 404, method);
    });
  });
});

describe('CertificateManager with a responder a hostile peer has filled', () => {
  test("this server's own order is still answered and succeeds", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rampart-responder-'));
    tmpDirs.push(dir);
    const clock = new FakeClock(Date.now());
    const responder = new ChallengeResponder(() => clock.now());
    const port = await responder.listen(0);
    for (let i = 0; i < MAX_CHALLENGES; i++) responder.add('shared.example.com', `flood-${i}`, KA(`flood-${i}`), 'peer');
    const store = new CertificateStore(join(dir, 'certs'));
    await store.load();
    const reports: CertStatusReport[] = [];
    const ctl = new AbortController();
    const manager = new CertificateManager({
      store,
      responder,
      clock,
      random: () => 0.5,
      resolve: async () => ['198.51.100.4'],
      link: { requestSlot: async () => ({ granted: true, message: null }), relayChallenge: async () => undefined, report: (s) => reports.push(s) },
      onServedChanged: () => undefined,
      issuer: {
        // The authority's validation: it fetches the token from this server's responder.
        async issue(domain, hooks) {
          await hooks.publish('own-order', KA('own-order'));
          const seen = await get(port, '/.well-known/acme-challenge/own-order', domain);
          await hooks.withdraw('own-order', KA('own-order'));
          if (seen.status !== 200 || seen.body !== KA('own-order')) throw new Error(`validation failed: the responder answered ${seen.status}`);
          return selfSignedCertificate(domain);
        },
      },
    });
    const snapshot: ServerSnapshot = {
      serverId: 's1',
      revision: 1,
      rules: [],
      domains: [
        {
          id: '00000000-0000-4000-8000-000000000001',
          domain: 'mine.example.com',
          origins: [{ ip: '127.0.0.1', port: 8080 }],
          sslEnabled: true,
          wafEnabled: true,
          wafLevel: 'medium',
          serverAddresses: ['198.51.100.4'],
        },
      ],
    };
    try {
      manager.update(snapshot);
      manager.start(ctl.signal);
      await waitFor(() => reports.some((r) => r.status !== 'pending'), 'the order to end', 10_000, 5);
      const last = reports.at(-1);
      assert.equal(last?.status, 'active', `the order's outcome: ${JSON.stringify(last)}`);
      assert.equal(responder.size, MAX_CHALLENGES, 'its own challenge withdrawn, the flood left as it was');
    } finally {
      ctl.abort();
      manager.wake();
      await manager.stopped();
      await responder.close();
    }
  });
});
