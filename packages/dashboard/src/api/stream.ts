import type { Notification, WafEvent } from './client';

// Live updates: one EventSource on GET /api/stream (session cookie), shared by every view.
// `waf_event` carries one item of GET /api/waf/events, `notification` one of GET /api/notifications,
// `resync` says to reload the lists. Nothing is replayed: each view loads its list, then follows.

type Handlers = { waf_event: (e: WafEvent) => void; notification: (n: Notification) => void; resync: () => void; state: (live: boolean) => void };
type Kind = keyof Handlers;

const handlers: { [K in Kind]: Set<Handlers[K]> } = { waf_event: new Set(), notification: new Set(), resync: new Set(), state: new Set() };
let source: EventSource | undefined;
let live = false;

function setLive(value: boolean) {
  live = value;
  for (const fn of handlers.state) fn(value);
}

export function isLive(): boolean {
  return live;
}

/** Opens the stream (after signing in). The browser reconnects by itself; a 404 (no stream on this control plane) closes it for good. */
export function openStream(): void {
  if (source || typeof EventSource === 'undefined') return;
  source = new EventSource('/api/stream', { withCredentials: true });
  source.onopen = () => setLive(true);
  source.onerror = () => setLive(false);
  // `resync`: this control-plane process may have missed changes; the views reload their lists.
  source.addEventListener('resync', () => {
    for (const fn of handlers.resync) fn();
  });
  for (const kind of ['waf_event', 'notification'] as const) {
    source.addEventListener(kind, (m) => {
      let data: unknown;
      try {
        data = JSON.parse((m as MessageEvent<string>).data);
      } catch {
        return;
      }
      for (const fn of handlers[kind]) (fn as (d: unknown) => void)(data);
    });
  }
}

export function closeStream(): void {
  source?.close();
  source = undefined;
  setLive(false);
}

export function subscribe<K extends Kind>(kind: K, fn: Handlers[K]): () => void {
  handlers[kind].add(fn);
  return () => handlers[kind].delete(fn);
}
