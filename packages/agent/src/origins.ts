import { AGENT_LIMITS, backendName, formatHostPort, originTarget, type OriginAddress } from '@rampart/protocol';

/**
 * Origin health as HAProxy's own checks see it (the server rows `originN` of `show stat`, read with
 * the analytics every interval), turned into origin_down / origin_up status reports when an
 * origin's state changes. Only our words, the domain and origin as the snapshot has them and
 * HAProxy's check code reach a message: nothing an origin sent.
 */

export type OriginState = 'up' | 'down';

export interface OriginReading {
  state: OriginState;
  /** HAProxy's check result code (L4CON, L4TOUT, L7STS, ...), when it is one. */
  check?: string | undefined;
  /** The HTTP status of a failed layer-7 check. */
  code?: number | undefined;
}

/** The originN rows of `show stat` by "<backend>/<server>"; rows not yet checked (INI) or not checked are left out. */
export function parseOriginStates(csv: string): Map<string, OriginReading> {
  const out = new Map<string, OriginReading>();
  const lines = csv.split('\n');
  const headerLine = lines.find((l) => l.startsWith('# '));
  if (!headerLine) return out;
  const col = new Map(
    headerLine
      .slice(2)
      .split(',')
      .map((h, i) => [h.trim(), i]),
  );
  const at = (row: string[], name: string) => (col.has(name) ? row[col.get(name)!] : undefined);
  for (const line of lines) {
    if (line.startsWith('#') || !line.includes(',')) continue;
    const row = line.split(',');
    const px = at(row, 'pxname');
    const sv = at(row, 'svname');
    if (!px || !sv || !/^origin\d{1,2}$/.test(sv)) continue;
    const status = at(row, 'status') ?? '';
    const check = at(row, 'check_status')?.replace(/^\* ?/, '') ?? '';
    if (check === 'INI' || check === '') continue;
    const state: OriginState | undefined = /^UP\b/.test(status) ? 'up' : /^(?:DOWN|MAINT)\b/.test(status) ? 'down' : undefined;
    if (!state) continue;
    const code = Number(at(row, 'check_code'));
    out.set(`${px}/${sv}`, {
      state,
      check: /^[A-Z0-9]{2,10}$/.test(check) ? check : undefined,
      code: Number.isInteger(code) && code >= 100 && code <= 599 ? code : undefined,
    });
  }
  return out;
}

const CHECK_WORDS: Record<string, string> = {
  L4CON: 'the connection was refused or failed',
  L4TOUT: 'the connection timed out',
  L6RSP: 'the TLS handshake failed',
  L6TOUT: 'the TLS handshake timed out',
  L7RSP: 'the answer was not valid HTTP',
  L7TOUT: 'no answer in time',
  L7STS: 'it answered an error status',
};

export interface WatchedDomain {
  domain: string;
  origins: readonly OriginAddress[];
}

export interface OriginReport {
  kind: 'origin_down' | 'origin_up';
  message: string;
}

/** Remembers each origin's last state; `update` returns the reports of the changes since. */
export class OriginWatch {
  private last = new Map<string, OriginState>();

  update(readings: Map<string, OriginReading>, domains: readonly WatchedDomain[]): OriginReport[] {
    const reports: OriginReport[] = [];
    const next = new Map<string, OriginState>();
    for (const d of domains) {
      const be = backendName(d.domain);
      d.origins.forEach((o, i) => {
        const key = `${d.domain}|${formatHostPort(originTarget(o), o.port)}`;
        const r = readings.get(`${be}/origin${i}`);
        const before = this.last.get(key);
        if (!r) {
          if (before) next.set(key, before);
          return;
        }
        next.set(key, r.state);
        // A first reading of "up" is the expected state, not news; a first "down" is.
        if (r.state === before || (before === undefined && r.state === 'up')) return;
        const where = `origin ${formatHostPort(originTarget(o), o.port)} of "${d.domain}"`;
        const why = r.check ? ` (HAProxy's health check: ${CHECK_WORDS[r.check] ?? r.check}${r.code ? `, HTTP ${r.code}` : ''})` : '';
        const message = r.state === 'down' ? `The ${where} is down${why}; visitors get the 503 page when no origin of the domain is up` : `The ${where} is up again`;
        reports.push({ kind: r.state === 'down' ? 'origin_down' : 'origin_up', message: message.slice(0, AGENT_LIMITS.statusMessage) });
      });
    }
    this.last = next;
    return reports;
  }
}
