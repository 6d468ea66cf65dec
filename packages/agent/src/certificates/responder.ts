import { createServer, type Server } from 'node:http';
import { once } from 'node:events';
import { ACME_CHALLENGE_PATH } from '@rampart/proxy';

interface Challenge {
  domain: string;
  keyAuthorization: string;
  expiresAt: number;
  /** Published by this server's own order, not relayed from another server of the domain. */
  own: boolean;
}

/** Who a challenge comes from: this server's own order, or another server of the domain (relayed by the service). */
export type ChallengeSource = 'own' | 'peer';

/** A challenge nobody removed (a lost message, a crashed order) is forgotten after this long. */
const CHALLENGE_TTL_MS = 30 * 60_000;
/** Bounds what a flood of relayed challenges can hold in memory (this server's own are always kept). */
export const MAX_CHALLENGES = 1000;

/**
 * The HTTP-01 responder: HAProxy sends every request under /.well-known/acme-challenge/ here,
 * for any host, before routing or the WAF. It answers a token only for the host it was issued
 * for, with the key authorization, as RFC 8555 section 8.3 asks.
 */
export class ChallengeResponder {
  private readonly challenges = new Map<string, Challenge>();
  private server: Server | undefined;

  constructor(private readonly now: () => number = Date.now) {}

  async listen(port: number): Promise<number> {
    const server = createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0] ?? '';
      const host = (req.headers.host ?? '').toLowerCase().replace(/:\d+$/, '').replace(/\.$/, '');
      const found = req.method === 'GET' && path.startsWith(ACME_CHALLENGE_PATH) ? this.lookup(host, path.slice(ACME_CHALLENGE_PATH.length)) : undefined;
      res.writeHead(found ? 200 : 404, { 'content-type': 'text/plain', 'cache-control': 'no-store' });
      res.end(found ?? 'Not Found');
    });
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    this.server = server;
    const addr = server.address();
    return typeof addr === 'object' && addr ? addr.port : port;
  }

  /**
   * A peer's challenges are bounded (a flood holds at most MAX_CHALLENGES) and never replace or
   * withdraw one of this server's own orders: a full responder or a hostile peer of the domain
   * cannot make this server fail its own validations.
   */
  add(domain: string, token: string, keyAuthorization: string, source: ChallengeSource = 'peer'): void {
    this.expire();
    const existing = this.challenges.get(token);
    if (source === 'peer' && (existing?.own || (!existing && this.challenges.size >= MAX_CHALLENGES))) return;
    this.challenges.set(token, { domain, keyAuthorization, expiresAt: this.now() + CHALLENGE_TTL_MS, own: source === 'own' });
  }

  remove(domain: string, token: string, source: ChallengeSource = 'peer'): void {
    const c = this.challenges.get(token);
    if (c?.domain === domain && (source === 'own' || !c.own)) this.challenges.delete(token);
  }

  private lookup(host: string, token: string): string | undefined {
    const c = this.challenges.get(token);
    if (!c || c.domain !== host || c.expiresAt < this.now()) return undefined;
    return c.keyAuthorization;
  }

  private expire(): void {
    const now = this.now();
    for (const [token, c] of this.challenges) if (c.expiresAt < now) this.challenges.delete(token);
  }

  get size(): number {
    return this.challenges.size;
  }

  async close(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server!.close(() => r()));
  }
}
