import { createSocket, type Socket } from 'node:dgram';
import { isHostname, isIP, WAF_REASONS, type WafEventItem } from '@rampart/protocol';

/** docs/architecture.md "The event log": at most 5,000 events per server per (UTC) day are stored; blocking goes on regardless. */
export const DAILY_EVENT_CAP = 5000;
const MAX_BUFFERED = 5000;
const BATCH = 500;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const REASONS = new Set<string>(WAF_REASONS);

/** One syslog line from HAProxy's log-format ("rampart-waf <ts> <ip> <domain> <reason> <rule>"). */
export function parseEventLine(line: string): WafEventItem | undefined {
  const m = /rampart-waf (\d+) (\S+) (\S+) (\S+) (\S+)\s*$/.exec(line);
  if (!m) return undefined;
  const [, ts, ip, domain, reason, rule] = m as unknown as [string, string, string, string, string, string];
  if (!isIP(ip) || !isHostname(domain) || !REASONS.has(reason)) return undefined;
  return { ts: Number(ts), ip, domain, reason: reason as WafEventItem['reason'], ruleId: UUID_RE.test(rule) ? rule : null };
}

/**
 * Receives HAProxy's WAF event log lines on a loopback UDP port, applies the daily cap, and hands
 * batches to `ship` (which returns false while the service is unreachable; they are kept then).
 */
export class EventCollector {
  private socket: Socket | undefined;
  private buffer: WafEventItem[] = [];
  private day = '';
  private countToday = 0;
  private timer: NodeJS.Timeout | undefined;
  dropped = 0;

  constructor(
    private readonly ship: (events: WafEventItem[]) => boolean,
    private readonly now: () => Date = () => new Date(),
    private readonly cap = DAILY_EVENT_CAP,
  ) {}

  /** Binds 127.0.0.1:port (0 for any) and returns the port. */
  async listen(port: number): Promise<number> {
    const socket = createSocket('udp4');
    this.socket = socket;
    socket.on('message', (msg) => this.accept(msg.toString('utf8')));
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(port, '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
    });
    this.timer = setInterval(() => this.flush(), 1000);
    this.timer.unref();
    return socket.address().port;
  }

  accept(line: string): void {
    const e = parseEventLine(line);
    if (!e) return;
    const day = this.now().toISOString().slice(0, 10);
    if (day !== this.day) {
      this.day = day;
      this.countToday = 0;
    }
    if (this.countToday >= this.cap) {
      this.dropped++;
      return; // logging stops at the cap; blocking does not depend on it
    }
    this.countToday++;
    this.buffer.push(e);
    if (this.buffer.length > MAX_BUFFERED) this.buffer.shift();
    if (this.buffer.length >= BATCH) this.flush();
  }

  flush(): void {
    while (this.buffer.length > 0) {
      const batch = this.buffer.slice(0, BATCH);
      if (!this.ship(batch)) return;
      this.buffer.splice(0, batch.length);
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.socket?.close();
  }
}
