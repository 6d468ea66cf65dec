import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import fc from 'fast-check';
import { evaluateRule, parseRuleExpression, RULE_FIELDS, type RuleRequest, type ServerSnapshot, type SnapshotCustomRule } from '@rampart/protocol';
import { countryClasses, countryTests, renderHaproxyConfig } from '../src/index.js';
import { freePort, startProcess, waitFor, type Proc } from '../../../test/support/processes.js';

// The compiler of custom rules (src/custom-rules.ts) against the language's reference evaluator
// (@rampart/protocol rule-language.ts), through a real HAProxy: random expressions (fast-check),
// one per domain with the action block, and random requests sent to every domain; the status
// (403: the rule matched, 200: the origin answered) must be what the evaluator decides. Values
// full of injection attempts (quotes, newlines, %[, }, backslashes, NUL) appear in every field
// and must stay data: the configuration stays valid and the rule matches exactly those bytes.

const HAPROXY = process.env.HAPROXY ?? 'haproxy';
const execFileAsync = promisify(execFile);
const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const COUNTRIES: Record<string, string> = { '127.0.40.9': 'KP', '127.0.41.3': 'IR' };
const ALL = 'all.rules.test';
const SOURCES = ['127.0.0.1', '127.0.1.5', '127.0.40.9', '127.0.41.3', '127.0.2.2'];

/** Pieces of values, shared by rules and requests so that they meet; the injection attempts among them. */
const INJECTIONS = ['"', "'", '\n', '\r\n', '%[src]', '%[', '}', '{', '\\', '\\"', '\u0000', ' #', '#', '$', '\t'];
const COMMON = ['a', 'b', 'A', '/', 'x=1', '%22', '%5B', 'é', ' '];
/** Common pieces often, so that rules and requests meet; an injection attempt now and then. */
const pieceArb = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...COMMON) }, { weight: 1, arbitrary: fc.constantFrom(...INJECTIONS) });
/** What a request line or header can carry (no control bytes, no blank at the ends of a header). */
const SENDABLE = (s: string) => !/[\x00-\x1f\x7f]/.test(s);

const stringLiteral = (v: string) => `"${v.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
const valueArb = fc.array(pieceArb, { maxLength: 3 }).map((p) => p.join(''));
const regexArb = fc
  .array(fc.constantFrom('a', 'b', 'A', '.', '^', '$', '[ab]', 'a*', '(a|b)', '\\x00', '%\\[', '\\}', '"', '\\\\', ' ', '#', '/', 'é', '\\d', '[^a]'), { minLength: 0, maxLength: 4 })
  .map((p) => p.join(''));
const stringField = fc.oneof(
  fc.constantFrom(
    'http.host',
    'http.request.method',
    'http.request.uri',
    'http.request.uri.path',
    'http.request.uri.query',
    'http.cookie',
    'http.user_agent',
    'http.referer',
    'ip.src.country',
    'ip.geoip.country',
  ),
  fc.constantFrom('a', 'b').map((k) => `http.request.uri.args[${stringLiteral(k)}]`),
  fc.constantFrom('x-t', 'X-T', 'a').map((k) => `http.request.headers[${stringLiteral(k)}]`),
);
const textOperand = fc.oneof({ weight: 3, arbitrary: stringField }, { weight: 1, arbitrary: stringField.map((f) => `lower(${f})`) });

const comparisonArb: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(textOperand, fc.constantFrom('eq', '==', 'ne', '!=', 'contains'), valueArb).map(([f, op, v]) => `${f} ${op} ${stringLiteral(v)}`),
  fc.tuple(textOperand, fc.constantFrom('matches', '~'), regexArb).map(([f, op, v]) => `${f} ${op} ${stringLiteral(v)}`),
  fc.tuple(textOperand, fc.array(valueArb, { minLength: 1, maxLength: 3 })).map(([f, vs]) => `${f} in {${vs.map(stringLiteral).join(' ')}}`),
  fc.tuple(fc.constantFrom('starts_with', 'ends_with'), textOperand, valueArb).map(([fn, f, v]) => `${fn}(${f}, ${stringLiteral(v)})`),
  fc.tuple(stringField, fc.constantFrom('eq', 'ne', 'lt', 'le', 'gt', 'ge'), fc.integer({ min: 0, max: 8 })).map(([f, op, n]) => `len(${f}) ${op} ${n}`),
  fc.tuple(fc.constantFrom('eq', 'ne'), fc.constantFrom('127.0.0.1', '127.0.1.0/24', '127.0.0.0/16', '::1')).map(([op, ip]) => `ip.src ${op} ${ip}`),
  fc.array(fc.constantFrom('127.0.0.1', '127.0.1.0/24', '127.0.40.0/24', '10.0.0.0/8', '2001:db8::/32'), { minLength: 1, maxLength: 3 }).map((ips) => `ip.src in {${ips.join(' ')}}`),
  fc.constant('ssl'),
);
const expressionArb: fc.Arbitrary<string> = fc.letrec<{ e: string }>((tie) => ({
  e: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    comparisonArb,
    fc.tuple(tie('e'), fc.constantFrom('and', '&&', 'or', '||'), tie('e')).map(([a, op, b]) => `(${a}) ${op} (${b})`),
    tie('e').map((a) => `not (${a})`),
    tie('e').map((a) => `!(${a})`),
  ),
})).e;

interface Sent {
  method: string;
  path: string;
  query: string | undefined;
  headers: [string, string][];
  src: string;
}
const headerValue = valueArb.filter(SENDABLE).map((v) => Buffer.from(v.trim(), 'utf8').toString('latin1'));
const requestArb: fc.Arbitrary<Sent> = fc.record({
  method: fc.constantFrom('GET', 'DELETE', 'OPTIONS', 'PATCH'),
  path: fc.array(fc.constantFrom('a', 'b', 'A', 'wp-admin', '%22', '%25%5B', 'x.y', '%7D', ''), { minLength: 1, maxLength: 3 }).map((s) => `/${s.join('/')}`),
  query: fc.option(
    fc.array(fc.constantFrom('a=1', 'b=', 'a=ab', 'x', 'b=A%20b', 'a=%22', 'a', 'b=%5Bb'), { maxLength: 3 }).map((p) => p.join('&')),
    { nil: undefined },
  ),
  headers: fc.array(fc.tuple(fc.constantFrom('User-Agent', 'Referer', 'Cookie', 'X-T', 'a', 'x-t'), headerValue), { maxLength: 4 }),
  src: fc.constantFrom(...SOURCES),
});

/** The request as the evaluator sees it, for the domain it is sent to. */
function asSeen(r: Sent, host: string): RuleRequest {
  return { method: r.method, path: r.path, query: r.query, headers: [['Host', host], ...r.headers], src: r.src, country: COUNTRIES[r.src], ssl: false };
}

/** One request on its own connection, written byte for byte; its status. */
async function send(port: number, host: string, r: Sent): Promise<number> {
  const url = r.query === undefined ? r.path : `${r.path}?${r.query}`;
  const head = [`${r.method} ${url} HTTP/1.1`, `Host: ${host}`, ...r.headers.map(([n, v]) => `${n}: ${v}`), 'Connection: close', '', ''].join('\r\n');
  const socket = connect({ host: '127.0.0.1', port, localAddress: r.src });
  socket.end(Buffer.from(head, 'latin1'));
  let text = '';
  socket.on('data', (d) => (text += d.toString('latin1')));
  await once(socket, 'close');
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
  if (!m) throw new Error(`no status for ${JSON.stringify(head)}: ${JSON.stringify(text.slice(0, 200))}`);
  return Number(m[1]);
}

describe('custom rules compiled to HAProxy', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rampart-rules-'));
  const origin = createServer((_req, res) => res.end('origin'));
  let originPort = 0;
  let runs = 0;

  before(async () => {
    writeFileSync(
      join(tmp, 'country.map'),
      Object.entries(COUNTRIES)
        .map(([ip, c]) => `${ip} ${c}\n`)
        .join(''),
    );
    origin.listen(0, '127.0.0.1');
    await once(origin, 'listening');
    originPort = (origin.address() as AddressInfo).port;
  });
  after(() => {
    origin.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  /**
   * HAProxy running one domain per expression (d<i>.rules.test), each with one rule of this
   * action, and all.rules.test with every one of them (rules that share lookups, planGuards).
   */
  async function withProxy<T>(expressions: string[], use: (port: number, configDir: string) => Promise<T>, action: SnapshotCustomRule['action'] = 'block', codes = false): Promise<T> {
    const configDir = join(tmp, `run${runs++}`);
    mkdirSync(configDir);
    const port = await freePort();
    const snapshot: ServerSnapshot = {
      serverId: 'rules',
      revision: 1,
      botKeys: [{ id: 'k1', secret: 'ab'.repeat(32) }],
      domains: [...expressions.map((_, i) => `d${i}.rules.test`), ALL].map((domain, i) => ({
        id: id(i + 1),
        domain,
        origins: [{ ip: '127.0.0.1', port: originPort }],
        sslEnabled: false,
        wafEnabled: true,
        wafLevel: 'low',
        wafMode: 'block',
        serverAddresses: [],
      })),
      rules: [],
      customRules: [
        ...expressions.map((expression, i) => ({ id: id(1000 + i), expression, action, domainId: id(i + 1), priority: 1 })),
        ...expressions.map((expression, i) => ({ id: id(2000 + i), expression, action, domainId: id(expressions.length + 1), priority: 2 + i })),
      ],
    };
    // As the agent does: a map of classes of countries for the rules' tests of the country; with
    // `codes`, a map of the countries themselves (which the renderer reads too).
    const classes = codes ? undefined : countryClasses(countryTests(snapshot.customRules!), Object.values(COUNTRIES));
    const countryMap = classes ? join(configDir, 'classes.map') : join(tmp, 'country.map');
    if (classes)
      writeFileSync(
        countryMap,
        Object.entries(COUNTRIES)
          .map(([ip, c]) => `${ip} ${classes.get(c) ?? '-'}\n`)
          .join(''),
      );
    const { files } = renderHaproxyConfig(snapshot, { httpBind: { address: '127.0.0.1', port }, runDir: configDir, countryMap, countryClasses: classes, nbthread: 1 }, { configDir });
    for (const [file, content] of Object.entries(files)) writeFileSync(join(configDir, file), content);
    const proc: Proc = startProcess(HAPROXY, ['-f', join(configDir, 'haproxy.cfg')]);
    try {
      await waitFor(
        async () => {
          if (proc.child.exitCode !== null) throw new Error(`haproxy exited: ${proc.output()}`);
          return (await send(port, 'nowhere.rules.test', { method: 'GET', path: '/', query: undefined, headers: [], src: '127.0.0.1' }).catch(() => 0)) === 404;
        },
        'HAProxy to answer',
        10_000,
      );
      return await use(port, configDir);
    } finally {
      await proc.stop();
    }
  }

  test('random expressions and requests: HAProxy decides as the reference evaluator', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(expressionArb, { minLength: 8, maxLength: 8 }), fc.array(requestArb, { minLength: 12, maxLength: 12 }), fc.boolean(), async (expressions, requests, codes) => {
        const parsed = expressions.map((e) => {
          const p = parseRuleExpression(e);
          assert.ok(p.ok, `${e}: ${!p.ok && p.message}`);
          return p.expr;
        });
        await withProxy(
          expressions,
          async (port) => {
            for (const r of requests) {
              for (let i = 0; i < expressions.length; i++) {
                const host = `d${i}.rules.test`;
                const expected = evaluateRule(parsed[i]!, asSeen(r, host)) ? 403 : 200;
                const status = await send(port, host, r);
                // fast-check reports the counterexample; the mismatch itself is said here.
                if (status !== expected) throw new Error(`HAProxy answered ${status}, the evaluator decides ${expected}: rule ${expressions[i]} on ${JSON.stringify(r)}`);
              }
              // Every rule on one domain: refused when any of them matches.
              const expected = parsed.some((e) => evaluateRule(e, asSeen(r, ALL))) ? 403 : 200;
              const status = await send(port, ALL, r);
              if (status !== expected) throw new Error(`HAProxy answered ${status}, the evaluator decides ${expected}: the rules ${JSON.stringify(expressions)} together on ${JSON.stringify(r)}`);
            }
          },
          'block',
          codes,
        );
      }),
      { numRuns: Number(process.env.RULES_RUNS ?? 8), includeErrorInReport: true, ...(process.env.RULES_SEED ? { seed: Number(process.env.RULES_SEED), endOnFailure: true } : {}) },
    );
  });

  test('tests of the country read a map of classes of countries: HAProxy decides as the reference evaluator', async () => {
    const expressions = [
      'ip.src.country eq "KP"',
      'ip.src.country in {"KP" "IR"}',
      'not ip.geoip.country eq "IR"',
      'lower(ip.src.country) eq "kp"',
      'lower(ip.src.country) in {"IR" "ir"}',
      'lower(ip.src.country) eq "KP"',
      'ip.src.country eq "US"',
      'ip.src.country ne "KP" and http.request.method eq "GET"',
      'ip.src.country in {"IR"} or ip.src.country in {"KP"}',
      'ip.src.country matches "^K"',
      'not ip.src.country contains "R"',
      'len(ip.src.country) eq 2',
      'ends_with(lower(ip.src.country), "p")',
    ];
    await withProxy(expressions, async (port, configDir) => {
      assert.match(readFileSync(join(configDir, 'haproxy.cfg'), 'utf8'), /classes\.map/);
      for (const src of SOURCES) {
        const r: Sent = { method: 'GET', path: '/', query: undefined, headers: [], src };
        for (let i = 0; i < expressions.length; i++) {
          const expected = evaluateRule((parseRuleExpression(expressions[i]!) as { expr: never }).expr, asSeen(r, `d${i}.rules.test`)) ? 403 : 200;
          assert.equal(await send(port, `d${i}.rules.test`, r), expected, `${expressions[i]} from ${src} (${COUNTRIES[src] ?? 'no country'})`);
        }
      }
    });
  });

  test('injection attempts in every field stay data: HAProxy accepts the configuration and matches only those bytes', async () => {
    const fields = Object.keys(RULE_FIELDS).flatMap((f) =>
      f === 'ssl' || f === 'ip.src' ? [] : f === 'http.request.headers' ? ['http.request.headers["x-t"]'] : f === 'http.request.uri.args' ? ['http.request.uri.args["a"]'] : [f],
    );
    const expressions = fields.flatMap((f) =>
      INJECTIONS.flatMap((v) => [`${f} eq ${stringLiteral(v)}`, `${f} contains ${stringLiteral(`x${v}y`)}`, `${f} in {${stringLiteral(v)} "z"}`, `starts_with(${f}, ${stringLiteral(`${v}a`)})`]),
    );
    await withProxy(expressions, async (port, configDir) => {
      await execFileAsync(HAPROXY, ['-c', '-f', join(configDir, 'haproxy.cfg')]);
      // A header carrying each sendable attempt is refused by exactly the rules that name it.
      for (const v of INJECTIONS.filter(SENDABLE)) {
        const r: Sent = { method: 'GET', path: '/', query: undefined, headers: [['X-T', `x${v}y`]], src: '127.0.0.1' };
        for (let i = 0; i < expressions.length; i++) {
          if (!expressions[i]!.startsWith('http.request.headers')) continue;
          const expected = evaluateRule((parseRuleExpression(expressions[i]!) as { expr: never }).expr, asSeen(r, `d${i}.rules.test`)) ? 403 : 200;
          assert.equal(await send(port, `d${i}.rules.test`, r), expected, `${expressions[i]} with X-T ${JSON.stringify(`x${v}y`)}`);
        }
      }
    });
  });
});
