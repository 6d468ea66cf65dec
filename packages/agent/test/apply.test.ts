import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ServerSnapshot, SnapshotDomain } from '@rampart/protocol';
import { DETECT_LUA_FILES, inputHash, renderHaproxyConfig, type RenderOptions } from '@rampart/proxy';
import { Agent } from '../src/agent.js';
import { Applier, type ApplyResult } from '../src/apply.js';
import { pruneCountryMaps } from '../src/geo.js';
import { checkConfig, HaproxyProcess, parseAlerts } from '../src/haproxy.js';
import { freePort, waitFor } from '../../../test/support/processes.js';

// docs/architecture.md "Applying a configuration": one apply at a time, the
// latest wins; identical state is skipped by hash without a reload; a configuration that
// `haproxy -c` refuses never goes live, and the last-known-good keeps serving.

const HAPROXY = '/usr/sbin/haproxy';

function snapshot(revision: number, domains: SnapshotDomain[] = []): ServerSnapshot {
  return { serverId: 'test', revision, domains, rules: [] };
}

function domain(id: string, name: string, port: number): SnapshotDomain {
  return { id, domain: name, origins: [{ ip: '127.0.0.1', port }], sslEnabled: false, wafEnabled: false, wafLevel: 'low', serverAddresses: [] };
}

/** GET path (default /) through HAProxy with the given Host header. */
function get(port: number, host: string, path = '/'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false, headers: { host, connection: 'close' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Pids listed under "# workers" (not "# old workers") in `show proc` output. */
function workerPids(showProcOutput: string): number[] {
  const pids: number[] = [];
  let inWorkers = false;
  for (const line of showProcOutput.split('\n')) {
    if (line.startsWith('#')) {
      inWorkers = line.trim() === '# workers';
      continue;
    }
    const m = /^(\d+)\s+worker\b/.exec(line);
    if (inWorkers && m) pids.push(Number(m[1]));
  }
  return pids;
}

describe('Agent.submit: one apply at a time, the latest wins', () => {
  let tmp: string;
  let agent: Agent;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'rampart-apply-queue-'));
    agent = new Agent({
      serverUrl: 'ws://127.0.0.1:9/agent',
      token: 'x',
      dataDir: tmp,
      httpPort: await freePort(),
      httpsPort: await freePort(),
      bindAddress: '127.0.0.1',
      haproxyBin: 'haproxy',
      log: () => {},
    });
  });

  after(async () => {
    await agent.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  test('a snapshot queued behind a running apply is replaced by a newer one; applies never overlap', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const seen: number[] = [];
    let running = 0;
    let maxRunning = 0;
    agent.applier.apply = async (s: ServerSnapshot): Promise<ApplyResult> => {
      seen.push(s.revision);
      running++;
      maxRunning = Math.max(maxRunning, running);
      try {
        if (seen.length === 1) await gate;
        else await new Promise((r) => setImmediate(r));
        return { ok: true, revision: s.revision, hash: `h${s.revision}`, skipped: false };
      } finally {
        running--;
      }
    };
    const idle = () => agent.state.applying === undefined;

    agent.submit(snapshot(1));
    assert.deepEqual(seen, [1], 'the first snapshot starts applying at once');
    agent.submit(snapshot(2));
    agent.submit(snapshot(3));
    assert.deepEqual(seen, [1], 'nothing else starts while the first apply runs');
    assert.equal(idle(), false);

    release();
    await waitFor(idle, 'the agent to finish applying');
    assert.deepEqual(seen, [1, 3], 'revision 2 was replaced by 3 before it started');
    assert.equal(maxRunning, 1, 'never two applies at once');

    // Once idle, a new snapshot starts a new apply (the queue is not left stuck).
    agent.submit(snapshot(4));
    await waitFor(idle, 'the agent to finish applying revision 4');
    assert.deepEqual(seen, [1, 3, 4]);
    assert.equal(maxRunning, 1);
  });
});

describe('Applier with a real HAProxy', () => {
  let tmp: string;
  let runDir: string;
  let configRoot: string;
  let stateFile: string;
  let httpPort: number;
  let renderOptions: RenderOptions;
  let proxy: HaproxyProcess;
  let applier: Applier;
  let origin: Server;
  let originPort: number;
  let good: ServerSnapshot;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'rampart-apply-'));
    runDir = join(tmp, 'run');
    configRoot = join(tmp, 'haproxy');
    stateFile = join(tmp, 'state.json');
    httpPort = await freePort();
    renderOptions = { httpBind: { address: '127.0.0.1', port: httpPort }, runDir };

    origin = createHttpServer((_req, res) => res.end('origin-ok'));
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    originPort = (origin.address() as AddressInfo).port;
    good = snapshot(5, [domain('00000000-0000-4000-8000-000000000001', 'a.example.com', originPort)]);

    // The way Agent.start brings HAProxy up.
    proxy = new HaproxyProcess(HAPROXY, join(configRoot, 'current', 'haproxy.cfg'), runDir);
    applier = new Applier(HAPROXY, proxy, { configRoot, runDir, stateFile }, renderOptions);
    await applier.loadState();
    await applier.ensureBootConfig('test');
    proxy.start();
    const bootHash = applier.state.hash;
    assert.ok(bootHash, 'the boot configuration has a hash');
    await waitFor(async () => (await proxy.health(500)) === bootHash, 'HAProxy to answer on its health socket', 10_000);
  });

  after(async () => {
    await proxy?.stop();
    await new Promise((r) => origin?.close(r));
    await rm(tmp, { recursive: true, force: true });
  });

  test('a snapshot goes live; the same state at a higher revision is skipped without a reload', async () => {
    const first = await applier.apply(good);
    const hash = inputHash(good, renderOptions);
    assert.deepEqual(first, { ok: true, revision: 5, hash, skipped: false });
    assert.equal(await proxy.health(), hash, 'the serving worker runs the new configuration');
    assert.deepEqual(await get(httpPort, 'a.example.com'), { status: 200, body: 'origin-ok' });

    const workersBefore = workerPids(await proxy.masterCommand('show proc'));
    assert.equal(workersBefore.length, 1, `one current worker: ${JSON.stringify(workersBefore)}`);

    const again = await applier.apply({ ...good, revision: 6 });
    assert.deepEqual(again, { ok: true, revision: 6, hash, skipped: true });
    assert.deepEqual(workerPids(await proxy.masterCommand('show proc')), workersBefore, 'no reload: the same worker still serves');
    assert.equal(await proxy.health(), hash);

    const saved = JSON.parse(await readFile(stateFile, 'utf8')) as { revision: unknown; hash: unknown };
    assert.equal(saved.revision, 6, 'the state file records the new revision');
    assert.equal(saved.hash, hash);
    assert.equal(applier.state.revision, 6);
    assert.equal(applier.state.hash, hash);
  });

  test('HaproxyProcess.masterCommand answers `show proc` (HAProxy 2.6 keeps the master CLI open until the client half-closes)', async () => {
    const out = await proxy.masterCommand('show proc', 2000);
    assert.equal(workerPids(out).length, 1, `show proc lists one worker:\n${out}`);
  });

  test('a schema-valid snapshot that `haproxy -c` refuses never goes live; the previous configuration keeps serving', async () => {
    const previousLink = await readlink(applier.currentLink);
    const previousHash = applier.state.hash;
    assert.ok(previousHash);
    assert.equal(await proxy.health(), previousHash);
    const workersBefore = workerPids(await proxy.masterCommand('show proc'));

    // The same domain twice passes the renderer's own checks but renders two backends with one
    // name, which HAProxy refuses.
    const dup = domain('00000000-0000-4000-8000-000000000002', 'dup.example.com', originPort);
    const bad = snapshot(7, [good.domains[0]!, dup, { ...dup, id: '00000000-0000-4000-8000-000000000003' }]);
    const cfg = renderHaproxyConfig(bad, renderOptions, { configDir: join(configRoot, 'x') }).files['haproxy.cfg']!;
    const backendLines = cfg.split('\n').flatMap((l, i) => (l === 'backend be_dup_example_com' ? [i + 1] : []));
    assert.equal(backendLines.length, 2);

    const result = await applier.apply(bad);
    assert.equal(result.ok, false, JSON.stringify(result));
    assert.ok(!result.ok);
    assert.equal(result.stage, 'validate');
    assert.equal(result.revision, 7);
    assert.equal(result.errors.length, 1, `one error, summary lines dropped: ${JSON.stringify(result.errors)}`);
    assert.equal(result.errors[0]!.line, backendLines[1], `HAProxy's line number: ${JSON.stringify(result.errors)}`);
    assert.match(result.errors[0]!.message, /backend 'be_dup_example_com' has the same name as backend 'be_dup_example_com'/);

    assert.equal(await readlink(applier.currentLink), previousLink, '`current` still points at the previous directory');
    assert.equal(existsSync(join(configRoot, `cfg-${inputHash(bad, renderOptions).slice(0, 16)}`)), false, 'the refused directory is removed');
    assert.equal(await proxy.health(), previousHash, 'the worker still runs the previous configuration');
    assert.deepEqual(workerPids(await proxy.masterCommand('show proc')), workersBefore, 'no reload happened');
    assert.deepEqual(await get(httpPort, 'a.example.com'), { status: 200, body: 'origin-ok' });
    assert.equal(applier.state.revision, 6);
    assert.equal(applier.state.hash, previousHash);
    const saved = JSON.parse(await readFile(stateFile, 'utf8')) as { revision: unknown; hash: unknown };
    assert.equal(saved.revision, 6, 'the state file still records the running revision');
    assert.equal(saved.hash, previousHash);
  });

  test("level high: the detectors' glue and every module it requires are written into the directory, validated and loaded", async () => {
    const high = snapshot(8, [{ ...good.domains[0]!, wafEnabled: true, wafLevel: 'high', wafMode: 'block' }]);
    const result = await applier.apply(high);
    assert.deepEqual(result, { ok: true, revision: 8, hash: inputHash(high, renderOptions), skipped: false });
    const dir = await readlink(applier.currentLink);
    const written = await readdir(dir);
    for (const file of DETECT_LUA_FILES) assert.ok(written.includes(file), `${file} in ${dir}`);
    const cfg = await readFile(join(dir, 'haproxy.cfg'), 'utf8');
    const prepend = cfg.indexOf(`lua-prepend-path ${dir}/?.lua`);
    assert.ok(prepend > 0 && prepend < cfg.indexOf(`lua-load-per-thread ${dir}/rampart_detect.lua`), 'the path is set before the glue loads');
    // the modules run in the serving worker: an injection is refused, an ordinary request passes
    assert.equal((await get(httpPort, 'a.example.com', "/?id=1'%20union%20select%20password%20from%20users--")).status, 403);
    assert.deepEqual(await get(httpPort, 'a.example.com', '/?id=42'), { status: 200, body: 'origin-ok' });

    // `haproxy -c` loads the glue into a thread's state: a module missing from the directory is refused
    const partial = join(tmp, 'partial');
    await mkdir(partial);
    const rendered = renderHaproxyConfig({ ...high, revision: 9 }, renderOptions, { configDir: partial });
    for (const [name, content] of Object.entries(rendered.files)) if (name !== 'rampart_detect_sqli.lua') await writeFile(join(partial, name), content);
    const check = await checkConfig(HAPROXY, join(partial, 'haproxy.cfg'));
    assert.equal(check.ok, false);
    assert.match(check.errors.map((e) => e.message).join('\n'), /module 'rampart_detect_sqli' not found/);
  });

  test('after an apply, the country maps that neither the running nor the previous configuration reads are removed', async () => {
    // As the agent does: a map per set of countries in <data-dir>/geo, written just before the
    // apply that reads it, and pruned after each apply (an operator's own map is never removed)
    const geo = join(tmp, 'geo');
    await mkdir(geo);
    await writeFile(join(geo, 'country-1.0-D.map.tmp'), 'half written');
    await writeFile(join(geo, 'notes.txt'), 'not a map');
    const withCountry = (revision: number) => ({
      ...snapshot(revision, [{ ...good.domains[0]!, wafEnabled: true, wafLevel: 'low' as const, wafMode: 'block' as const }]),
      rules: [{ id: '00000000-0000-4000-8000-0000000000c1', type: 'block_country' as const, value: 'DE', domainId: null, priority: 0 }],
    });
    const maps = ['A', 'B', 'C'].map((tag) => join(geo, `country-1.0-${tag}.map`));
    const removed: string[][] = [];
    try {
      for (const [i, m] of maps.entries()) {
        await writeFile(m, `192.0.2.${i}/32 DE\n`);
        renderOptions.countryMap = m;
        const result = await applier.apply(withCountry(20 + i));
        assert.equal(result.ok, true, JSON.stringify(result));
        removed.push(await pruneCountryMaps(geo, configRoot));
      }
    } finally {
      delete renderOptions.countryMap;
    }
    assert.deepEqual(removed, [[join(geo, 'country-1.0-D.map.tmp')], [], [maps[0]]], 'A goes once neither kept configuration (C running, B before it) reads it');
    assert.deepEqual((await readdir(geo)).sort(), ['country-1.0-B.map', 'country-1.0-C.map', 'notes.txt']);
    await writeFile(join(geo, 'country-own.map'), '192.0.2.0/24 DE\n');
    assert.deepEqual(await pruneCountryMaps(geo, configRoot, join(geo, 'country-own.map')), [], "the operator's map stays, wherever it is");
    assert.deepEqual(await pruneCountryMaps(geo, configRoot), [join(geo, 'country-own.map')]);
    assert.deepEqual(await get(httpPort, 'a.example.com'), { status: 200, body: 'origin-ok' }, 'C serves');
  });
});

describe('checkConfig', () => {
  let tmp: string;
  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'rampart-check-'));
  });
  after(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  test("reports HAProxy's [ALERT] line and message for a refused file", async () => {
    const cfg = join(tmp, 'bad.cfg');
    await writeFile(cfg, 'defaults\n    mode http\n\nfrontend f\n    bind 127.0.0.1:1\n    no-such-keyword here\n');
    const result = await checkConfig(HAPROXY, cfg);
    assert.equal(result.ok, false);
    assert.equal(result.errors[0]?.line, 6, JSON.stringify(result.errors));
    assert.match(result.errors[0]!.message, /no-such-keyword/);
  });

  test('accepts a valid file', async () => {
    const cfg = join(tmp, 'good.cfg');
    await writeFile(cfg, 'defaults\n    mode http\n    timeout client 1s\n    timeout server 1s\n    timeout connect 1s\n\nfrontend f\n    bind 127.0.0.1:1\n');
    assert.deepEqual(await checkConfig(HAPROXY, cfg), { ok: true, errors: [] });
  });
});

describe('parseAlerts', () => {
  test('an alert with [file:line] gives the line and drops the "config :" prefix', () => {
    const out = "[ALERT]    (25161) : config : Parsing [/tmp/hx/haproxy.cfg:36]: backend 'be_x' has the same name as backend 'be_x' declared at /tmp/hx/haproxy.cfg:28.";
    assert.deepEqual(parseAlerts(out), [{ line: 36, message: "Parsing [/tmp/hx/haproxy.cfg:36]: backend 'be_x' has the same name as backend 'be_x' declared at /tmp/hx/haproxy.cfg:28." }]);
  });

  test('the [file:line] wins over a bracketed address later in the line', () => {
    const out = '[ALERT]    (25400) : Binding [b.cfg:7] for frontend f: cannot bind socket (Address already in use) for [127.0.0.1:18080]';
    assert.deepEqual(parseAlerts(out), [{ line: 7, message: 'Binding [b.cfg:7] for frontend f: cannot bind socket (Address already in use) for [127.0.0.1:18080]' }]);
  });

  test('an alert without [file:line] has line null', () => {
    const out = ['[ALERT]    (25400) : [/usr/sbin/haproxy.main()] Some protocols failed to start their listeners! Exiting.', '[ALERT]    (1) : Current worker (1234) exited with code 1 (Exit)'].join(
      '\n',
    );
    assert.deepEqual(parseAlerts(out), [
      { line: null, message: '[/usr/sbin/haproxy.main()] Some protocols failed to start their listeners! Exiting.' },
      { line: null, message: 'Current worker (1234) exited with code 1 (Exit)' },
    ]);
  });

  test('summary lines, notices and warnings are dropped', () => {
    const out = [
      '[NOTICE]   (25161) : haproxy version is 2.6.12-1+deb12u4',
      '[WARNING]  (25161) : config : parsing [x.cfg:3] : something odd',
      "[ALERT]    (25161) : config : Parsing [x.cfg:7]: unknown keyword 'foo' in 'frontend' section",
      '[ALERT]    (25161) : config : Error(s) found in configuration file : x.cfg',
      '[ALERT]    (25161) : config : Fatal errors found in configuration.',
      '',
    ].join('\n');
    assert.deepEqual(parseAlerts(out), [{ line: 7, message: "Parsing [x.cfg:7]: unknown keyword 'foo' in 'frontend' section" }]);
    assert.deepEqual(parseAlerts(''), []);
  });
});

describe("Applier: a failed reload is rolled back, and the rollback's own result is reported", () => {
  let tmp: string;
  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'rampart-rollback-'));
  });
  after(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  /** A stand-in for HAProxy whose workers come up only on the configurations `healthy` accepts. */
  function fakeProxy(healthy: (hash: string) => boolean) {
    const reloads: string[] = [];
    const proxy = {
      running: true,
      reload: async () => void reloads.push('reload'),
      waitForHash: async (hash: string) => healthy(hash),
      outputMark: () => 0,
      alertsSince: () => [{ line: null, message: '[WARNING] worker exited with code 1' }],
    };
    return { proxy: proxy as unknown as HaproxyProcess, reloads };
  }

  async function setup(name: string, healthy: (hash: string, first: string) => boolean) {
    const dir = join(tmp, name);
    const renderOptions: RenderOptions = { httpBind: { address: '127.0.0.1', port: await freePort() }, runDir: join(dir, 'run') };
    let first = '';
    const { proxy, reloads } = fakeProxy((h) => healthy(h, first));
    const applier = new Applier(HAPROXY, proxy, { configRoot: join(dir, 'haproxy'), runDir: join(dir, 'run'), stateFile: join(dir, 'state.json') }, renderOptions);
    await applier.ensureBootConfig('test');
    const one = snapshot(1, [domain('00000000-0000-4000-8000-000000000001', 'a.example.com', 8080)]);
    first = inputHash(one, renderOptions);
    assert.equal((await applier.apply(one)).ok, true);
    const two = snapshot(2, [domain('00000000-0000-4000-8000-000000000002', 'b.example.com', 8080)]);
    return { applier, reloads, two, firstLink: await readlink(applier.currentLink) };
  }

  test('the new configuration fails, the previous one comes back: stage reload', async () => {
    const { applier, reloads, two, firstLink } = await setup('restored', (h, first) => h === first);
    const result = await applier.apply(two);
    assert.ok(!result.ok);
    assert.equal(result.stage, 'reload');
    assert.equal(reloads.length, 3, 'the first apply, the failed one, the rollback');
    assert.equal(await readlink(applier.currentLink), firstLink, '`current` is the previous configuration again');
    assert.equal(applier.state.revision, 1);
  });

  test('the previous configuration does not come back either: stage rollback, said plainly', async () => {
    let broken = false;
    const { applier, two } = await setup('lost', (h, first) => !broken && h === first);
    broken = true; // from now on no worker comes up on anything
    const result = await applier.apply(two);
    assert.ok(!result.ok);
    assert.equal(result.stage, 'rollback');
    assert.match(result.errors.at(-1)!.message, /restoring the previous configuration failed too/);
  });
});
