import { createHash, X509Certificate } from 'node:crypto';
import { chmod, mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isHostname } from '@rampart/protocol';

export interface StoredCertificate {
  domain: string;
  /** Absolute path of the PEM file (chain, then the private key), mode 0600. */
  file: string;
  notBefore: number;
  notAfter: number;
}

/** How many certificate files of a domain are kept: the live one and the one before it (rollback). */
const KEEP_PER_DOMAIN = 2;

/**
 * The certificates of one shield server under <data-dir>/certs/<domain>/<content hash>.pem. A file
 * never changes once written (a renewal is a new file), so a configuration that names a file
 * always gets the certificate it was checked with, and a rollback gets the previous one back.
 * Private keys are written 0600 in 0700 directories and never leave this machine.
 */
export class CertificateStore {
  private readonly byDomain = new Map<string, StoredCertificate>();

  constructor(readonly dir: string) {}

  /** Reads what is on disk; the newest valid certificate of each domain wins. */
  async load(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    for (const domain of await readdir(this.dir)) {
      if (!isHostname(domain)) continue;
      for (const name of await readdir(join(this.dir, domain)).catch(() => [])) {
        if (!/^[0-9a-f]{16}\.pem$/.test(name)) continue;
        const file = join(this.dir, domain, name);
        const cert = parse(domain, file, await readFile(file, 'utf8').catch(() => ''));
        if (cert && cert.notAfter > (this.byDomain.get(domain)?.notAfter ?? 0)) this.byDomain.set(domain, cert);
      }
    }
  }

  get(domain: string): StoredCertificate | undefined {
    return this.byDomain.get(domain);
  }

  /** Writes chain + key atomically (0600) and makes it the domain's certificate. */
  async save(domain: string, chainPem: string, keyPem: string): Promise<StoredCertificate> {
    if (!isHostname(domain)) throw new Error(`not a hostname: ${domain}`);
    const pem = `${chainPem.trim()}\n${keyPem.trim()}\n`;
    const dir = join(this.dir, domain);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const file = join(dir, `${createHash('sha256').update(pem).digest('hex').slice(0, 16)}.pem`);
    const cert = parse(domain, file, pem);
    if (!cert) throw new Error(`the authority's certificate for ${domain} could not be read`);
    const tmp = `${file}.tmp-${process.pid}`;
    await writeFile(tmp, pem, { mode: 0o600 });
    await chmod(tmp, 0o600); // whatever the umask
    await rename(tmp, file);
    this.byDomain.set(domain, cert);
    await this.prune(domain);
    return cert;
  }

  private async prune(domain: string): Promise<void> {
    const dir = join(this.dir, domain);
    const files = await Promise.all((await readdir(dir)).filter((n) => n.endsWith('.pem')).map(async (n) => ({ path: join(dir, n), mtime: (await stat(join(dir, n))).mtimeMs })));
    files.sort((a, b) => b.mtime - a.mtime);
    for (const f of files.slice(KEEP_PER_DOMAIN)) if (f.path !== this.byDomain.get(domain)?.file) await rm(f.path, { force: true });
  }
}

/** The certificate at the head of the PEM, if it names the domain. */
function parse(domain: string, file: string, pem: string): StoredCertificate | undefined {
  const first = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(pem)?.[0];
  if (!first || !/-----BEGIN (?:EC |RSA )?PRIVATE KEY-----/.test(pem)) return undefined;
  try {
    const x = new X509Certificate(first);
    if (!x.checkHost(domain)) return undefined;
    return { domain, file, notBefore: Date.parse(x.validFrom), notAfter: Date.parse(x.validTo) };
  } catch {
    return undefined;
  }
}
