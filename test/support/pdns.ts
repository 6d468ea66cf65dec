// A real PowerDNS Authoritative server (pdns_server, gsqlite3 backend) on free ports, for testing
// the DNS failover provider against the real HTTP API and the records it then serves over DNS.
//
//   provider ──http, X-API-Key──▶ pdns webserver/API (apiUrl)
//   query()  ──DNS (UDP)──────▶ pdns on 127.0.0.1:dnsPort
//
// Everything is set on the command line; --config-dir points at an empty pdns.conf in the temp
// directory so the system's /etc/powerdns is never read. The server keeps its default packet and
// query caches: the API purges them on every zone change, and the tests rely on that as a real
// deployment does.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startProcess, waitFor, type Proc } from './processes.js';

const SCHEMA = '/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql';

export interface Pdns {
  /** The webserver's base URL (the API is under /api/v1), e.g. http://127.0.0.1:18081 */
  apiUrl: string;
  apiKey: string;
  serverId: 'localhost';
  /** UDP/TCP port pdns answers DNS on, at 127.0.0.1. */
  dnsPort: number;
  /** The records of one type pdns serves for name over DNS, sorted; [] when it has none. */
  query(name: string, type: 'A' | 'AAAA'): Promise<string[]>;
  /** pdns_server's output, for assertion messages. */
  output(): string;
  stop(): Promise<void>;
}

/**
 * Starts pdns_server with the given zones (kind Native, created through the API, each with SOA and NS).
 * `logQueries`: pdns logs every question it gets ("Remote <ip> wants '<name>|<type>'"), read
 * through output(), so a test can wait until a question was asked.
 */
export async function startPdns(opts: { zones?: string[]; logQueries?: boolean } = {}): Promise<Pdns> {
  const zones = opts.zones ?? ['example.test'];
  const dir = mkdtempSync(join(tmpdir(), 'rampart-pdns-'));
  let proc: Proc | undefined;
  const stop = async () => {
    if (proc) await stopWithin(proc, 5_000);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const database = join(dir, 'pdns.sqlite3');
    execFileSync('sqlite3', [database], { input: readFileSync(SCHEMA), stdio: ['pipe', 'pipe', 'pipe'] });
    writeFileSync(join(dir, 'pdns.conf'), '');
    const [dnsPort, apiPort] = await Promise.all([freePort(), freePort()]);
    const apiKey = randomBytes(24).toString('hex');
    proc = startProcess('pdns_server', [
      `--config-dir=${dir}`,
      '--launch=gsqlite3',
      `--gsqlite3-database=${database}`,
      '--local-address=127.0.0.1',
      `--local-port=${dnsPort}`,
      '--webserver=yes',
      '--webserver-address=127.0.0.1',
      `--webserver-port=${apiPort}`,
      '--webserver-allow-from=127.0.0.0/8',
      '--api=yes',
      `--api-key=${apiKey}`,
      `--socket-dir=${dir}`,
      '--guardian=no',
      '--daemon=no',
      '--disable-syslog',
      '--security-poll-suffix=', // no DNS query to the outside world for its security status
      ...(opts.logQueries ? ['--log-dns-queries=yes', '--loglevel=7'] : []),
    ]);
    const running = proc;
    const assertRunning = () => {
      if (running.child.exitCode !== null || running.child.signalCode !== null) throw new Error(`pdns_server exited early:\n${running.output()}`);
    };
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    const api = (path: string, init: RequestInit = {}) => fetch(`${apiUrl}/api/v1/servers/localhost${path}`, { ...init, headers: { 'X-API-Key': apiKey }, signal: AbortSignal.timeout(5_000) });
    await waitFor(async () => {
      assertRunning();
      return (await api('')).ok;
    }, 'the PowerDNS API to answer');

    for (const zone of zones) {
      const res = await api('/zones', { method: 'POST', body: JSON.stringify(nativeZone(zone)) });
      if (res.status !== 201) throw new Error(`creating zone ${zone}: ${res.status} ${await res.text()}`);
    }

    const resolver = new Resolver({ timeout: 1_000, tries: 1 });
    resolver.setServers([`127.0.0.1:${dnsPort}`]);
    await waitFor(async () => {
      assertRunning();
      for (const zone of zones) await resolver.resolveSoa(zone); // throws until pdns serves every zone
      return true;
    }, 'PowerDNS to serve its zones over DNS');

    return {
      apiUrl,
      apiKey,
      serverId: 'localhost',
      dnsPort,
      async query(name, type) {
        try {
          return (type === 'A' ? await resolver.resolve4(name) : await resolver.resolve6(name)).sort();
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENODATA' || code === 'ENOTFOUND') return []; // an answer: the name has no such records
          throw err;
        }
      },
      output: () => running.output(),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** A zone as the API's POST /zones takes it: Native (no replication), with its SOA and one NS. */
function nativeZone(zone: string) {
  const name = `${zone}.`;
  return {
    name,
    kind: 'Native',
    rrsets: [
      { name, type: 'SOA', ttl: 3600, records: [{ content: `ns1.${name} hostmaster.${name} 1 10800 3600 604800 3600`, disabled: false }] },
      { name, type: 'NS', ttl: 3600, records: [{ content: `ns1.${name}`, disabled: false }] },
    ],
  };
}

/** SIGTERM, then SIGKILL if pdns_server has not exited after ms. */
async function stopWithin(proc: Proc, ms: number): Promise<void> {
  const kill = setTimeout(() => proc.child.kill('SIGKILL'), ms);
  try {
    await proc.stop();
  } finally {
    clearTimeout(kill);
  }
}

/**
 * Replaces the records of one name and type in a zone through the API (PATCH, changetype
 * REPLACE), e.g. setRecords(pdns, '60.0.127.in-addr.arpa', '1.60.0.127.in-addr.arpa', 'PTR',
 * ['crawl.example.com.']). Names and contents are absolute (a trailing dot is added if missing).
 */
export async function setRecords(pdns: Pdns, zone: string, name: string, type: string, contents: string[], ttl = 60): Promise<void> {
  const abs = (n: string) => (n.endsWith('.') ? n : `${n}.`);
  const content = (c: string) => (type === 'PTR' || type === 'CNAME' || type === 'NS' ? abs(c) : c);
  const res = await fetch(`${pdns.apiUrl}/api/v1/servers/localhost/zones/${abs(zone)}`, {
    method: 'PATCH',
    headers: { 'X-API-Key': pdns.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ rrsets: [{ name: abs(name), type, ttl, changetype: 'REPLACE', records: contents.map((c) => ({ content: content(c), disabled: false })) }] }),
    signal: AbortSignal.timeout(5_000),
  });
  if (res.status !== 204) throw new Error(`setting ${name} ${type} in ${zone}: ${res.status} ${await res.text()}`);
}
