import assert from 'node:assert/strict';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, beforeEach, describe, test } from 'node:test';
import type { ServerSnapshot } from '@rampart/protocol';
import { CertificateManager, type CertStatusReport } from '../src/certificates/manager.js';
import { checkPointsHere } from '../src/certificates/resolve.js';
import { ChallengeResponder } from '../src/certificates/responder.js';
import { CertificateStore } from '../src/certificates/store.js';
import acme from 'acme-client';
import { directoryUrl, LETS_ENCRYPT, type ChallengeHooks } from '../src/certificates/issuer.js';
import { FakeClock } from './fake-clock.js';
import { selfSignedCertificate } from '../../../test/support/certificates.js';

const DAY = 86_400_000;
const HERE = '198.51.100.4';
const tmpDirs: string[] = [];
after(async () => Promise.all(tmpDirs.map((d) => rm(d, { recursive: true, force: true }))));

async function tmp(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'rampart-certs-'));
  tmpDirs.push(d);
  return d;
}

function snapshot(domains: { name: string; ssl?: boolean; addresses?: string[] }[]): ServerSnapshot {
  return {
    serverId: 's1',
    revision: 1,
    rules: [],
    domains: domains.map((d, i) => ({
      id: `00000000-0000-4000-8000-00000000000${i}`,
      domain: d.name,
      origins: [{ ip: '127.0.0.1', port: 8080 }],
      sslEnabled: d.ssl ?? true,
      wafEnabled: true,
      wafLevel: 'medium',
      serverAddresses: d.addresses ?? [HERE],
    })),
  };
}

/** Lets the loop run until it is asleep again (the fake clock is the only thing it waits on). */
async function settled(clock: FakeClock): Promise<void> {
  // The loop also waits on the file system (the store writes certificates), which a busy machine
  // makes slow: wait for the condition up to 10 s of real time, not a number of turns.
  const deadline = Date.now() + 10_000;
  for (let i = 0; Date.now() < deadline; i++) {
    await new Promise((r) => (i < 100 ? setImmediate(r) : setTimeout(r, 1)));
    if (clock.sleeping > 0 && i > 3) return;
  }
  throw new Error('the certificate loop did not go back to sleep');
}

function harness(opts: { dns?: Record<string, string[]>; slot?: (d: string) => { granted: boolean; message: string | null } | Error; fail?: (d: string) => string | undefined; days?: number } = {}) {
  const clock = new FakeClock(Date.now());
  const reports: CertStatusReport[] = [];
  const relayed: string[] = [];
  const issued: string[] = [];
  const slots: string[] = [];
  let servedChanges = 0;
  const responder = new ChallengeResponder(() => clock.now());
  const seenByResponder: string[] = [];
  const ctl = new AbortController();
  const make = async () => {
    const store = new CertificateStore(join(await tmp(), 'certs'));
    await store.load();
    const manager = new CertificateManager({
      store,
      responder,
      clock,
      random: () => 0.5,
      resolve: async (d) => opts.dns?.[d] ?? [HERE],
      issuer: {
        async issue(domain: string, hooks: ChallengeHooks) {
          issued.push(domain);
          await hooks.publish(`tok-${issued.length}`, `tok-${issued.length}.${'a'.repeat(43)}`);
          seenByResponder.push(String(responder.size));
          await hooks.withdraw(`tok-${issued.length}`, `tok-${issued.length}.${'a'.repeat(43)}`);
          const err = opts.fail?.(domain);
          if (err) throw new Error(err);
          return selfSignedCertificate(domain, opts.days ?? 90);
        },
      },
      link: {
        async requestSlot(d) {
          slots.push(d);
          const r = opts.slot?.(d) ?? { granted: true, message: null };
          if (r instanceof Error) throw r;
          return r;
        },
        async relayChallenge(d, token, _k, action) {
          relayed.push(`${action} ${d} ${token}`);
        },
        report: (s) => reports.push(s),
      },
      onServedChanged: () => servedChanges++,
    });
    return { store, manager };
  };
  return {
    clock,
    reports,
    relayed,
    issued,
    slots,
    seenByResponder,
    ctl,
    make,
    get servedChanges() {
      return servedChanges;
    },
  };
}

describe('checkPointsHere', () => {
  test('the message names what the domain resolves to and the servers it should point to', () => {
    assert.deepEqual(checkPointsHere('shop.example.com', ['203.0.113.9'], ['198.51.100.4']), {
      ok: false,
      message: 'shop.example.com resolves to 203.0.113.9, not to a shield server of this domain (198.51.100.4)',
    });
    assert.deepEqual(checkPointsHere('shop.example.com', [], ['198.51.100.4']), {
      ok: false,
      message: 'shop.example.com does not resolve; point it to a shield server of this domain (198.51.100.4)',
    });
  });
  test('one matching address is enough, whatever its spelling', () => {
    assert.deepEqual(checkPointsHere('a.example.com', ['203.0.113.9', '::ffff:198.51.100.4'], ['198.51.100.4']), { ok: true });
    assert.deepEqual(checkPointsHere('a.example.com', ['2001:DB8:0:0::1'], ['2001:db8::1']), { ok: true });
  });
});

describe('CertificateManager', () => {
  let h: ReturnType<typeof harness>;
  beforeEach(() => h?.ctl.abort());

  test('orders a certificate for each sslEnabled domain, serves it, and reports pending then active with its expiry', async () => {
    h = harness();
    const { manager, store } = await h.make();
    const snap = snapshot([{ name: 'www.example.com' }, { name: 'plain.example.com', ssl: false }]);
    manager.update(snap);
    manager.start(h.ctl.signal);
    await settled(h.clock);
    assert.deepEqual(h.slots, ['www.example.com'], 'a slot is asked for before the order; never for a domain without sslEnabled');
    assert.deepEqual(h.issued, ['www.example.com']);
    assert.deepEqual(h.relayed, ['add www.example.com tok-1', 'remove www.example.com tok-1'], 'the key authorization goes to the other servers, then is withdrawn');
    assert.deepEqual(h.seenByResponder, ['1'], 'the local responder holds the challenge during validation');
    assert.equal(h.servedChanges, 1, 'the agent is told to re-apply once the certificate is stored');
    assert.deepEqual(
      h.reports.map((r) => r.status),
      ['pending', 'active'],
    );
    const cert = store.get('www.example.com')!;
    assert.equal(h.reports[1]!.expiresAt, Math.floor(cert.notAfter / 1000));
    assert.deepEqual(manager.served(snap), [{ domain: 'www.example.com', file: cert.file }]);
    assert.equal((await stat(cert.file)).mode & 0o777, 0o600, 'the private key is readable by the agent only');
    assert.equal((await stat(join(store.dir, 'www.example.com'))).mode & 0o777, 0o700);
  });

  test('a domain that resolves elsewhere is an error with an actionable message, retried a few times a day at most', async () => {
    h = harness({ dns: { 'shop.example.com': ['203.0.113.9'] } });
    const { manager } = await h.make();
    manager.update(snapshot([{ name: 'shop.example.com' }]));
    manager.start(h.ctl.signal);
    await settled(h.clock);
    assert.deepEqual(h.slots, [], 'no slot is spent on a domain that does not point here');
    assert.equal(h.reports.at(-1)!.status, 'error');
    assert.equal(h.reports.at(-1)!.message, 'shop.example.com resolves to 203.0.113.9, not to a shield server of this domain (198.51.100.4)');
    let attempts = 1;
    const errorsBefore = () => h.reports.filter((r) => r.status === 'error').length;
    for (let minute = 0; minute < 24 * 60; minute += 10) {
      const before = errorsBefore();
      h.clock.advance(10 * 60_000);
      await settled(h.clock);
      attempts += errorsBefore() - before;
    }
    assert.ok(attempts >= 2 && attempts <= 5, `attempts in the first day: ${attempts}`);
  });

  test("a refused slot is an error carrying the service's reason, and nothing is ordered", async () => {
    h = harness({ slot: () => ({ granted: false, message: 'The certificate authority allows 50 orders per registered domain per week' }) });
    const { manager } = await h.make();
    manager.update(snapshot([{ name: 'a.example.com' }]));
    manager.start(h.ctl.signal);
    await settled(h.clock);
    assert.deepEqual(h.issued, []);
    assert.equal(h.reports.at(-1)!.status, 'error');
    assert.match(h.reports.at(-1)!.message!, /50 orders per registered domain/);
  });

  test('while the service cannot be asked, the order waits without counting as a failure', async () => {
    let away = true;
    h = harness({ slot: () => (away ? new Error('not connected') : { granted: true, message: null }) });
    const { manager } = await h.make();
    manager.update(snapshot([{ name: 'a.example.com' }]));
    manager.start(h.ctl.signal);
    await settled(h.clock);
    assert.deepEqual(h.issued, []);
    assert.deepEqual(
      h.reports.map((r) => r.status),
      ['pending'],
    );
    away = false;
    h.clock.advance(30_000);
    await settled(h.clock);
    assert.deepEqual(h.issued, ['a.example.com']);
  });

  test('a failed order for one domain does not stop the others', async () => {
    h = harness({ fail: (d) => (d === 'bad.example.com' ? 'urn:ietf:params:acme:error:connection: Fetching http://bad.example.com/.well-known/acme-challenge/x: Timeout' : undefined) });
    const { manager } = await h.make();
    const snap = snapshot([{ name: 'bad.example.com' }, { name: 'good.example.com' }]);
    manager.update(snap);
    manager.start(h.ctl.signal);
    await settled(h.clock);
    const last = (d: string) => h.reports.filter((r) => r.domain === d).at(-1)!;
    assert.equal(last('bad.example.com').status, 'error');
    assert.match(last('bad.example.com').message!, /^the certificate order for bad\.example\.com failed: .*Timeout/);
    assert.equal(last('good.example.com').status, 'active');
    assert.deepEqual(
      manager.served(snap).map((c) => c.domain),
      ['good.example.com'],
    );
  });

  test('renews 30 days before expiry, checked twice a day; a certificate not due is left alone', async () => {
    h = harness({ days: 45 });
    const { manager, store } = await h.make();
    manager.update(snapshot([{ name: 'www.example.com' }]));
    manager.start(h.ctl.signal);
    await settled(h.clock);
    const first = store.get('www.example.com')!;
    assert.deepEqual(h.issued, ['www.example.com']);
    h.clock.advance(14 * DAY); // 31 days left: not due (wakes every 12 h on the way)
    await settled(h.clock);
    assert.deepEqual(h.issued, ['www.example.com']);
    // Twice a day until it renews: that must be the first check with less than 30 days left.
    let daysLeftAtRenewal = Infinity;
    for (let i = 0; i < 10 && h.issued.length === 1; i++) {
      h.clock.advance(DAY / 2);
      await settled(h.clock);
      if (h.issued.length === 2) daysLeftAtRenewal = (first.notAfter - h.clock.now()) / DAY;
    }
    assert.deepEqual(h.issued, ['www.example.com', 'www.example.com'], 'renewed once it was within 30 days');
    assert.ok(daysLeftAtRenewal <= 30 && daysLeftAtRenewal > 29.5, `renewed with ${daysLeftAtRenewal} days left`);
    assert.notEqual(store.get('www.example.com')!.file, first.file, 'the renewal is a new file, so the configuration changes and HAProxy reloads');
    assert.equal(h.servedChanges, 2);
  });

  test('a failed renewal keeps the current certificate serving and says so', async () => {
    let failing = false;
    h = harness({ days: 20, fail: () => (failing ? 'the authority is down' : undefined) });
    const { manager } = await h.make();
    manager.update(snapshot([{ name: 'www.example.com' }]));
    manager.start(h.ctl.signal);
    await settled(h.clock);
    failing = true;
    manager.update(snapshot([{ name: 'www.example.com', addresses: [HERE, '192.0.2.1'] }])); // a change: look again now
    await settled(h.clock);
    const last = h.reports.at(-1)!;
    assert.equal(last.status, 'active');
    assert.match(last.message!, /^Renewal failed \(next try .*\): the certificate order for www\.example\.com failed: the authority is down/);
  });

  test('switching sslEnabled off stops serving the certificate; switching it on reuses it without a new order', async () => {
    h = harness();
    const { manager } = await h.make();
    manager.update(snapshot([{ name: 'www.example.com' }]));
    manager.start(h.ctl.signal);
    await settled(h.clock);
    const off = snapshot([{ name: 'www.example.com', ssl: false }]);
    manager.update(off);
    await settled(h.clock);
    assert.deepEqual(manager.served(off), []);
    const on = snapshot([{ name: 'www.example.com' }]);
    manager.update(on);
    await settled(h.clock);
    assert.deepEqual(h.issued, ['www.example.com'], 'no second order');
    assert.equal(manager.served(on).length, 1);
    assert.equal(h.reports.at(-1)!.status, 'active');
  });
});

describe('CertificateStore', () => {
  test('reloads what is on disk; files that do not name their domain are ignored', async () => {
    const dir = join(await tmp(), 'certs');
    const a = new CertificateStore(dir);
    await a.load();
    const issued = selfSignedCertificate('www.example.com');
    await assert.rejects(a.save('www.example.com', selfSignedCertificate('other.example.com').chainPem, issued.keyPem), /could not be read/);
    const saved = await a.save('www.example.com', issued.chainPem, issued.keyPem);
    const b = new CertificateStore(dir);
    await b.load();
    assert.deepEqual(b.get('www.example.com'), saved);
  });
});

describe('ChallengeResponder', () => {
  test('answers a token only for its own host, and forgets it when removed', async () => {
    const r = new ChallengeResponder();
    const port = await r.listen(0);
    try {
      r.add('www.example.com', 'tok', `tok.${'b'.repeat(43)}`);
      // fetch cannot set Host; node:http can
      const get = (host: string) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          request({ host: '127.0.0.1', port, path: '/.well-known/acme-challenge/tok', headers: { host } }, (res) => {
            let body = '';
            res.on('data', (c) => (body += c));
            res.on('end', () => resolve({ status: res.statusCode!, body }));
          })
            .on('error', reject)
            .end();
        });
      assert.deepEqual(await get('www.example.com'), { status: 200, body: `tok.${'b'.repeat(43)}` });
      assert.deepEqual(await get('WWW.example.com:80'), { status: 200, body: `tok.${'b'.repeat(43)}` });
      assert.equal((await get('evil.example.com')).status, 404);
      r.remove('www.example.com', 'tok');
      assert.equal((await get('www.example.com')).status, 404);
    } finally {
      await r.close();
    }
  });
});

test("--acme-directory: Let's Encrypt's directories are acme-client's, a URL is taken as given", () => {
  assert.deepEqual(LETS_ENCRYPT, { production: acme.directory.letsencrypt.production, staging: acme.directory.letsencrypt.staging });
  assert.equal(directoryUrl(undefined), acme.directory.letsencrypt.production);
  assert.equal(directoryUrl('production'), acme.directory.letsencrypt.production);
  assert.equal(directoryUrl('staging'), acme.directory.letsencrypt.staging);
  assert.equal(directoryUrl('https://127.0.0.1:14000/dir'), 'https://127.0.0.1:14000/dir');
});
