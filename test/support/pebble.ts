// Pebble (Let's Encrypt's ACME test CA) plus pebble-challtestsrv (its mock DNS server), as real
// processes on free ports, for end-to-end certificate tests.
//
//   ACME client ──https──▶ pebble (directoryUrl, TLS cert from our throwaway CA: caFile)
//   pebble's validator ──DNS──▶ challtestsrv (resolver; A records set with setA)
//   pebble's validator ──http──▶ <address from DNS>:httpPort/.well-known/acme-challenge/<token>
//
// challtestsrv by default answers every A query it has no record for with 127.0.0.1 (AAAA: ::1).
// We start it with `-defaultIPv4 "" -defaultIPv6 ""`, which turns those defaults off: a name we did
// not setA answers NOERROR with no records (node:dns reports ENODATA), so Pebble fails validation
// for it instead of silently reaching whatever listens on 127.0.0.1. With no AAAA answers, Pebble
// also never tries ::1 for HTTP-01.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Resolver } from 'node:dns/promises';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startProcess, waitFor, type Proc } from './processes.js';

export interface Pebble {
  /** ACME directory, e.g. https://127.0.0.1:14000/dir */
  directoryUrl: string;
  /** CA that signed Pebble's own HTTPS listener (for NODE_EXTRA_CA_CERTS or an https.Agent's `ca`). */
  caFile: string;
  /** "127.0.0.1:<port>": challtestsrv's DNS server, which Pebble's validator uses too (an agent's --resolver). */
  resolver: string;
  /** The port Pebble's validator connects to for HTTP-01 (an agent's HAProxy --http-port must be this). */
  httpPort: number;
  /** Replaces the A records of host (challtestsrv /add-a appends, so this clears first). */
  setA(host: string, addresses: string[]): Promise<void>;
  /** Removes the A records of host: it no longer resolves. */
  clearA(host: string): Promise<void>;
  /**
   * PEM of the root that signs issued certificates (Pebble regenerates it on every start). Issued
   * chains are leaf + intermediate, so this root alone is the trust anchor to verify a served chain.
   */
  issuerRoots(): Promise<string>;
  /** Output of both processes, for assertion messages. */
  output(): string;
  stop(): Promise<void>;
}

/** GET/POST over https trusting only `ca` (fetch cannot take a CA without an extra dependency). */
function httpsCall(url: string, ca: string, method = 'GET', body?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method, ca, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', reject);
    });
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${url} timed out`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** A throwaway CA and a leaf for localhost/127.0.0.1 signed by it, as PEM files in dir. */
function makeListenerCert(dir: string): { caFile: string; certFile: string; keyFile: string } {
  const caFile = join(dir, 'ca.pem');
  const caKey = join(dir, 'ca.key');
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2'];
  const openssl = (args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  openssl(['req', '-x509', ...ec, '-subj', '/CN=Rampart test Pebble listener CA', '-keyout', caKey, '-out', caFile]);
  openssl([
    'req',
    '-x509',
    ...ec,
    '-subj',
    '/CN=localhost',
    '-CA',
    caFile,
    '-CAkey',
    caKey,
    '-keyout',
    keyFile,
    '-out',
    certFile,
    '-addext',
    'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-addext',
    'basicConstraints=critical,CA:FALSE',
  ]);
  return { caFile, certFile, keyFile };
}

export async function startPebble(opts: { httpPort?: number } = {}): Promise<Pebble> {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-pebble-'));
  const procs: Proc[] = [];
  const stop = async () => {
    await Promise.all(procs.map((p) => p.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const { caFile, certFile, keyFile } = makeListenerCert(dir);
    const ca = readFileSync(caFile, 'utf8');
    const [acmePort, mgmtPort, dnsPort, ctsPort, tlsPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
    const httpPort = opts.httpPort ?? (await freePort());

    // Mock DNS only: its own challenge responders (-http01 etc.) are off so they take no ports.
    const cts = startProcess('pebble-challtestsrv', [
      '-http01',
      '',
      '-https01',
      '',
      '-tlsalpn01',
      '',
      '-dns01',
      `127.0.0.1:${dnsPort}`,
      '-management',
      `127.0.0.1:${ctsPort}`,
      '-defaultIPv4',
      '',
      '-defaultIPv6',
      '',
    ]);
    procs.push(cts);

    const configFile = join(dir, 'pebble-config.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        pebble: {
          listenAddress: `127.0.0.1:${acmePort}`,
          managementListenAddress: `127.0.0.1:${mgmtPort}`,
          certificate: certFile,
          privateKey: keyFile,
          httpPort,
          tlsPort, // TLS-ALPN-01 validation port; nothing listens there unless a test wants it
          ocspResponderURL: '',
          externalAccountBindingRequired: false,
        },
      }),
    );
    const pebble = startProcess('pebble', ['-config', configFile, '-dnsserver', `127.0.0.1:${dnsPort}`], {
      PEBBLE_VA_NOSLEEP: '1', // validate at once (default: a random 0-15 s sleep before each attempt)
      PEBBLE_WFE_NONCEREJECT: '0', // never reject a good nonce (default: 5% badNonce errors)
      PEBBLE_AUTHZREUSE: '0', // every order gets fresh authorizations, so every order is validated
    });
    procs.push(pebble);

    const ctsUrl = `http://127.0.0.1:${ctsPort}`;
    const ctsPost = async (path: string, body: unknown) => {
      const res = await fetch(ctsUrl + path, { method: 'POST', body: JSON.stringify(body) });
      if (!res.ok) throw new Error(`challtestsrv ${path}: ${res.status} ${await res.text()}`);
    };
    const output = () => `--- pebble ---\n${pebble.output()}\n--- challtestsrv ---\n${cts.output()}`;
    const assertRunning = () => {
      for (const p of procs) if (p.child.exitCode !== null || p.child.signalCode !== null) throw new Error(`exited early:\n${output()}`);
    };
    const directoryUrl = `https://127.0.0.1:${acmePort}/dir`;
    const dns = new Resolver({ timeout: 500, tries: 1 });
    dns.setServers([`127.0.0.1:${dnsPort}`]);
    await waitFor(async () => {
      assertRunning();
      await ctsPost('/clear-a', { host: 'ready.invalid' }); // throws until the management API listens
      const answer = await dns.resolve4('ready.invalid').catch((err: NodeJS.ErrnoException) => err.code);
      return answer === 'ENODATA'; // an (empty) answer, not ECONNREFUSED or ETIMEOUT
    }, 'challtestsrv to answer');
    await waitFor(async () => {
      assertRunning();
      return (await httpsCall(directoryUrl, ca)).status === 200;
    }, 'pebble to answer');

    return {
      directoryUrl,
      caFile,
      resolver: `127.0.0.1:${dnsPort}`,
      httpPort,
      async setA(host, addresses) {
        await ctsPost('/clear-a', { host });
        await ctsPost('/add-a', { host, addresses });
      },
      clearA: (host) => ctsPost('/clear-a', { host }),
      async issuerRoots() {
        const res = await httpsCall(`https://127.0.0.1:${mgmtPort}/roots/0`, ca);
        if (res.status !== 200) throw new Error(`pebble /roots/0: ${res.status} ${res.text}`);
        return res.text;
      },
      output,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
