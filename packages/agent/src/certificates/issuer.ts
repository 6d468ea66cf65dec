import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type acme from 'acme-client';

/**
 * acme-client, with node-forge, axios and its ASN.1 libraries (about 1.5 MB of code, a third of
 * the agent's start), is loaded with the first certificate order: an agent without a TLS domain
 * never loads it.
 */
const acmeClient = async () => (await import('acme-client')).default;

/** Let's Encrypt's directories (acme-client's `directory.letsencrypt`; test/certificates.test.ts compares). */
export const LETS_ENCRYPT = {
  production: 'https://acme-v02.api.letsencrypt.org/directory',
  staging: 'https://acme-staging-v02.api.letsencrypt.org/directory',
} as const;

/** `--acme-directory`: a URL, or `production`/`staging` for Let's Encrypt's. */
export function directoryUrl(flag: string | undefined): string {
  if (flag === undefined || flag === 'production') return LETS_ENCRYPT.production;
  if (flag === 'staging') return LETS_ENCRYPT.staging;
  return flag;
}

export interface ChallengeHooks {
  /** The key authorization must be served before this resolves (on every server of the domain). */
  publish(token: string, keyAuthorization: string): Promise<void>;
  withdraw(token: string, keyAuthorization: string): Promise<void>;
}

export interface IssuedCertificate {
  chainPem: string;
  keyPem: string;
}

/** Orders certificates; a fake stands in for it in unit tests. */
export interface CertificateIssuer {
  issue(domain: string, hooks: ChallengeHooks): Promise<IssuedCertificate>;
}

interface AccountFile {
  directoryUrl: string;
  accountUrl: string | null;
  keyPem: string;
}

/**
 * HTTP-01 orders with acme-client: one ACME account per agent (its key in
 * <data-dir>/acme/account.json, 0600; a new one if the directory changes), an ECDSA P-256 key
 * per certificate (fast handshakes), made here and never sent anywhere.
 */
export class AcmeIssuer implements CertificateIssuer {
  private client: acme.Client | undefined;

  constructor(private readonly options: { directoryUrl: string; email?: string | undefined; accountFile: string }) {}

  private async account(): Promise<acme.Client> {
    if (this.client) return this.client;
    const acme = await acmeClient();
    let saved: AccountFile | undefined;
    try {
      saved = JSON.parse(await readFile(this.options.accountFile, 'utf8')) as AccountFile;
      if (saved.directoryUrl !== this.options.directoryUrl) saved = undefined;
    } catch {
      saved = undefined;
    }
    const keyPem = saved?.keyPem ?? (await acme.crypto.createPrivateEcdsaKey('P-256')).toString();
    // The authority's polling of a pending order: short first waits, so a certificate is live soon after it is valid.
    const client = new acme.Client({
      directoryUrl: this.options.directoryUrl,
      accountKey: keyPem,
      ...(saved?.accountUrl ? { accountUrl: saved.accountUrl } : {}),
      backoffAttempts: 12,
      backoffMin: 250,
      backoffMax: 10_000,
    });
    if (!saved?.accountUrl) {
      await client.createAccount({ termsOfServiceAgreed: true, ...(this.options.email ? { contact: [`mailto:${this.options.email}`] } : {}) });
      await mkdir(dirname(this.options.accountFile), { recursive: true, mode: 0o700 });
      const tmp = `${this.options.accountFile}.tmp`;
      const file: AccountFile = { directoryUrl: this.options.directoryUrl, accountUrl: client.getAccountUrl(), keyPem };
      await writeFile(tmp, JSON.stringify(file), { mode: 0o600 });
      await chmod(tmp, 0o600);
      await rename(tmp, this.options.accountFile);
    }
    this.client = client;
    return client;
  }

  async issue(domain: string, hooks: ChallengeHooks): Promise<IssuedCertificate> {
    const client = await this.account();
    const acme = await acmeClient();
    const key = await acme.crypto.createPrivateEcdsaKey('P-256');
    const [, csr] = await acme.crypto.createCsr({ commonName: domain, altNames: [domain] }, key);
    const chainPem = await client.auto({
      csr,
      challengePriority: ['http-01'],
      termsOfServiceAgreed: true,
      // The agent checked DNS itself; the authority's own validation is the real test.
      skipChallengeVerification: true,
      challengeCreateFn: async (_authz, challenge, keyAuthorization) => {
        if (challenge.type !== 'http-01') throw new Error(`unexpected ${challenge.type} challenge`);
        await hooks.publish(challenge.token, keyAuthorization);
      },
      challengeRemoveFn: async (_authz, challenge, keyAuthorization) => {
        await hooks.withdraw(challenge.token, keyAuthorization);
      },
    });
    return { chainPem, keyPem: key.toString() };
  }
}
