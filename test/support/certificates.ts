// A self-signed certificate, as an ACME authority would hand one back, for tests and benches.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** An ECDSA P-256 certificate for `domain` (CN and subjectAltName), valid `days` from now, made by the openssl CLI. */
export function selfSignedCertificate(domain: string, days = 90): { chainPem: string; keyPem: string } {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-cert-'));
  try {
    const key = join(dir, 'k.pem');
    const cert = join(dir, 'c.pem');
    const args = ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert, '-days', String(days)];
    execFileSync('openssl', [...args, '-subj', `/CN=${domain}`, '-addext', `subjectAltName=DNS:${domain}`], { stdio: 'ignore' });
    return { chainPem: readFileSync(cert, 'utf8'), keyPem: readFileSync(key, 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
