import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigFileError, parseConfigFile, parseOrigin, renderConfigFile, type AccountConfig, type FileError } from '../src/config-file.js';
import { makePlan, renderPlan } from '../src/config-plan.js';

// docs/config-as-code.md: the file's format and checks, and the plan `rampart apply` prints.

const FILE = `# a comment
version: 1
servers:
  - name: edge-2
  - name: edge-1
    publicIp: 203.0.113.10
domains:
  - domain: WWW.Example.com.
    origins: ["192.0.2.10:8080", "[2001:DB8::10]:8080"]
    servers: [edge-2, edge-1]
    wafLevel: high
  - domain: api.example.com
    origins: [192.0.2.11:80]
wafRules:
  - type: block_ip
    value: 203.0.113.7/32
  - type: rate_limit
    value: { requests_per_minute: 120 }
  - type: block_country
    value: KP
    domain: www.example.com
    priority: 10
customRules:
  - name: api limit
    domain: api.example.com
    expression: http.request.uri.path contains "/api"
    action: rate_limit
    rateLimit: { requests: 100, period: 60, characteristics: [ip], mitigation: block, duration: 60 }
notifications:
  kinds: [server_down, account_frozen, server_down]
`;

function errorsOf(text: string): FileError[] {
  try {
    parseConfigFile(text);
  } catch (err) {
    if (err instanceof ConfigFileError) return err.errors;
    throw err;
  }
  assert.fail('the file was accepted');
}

describe('the configuration file', () => {
  test('is read with defaults filled in, names normalized, values canonical and lists sorted', () => {
    const c = parseConfigFile(FILE);
    assert.deepEqual(c.servers, [
      { name: 'edge-1', publicIp: '203.0.113.10' },
      { name: 'edge-2', publicIp: null },
    ]);
    assert.deepEqual(
      c.domains.map((d) => [d.domain, d.origins, d.servers, d.sslEnabled, d.wafLevel, d.wafMode, d.dnsFailover]),
      [
        ['api.example.com', [{ ip: '192.0.2.11', port: 80 }], [], true, 'medium', 'block', false],
        [
          'www.example.com',
          [
            { ip: '192.0.2.10', port: 8080 },
            { ip: '2001:db8::10', port: 8080 },
          ],
          ['edge-1', 'edge-2'],
          true,
          'high',
          'block',
          false,
        ],
      ],
    );
    assert.deepEqual(
      c.wafRules.map((r) => [r.type, r.value, r.domain, r.priority, r.enabled]),
      [
        ['block_country', 'KP', 'www.example.com', 10, true],
        ['block_ip', '203.0.113.7', null, 100, true],
        ['rate_limit', '{"requests_per_minute":120}', null, 100, true],
      ],
    );
    assert.equal(c.customRules[0]!.domain, 'api.example.com');
    assert.deepEqual(c.notifications, { webhookUrl: null, email: null, kinds: ['account_frozen', 'server_down'] });
  });

  test('written and read back is the same model, and written twice is the same text', () => {
    const c = parseConfigFile(FILE);
    const text = renderConfigFile(c, ['header line']);
    assert.match(text, /^# header line\n/);
    assert.deepEqual(parseConfigFile(text), c);
    assert.equal(renderConfigFile(parseConfigFile(text), ['header line']), text);
    assert.doesNotMatch(text, /\bid\b|token|secret/i);
  });

  test('an invalid file is refused with every error, each with its line, column and field', () => {
    const errors = errorsOf(`version: 1
servers:
  - name: edge-1
  - name: edge-1
  - {}
domains:
  - domain: bad..name
    origins: ["192.0.2.1:99999", "192.0.2.1"]
    servers: [edge-1, edge-9]
    colour: red
  - domain: ok.example.com
    origins: ["192.0.2.1:80"]
    wafLevel: extreme
wafRules:
  - type: block_ip
    value: not-an-ip
  - type: rate_limit
    value: { requests_per_minute: 10 }
    domain: ok.example.com
  - type: block_country
    value: KP
    domain: nowhere.example.com
customRules:
  - name: r
    expression: http.request.uri.path contains
    action: block
`);
    const got = errors.map((e) => `${e.line}:${e.column} ${e.field}`);
    assert.deepEqual(got, [
      '4:11 servers[1].name',
      '5:5 servers[2].name',
      '7:13 domains[0].domain',
      '8:15 domains[0].origins[0]',
      '8:34 domains[0].origins[1]',
      '9:23 domains[0].servers[1]',
      '10:5 domains[0].colour',
      '13:15 domains[1].wafLevel',
      '16:12 wafRules[0].value',
      '19:13 wafRules[1].domain',
      '22:13 wafRules[2].domain',
      '25:17 customRules[0].expression',
    ]);
    const message = (field: string) => errors.find((e) => e.field === field)!.message;
    assert.match(message('servers[1].name'), /named twice/);
    assert.equal(message('servers[2].name'), 'is required');
    assert.equal(message('domains[0].colour'), 'unknown field');
    assert.match(message('domains[0].servers[1]'), /edge-9/);
    assert.match(message('wafRules[0].value'), /IPv4 address/);
    assert.match(message('wafRules[1].domain'), /server-wide/);
    assert.match(message('customRules[0].expression'), /expected/);
  });

  test('YAML that does not parse is refused with its line', () => {
    const errors = errorsOf('version: 1\nservers:\n  - name: "edge-1\n');
    assert.ok(errors.length > 0);
    assert.ok(
      errors.every((e) => e.line >= 3 && /not valid YAML/.test(e.message)),
      JSON.stringify(errors),
    );
  });

  test('the version is required, and a file that is not a mapping is refused', () => {
    assert.equal(errorsOf('servers: []\n')[0]!.message, 'is required');
    assert.equal(errorsOf('- 1\n')[0]!.line, 1);
  });
});

describe('the plan', () => {
  const base = parseConfigFile(FILE);
  const empty: AccountConfig = { servers: [], domains: [], wafRules: [], customRules: [], notifications: { webhookUrl: null, email: null, kinds: [] } };

  test('into an empty account: everything created, servers before domains before rules', () => {
    const plan = makePlan(empty, base, false);
    assert.deepEqual(
      plan.steps.map((s) => `${s.op} ${s.kind} ${s.label}`),
      [
        'create server edge-1',
        'create server edge-2',
        'create domain api.example.com',
        'create domain www.example.com',
        'create waf rule block_country KP (www.example.com)',
        'create waf rule block_ip 203.0.113.7',
        'create waf rule rate_limit {"requests_per_minute":120}',
        'create custom rule api limit (api.example.com)',
        'update notifications settings',
      ],
    );
    assert.match(renderPlan(plan), /Plan: 8 to create, 1 to change, 0 to delete\./);
  });

  test('the same configuration: no steps', () => {
    assert.deepEqual(makePlan(base, parseConfigFile(FILE), true).steps, []);
  });

  test('changes name each field with its old and new value; objects left out are kept unless pruned, deleted in reverse order', () => {
    const want = parseConfigFile(
      FILE.replace('wafLevel: high', 'wafLevel: low')
        .replace('    priority: 10\n', '    priority: 20\n')
        .replace(/  - name: edge-2\n/, '')
        .replace('servers: [edge-2, edge-1]', 'servers: [edge-1]')
        .replace(/  - domain: api\.example\.com\n    origins: \[192\.0\.2\.11:80\]\n/, '')
        .replace(/customRules:[\s\S]*?notifications:/, 'notifications:'),
    );
    const kept = makePlan(base, want, false);
    assert.deepEqual(
      kept.steps.map((s) => `${s.op} ${s.kind} ${s.label} ${s.changes.map((c) => `${c.field}:${JSON.stringify(c.from)}->${JSON.stringify(c.to)}`).join(' ')}`),
      ['update domain www.example.com servers:["edge-1","edge-2"]->["edge-1"] wafLevel:"high"->"low"', 'update waf rule block_country KP (www.example.com) priority:10->20'],
    );
    assert.equal(kept.kept, 3);
    const text = renderPlan(kept);
    assert.match(text, /  ~ domain www\.example\.com\n      servers: \["edge-1","edge-2"\] -> \["edge-1"\]\n      wafLevel: "high" -> "low"\n/);
    assert.match(text, /3 object\(s\) of the account are not in the file and are kept \(--prune deletes them\)/);

    const pruned = makePlan(base, want, true);
    assert.equal(pruned.kept, 0);
    assert.deepEqual(
      pruned.steps.filter((s) => s.op === 'delete').map((s) => `${s.kind} ${s.label}`),
      ['custom rule api limit (api.example.com)', 'domain api.example.com', 'server edge-2'],
    );
    assert.match(renderPlan(pruned), /  - server edge-2\n/);
  });

  test('a file without a notifications section leaves the settings alone', () => {
    const want = parseConfigFile(FILE.replace(/notifications:[\s\S]*$/, ''));
    assert.deepEqual(makePlan(base, want, true).steps, []);
  });
});

test('origins by address or by DNS name, as the API takes them; anything else refused', () => {
  assert.deepEqual(parseOrigin('10.0.0.5:8080'), { ip: '10.0.0.5', port: 8080 });
  assert.deepEqual(parseOrigin('[2001:DB8::10]:443'), { ip: '2001:db8::10', port: 443 });
  assert.deepEqual(parseOrigin('App.Internal.:8080'), { host: 'app.internal', port: 8080 });
  assert.deepEqual(parseOrigin('localhost:3000'), { host: 'localhost', port: 3000 });
  for (const bad of ['bad_name:80', 'x y:80', '10.0.0.5:0', 'localhost', '%[src]:80']) assert.equal(parseOrigin(bad), undefined, bad);
});
