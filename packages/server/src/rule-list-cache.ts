/**
 * Serialized rule lists by account, valid for one accounts.waf_version. The version is read from
 * the database on every GET /api/waf, so every process sees a change at once and a stale entry is
 * simply never served. Bounded by total bytes; least recently used entries go first.
 */
export class RuleListCache {
  private readonly entries = new Map<string, { version: number; body: string }>();
  private bytes = 0;

  constructor(private readonly maxBytes = 64 * 1024 * 1024) {}

  get(accountId: string, version: number): string | undefined {
    const e = this.entries.get(accountId);
    if (!e || e.version !== version) return undefined;
    this.entries.delete(accountId);
    this.entries.set(accountId, e); // most recently used last
    return e.body;
  }

  set(accountId: string, version: number, body: string): void {
    this.drop(accountId);
    if (body.length > this.maxBytes) return;
    this.entries.set(accountId, { version, body });
    this.bytes += body.length;
    for (const [id] of this.entries) {
      if (this.bytes <= this.maxBytes) break;
      this.drop(id);
    }
  }

  private drop(accountId: string): void {
    const e = this.entries.get(accountId);
    if (!e) return;
    this.bytes -= e.body.length;
    this.entries.delete(accountId);
  }
}
