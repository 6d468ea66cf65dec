// The custom rule set of bench:waf's custom rules case: 100 rules and 10 rate-limiting rules of the
// kinds a site's rule set holds (docs/rules.md), generated from a seed, so every run renders the
// same configuration. Most are aimed at scanners, bad user-agents, addresses and countries, and so
// an ordinary request matches none of them; a few log rules watch ordinary traffic, and the
// rate-limiting rules that select ordinary requests have limits no bench run reaches.
import { parseRuleExpression, type RuleRequest, type SnapshotCustomRule } from '@rampart/protocol';

/** mulberry32: a small deterministic generator, numbers in [0, 1). */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SCANNER_PATHS = [
  '/wp-admin',
  '/wp-login.php',
  '/xmlrpc.php',
  '/.env',
  '/.git/',
  '/phpmyadmin',
  '/pma/',
  '/admin.php',
  '/cgi-bin/luci',
  '/vendor/phpunit',
  '/solr/admin',
  '/actuator',
  '/server-status',
  '/boaform',
  '/HNAP1',
  '/owa/auth',
  '/autodiscover',
  '/_ignition',
  '/telescope',
  '/debug/pprof',
  '/console/',
  '/manager/html',
  '/jmx-console',
  '/.DS_Store',
  '/config.json',
  '/backup/',
  '/db.sql',
  '/.aws/credentials',
  '/wp-content/plugins/',
  '/shell.php',
  '/.svn/',
  '/.hg/',
  '/etc/passwd',
  '/sftp-config.json',
  '/.vscode/',
  '/web.config',
  '/elmah.axd',
  '/trace.axd',
  '/invoker/',
  '/hudson',
];
const PATH_TOKENS = ['../', '%2e%2e', '/etc/passwd', 'revslider', '.git/config', 'phpinfo', 'eval-stdin', 'wlwmanifest', 'setup-config', 'cmd.exe', 'win.ini', 'proc/self'];
const EXTENSIONS = ['.bak', '.sql', '.old', '.swp', '.ini', '.tar.gz', '.7z', '.rar', '.orig', '.save', '.dist', '.inc'];
const BAD_AGENTS = [
  'sqlmap',
  'nikto',
  'masscan',
  'zgrab',
  'nuclei',
  'dirbuster',
  'gobuster',
  'wpscan',
  'acunetix',
  'netsparker',
  'python-requests',
  'Go-http-client',
  'libwww-perl',
  'curl/',
  'Wget/',
  'Apache-HttpClient',
  'Scrapy',
  'AhrefsBot',
  'MJ12bot',
  'SemrushBot',
  'DotBot',
  'PetalBot',
  'BLEXBot',
  'MegaIndex',
];
const SPAM_REFERERS = ['casino', 'best-seo-offer', 'free-traffic', 'buttons-for-website', 'darodar', 'ilovevitaly', 'priceg', 'hulfingtonpost'];
const ARGS: [string, string][] = [
  ['debug', 'true'],
  ['XDEBUG_SESSION_START', 'phpstorm'],
  ['cmd', 'id'],
  ['exec', '1'],
  ['phpinfo', '1'],
  ['wsdl', ''],
  ['_profiler', '1'],
  ['test', 'sqli'],
];
/** The sets of countries the rules name. */
const COUNTRY_SETS = [
  ['KP', 'IR'],
  ['RU', 'BY'],
  ['CN', 'HK'],
  ['VN', 'ID', 'TH'],
  ['BR', 'AR'],
  ['NG', 'GH', 'PK'],
];
const hex = (rnd: () => number, n: number) => Array.from({ length: n }, () => Math.floor(rnd() * 16).toString(16)).join('');

/**
 * The rules, in priority order (priorities 1 to 110): a few allow rules first (office addresses,
 * an internal token, an uptime monitor), then block, challenge and log rules mixed with the
 * rate-limiting rules; a third account-wide, the rest the domain's own.
 */
export function benchCustomRules(domainId: string, seed = 22): SnapshotCustomRule[] {
  const rnd = generator(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const some = <T>(xs: readonly T[], n: number): T[] => [...xs].sort(() => rnd() - 0.5).slice(0, n);
  const cidr = () =>
    rnd() < 0.5
      ? `${pick([45, 80, 91, 103, 185, 193, 194, 212])}.${Math.floor(rnd() * 256)}.${Math.floor(rnd() * 256)}.0/24`
      : `198.${18 + Math.floor(rnd() * 2)}.${Math.floor(rnd() * 256)}.${Math.floor(rnd() * 256)}/32`;
  const cidrs = (n: number) => Array.from({ length: n }, cidr).join(' ');
  const path = 'http.request.uri.path';
  const q = (s: string) => JSON.stringify(s); // the language's strings take \" and \\, as JSON's do

  const ordinary: { action: SnapshotCustomRule['action']; expression: string }[] = [
    { action: 'allow', expression: `ip.src in {${cidrs(6)}}` },
    { action: 'allow', expression: `http.request.headers["x-internal-token"] eq "${hex(rnd, 32)}"` },
    { action: 'allow', expression: `http.user_agent eq "UptimeMonitor/2.${Math.floor(rnd() * 9)} (+https://status.example.net)" and ip.src in {${cidrs(3)}}` },
    { action: 'allow', expression: `starts_with(${path}, "/healthz") and ip.src in {10.${Math.floor(rnd() * 256)}.0.0/16}` },
  ];
  // Every other rule from these templates, in turn, with the generator's values.
  const templates: (() => { action: SnapshotCustomRule['action']; expression: string })[] = [
    () => ({ action: 'block', expression: `starts_with(${path}, ${q(pick(SCANNER_PATHS))})` }),
    () => ({ action: 'block', expression: `${path} eq ${q(pick(SCANNER_PATHS))}` }),
    () => ({ action: 'block', expression: `${path} in {${some(SCANNER_PATHS, 12).map(q).join(' ')}}` }),
    () => ({ action: 'block', expression: `lower(http.request.uri) contains ${q(pick(PATH_TOKENS))}` }),
    () => ({ action: 'block', expression: `ends_with(lower(${path}), ${q(pick(EXTENSIONS))})` }),
    () => ({ action: 'block', expression: `lower(http.user_agent) contains ${q(pick(BAD_AGENTS).toLowerCase())}` }),
    () => ({
      action: 'block',
      expression: `http.user_agent in {${some(BAD_AGENTS, 6)
        .map((a) => q(`${a}/${Math.floor(rnd() * 5)}.${Math.floor(rnd() * 10)}`))
        .join(' ')}}`,
    }),
    () => ({ action: 'block', expression: `ip.src in {${cidrs(10 + Math.floor(rnd() * 50))}}` }),
    () => ({ action: 'block', expression: `ip.src.country in {${pick(COUNTRY_SETS).map(q).join(' ')}} and not starts_with(${path}, "/public/")` }),
    () => ({ action: 'challenge', expression: `ip.src.country in {${pick(COUNTRY_SETS).map(q).join(' ')}} and http.request.method eq "POST"` }),
    () => ({ action: 'block', expression: `http.request.method in {"TRACE" "TRACK" "DEBUG" "PROPFIND" "MKCOL"}` }),
    () => ({
      action: 'block',
      expression: `http.request.headers[${q(pick(['x-forwarded-host', 'x-original-url', 'x-rewrite-url', 'x-http-method-override']))}] contains ${q(pick(['evil', 'localhost', '127.0.0.1', 'DELETE']))}`,
    }),
    () => {
      const [name, value] = pick(ARGS);
      return { action: 'block', expression: value ? `http.request.uri.args[${q(name)}] eq ${q(value)}` : `len(http.request.uri.args[${q(name)}]) ge 0` };
    },
    () => ({ action: 'block', expression: `http.request.uri.query contains ${q(pick(['wp_cron', 'XDEBUG_SESSION', 'allow_url_include', 'auto_prepend_file', 'base64_decode(']))}` }),
    () => ({ action: 'block', expression: `${path} matches r"^/(\\.git|\\.svn|\\.hg|\\.bzr)(/|$)"` }),
    () => ({ action: 'block', expression: `http.user_agent matches r"^(curl|[Ww]get|python-requests|Go-http-client|okhttp)/[0-9]"` }),
    () => ({ action: 'block', expression: `lower(${path}) matches r"\\.(php[3-7]|phtml|pl|asp|cfm|shtml)$" and not starts_with(${path}, "/legacy/")` }),
    () => ({ action: 'log', expression: `http.request.uri matches r"/api/v[0-9]+/(internal|admin)/"` }),
    () => ({ action: 'block', expression: `http.referer contains ${q(pick(SPAM_REFERERS))}` }),
    () => ({ action: 'block', expression: `len(http.cookie) gt ${pick([8192, 16384])} or len(http.request.uri) gt ${pick([20000, 32768])}` }),
    () => ({ action: 'block', expression: `http.host in {"old.bench.example.com" "staging.bench.example.com"}` }),
    () => ({
      action: 'challenge',
      expression: `(${path} eq ${q(pick(['/checkout', '/cart/checkout', '/order/confirm']))} or starts_with(${path}, ${q(pick(['/account/', '/billing/', '/my/']))})) and not http.cookie contains "sid="`,
    }),
    () => ({ action: 'challenge', expression: `starts_with(${path}, ${q(pick(['/signup', '/register', '/contact', '/newsletter']))}) and http.request.method eq "POST"` }),
    () => ({ action: 'log', expression: `http.request.headers["x-debug"] eq "1" or http.request.uri.args["utm_source"] eq "newsletter-${Math.floor(rnd() * 100)}"` }),
    () => ({ action: 'log', expression: `http.referer contains "partner-${hex(rnd, 4)}.example"` }),
    () => ({ action: 'block', expression: `(starts_with(${path}, "/admin") or starts_with(${path}, "/manage")) and not ip.src in {${cidrs(4)}}` }),
    () => ({ action: 'block', expression: `http.request.method eq "POST" and ${path} eq ${q(pick(['/xmlrpc.php', '/wp-login.php', '/wp-comments-post.php', '/index.php']))}` }),
  ];
  const rest = Array.from({ length: 100 - ordinary.length }, (_, i) => templates[i % templates.length]!());
  // Two log rules that do see ordinary traffic (a release's watched endpoints), as rule sets have.
  rest[40] = { action: 'log', expression: `http.request.method eq "PUT"` };
  rest[70] = { action: 'log', expression: `http.request.method eq "DELETE"` };
  const rules = [...ordinary, ...rest];

  const rate = (expression: string, r: NonNullable<SnapshotCustomRule['rateLimit']>) => ({ action: 'rate_limit' as const, expression, rateLimit: r });
  const limited = [
    rate(`${path} eq "/login" and http.request.method eq "POST"`, { requests: 10, period: 60, characteristics: ['ip'], mitigation: 'block', duration: 300 }),
    rate(`${path} in {"/password/reset" "/register" "/signup"}`, { requests: 5, period: 300, characteristics: ['ip'], mitigation: 'challenge', duration: 600 }),
    rate(`starts_with(${path}, "/graphql")`, { requests: 100_000, period: 60, characteristics: ['header:authorization'], mitigation: 'block', duration: 60 }),
    rate(`starts_with(${path}, "/wp-login.php") or ${path} eq "/xmlrpc.php"`, { requests: 3, period: 60, characteristics: ['ip'], mitigation: 'block', duration: 3600 }),
    rate(`len(http.request.uri.args["coupon"]) gt 0`, { requests: 20, period: 600, characteristics: ['ip'], mitigation: 'challenge', duration: 600 }),
    // These select ordinary traffic: limits no bench run reaches (wrk sends everything from one address).
    rate(`starts_with(${path}, "/api/")`, { requests: 1_000_000, period: 10, characteristics: ['header:x-api-key'], mitigation: 'block', duration: 60 }),
    rate(`starts_with(${path}, "/search") or starts_with(${path}, "/s")`, { requests: 1_000_000, period: 10, characteristics: ['ip', 'path'], mitigation: 'challenge', duration: 60 }),
    rate(`http.request.method eq "POST"`, { requests: 1_000_000, period: 10, characteristics: ['ip'], mitigation: 'block', duration: 60 }),
    rate(`ends_with(${path}, ".json") or ends_with(${path}, ".xml")`, { requests: 1_000_000, period: 10, characteristics: ['ip', 'path'], mitigation: 'block', duration: 60 }),
    rate(`http.request.method ne "OPTIONS"`, { requests: 1_000_000, period: 10, characteristics: ['ip'], mitigation: 'block', duration: 60 }),
  ];
  // The rate-limiting rules among the others (the last, the per-address ceiling, at the end).
  const all: { action: SnapshotCustomRule['action']; expression: string; rateLimit?: SnapshotCustomRule['rateLimit'] }[] = [...rules];
  limited.slice(0, -1).forEach((r, i) => all.splice(ordinary.length + 4 + i * 11, 0, r));
  all.push(limited[limited.length - 1]!);
  return all.map((r, i) => {
    if (!parseRuleExpression(r.expression).ok) throw new Error(`bench custom rule ${i} does not parse: ${r.expression}`);
    const id = `${hex(rnd, 8)}-${hex(rnd, 4)}-4${hex(rnd, 3)}-8${hex(rnd, 3)}-${hex(rnd, 12)}`;
    return { id, expression: r.expression, action: r.action, domainId: i % 3 === 0 ? null : domainId, priority: i + 1, ...(r.rateLimit ? { rateLimit: r.rateLimit } : {}) };
  });
}

/** A raw request as the rule evaluator sees it (what HAProxy's fetches return), from 127.0.0.1 without a country, over plain HTTP. */
export function ruleRequestOf(raw: Buffer): RuleRequest {
  const end = raw.indexOf('\r\n\r\n');
  const [first = '', ...lines] = raw
    .subarray(0, end < 0 ? raw.length : end)
    .toString('latin1')
    .split('\r\n');
  const [method = '', target = ''] = first.split(' ');
  const at = target.indexOf('?');
  const headers = lines.map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()] as const);
  return { method, path: at < 0 ? target : target.slice(0, at), query: at < 0 ? undefined : target.slice(at + 1), headers, src: '127.0.0.1', ssl: false };
}
