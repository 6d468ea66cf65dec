// npm run bench:apply — `rampart apply` of a file with 1,000 domains (2 origins each, on 2 of 10
// shield servers) into an empty account of a real `rampart serve` (embedded database), through
// the built CLI: the time to plan (read the account and compare), the time to apply, and the time
// to plan the same file again once the account holds all 1,000 (nothing to do). Targets (issue 23):
// plan under 2 s, apply under 60 s.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, freePort, startServe } from '../test/support/processes.js';

const DOMAINS = Number(process.env.BENCH_DOMAINS ?? 1000);
const SERVERS = 10;
const ADMIN = 'bench-admin';

function cli(url: string, key: string, args: string[]): Promise<{ ms: number; code: number | null; stdout: string; stderr: string }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, RAMPART_URL: url, RAMPART_API_KEY: key } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ ms: performance.now() - started, code, stdout, stderr }));
  });
}

const servers = Array.from({ length: SERVERS }, (_, i) => `edge-${String(i + 1).padStart(2, '0')}`);
const lines = ['version: 1', 'servers:', ...servers.map((s) => `  - name: ${s}`), 'domains:'];
for (let i = 0; i < DOMAINS; i++) {
  lines.push(
    `  - domain: site-${i}.bench.example.com`,
    `    origins: ["10.${(i >> 8) & 255}.${i & 255}.10:8080", "10.${(i >> 8) & 255}.${i & 255}.11:8080"]`,
    `    servers: [${servers[i % SERVERS]}, ${servers[(i + 1) % SERVERS]}]`,
    `    wafLevel: ${['low', 'medium', 'high'][i % 3]}`,
  );
}
const dir = mkdtempSync(join(tmpdir(), 'rampart-bench-apply-'));
const file = join(dir, 'domains.yaml');
writeFileSync(file, `${lines.join('\n')}\n`);

const serve = await startServe({ port: await freePort(), adminToken: ADMIN });
try {
  const res = await fetch(`${serve.url}/admin/accounts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ email: 'bench-apply@example.com', plan: 'enterprise', balance: 1000 }),
  });
  const { apiKey } = (await res.json()) as { apiKey: string };
  const dry = await cli(serve.url, apiKey, ['apply', '-f', file, '--dry-run']);
  if (dry.code !== 0) throw new Error(`dry run failed: ${dry.stderr}`);
  const planEmpty = Number(/planned in (\d+) ms/.exec(dry.stdout)![1]);
  const applied = await cli(serve.url, apiKey, ['apply', '-f', file]);
  if (applied.code !== 0) throw new Error(`apply failed: ${applied.stderr}`);
  const planApply = Number(/planned in (\d+) ms/.exec(applied.stdout)![1]);
  const again = await cli(serve.url, apiKey, ['apply', '-f', file]);
  if (again.code !== 0 || !again.stdout.startsWith('No changes.')) throw new Error(`second apply: ${again.stdout}${again.stderr}`);
  const planFull = Number(/planned in (\d+) ms/.exec(again.stdout)![1]);
  const planWorst = Math.max(planEmpty, planApply, planFull);
  const verdict = (ok: boolean) => (ok ? 'ok' : 'OVER TARGET');
  console.log(`rampart apply, ${DOMAINS} domains on ${SERVERS} servers (PGlite control plane, ${new Date().toISOString()}):`);
  console.log(`  plan into the empty account:       ${planEmpty} ms (dry run, whole command ${(dry.ms / 1000).toFixed(1)} s)`);
  console.log(`  apply (plan ${planApply} ms + ${SERVERS + DOMAINS} creations): ${(applied.ms / 1000).toFixed(1)} s for the whole command  [target < 60 s: ${verdict(applied.ms < 60_000)}]`);
  console.log(`  plan with all ${DOMAINS} in place:      ${planFull} ms, "No changes." (whole command ${(again.ms / 1000).toFixed(1)} s)`);
  console.log(`  slowest plan: ${planWorst} ms  [target < 2 s: ${verdict(planWorst < 2000)}]`);
  process.exitCode = applied.ms < 60_000 && planWorst < 2000 ? 0 : 1;
} finally {
  await serve.stop();
  rmSync(dir, { recursive: true, force: true });
}
