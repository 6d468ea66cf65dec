import { AGENT_LIMITS, type CertState, type ServerSnapshot } from '@rampart/protocol';
import type { ServedCertificate } from '@rampart/proxy';
import { Backoff, systemClock, type Clock } from '../backoff.js';
import type { CertificateIssuer } from './issuer.js';
import type { ChallengeResponder } from './responder.js';
import { checkPointsHere, type ResolveFn } from './resolve.js';
import type { CertificateStore } from './store.js';

export interface CertStatusReport {
  domain: string;
  status: CertState;
  expiresAt: number | null;
  message: string | null;
}

/** The service, as the certificate loop sees it. */
export interface CertificateLink {
  /** Asks for an order slot (the authority's weekly cap); rejects when the service cannot be asked. */
  requestSlot(domain: string): Promise<{ granted: boolean; message: string | null }>;
  /** Relays a key authorization to the domain's other servers; resolves once relayed (or given up). */
  relayChallenge(domain: string, token: string, keyAuthorization: string, action: 'add' | 'remove'): Promise<void>;
  report(status: CertStatusReport): void;
}

export interface CertificateManagerOptions {
  store: CertificateStore;
  issuer: CertificateIssuer;
  responder: ChallengeResponder;
  resolve: ResolveFn;
  link: CertificateLink;
  /** The served certificates changed: the agent re-applies its configuration. */
  onServedChanged(): void;
  clock?: Clock;
  random?: () => number;
  /** Renew this long before expiry (30 days). */
  renewBeforeMs?: number;
  /** Look at every certificate this often (twice a day), besides at start and on every change. */
  checkEveryMs?: number;
  /** Retries of a failed order: 2 h doubling to 12 h, at least half of each step (so a few a day). */
  retryBaseMs?: number;
  retryCapMs?: number;
  log?: (level: 'info' | 'warn' | 'error', msg: string) => void;
}

const DAY = 86_400_000;
/** The service could not be asked for a slot (disconnected): try again this soon, at no cost to the domain's backoff. */
const SERVICE_AWAY_RETRY_MS = 30_000;

interface DomainCert {
  name: string;
  serverAddresses: readonly string[];
  notBeforeAttempt: number;
  backoff: Backoff;
  last: CertStatusReport | undefined;
}

/**
 * One loop toward a goal: every domain of the snapshot with sslEnabled has a valid certificate
 * that is not due for renewal. It looks at start, twice a day and whenever the snapshot changes;
 * orders run one at a time; a failed order backs off per domain and never touches the others.
 */
export class CertificateManager {
  private readonly domains = new Map<string, DomainCert>();
  private readonly clock: Clock;
  private readonly renewBeforeMs: number;
  private wakeup = new AbortController();
  private running: Promise<void> | undefined;

  constructor(private readonly o: CertificateManagerOptions) {
    this.clock = o.clock ?? systemClock;
    this.renewBeforeMs = o.renewBeforeMs ?? 30 * DAY;
  }

  /** The domains to serve over HTTPS, from the latest snapshot. */
  update(snapshot: ServerSnapshot): void {
    const wanted = new Map(snapshot.domains.filter((d) => d.sslEnabled).map((d) => [d.domain, d.serverAddresses]));
    for (const name of [...this.domains.keys()]) if (!wanted.has(name)) this.domains.delete(name); // renewals stop; the files stay for reuse
    for (const [name, serverAddresses] of wanted) {
      const d = this.domains.get(name);
      if (!d) {
        const backoff = new Backoff({
          baseMs: this.o.retryBaseMs ?? 2 * 3_600_000,
          capMs: this.o.retryCapMs ?? 12 * 3_600_000,
          jitter: 'equal',
          clock: this.clock,
          ...(this.o.random ? { random: this.o.random } : {}),
        });
        this.domains.set(name, { name, serverAddresses, notBeforeAttempt: 0, backoff, last: undefined });
      } else if (d.serverAddresses.join() !== serverAddresses.join()) {
        // The user changed where the domain's servers are: worth a new look at once.
        d.serverAddresses = serverAddresses;
        d.notBeforeAttempt = 0;
      }
    }
    this.wake();
  }

  /** Certificates for the renderer: those of the snapshot's sslEnabled domains that have not expired. */
  served(snapshot: ServerSnapshot): ServedCertificate[] {
    const now = this.clock.now();
    return snapshot.domains
      .filter((d) => d.sslEnabled)
      .flatMap((d) => {
        const c = this.o.store.get(d.domain);
        return c && c.notAfter > now ? [{ domain: d.domain, file: c.file }] : [];
      });
  }

  /** Every domain's last reported state, to send again after a reconnect. */
  statuses(): CertStatusReport[] {
    return [...this.domains.values()].flatMap((d) => (d.last ? [d.last] : []));
  }

  /** Looks at every domain now, failed ones included (backoff skipped once): an operator's SIGHUP. */
  recheck(): void {
    for (const d of this.domains.values()) d.notBeforeAttempt = 0;
    this.wake();
  }

  /** Looks again now (a snapshot arrived, the service is back). */
  wake(): void {
    this.wakeup.abort();
  }

  start(signal: AbortSignal): void {
    this.running ??= this.loop(signal);
  }

  async stopped(): Promise<void> {
    await this.running;
  }

  private async loop(signal: AbortSignal): Promise<void> {
    const every = this.o.checkEveryMs ?? DAY / 2;
    while (!signal.aborted) {
      this.wakeup = new AbortController();
      for (const [name, d] of [...this.domains]) {
        if (signal.aborted) return;
        if (this.domains.get(name) !== d) continue; // removed meanwhile
        await this.reconcile(name, d).catch((err) => this.o.log?.('error', `certificate loop for ${name}: ${String(err)}`));
      }
      const now = this.clock.now();
      const due = [...this.domains.values()].filter((d) => this.dueAt(d) !== undefined).map((d) => Math.max(d.notBeforeAttempt, now));
      const wakeAt = Math.min(now + every, ...due);
      if (wakeAt > now) await this.clock.sleep(wakeAt - now, AbortSignal.any([signal, this.wakeup.signal]));
    }
  }

  /** When the domain wants an order (undefined: it has a certificate that is not due). */
  private dueAt(d: DomainCert): number | undefined {
    const c = this.o.store.get(d.name);
    if (c && c.notAfter - this.renewBeforeMs > this.clock.now()) return undefined;
    return d.notBeforeAttempt;
  }

  private async reconcile(name: string, d: DomainCert): Promise<void> {
    const now = this.clock.now();
    const current = this.o.store.get(name);
    const valid = current && current.notAfter > now;
    if (current && current.notAfter - this.renewBeforeMs > now) {
      if (d.last?.status !== 'active' || d.last.expiresAt !== Math.floor(current.notAfter / 1000)) this.report(name, d, 'active', null);
      return;
    }
    if (now < d.notBeforeAttempt) return;
    if (!valid && d.last?.status !== 'pending' && d.last?.status !== 'error') this.report(name, d, 'pending', null);
    const failed = (message: string) => {
      d.notBeforeAttempt = now + d.backoff.next();
      const retry = new Date(d.notBeforeAttempt).toISOString();
      // A renewal that fails leaves the current certificate serving: still active, with the reason.
      this.report(name, d, valid ? 'active' : 'error', valid ? `Renewal failed (next try ${retry}): ${message}` : message);
      this.o.log?.('warn', `certificate for ${name}: ${message}; next try ${retry}`);
    };

    // 1. DNS must point here, or the authority's validation would go elsewhere.
    let resolved: string[];
    try {
      resolved = await this.o.resolve(name);
    } catch (err) {
      return failed(`${name} could not be resolved: ${(err as Error).message}`);
    }
    const check = checkPointsHere(name, resolved, d.serverAddresses);
    if (!check.ok) return failed(check.message);

    // 2. A slot under the authority's weekly cap, from the service.
    let slot: { granted: boolean; message: string | null };
    try {
      slot = await this.o.link.requestSlot(name);
    } catch {
      d.notBeforeAttempt = now + SERVICE_AWAY_RETRY_MS;
      return;
    }
    if (!slot.granted) return failed(slot.message ?? `no certificate order slot for ${name}`);

    // 3. The order: every server of the domain answers the challenge.
    try {
      this.o.log?.('info', `ordering a certificate for ${name}`);
      const issued = await this.o.issuer.issue(name, {
        publish: async (token, keyAuthorization) => {
          this.o.responder.add(name, token, keyAuthorization, 'own');
          await this.o.link.relayChallenge(name, token, keyAuthorization, 'add');
        },
        withdraw: async (token, keyAuthorization) => {
          this.o.responder.remove(name, token, 'own');
          await this.o.link.relayChallenge(name, token, keyAuthorization, 'remove').catch(() => undefined);
        },
      });
      const cert = await this.o.store.save(name, issued.chainPem, issued.keyPem);
      d.backoff.reset();
      // Looked at again on the next regular check, even if the authority's certificates are so
      // short-lived (or --renew-before-days so long) that this one is already due.
      d.notBeforeAttempt = this.clock.now() + (this.o.checkEveryMs ?? DAY / 2);
      this.o.log?.('info', `certificate for ${name} issued, valid until ${new Date(cert.notAfter).toISOString()}`);
      this.o.onServedChanged();
      this.report(name, d, 'active', null);
    } catch (err) {
      failed(`the certificate order for ${name} failed: ${orderError(err)}`);
    }
  }

  private report(domain: string, d: DomainCert, status: CertState, message: string | null): void {
    const c = this.o.store.get(domain);
    const expiresAt = c && c.notAfter > this.clock.now() ? Math.floor(c.notAfter / 1000) : null;
    d.last = { domain, status, expiresAt, message: message?.slice(0, AGENT_LIMITS.certMessage) ?? null };
    this.o.link.report(d.last);
  }
}

/** The authority's own words where it gave some (acme-client puts the problem detail in the message). */
function orderError(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').slice(0, 800);
}
