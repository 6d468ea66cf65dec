import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { GATE_FILES, gateAcls } from '../src/gate.js';
import { freePort, startProcess, waitFor, type Proc } from '../../../test/support/processes.js';

// The gate's test bench (test/gate.test.ts): a real HAProxy whose backend has the gate's ACLs and
// a Lua action (test/lua/gate_dump.lua) that records what HAProxy hands rampart_detect.lua's action
// (path, query, headers, body: the same sample fetches) with the gate's verdict, and answers
// "gate" or "clean"; then one lua5.3 process runs D.inspect over every record
// (test/lua/gate_verdicts.lua). The detectors thus read exactly what the gate read.

export const HAPROXY = process.env.HAPROXY ?? 'haproxy';
export const LUA = process.env.RAMPART_LUA ?? 'lua5.3';
const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
export const ENGINE = here('../lua/rampart_detect.lua');
const DUMP_LUA = here('./lua/gate_dump.lua');
const VERDICTS_LUA = here('./lua/gate_verdicts.lua');
/** Bytes of a body the gate and the detectors wait for, as waf.ts renders it (BODY_INSPECT_LIMIT). */
export const BODY_WAIT = 16384;

export interface GateProxy {
  port: number;
  dumpFile: string;
  proc: Proc;
  /** Empties the record file (the Lua action appends to it). */
  resetDump(): void;
  stop(): Promise<void>;
}

/** A HAProxy with the gate (gateAcls and GATE_FILES) in front of the recording action. */
export async function startGateProxy(): Promise<GateProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-gate-'));
  for (const [name, content] of Object.entries(GATE_FILES)) writeFileSync(join(dir, name), content);
  const dumpFile = join(dir, 'dump.bin');
  writeFileSync(dumpFile, '');
  const port = await freePort();
  const config = [
    'global',
    `    lua-load ${DUMP_LUA}`,
    '    nbthread 2',
    'defaults',
    '    mode http',
    '    timeout connect 5s',
    '    timeout client 30s',
    '    timeout server 30s',
    '    timeout http-request 10s',
    'frontend fe',
    `    bind 127.0.0.1:${port}`,
    '    default_backend be',
    'backend be',
    // as waf.ts renders level high: the body first (as far as the buffer holds it), then the gate
    `    http-request wait-for-body time 1s at-least ${BODY_WAIT} if { req.hdr(content-length) -m found } or { req.hdr(transfer-encoding) -m found }`,
    ...gateAcls(dir),
    '    http-request set-var(txn.rp_gate_test) str(gate) if rp_gate',
    '    http-request lua.gate_dump',
    '',
  ].join('\n');
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, config);
  const env = { ...process.env, RAMPART_GATE_DUMP: dumpFile };
  const check = spawnSync(HAPROXY, ['-c', '-f', cfg], { env, encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`haproxy -c failed:\n${check.error ?? ''}${check.stdout}${check.stderr}\n${config}`);
  const proc = startProcess(HAPROXY, ['-db', '-f', cfg], { RAMPART_GATE_DUMP: dumpFile });
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`haproxy exited: ${proc.output()}`);
      return new Promise<boolean>((resolve) => {
        const s = connect(port, '127.0.0.1', () => {
          s.destroy();
          resolve(true);
        });
        s.on('error', () => resolve(false));
      });
    },
    'the gate HAProxy to listen',
    20_000,
  );
  return {
    port,
    dumpFile,
    proc,
    resetDump() {
      truncateSync(dumpFile, 0);
    },
    async stop() {
      await proc.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One request on the wire: its id goes in an X-Gate-Id header right after the request line. */
export function withId(raw: Buffer, id: string): Buffer {
  const eol = raw.indexOf('\r\n');
  if (eol < 0) throw new Error('a request without a request line');
  return Buffer.concat([raw.subarray(0, eol + 2), Buffer.from(`X-Gate-Id: ${id}\r\n`, 'latin1'), raw.subarray(eol + 2)]);
}

/** HAProxy's answer to one request: "gate", "clean" (the x-gate header), or the status line of anything else (400...). */
export function send(port: number, raw: Buffer, timeoutMs = 20_000): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let settled = false;
    const done = (v: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      resolve(v);
    };
    const s = connect(port, '127.0.0.1', () => s.write(raw));
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    s.on('data', (d) => chunks.push(d));
    s.on('error', (e) => done(`error ${e.message}`));
    s.on('close', () => {
      const res = Buffer.concat(chunks).toString('latin1');
      const head = res.slice(0, res.indexOf('\r\n\r\n'));
      const status = head.slice(0, head.indexOf('\r\n'));
      const verdict = /\r\nx-gate: (gate|clean)\r\n/i.exec(`${head}\r\n`)?.[1];
      if (!/^HTTP\/1\.1 200 /.test(status) || !verdict) return done(status || 'no answer');
      done(verdict);
    });
  });
}

/** Sends every request (Connection: close each), `concurrency` at a time; answers in order. */
export async function sendAll(port: number, raws: readonly Buffer[], concurrency = 32): Promise<string[]> {
  const answers: string[] = new Array(raws.length);
  let next = 0;
  async function worker() {
    while (next < raws.length) {
      const i = next++;
      answers[i] = await send(port, raws[i]!);
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, raws.length) }, worker));
  return answers;
}

export interface Verdict {
  /** The gate's verdict as the recording action saw it. */
  gate: 'gate' | 'clean';
  /** "-" when the detectors find nothing, else "<reason>:<location>" (or "error:<message>"). */
  finding: string;
}

/** D.inspect over every recorded request (one lua5.3 process per part of the records): id -> verdict. */
export async function detectorVerdicts(dumpFile: string, parts = 2): Promise<Map<string, Verdict>> {
  const maps = await Promise.all(Array.from({ length: parts }, (_, part) => runVerdicts([dumpFile, String(part), String(parts)])));
  return new Map(maps.flatMap((m) => [...m]));
}

function runLua(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(LUA, [VERDICTS_LUA, ENGINE, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('latin1');
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${LUA} gate_verdicts.lua exited with ${code}:\n${err}${out.slice(-2000)}`))));
  });
}

async function runVerdicts(args: string[]): Promise<Map<string, Verdict>> {
  const lines = (await runLua(args)).trimEnd().split('\n');
  const last = lines.pop() ?? '';
  const map = new Map<string, Verdict>();
  for (const line of lines) {
    const [id = '', gate = '', finding = ''] = line.split(' ');
    map.set(id, { gate: gate as Verdict['gate'], finding });
  }
  if (last !== `done ${map.size}`) throw new Error(`gate_verdicts.lua: unexpected end ${JSON.stringify(last)} after ${map.size} records`);
  return map;
}

/** Percent-decoding of the engine's log_escape, byte for byte. */
const unescape = (s: string) =>
  Buffer.from(
    s.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))),
    'latin1',
  ).toString('latin1');

/** The engine's lists the gate keeps copies of: STRUCTURED_HEADERS and CODE_MARKERS. */
export async function engineTables(): Promise<{ structured: Set<string>; markers: string[] }> {
  const lines = (await runLua(['--tables'])).trimEnd().split('\n');
  if (lines.pop() !== 'done tables') throw new Error('gate_verdicts.lua --tables: no end');
  const structured = new Set<string>();
  const markers: string[] = [];
  for (const line of lines) {
    const [kind, value = ''] = [line.slice(0, line.indexOf(' ')), line.slice(line.indexOf(' ') + 1)];
    if (kind === 'structured') structured.add(value);
    else if (kind === 'marker') markers.push(unescape(value));
  }
  return { structured, markers };
}

/** The BlazeHTTP corpus (requests.jsonl.gz; never part of the repository), when RAMPART_BLAZEHTTP names it. */
export const BLAZEHTTP = process.env.RAMPART_BLAZEHTTP;

export interface CorpusCase {
  id: string;
  kind: 'attack' | 'benign';
  bytes: Buffer;
}

/**
 * The corpus's requests as BlazeHTTP sends them (its README): Connection: close, Content-Length
 * recomputed from the body's bytes (a chunked request keeps its framing), other headers as they are.
 */
export function loadBlazehttp(file = BLAZEHTTP): CorpusCase[] | undefined {
  if (file === undefined || !existsSync(file)) return undefined;
  const cases: CorpusCase[] = [];
  for (const line of gunzipSync(readFileSync(file)).toString('utf8').split('\n')) {
    if (!line.trim()) continue;
    const o = JSON.parse(line) as { id: string; kind: 'attack' | 'benign'; request: string };
    cases.push({ id: o.id, kind: o.kind, bytes: prepare(Buffer.from(o.request, 'latin1')) });
  }
  return cases;
}

function prepare(raw: Buffer): Buffer {
  const end = raw.indexOf('\r\n\r\n');
  const head = (end < 0 ? raw : raw.subarray(0, end)).toString('latin1');
  const body = end < 0 ? Buffer.alloc(0) : raw.subarray(end + 4);
  const [firstLine = '', ...headers] = head.split('\r\n');
  const name = (h: string) =>
    h
      .slice(0, Math.max(0, h.indexOf(':')))
      .trim()
      .toLowerCase();
  const chunked = headers.some((h) => name(h) === 'transfer-encoding' && /chunked/i.test(h));
  const out = [firstLine];
  const seen = new Set<string>();
  for (const h of headers) {
    const n = name(h);
    if (n === 'connection' || (n === 'content-length' && !chunked)) {
      if (seen.has(n)) continue;
      seen.add(n);
      out.push(n === 'connection' ? 'Connection: close' : `Content-Length: ${body.length}`);
      continue;
    }
    out.push(h);
  }
  if (!seen.has('host') && !headers.some((h) => name(h) === 'host')) out.splice(1, 0, 'Host: gate.test');
  if (!seen.has('connection')) out.push('Connection: close');
  if (!chunked && !seen.has('content-length') && body.length > 0) out.push(`Content-Length: ${body.length}`);
  return Buffer.concat([Buffer.from(`${out.join('\r\n')}\r\n\r\n`, 'latin1'), body]);
}
