// npm run bench:api — requests per second of GET /api/waf (1,000 rules) and key-authenticated
// GET /api/servers on PGlite, on PostgreSQL, and on two processes sharing PostgreSQL behind a
// round-robin HAProxy, as ratios to a bare Fastify hello-world measured in the same run. Servers
// and the load generator (bench/load.mjs, autocannon) each run as processes of their own.
import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freshPostgresSchema, PG_URL } from '../test/support/postgres.js';
import { freePort, ROOT, startProcess, startServe, waitFor } from '../test/support/processes.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const ADMIN = 'bench-admin';

function measure(url: string, headers: Record<string, string> = {}): Promise<{ rps: number; p99: number; errors: number }> {
  const args = [join(ROOT, 'bench/load.mjs'), url, String(CONNECTIONS), String(DURATION), ...Object.entries(headers).flat()];
  return new Promise((resolve, reject) =>
    execFile(process.execPath, args, { timeout: (DURATION + 30) * 1000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`load generator: ${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout.trim().split('\n').at(-1)!)),
    ),
  );
}

/** A round-robin HAProxy in front of ports, as a load balancer in front of control-plane processes. */
async function roundRobin(ports: number[]): Promise<{ url: string; stop(): Promise<unknown> }> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'rampart-bench-rr-'));
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(
    cfg,
    [
      'defaults',
      '    mode http',
      '    timeout connect 5s',
      '    timeout client 60s',
      '    timeout server 60s',
      '    option http-keep-alive',
      'frontend in',
      `    bind 127.0.0.1:${port}`,
      '    default_backend processes',
      'backend processes',
      '    balance roundrobin',
      ...ports.map((p, i) => `    server p${i} 127.0.0.1:${p}`),
      '',
    ].join('\n'),
  );
  const proc = startProcess('haproxy', ['-f', cfg, '-db']);
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${url}/`).catch(() => undefined)) !== undefined, 'the round-robin HAProxy');
  return {
    url,
    stop: async () => {
      await proc.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function seed(url: string) {
  const post = async (path: string, body: unknown, key?: string) => {
    const res = await fetch(url + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { 'x-api-key': key } : { authorization: `Bearer ${ADMIN}` }) },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as any;
  };
  const { apiKey } = await post('/admin/accounts', { email: `bench-${randomBytes(4).toString('hex')}@example.com`, plan: 'enterprise', balance: 1000 });
  for (let i = 0; i < 5; i++) await post('/api/servers', { name: `edge-${i}` }, apiKey);
  for (let i = 0; i < 1000; i++) {
    await post('/api/waf', { rule_type: 'block_ip', value: `10.${(i >> 8) & 255}.${i & 255}.0/24`, priority: i % 200 }, apiKey);
  }
  return apiKey as string;
}

const rows: { name: string; rps: number; p99: number; errors: number }[] = [];

// A body shaped like GET /api/waf's with 1,000 rules, so payload size can be told apart from our work.
const fixedBody = join(mkdtempSync(join(tmpdir(), 'rampart-bench-body-')), 'rules.json');
writeFileSync(
  fixedBody,
  JSON.stringify(
    Array.from({ length: 1000 }, (_, i) => ({
      id: randomUUID(),
      rule_type: 'block_ip',
      value: `10.${(i >> 8) & 255}.${i & 255}.0/24`,
      domain_id: null,
      enabled: true,
      priority: i % 200,
      created_at: new Date().toISOString(),
      updated_at: new Date().toISOString(),
    })),
  ),
);
const helloPort = await freePort();
const hello = startProcess(process.execPath, [join(ROOT, 'bench/hello.mjs'), String(helloPort), fixedBody]);
await waitFor(async () => (await fetch(`http://127.0.0.1:${helloPort}/`)).ok, 'hello-world');
const base = await measure(`http://127.0.0.1:${helloPort}/`);
rows.push({ name: 'fastify hello-world (baseline)', ...base });
rows.push({ name: 'fastify, fixed 1,000-rule-sized body', ...(await measure(`http://127.0.0.1:${helloPort}/fixed`)) });
{
  // the extra hop the two-process rows pay, for reference
  const rr = await roundRobin([helloPort]);
  rows.push({ name: 'fastify hello-world via the round-robin', ...(await measure(`${rr.url}/`)) });
  await rr.stop();
}
await hello.stop();

const targets: { name: string; dataDir?: string; databaseUrl?: string }[] = [{ name: 'pglite', dataDir: mkdtempSync(join(tmpdir(), 'rampart-bench-')) }];
const pgUrl = await freshPostgresSchema('bench');
if (pgUrl) targets.push({ name: 'postgres', databaseUrl: pgUrl });
else console.log(`PostgreSQL at ${PG_URL} is not reachable: measuring PGlite only`);

// Two processes on the same PostgreSQL (schema) behind a round-robin, as DESIGN.md's "Scale" has it.
if (pgUrl) {
  const servers = [];
  try {
    for (let i = 0; i < 2; i++) servers.push(await startServe({ port: await freePort(), adminToken: ADMIN, databaseUrl: pgUrl }));
    const rr = await roundRobin(servers.map((s) => Number(new URL(s.url).port)));
    try {
      const key = await seed(rr.url);
      rows.push({ name: 'postgres x2 (round-robin): GET /api/servers', ...(await measure(`${rr.url}/api/servers`, { 'x-api-key': key })) });
      rows.push({ name: 'postgres x2 (round-robin): GET /api/waf', ...(await measure(`${rr.url}/api/waf`, { 'x-api-key': key })) });
    } finally {
      await rr.stop();
    }
  } finally {
    for (const s of servers) await s.stop();
  }
}

for (const t of targets) {
  const port = await freePort();
  const server = await startServe({ port, adminToken: ADMIN, dataDir: t.dataDir, databaseUrl: t.databaseUrl });
  try {
    const key = await seed(server.url);
    rows.push({ name: `${t.name}: GET /api/waf (1,000 rules)`, ...(await measure(`${server.url}/api/waf`, { 'x-api-key': key })) });
    rows.push({ name: `${t.name}: GET /api/servers (x-api-key)`, ...(await measure(`${server.url}/api/servers`, { 'x-api-key': key })) });
  } finally {
    await server.stop();
    if (t.dataDir) rmSync(t.dataDir, { recursive: true, force: true });
  }
}

console.log(`\nbench:api — ${CONNECTIONS} connections, ${DURATION} s per run, ratios to the hello-world in this run\n`);
console.log('target'.padEnd(44) + 'req/s'.padStart(10) + 'p99 ms'.padStart(9) + 'ratio'.padStart(8) + 'errors'.padStart(8));
for (const r of rows) {
  console.log(r.name.padEnd(44) + r.rps.toFixed(0).padStart(10) + String(r.p99).padStart(9) + (r.rps / base.rps).toFixed(2).padStart(8) + String(r.errors).padStart(8));
}
