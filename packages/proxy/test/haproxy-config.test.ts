import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { after, describe, test } from 'node:test';
import fc from 'fast-check';
import { LATENCY_SAMPLE_EVERY, type ServerSnapshot, type SnapshotDomain, type SnapshotRule } from '@rampart/protocol';
import { cookieKeys, GATE_FILES, renderHaproxyConfig, UnsafeValueError, WAF_ASSETS, type RenderOptions, type RenderTarget } from '../src/index.js';
import { goldenSuite } from './golden.js';
import { skipUnless } from '../../../test/support/processes.js';

// The live shield-server renderer (docs/architecture.md "Data plane"): snapshot in, { files, hash } out.
// Golden files show every change to the generated configuration; the rest proves that user strings
// never change its structure, that routing stays one backend per domain, and that HAProxy accepts it.

const execFileAsync = promisify(execFile);
const HAPROXY = process.env.RAMPART_HAPROXY ?? '/usr/sbin/haproxy';

/** The files every render copies as they are (the Lua engines, the proof-of-work worker, the gate's patterns). */
const STATIC_ASSETS = new Map([...Object.entries(WAF_ASSETS), ...Object.entries(GATE_FILES)]);

/**
 * Every output of one render in one text: each file under a header, then the hash. A static asset
 * the render copies as it is appears by its size and SHA-256 (its own tests cover its content):
 * the goldens show what the renderer writes.
 */
function renderAll(input: { snapshot: ServerSnapshot; options: RenderOptions & { countryClasses?: Record<string, string> }; target: RenderTarget }): string {
  // countryClasses is a Map; JSON holds it as an object
  const options = { ...input.options, countryClasses: input.options.countryClasses && new Map(Object.entries(input.options.countryClasses)) };
  const { files, hash } = renderHaproxyConfig(input.snapshot, options, input.target);
  const names = Object.keys(files).sort();
  const shown = (n: string) =>
    STATIC_ASSETS.get(n) === files[n] ? `(static asset: ${Buffer.byteLength(files[n]!)} bytes, sha256 ${createHash('sha256').update(files[n]!).digest('hex')})\n` : files[n];
  return [...names.map((n) => `==> ${n} <==\n${shown(n)}`), `==> hash <==\n${hash}\n`].join('');
}

goldenSuite(fileURLToPath(new URL('./golden/haproxy-config', import.meta.url)), renderAll);

const OPTIONS: RenderOptions = { httpBind: { address: '*', port: 80 }, runDir: '/var/lib/rampart/run' };
const TARGET: RenderTarget = { configDir: '/var/lib/rampart/haproxy/cfg-0123456789abcdef' };

let nextId = 0;
function domain(name: string, origins: { ip: string; port: number }[] = [{ ip: '10.0.0.1', port: 80 }]): SnapshotDomain {
  return { id: `00000000-0000-4000-8000-${String(++nextId).padStart(12, '0')}`, domain: name, origins, sslEnabled: true, wafEnabled: true, wafLevel: 'medium' };
}
function snapshot(domains: SnapshotDomain[], revision = 1): ServerSnapshot {
  return { serverId: 'srv-1', revision, domains, rules: [] };
}

describe('hostile strings never reach the configuration', () => {
  const hostileFragments = ['\n', '\r', '#', '"', '\\', '\u0000', '%[', '{', ' ', '\t', "'", '}', '$'];

  test('a domain carrying any syntax character is refused with UnsafeValueError', () => {
    const domains = [
      ...hostileFragments.flatMap((f) => [`exa${f}mple.com`, `example.com${f}`, `${f}example.com`]),
      'example.com\n    bind *:1',
      'example.com\r\nbackend evil',
      'example.com # comment',
      'exa"mple.com',
      '%[src].example.com',
      '%[req.hdr(host)]',
      '{ always_true }.example.com',
      'example.com if TRUE',
      'Example.com', // callers lowercase first; an uppercase name is not a validated token
      'localhost',
      '',
    ];
    for (const name of domains) {
      assert.throws(() => renderHaproxyConfig(snapshot([domain(name)]), OPTIONS, TARGET), UnsafeValueError, JSON.stringify(name));
      // Also when a harmless domain comes first: nothing is half-rendered.
      assert.throws(() => renderHaproxyConfig(snapshot([domain('aaa.example.com'), domain(name)]), OPTIONS, TARGET), UnsafeValueError, JSON.stringify(name));
    }
  });

  test('an origin address carrying any syntax character is refused with UnsafeValueError', () => {
    const ips = [
      ...hostileFragments.flatMap((f) => [`10.0.0.1${f}`, `${f}10.0.0.1`, `2001:db8::1${f}`]),
      '10.0.0.1 check',
      '10.0.0.1\n    server evil 6.6.6.6:80',
      '10.0.0.1 # x',
      '%[src]',
      '{10.0.0.1}',
      'fe80::1%eth0',
      '[::1]',
      'localhost',
      '10.0.0.1:80',
      '',
    ];
    for (const ip of ips) {
      assert.throws(() => renderHaproxyConfig(snapshot([domain('example.com', [{ ip, port: 80 }])]), OPTIONS, TARGET), UnsafeValueError, JSON.stringify(ip));
      assert.throws(
        () =>
          renderHaproxyConfig(
            snapshot([
              domain('example.com', [
                { ip: '10.0.0.2', port: 80 },
                { ip, port: 80 },
              ]),
            ]),
            OPTIONS,
            TARGET,
          ),
        UnsafeValueError,
        JSON.stringify(ip),
      );
    }
  });

  test('an origin port outside 1..65535 or not an integer is refused', () => {
    for (const port of [0, -1, 65536, 80.5, Number.NaN, '80' as unknown as number]) {
      assert.throws(() => renderHaproxyConfig(snapshot([domain('example.com', [{ ip: '10.0.0.1', port }])]), OPTIONS, TARGET), UnsafeValueError, String(port));
    }
  });

  test('the agent-side paths and bind address are checked too', () => {
    for (const runDir of ['relative/run', '/run dir', '/run\n    bind *:1', '/run#x', '/run"x']) {
      assert.throws(() => renderHaproxyConfig(snapshot([]), { ...OPTIONS, runDir }, TARGET), UnsafeValueError, runDir);
    }
    for (const configDir of ['cfg', '/cfg dir', '/cfg\nx', '/cfg%[src]']) {
      assert.throws(() => renderHaproxyConfig(snapshot([]), OPTIONS, { configDir }), UnsafeValueError, configDir);
    }
    for (const address of ['0.0.0.0 ssl', 'localhost', '::1', '*\n']) {
      assert.throws(() => renderHaproxyConfig(snapshot([]), { ...OPTIONS, httpBind: { address, port: 80 } }, TARGET), UnsafeValueError, address);
    }
    for (const port of [0, 65536, 1.5]) {
      assert.throws(() => renderHaproxyConfig(snapshot([]), { ...OPTIONS, httpBind: { address: '*', port } }, TARGET), UnsafeValueError, String(port));
    }
  });
});

// ------------------------------------------------------------------- purity

test('the output does not depend on the machine locale (same snapshot, same files everywhere)', async () => {
  // Names whose order differs between collations: Czech sorts "ch" after "h", Lithuanian "y" with
  // "i", Estonian "z" after "s"; plus punctuation and digits.
  const names = ['z.example.com', 'y.example.com', 't.example.com', 'j.example.com', 'i.example.com', 'h.example.com', 'ch.example.com', 'a0.example.com', 'a.example.com', 'a-b.example.com'];
  const input = { snapshot: snapshot(names.map((n) => domain(n))), options: OPTIONS, target: TARGET };
  // The built package (npm run build precedes the tests): a child without tsx starts in a fraction of the time.
  const built = pathToFileURL(fileURLToPath(new URL('../dist/index.js', import.meta.url))).href;
  const script = `import { renderHaproxyConfig } from ${JSON.stringify(built)};
const i = JSON.parse(process.env.RENDER_INPUT);
process.stdout.write(JSON.stringify(renderHaproxyConfig(i.snapshot, i.options, i.target)));`;
  // One child per locale (the default collation is process-wide), run side by side.
  const locales = ['C', 'en_US.UTF-8', 'cs_CZ.UTF-8', 'lt_LT.UTF-8', 'et_EE.UTF-8'];
  const outputs = await Promise.all(
    locales.map(async (locale): Promise<[string, string]> => {
      const { stdout } = await execFileAsync(process.execPath, ['--input-type=module', '-e', script], {
        env: { ...process.env, LC_ALL: locale, LANG: locale, RENDER_INPUT: JSON.stringify(input) },
        encoding: 'utf8',
        timeout: 20_000,
      });
      return [locale, stdout];
    }),
  );
  const [, reference] = outputs[0]!;
  for (const [locale, out] of outputs) {
    const mapOf = (o: string) => (JSON.parse(o) as { files: Record<string, string> }).files['domains.map'];
    assert.equal(mapOf(out), mapOf(reference), `domains.map rendered under ${locale} differs from LC_ALL=C`);
    assert.equal(out, reference, `output rendered under ${locale} differs from LC_ALL=C`);
  }
});

// ------------------------------------------------------------------- properties

const label = fc.stringMatching(/^[a-z]{1,12}$/);
const hostname = fc.array(label, { minLength: 2, maxLength: 4 }).map((ls) => ls.join('.'));
const ipv4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((o) => o.join('.'));
const origin = fc.record({ ip: ipv4, port: fc.integer({ min: 1, max: 65535 }) });
const validSnapshot = fc.uniqueArray(fc.record({ name: hostname, origins: fc.array(origin, { minLength: 1, maxLength: 4 }) }), { selector: (d) => d.name, maxLength: 8 }).chain((ds) =>
  fc.tuple(fc.uuid(), fc.nat()).map(([serverId, revision]): ServerSnapshot => ({
    serverId,
    revision,
    domains: ds.map((d, i) => ({ id: `00000000-0000-4000-9000-${String(i).padStart(12, '0')}`, domain: d.name, origins: d.origins, sslEnabled: true, wafEnabled: true, wafLevel: 'medium' })),
    rules: [],
  })),
);

describe('properties of random valid snapshots', () => {
  test('one backend per domain plus default_404, and each domain mapped exactly once to its backend', () => {
    fc.assert(
      fc.property(validSnapshot, (snap) => {
        const { files } = renderHaproxyConfig(snap, OPTIONS, TARGET);
        const cfg = files['haproxy.cfg']!;
        const backends = cfg.split('\n').filter((l) => l.startsWith('backend '));
        assert.equal(backends.length, snap.domains.length + 1);
        assert.ok(backends.includes('backend default_404'));
        const mapLines = files['domains.map']!.split('\n').filter((l) => l !== '');
        assert.equal(mapLines.length, snap.domains.length);
        for (const d of snap.domains) {
          const be = `be_${d.domain.replace(/\./g, '_')}`;
          assert.equal(mapLines.filter((l) => l === `${d.domain} ${be}`).length, 1, `${d.domain} in domains.map`);
          assert.equal(mapLines.filter((l) => l.split(' ')[0] === d.domain).length, 1, `${d.domain} keyed once`);
          assert.equal(backends.filter((l) => l === `backend ${be}`).length, 1, `backend ${be}`);
        }
        // Routing: one domain by one ACL (as the plain proxy does), several through the map.
        const routes = cfg.split('\n').filter((l) => l.includes('use_backend'));
        const host = 'req.hdr(host),lower,field(1,:)';
        if (snap.domains.length === 1) {
          const d = snap.domains[0]!.domain;
          assert.deepEqual(routes, [`    use_backend be_${d.replace(/\./g, '_')} if { ${host} -m str ${d} }`]);
        } else if (snap.domains.length > 1) assert.deepEqual(routes, [`    use_backend %[${host},map(${TARGET.configDir}/domains.map,default_404)]`]);
        else assert.deepEqual(routes, [], 'no domain: default_404');
      }),
      { numRuns: 200 },
    );
  });

  test('countries: a domain refuses the classes of its countries (a Map in the options, part of the hash); bad classes are refused', () => {
    const snap: ServerSnapshot = {
      serverId: 's',
      revision: 1,
      domains: [{ id: '00000000-0000-4000-8000-000000000001', domain: 'a.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], sslEnabled: false, wafEnabled: true, wafLevel: 'low' }],
      rules: [
        { id: '00000000-0000-4000-8000-000000000002', type: 'block_country', value: 'KP', domainId: null, priority: 1 },
        { id: '00000000-0000-4000-8000-000000000003', type: 'block_country', value: 'IR', domainId: null, priority: 2 },
      ],
    };
    const countryMap = '/var/lib/rampart/geo/country-1.0-classes-0123456789abcdef.map';
    const render = (classes?: [string, string][]) => renderHaproxyConfig(snap, { ...OPTIONS, countryMap, ...(classes ? { countryClasses: new Map(classes) } : {}) }, TARGET);
    const a = render([
      ['KP', 'c000'],
      ['IR', 'c000'],
    ]);
    const b = render([
      ['KP', 'c000'],
      ['IR', 'c001'],
    ]);
    assert.notEqual(a.hash, b.hash, 'JSON.stringify writes a Map as {}: the hash reads its entries');
    assert.match(a.files['haproxy.cfg']!, /str\(country_blocked:-\) if .* \{ src,map_ip\(\/var\/lib\/rampart\/geo\/country-1\.0-classes-0123456789abcdef\.map\) -m str -f \S+\/countries_d0\.pat \}/);
    assert.equal(a.files['countries_d0.pat'], 'c000\n');
    assert.equal(b.files['countries_d0.pat'], 'c000\nc001\n');
    assert.equal(render().files['countries_d0.pat'], 'IR\nKP\n', 'a map of the countries themselves: the countries');
    assert.doesNotMatch(renderHaproxyConfig(snap, OPTIONS, TARGET).files['haproxy.cfg']!, /country_blocked/, 'no country map: no country line');
    assert.throws(() => render([['KP', 'c0 x']]), /countryClasses/);
    assert.throws(() => render([['KP', '%[src]']]), /countryClasses/);
  });

  test('the hash ignores the revision and changes when an origin changes', () => {
    fc.assert(
      fc.property(validSnapshot, fc.nat(), (snap, otherRevision) => {
        const a = renderHaproxyConfig(snap, OPTIONS, TARGET);
        const b = renderHaproxyConfig({ ...snap, revision: otherRevision }, OPTIONS, TARGET);
        assert.equal(b.hash, a.hash);
        assert.deepEqual(b.files, a.files);
        if (snap.domains.length === 0) return;
        const [first, ...rest] = snap.domains;
        const [o, ...others] = first!.origins;
        const movedPort = { ...first!, origins: [{ ip: o!.ip, port: (o!.port % 65535) + 1 }, ...others] };
        const c = renderHaproxyConfig({ ...snap, domains: [movedPort, ...rest] }, OPTIONS, TARGET);
        assert.notEqual(c.hash, a.hash, 'origin port changed');
        const octets = o!.ip.split('.').map(Number);
        octets[3] = (octets[3]! + 1) % 256;
        const movedIp = { ...first!, origins: [{ ip: octets.join('.'), port: o!.port }, ...others] };
        const d = renderHaproxyConfig({ ...snap, domains: [movedIp, ...rest] }, OPTIONS, TARGET);
        assert.notEqual(d.hash, a.hash, 'origin address changed');
        const added = { ...first!, origins: [...first!.origins, { ip: '192.0.2.1', port: 80 }] };
        assert.notEqual(renderHaproxyConfig({ ...snap, domains: [added, ...rest] }, OPTIONS, TARGET).hash, a.hash, 'origin added');
      }),
      { numRuns: 200 },
    );
  });
});

// ------------------------------------------------------------------- real HAProxy

describe('HAProxy accepts the rendered configuration', { skip: skipUnless(existsSync(HAPROXY), `${HAPROXY} is not installed`) }, () => {
  const root = mkdtempSync(join(tmpdir(), 'rampart-cfg-'));
  after(() => rmSync(root, { recursive: true, force: true }));

  function check(snap: ServerSnapshot, name: string, allowed?: RegExp) {
    const configDir = join(root, name, 'cfg');
    const runDir = join(root, name, 'run');
    const { files } = renderHaproxyConfig(snap, { httpBind: { address: '127.0.0.1', port: 18080 }, runDir }, { configDir });
    mkdirSync(configDir, { recursive: true });
    mkdirSync(runDir, { recursive: true });
    for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
    const res = spawnSync(HAPROXY, ['-c', '-f', join(configDir, 'haproxy.cfg')], { encoding: 'utf8', timeout: 20_000 });
    const output = `${res.stdout}${res.stderr}`;
    assert.equal(res.status, 0, output);
    assert.doesNotMatch(output, /\[ALERT\]/, output);
    const warnings = output.split('\n').filter((l) => l.includes('[WARNING]'));
    assert.deepEqual(
      warnings.filter((l) => !allowed?.test(l)),
      [],
      output,
    );
    return output;
  }

  test('two domains with IPv4 and IPv6 origins pass haproxy -c', () => {
    check(
      snapshot([
        domain('www.example.com', [
          { ip: '10.0.0.1', port: 8080 },
          { ip: '2001:db8::7', port: 80 },
        ]),
        domain('api.example-shop.co.uk', [
          { ip: '192.0.2.10', port: 443 },
          { ip: '::ffff:192.0.2.11', port: 8443 },
          { ip: '::1', port: 65535 },
        ]),
      ]),
      'two-domains',
    );
  });

  test('origins by name pass haproxy -c; a name that does not resolve only disables its server (init-addr none)', () => {
    check(
      snapshot([
        domain('www.example.com', [
          { host: 'localhost', port: 8080 },
          { ip: '10.0.0.1', port: 80 },
        ] as never),
      ]),
      'named-origins',
    );
    const out = check(
      snapshot([domain('www.example.com', [{ host: 'no-such-origin.invalid', port: 80 }] as never)]),
      'unresolved-origin',
      /could not resolve address 'no-such-origin\.invalid', disabling server/,
    );
    assert.match(out, /could not resolve address 'no-such-origin\.invalid', disabling server/);
  });

  test('an origin name carrying any syntax character is refused with UnsafeValueError', () => {
    for (const host of ['web backup', 'web\n    bind *:1', 'web#x', 'web"', '-web', '10.0.0.1', '123', 'a..b', '%[src]', '']) {
      assert.throws(() => renderHaproxyConfig(snapshot([domain('example.com', [{ host, port: 80 }] as never)]), OPTIONS, TARGET), UnsafeValueError, JSON.stringify(host));
    }
  });

  test('an empty snapshot passes haproxy -c', () => {
    check(snapshot([]), 'empty');
  });
});

describe('the renderer re-checks every rule and WAF setting itself', () => {
  const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
  const base = (): ServerSnapshot => ({
    serverId: id(0),
    revision: 1,
    botKeys: [{ id: 'k2', secret: 'ab'.repeat(32) }],
    domains: [{ id: id(1), domain: 'shop.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], sslEnabled: false, wafEnabled: true, wafLevel: 'high' }],
    rules: [],
  });
  const render = (s: ServerSnapshot) => renderHaproxyConfig(s, { httpBind: { address: '*', port: 80 }, runDir: '/run/rampart' }, { configDir: '/etc/rampart/cfg' });

  test('values the API would never store are refused, not written', () => {
    const hostile: [SnapshotRule['type'], string][] = [
      ['rate_limit', '{"requests_per_minute":1e999}'],
      ['rate_limit', '{"requests_per_minute":"60\\n})os.exit()--"}'],
      ['rate_limit', 'not json'],
      ['block_bot', '{"enabled":true,"x":"\\"})"}'],
      ['block_bot', '{'],
      ['block_bot', '{"enabled":true,"difficulty":99}'],
      ['block_bot', '{"enabled":true,"paths":["/login\\n    bind *:1"]}'],
      ['block_bot', '{"enabled":true,"paths":["/a b"]}'],
      ['block_ip', '10.0.0.1 }\n    bind *:1'],
      ['block_country', 'K"'],
      ['block_ai_bot', 'GPTBot\n'],
    ];
    for (const [type, value] of hostile) {
      const s = base();
      s.rules = [{ id: id(2), type, value, domainId: null, priority: 1 }];
      assert.throws(() => render(s), UnsafeValueError, `${type} ${JSON.stringify(value)}`);
    }
    const badId = base();
    badId.rules = [{ id: 'x"})', type: 'block_ip', value: '10.0.0.1', domainId: null, priority: 1 }];
    assert.throws(() => render(badId), UnsafeValueError);
  });

  test('a domain WAF level or switch outside their values is refused', () => {
    const level = base();
    (level.domains[0] as any).wafLevel = 'high", bot = "x';
    assert.throws(() => render(level), UnsafeValueError);
    const enabled = base();
    (enabled.domains[0] as any).wafEnabled = 'true } os.exit() {';
    assert.throws(() => render(enabled), UnsafeValueError);
  });

  test('the events secret is hex or refused, and every event line starts with it', () => {
    const s = base();
    assert.throws(() => renderHaproxyConfig(s, { ...OPTIONS, eventsPort: 5140, eventsSecret: 'not hex; log stdout' }, TARGET), UnsafeValueError);
    const cfg = renderHaproxyConfig(s, { ...OPTIONS, eventsPort: 5140, eventsSecret: 'ab'.repeat(16) }, TARGET).files['haproxy.cfg']!;
    assert.match(cfg, new RegExp(`log-format "rampart-waf ${'ab'.repeat(16)} %Ts `));
  });

  test('a valid rate_limit value becomes the limit of the native counter, with its rule id', () => {
    const s = base();
    s.rules = [{ id: id(3), type: 'rate_limit', value: '{ "requests_per_minute": 120 }', domainId: null, priority: 1 }];
    const cfg = render(s).files['haproxy.cfg']!;
    // The count goes up and is compared in one rule; sc0 is tracked only by the limiter's own line,
    // for a request the earlier steps let through, so the rules after it test sc0 alone.
    assert.match(cfg, /\n    http-request set-var\(txn\.rp_hit\) str\(rate_limited:00000000-0000-4000-8000-000000000003\) if \{ sc_inc_gpc0\(0\) gt 120 \}\n/);
    assert.match(cfg, /\n    http-request track-sc0 \S+ table rampart_rate if (?:!\{ var\(txn\.rp_wl\) -m found \} )?!\{ var\(txn\.rp_hit\) -m found \}\n/);
    assert.equal(cfg.split('track-sc0').length, 2, 'one tracking of sc0');
    assert.doesNotMatch(cfg, /lua\.rampart_(rate|waf)/, 'the limit is native: no Lua action');
    assert.match(cfg, /stick-table type ipv6 size 50000 expire 6m store gpt0,gpc0/);
    // an IPv6 client is counted by its /64, an IPv4 client by its address
    assert.match(cfg, /\n    http-request track-sc0 src,ipmask\(32,64\) table rampart_rate if /);
    assert.doesNotMatch(cfg, /track-sc0 src table/);
  });

  /** A level-high domain in detect mode that refuses compressed bodies, with a log rule: every kind of event line a rule logs. */
  const renderEventful = () => {
    const s = base();
    s.domains[0]!.wafLevel = 'high';
    s.domains[0]!.wafMode = 'detect';
    s.domains[0]!.wafCompressedBodies = 'refuse';
    s.customRules = [{ id: id(9), expression: 'http.request.uri.path eq "/admin"', action: 'log', priority: 1, domainId: null }];
    return renderHaproxyConfig(s, { httpBind: { address: '*', port: 80 }, runDir: '/run/rampart', eventsPort: 5514 }, { configDir: '/etc/rampart/cfg' });
  };

  test('every WAF answer and event line has a request id, made only where one is read: no unique-id-format (HAProxy would make it for every request)', () => {
    const { files } = renderEventful();
    const cfg = files['haproxy.cfg']!;
    assert.doesNotMatch(cfg, /unique-id/);
    assert.match(cfg, /log-format "rampart-waf .* %\[var\(txn\.rp_match\)\] %\[var\(txn\.rp_id\)\] %\[var\(txn\.rp_claim\)\] %\[var\(txn\.rp_query\)\] %b %Ta"\n/);
    // The id is made by every answer's body (before its header, which reads it) or, for an event no
    // answer follows (the compressed body in detect mode, a log rule), by a line under the event's
    // own condition: never by a line every request passes.
    const made = '%[rand,hex,bytes(8,8),lower,set-var(txn.rp_ia),field(2,-)]%[rand,hex,bytes(8,8),lower,concat(,txn.rp_ia),set-var(txn.rp_id,ifnotexists),field(2,-)]%[var(txn.rp_id)]';
    const make = (cond: string) => `    http-request set-var-fmt(txn.rp_id) "%[rand,hex,bytes(8,8),lower]%[rand,hex,bytes(8,8),lower]" if ${cond} !{ var(txn.rp_id) -m found }`;
    const lines = cfg.split('\n');
    const logged = lines.flatMap((l, i) => (/^    http-request set-log-level info if (?!\{ rand)/.test(l) ? [i] : []));
    assert.ok(logged.length >= 3, `the answer block, the compressed body detection and the logged custom rule: ${logged.length}`);
    for (const i of logged) {
      const cond = lines[i]!.replace('    http-request set-log-level info if ', '');
      if (cond === '{ var(txn.rp_hit) -m found }') assert.match(lines[i + 1]!, /^    http-request return /, 'a hit is answered at once');
      else assert.equal(lines[i - 1], make(cond), lines[i]);
    }
    const answers = lines.filter((l) => l.includes('x-rampart-request-id'));
    assert.equal(answers.length, 9, 'the 429 and 403 answers (HTML, text), the 404 (HTML, text), the 502, 503 and 504 pages');
    for (const l of answers) {
      assert.ok(l.includes('hdr x-rampart-request-id %[var(txn.rp_id)]'), l);
      const file = / lf-file \/etc\/rampart\/cfg\/(\S+) /.exec(l)?.[1];
      assert.ok(file ? files[file]!.includes(made) : l.includes(`Request id: ${made}\\n`), `its body makes the id: ${l}`);
    }
    assert.doesNotMatch(cfg, /set-var-fmt\(txn\.rp_id\) .* if TRUE/);
    // Latency samples: every request is silent but one in LATENCY_SAMPLE_EVERY, at random.
    assert.equal(cfg.split('set-log-level silent').length, 2, 'one silencing rule');
    assert.match(cfg, new RegExp(`\\n    http-request set-log-level silent if !\\{ rand\\(${LATENCY_SAMPLE_EVERY}\\) -m int 0 \\}\\n`));
    assert.match(cfg, /\n    log 127\.0\.0\.1:5514 len 4096 local0 info\n/, 'room for a path of 256 bytes and a query of 192, every byte escaped, every byte escaped');
  });

  test('wherever an event line gets its path, it gets the query the same way (bounded, percent-encoded)', () => {
    const cfg = renderEventful().files['haproxy.cfg']!;
    const paths = [
      ...cfg.matchAll(/\n    http-request set-var\(txn\.rp_path\) path,bytes\(0,256\),url_enc (if .*)\n    http-request set-var\(txn\.rp_query\) query,bytes\(0,192\),url_enc (if .*)\n/g),
    ];
    assert.equal(paths.length, cfg.split('http-request set-var(txn.rp_path)').length - 1, 'every path line is followed by its query line');
    assert.ok(paths.length >= 2, `the compressed body detection and the logged custom rule: ${paths.length}`);
    for (const m of paths) assert.equal(m[2], m[1], 'under the same condition');
  });

  test("a refusal's answer sets its event line's fields in its body: no rule a clean request passes sets them", () => {
    const { files } = renderEventful();
    const cfg = files['haproxy.cfg']!;
    const fields =
      '%[var(txn.rp_hit),field(1,:),set-var(txn.rp_reason),bytes(0,0)]%[var(txn.rp_hit),field(2,:),set-var(txn.rp_rule),bytes(0,0)]%[str(block),set-var(txn.rp_action),bytes(0,0)]' +
      '%[method,url_enc,set-var(txn.rp_method),bytes(0,0)]%[path,bytes(0,256),url_enc,set-var(txn.rp_path),bytes(0,0)]%[query,bytes(0,192),url_enc,set-var(txn.rp_query),bytes(0,0)]';
    const returns = cfg.split('\n').filter((l) => /^    http-request return status (403|429) .* if \{ var\(txn\.rp_hit\) -m (found|beg rate_limited:) \}/.test(l));
    assert.ok(returns.length >= 4, `the 403 and 429 answers, HTML and text: ${returns.length}`);
    for (const l of returns) {
      const file = / lf-file \/etc\/rampart\/cfg\/(\S+) /.exec(l)?.[1];
      assert.ok(file ? files[file]!.startsWith(fields) : l.includes(`lf-string "${fields}`), `its body sets the fields first: ${l}`);
    }
    assert.doesNotMatch(cfg, /http-request set-var\(txn\.rp_(reason|rule|action|method)\) .* if \{ var\(txn\.rp_hit\) -m found \}\n/, 'no rule under the hit sets them');
  });

  const botOn = (value = '{"enabled":true}') => {
    const s = base();
    s.rules = [{ id: id(5), type: 'block_bot', value, domainId: null, priority: 1 }];
    return s;
  };

  test('bot keys: ids and secrets of their form or refused; the engine gets each key (current first), the configuration none', () => {
    for (const bad of [
      { id: 'K1', secret: 'ab'.repeat(32) },
      { id: 'k1 }', secret: 'ab'.repeat(32) },
      { id: 'k1', secret: 'xyz' },
      { id: 'k1', secret: 'ab'.repeat(8) },
    ]) {
      const s = botOn();
      s.botKeys = [bad];
      assert.throws(() => render(s), UnsafeValueError, JSON.stringify(bad));
    }
    const s = botOn();
    s.botKeys = [
      { id: 'k2', secret: 'ab'.repeat(32) },
      { id: 'k1', secret: 'cd'.repeat(32) },
    ];
    const files = render(s).files;
    const cfg = files['haproxy.cfg']!;
    const data = files['waf_data.lua']!;
    const keys = [...data.matchAll(/\{ id = "(k\d)", secret = "[^"]+", inner = "([0-9a-f]{64})", outer = "([0-9a-f]{64})" \}/g)].map((m) => [m[1], m[2], m[3]]);
    assert.deepEqual(
      keys,
      [
        ['k2', cookieKeys('ab'.repeat(32)).inner, cookieKeys('ab'.repeat(32)).outer],
        ['k1', cookieKeys('cd'.repeat(32)).inner, cookieKeys('cd'.repeat(32)).outer],
      ],
      'the current key first: it signs; the previous one only verifies',
    );
    // The cookie is checked natively with the derived keys from map files (current first); a
    // connection that showed a verified cookie passes on one comparison; no key is in the configuration.
    assert.equal(files['bot_inner.map'], `k2 ${cookieKeys('ab'.repeat(32)).inner}\nk1 ${cookieKeys('cd'.repeat(32)).inner}\n`);
    assert.equal(files['bot_outer.map'], `k2 ${cookieKeys('ab'.repeat(32)).outer}\nk1 ${cookieKeys('cd'.repeat(32)).outer}\n`);
    assert.ok(
      cfg.includes(
        'http-request set-var(txn.rp_cookie_ok) str(seen) if { req.cook(rampart_bot),strcmp(sess.rp_okck) eq 0 } { req.fhdr(user-agent),strcmp(sess.rp_okua) eq 0 } { var(txn.rp_domain),strcmp(sess.rp_okdom) eq 0 } { date,sub(sess.rp_okexp) -m int lt 0 } { req.fhdr_cnt(user-agent) eq 1 }',
      ),
    );
    for (const secret of ['ab'.repeat(32), 'cd'.repeat(32)]) {
      for (const k of [secret, Buffer.from(secret, 'hex').toString('base64'), cookieKeys(secret).inner, cookieKeys(secret).outer]) assert.ok(!cfg.includes(k), 'no key material in haproxy.cfg');
    }
    const none = botOn();
    delete none.botKeys;
    assert.doesNotMatch(render(none).files['haproxy.cfg']!, /rp_cookie_ok/, 'without keys there is no bot protection to render');
  });

  test('block_bot difficulty and paths reach the engine as data; paths as a list file, never as configuration text', () => {
    const files = render(botOn('{"enabled":true,"difficulty":18,"paths":["/login","/api/"]}')).files;
    assert.match(files['waf_data.lua']!, /difficulty = 18,\n/);
    assert.equal(files['bot_paths.lst'], '/login\n/api/\n');
    assert.match(files['haproxy.cfg']!, /lua\.rampart_bot \S+ if .* \{ path -m beg -f \/etc\/rampart\/cfg\/bot_paths\.lst \} or .* \{ path -m str \/\.well-known\/rampart\/bot \}\n/);
    const all = render(botOn()).files;
    assert.match(all['waf_data.lua']!, /difficulty = 14,\n/, 'the default difficulty');
    assert.doesNotMatch(all['haproxy.cfg']!, /path -m beg/, 'every path');
    assert.equal(all['bot_paths.lst'], undefined);
  });

  test('search crawlers: a claim by the one User-Agent header, verified addresses from the agent, neither in the hash', () => {
    const s = botOn();
    const target = {
      configDir: '/etc/rampart/cfg',
      verifiedCrawlers: new Map([
        ['192.0.2.7', 'google'],
        ['2001:db8::7', 'bing'],
      ]),
    };
    const out = renderHaproxyConfig(s, OPTIONS, target);
    assert.equal(out.files['verified_crawlers.map'], '192.0.2.7 google\n2001:db8::7 bing\n');
    assert.match(out.files['crawlers.map']!, /^googlebot google$/m);
    assert.match(
      out.files['haproxy.cfg']!,
      /set-var\(txn\.rp_crawler\) bool\(1\) if !\{ var\(txn\.rp_cookie_ok\) -m found \} .*\{ req\.fhdr_cnt\(user-agent\) eq 1 \} \{ req\.fhdr\(user-agent\),lower,map_sub\(\/etc\/rampart\/cfg\/crawlers\.map\),set-var\(txn\.rp_claim\) -m found \} \{ src,map_ip\(\/etc\/rampart\/cfg\/verified_crawlers\.map\),strcmp\(txn\.rp_claim\) eq 0 \}\n/,
    );
    assert.equal(out.hash, renderHaproxyConfig(s, OPTIONS, { configDir: '/etc/rampart/cfg' }).hash, 'verifications do not change the hash');
    for (const bad of [
      ['192.0.2.7\n0.0.0.0/0', 'google'],
      ['192.0.2.7', 'evil'],
      ['192.0.2.7', 'google x'],
    ]) {
      assert.throws(() => renderHaproxyConfig(s, OPTIONS, { configDir: '/etc/rampart/cfg', verifiedCrawlers: new Map([bad as [string, string]]) }), UnsafeValueError, bad.join(' '));
    }
  });
});

describe('the health path (the service probe, docs/dns-failover.md)', () => {
  const frontendOf = (cfg: string) => cfg.slice(cfg.indexOf('frontend http_in'), cfg.indexOf('\n\n', cfg.indexOf('frontend http_in')));

  test('answered in the HTTP frontend, once, for that exact path, before any rule and routing, with a constant body and no backend', () => {
    for (const s of [snapshot([]), snapshot([domain('a.example.com'), domain('b.example.com')])]) {
      const cfg = renderHaproxyConfig(s, { ...OPTIONS, acmePort: 8402, eventsPort: 5140 }, TARGET).files['haproxy.cfg']!;
      const lines = cfg.split('\n').filter((l) => l.includes('/.well-known/rampart/health'));
      // monitor-uri: HAProxy answers the path before any rule (so before routing, and the WAF in
      // the domain backends), with its 200 reply, which no other answer uses.
      assert.deepEqual(lines, ['    monitor-uri /.well-known/rampart/health']);
      const frontend = frontendOf(cfg);
      assert.ok(frontend.includes(lines[0]!), 'in frontend http_in');
      const reply = frontend.split('\n').filter((l) => l.includes('status 200'));
      assert.deepEqual(reply, ['    http-error status 200 content-type text/plain string ok hdr cache-control no-store'], 'a constant answer, nothing taken from the request');
      assert.equal(cfg.split('monitor-uri').length, 2, 'once');
    }
  });
});
