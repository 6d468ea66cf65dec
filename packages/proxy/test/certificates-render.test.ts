import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { ServerSnapshot, SnapshotDomain } from '@rampart/protocol';
import { renderBackend, renderHaproxyConfig, UnsafeValueError, type RenderOptions, type ServedCertificate } from '../src/index.js';
import { skipUnless } from '../../../test/support/processes.js';

// RenderOptions.certificates comes from the agent's own store, not from users, but the renderer
// trusts nothing it writes into configuration syntax: a certificate path or domain that is not a
// plain token is refused, whatever produced it. And what HTTPS adds to the configuration
// (crt-list, strict SNI, the 421 for a Host that is not the SNI's, the redirect) passes haproxy -c.

const HAPROXY = process.env.RAMPART_HAPROXY ?? '/usr/sbin/haproxy';
const TARGET = { configDir: '/var/lib/rampart/haproxy/cfg-0123456789abcdef' };
const OPTIONS: RenderOptions = { httpBind: { address: '*', port: 80 }, httpsPort: 443, runDir: '/var/lib/rampart/run', acmePort: 40123 };
const GOOD_FILE = '/var/lib/rampart/certs/www.example.com/0123456789abcdef.pem';

function domain(name: string, sslEnabled = true, n = 1): SnapshotDomain {
  return { id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`, domain: name, origins: [{ ip: '10.0.0.1', port: 80 }], sslEnabled, wafEnabled: true, wafLevel: 'medium', serverAddresses: [] };
}
function snapshot(domains: SnapshotDomain[]): ServerSnapshot {
  return { serverId: 'srv-1', revision: 1, domains, rules: [] };
}
const render = (certificates: ServedCertificate[], domains = [domain('www.example.com')], options: Partial<RenderOptions> = {}) =>
  renderHaproxyConfig(snapshot(domains), { ...OPTIONS, ...options, certificates }, TARGET);

describe('certificates in RenderOptions are re-checked', () => {
  const hostile = ['\n', '\r', ' ', '\t', '"', "'", '#', '\\', '\u0000', '%[', '{', '}', '$', ';', ',', '`'];

  test('a certificate file path carrying any syntax character, or not absolute, is refused with UnsafeValueError', () => {
    const files = [
      ...hostile.flatMap((f) => [`/var/lib/rampart/certs/www.example.com/a${f}b.pem`, `${GOOD_FILE}${f}`]),
      `${GOOD_FILE} www.evil.com`, // a second crt-list field
      `${GOOD_FILE} [alpn h2] evil.com`, // crt-list per-line SSL options
      `${GOOD_FILE}\n/etc/ssl/private/other.pem evil.com`, // a second crt-list line
      `${GOOD_FILE}\n    bind *:1`,
      '/var/lib/rampart/certs/my cert.pem',
      '/var/lib/rampart/certs/"quoted".pem',
      'certs/www.example.com/0123456789abcdef.pem',
      './x.pem',
      '',
    ];
    for (const file of files) {
      assert.throws(() => render([{ domain: 'www.example.com', file }]), UnsafeValueError, JSON.stringify(file));
      // Checked even when the certificate would not be served (its domain is not in the snapshot).
      assert.throws(() => render([{ domain: 'other.example.com', file }]), UnsafeValueError, `unserved: ${JSON.stringify(file)}`);
    }
  });

  test('a certificate domain that is not a validated hostname is refused with UnsafeValueError', () => {
    const domains = [
      ...hostile.flatMap((f) => [`www.exa${f}mple.com`, `www.example.com${f}`]),
      'www.example.com evil.com',
      'www.example.com\nevil.com',
      'www.example.com\r\n/etc/ssl/private/key.pem evil.com',
      '"www.example.com"',
      'WWW.example.com',
      'www.example.com.',
      '*.example.com',
      '!www.example.com', // crt-list's negative SNI filter
      '1.2.3.4',
      'localhost',
      '',
    ];
    for (const name of domains) {
      assert.throws(() => render([{ domain: name, file: GOOD_FILE }]), UnsafeValueError, JSON.stringify(name));
    }
  });

  test('only the certificates of sslEnabled domains of this snapshot are listed, each domain once, the first one given winning', () => {
    const { files } = render(
      [
        { domain: 'www.example.com', file: GOOD_FILE },
        { domain: 'www.example.com', file: '/var/lib/rampart/certs/www.example.com/fedcba9876543210.pem' },
        { domain: 'plain.example.com', file: '/var/lib/rampart/certs/plain.example.com/0123456789abcdef.pem' },
        { domain: 'gone.example.com', file: '/var/lib/rampart/certs/gone.example.com/0123456789abcdef.pem' },
      ],
      [domain('www.example.com', true, 1), domain('plain.example.com', false, 2)],
    );
    assert.equal(files['certificates.list'], `${GOOD_FILE} www.example.com\n`);
    const cfg = files['haproxy.cfg']!;
    assert.match(cfg, /http-request redirect prefix https:\/\/www\.example\.com code 301 unless \{ ssl_fc \}/);
    assert.equal(cfg.match(/http-request redirect/g)?.length, 1, 'no redirect for the domain without SSL');
  });

  test("HTTPS is strict about SNI and answers 421 when Host is not the SNI's domain; without certificates, none of it", () => {
    const cfg = render([{ domain: 'www.example.com', file: GOOD_FILE }]).files['haproxy.cfg']!;
    assert.match(cfg, /\n {4}bind \*:443 ssl crt-list \/var\/lib\/rampart\/haproxy\/cfg-0123456789abcdef\/certificates\.list alpn h2,http\/1\.1 strict-sni\n/);
    // Each domain's backend, first thing: the SNI must be its own name; an unknown Host over TLS is misdirected too.
    const backend = cfg.slice(cfg.indexOf('\nbackend be_www_example_com') + 1);
    assert.match(
      backend,
      /^backend be_www_example_com\n(?: {4}(?:option|http-check) .*\n)* {4}http-request return status 421 content-type text\/plain string "Misdirected Request" if \{ ssl_fc \} !\{ ssl_fc_sni -i www\.example\.com \}\n/,
    );
    assert.match(cfg, /backend default_404\n {4}http-request return status 421 content-type text\/plain string "Misdirected Request" if \{ ssl_fc \}\n/);
    const plain = render([]).files['haproxy.cfg']!;
    for (const line of ['ssl crt-list', 'strict-sni', 'status 421', 'redirect']) assert.ok(!plain.includes(line), line);
  });

  test('a redirect target other than https://<hostname>[:port] is refused', () => {
    for (const target of [
      'https://evil.com/',
      'https://www.example.com:443/x',
      'http://www.example.com',
      'https://www.example.com x',
      'https://www.example.com\n',
      'https://user@www.example.com',
      'https://www.example.com:443 code 302',
      '//www.example.com',
      'https://%[req.hdr(host)]',
    ]) {
      assert.throws(() => renderBackend({ domain: 'www.example.com', origins: [{ ip: '10.0.0.1', port: 80 }] }, { requestRules: [], httpsRedirect: target }), UnsafeValueError, JSON.stringify(target));
    }
  });
});

describe('HAProxy accepts the HTTPS configuration', { skip: skipUnless(existsSync(HAPROXY), `${HAPROXY} is not installed`) }, () => {
  const root = mkdtempSync(join(tmpdir(), 'rampart-tls-cfg-'));
  after(() => rmSync(root, { recursive: true, force: true }));

  test('two domains with certificates and one without pass haproxy -c', () => {
    const configDir = join(root, 'cfg');
    const runDir = join(root, 'run');
    mkdirSync(configDir, { recursive: true });
    mkdirSync(runDir, { recursive: true });
    const certificates = ['a.example.com', 'b.example.com'].map((name) => {
      const key = join(root, `${name}.key`);
      const crt = join(root, `${name}.crt`);
      execFileSync(
        'openssl',
        ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', crt, '-days', '2', '-subj', `/CN=${name}`, '-addext', `subjectAltName=DNS:${name}`],
        { stdio: 'ignore' },
      );
      const file = join(root, `${name}.pem`);
      writeFileSync(file, `${readFileSync(crt, 'utf8')}${readFileSync(key, 'utf8')}`);
      return { domain: name, file };
    });
    const { files } = renderHaproxyConfig(
      snapshot([domain('a.example.com', true, 1), domain('b.example.com', true, 2), domain('c.example.com', false, 3)]),
      { httpBind: { address: '127.0.0.1', port: 18080 }, httpsPort: 18443, acmePort: 18081, runDir, certificates },
      { configDir },
    );
    for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
    const res = spawnSync(HAPROXY, ['-c', '-f', join(configDir, 'haproxy.cfg')], { encoding: 'utf8', timeout: 20_000 });
    const output = `${res.stdout}${res.stderr}`;
    assert.equal(res.status, 0, output);
    assert.doesNotMatch(output, /\[(ALERT|WARNING)\]/, output);
  });
});
