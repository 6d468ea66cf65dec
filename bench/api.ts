// npm run bench:api — requests per second of GET /api/waf (1,000 rules) and key-authenticated
// GET /api/servers on PGlite and on PostgreSQL, as ratios to a bare Fastify hello-world measured
// in the same run. Servers run as separate processes; autocannon drives them from this one.
import autocannon from 'autocannon';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freshPostgresSchema, PG_URL } from './postgres.js';
import { freePort, ROOT, startProcess, startServe, waitFor } from '../test/support/processes.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const ADMIN = 'bench-admin';

async function measure(url: string, headers: Record<string, string> = {}): Promise<{ rps: number; p99: number; errors: number }> {
  // A short warm-up so JIT and connection pools are settled before the measured run.
  await autocannon({ url, headers, connections: CONNECTIONS, duration: 1 });
  const r = await autocannon({ url, headers, connections: CONNECTIONS, duration: DURATION });
  return { rps: r.requests.average, p99: r.latency.p99, errors: r.errors + r.non2xx };
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
      id: randomUUID(), rule_type: 'block_ip', value: `10.${(i >> 8) & 255}.${i & 255}.0/24`, domain_id: null,
      enabled: true, priority: i % 200, created_at: new Date().toISOString(), updated_at: new Date().toISOString(),
    })),
  ),
);
const helloPort = await freePort();
const hello = startProcess(process.execPath, [join(ROOT, 'bench/hello.mjs'), String(helloPort), fixedBody]);
await waitFor(async () => (await fetch(`http://127.0.0.1:${helloPort}/`)).ok, 'hello-world');
const base = await measure(`http://127.0.0.1:${helloPort}/`);
rows.push({ name: 'fastify hello-world (baseline)', ...base });
rows.push({ name: 'fastify, fixed 1,000-rule-sized body', ...(await measure(`http://127.0.0.1:${helloPort}/fixed`)) });
await hello.stop();

const targets: { name: string; dataDir?: string; databaseUrl?: string }[] = [{ name: 'pglite', dataDir: mkdtempSync(join(tmpdir(), 'rampart-bench-')) }];
const pgUrl = await freshPostgresSchema('bench');
if (pgUrl) targets.push({ name: 'postgres', databaseUrl: pgUrl });
else console.log(`PostgreSQL at ${PG_URL} is not reachable: measuring PGlite only`);

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
