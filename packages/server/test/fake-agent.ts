import { parseServiceMessage, PROTOCOL_VERSION, type ServerSnapshot, type ServiceMessage } from '@rampart/protocol';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { after } from 'node:test';
import type { App } from '../src/routes/types.js';
import { startServer, type ServerOptions } from '../src/serve.js';
import { ADMIN_TOKEN, call } from './helpers.js';
import { waitFor } from '../../../test/support/processes.js';

// A shield-server agent reduced to its wire protocol, over a real WebSocket to a real hub.

export const WAIT_MS = 10_000;

type Of<T extends ServiceMessage['type']> = Extract<ServiceMessage, { type: T }>;

let requestCounter = 0;

export class FakeAgent {
  readonly ws: WebSocket;
  readonly received: ServiceMessage[] = [];
  readonly invalid: string[] = [];
  readonly opened: Promise<void>;
  /** The close code and reason, once the connection has closed. */
  readonly closed: Promise<{ code: number; reason: string }>;

  constructor(agentUrl: string, token: string) {
    this.ws = new WebSocket(agentUrl, { headers: { authorization: `Bearer ${token}` } });
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', () => resolve());
      this.ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
    });
    this.opened.catch(() => undefined);
    this.closed = new Promise((resolve) => this.ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    this.ws.on('error', () => undefined);
    this.ws.on('message', (data) => {
      const parsed = parseServiceMessage(data.toString());
      if (parsed.ok) this.received.push(parsed.message);
      else this.invalid.push(parsed.error);
    });
  }

  /**
   * Connects, says hello and waits for the first snapshot. `httpPort` is where its HAProxy would
   * answer the health probe (a probe target); without it the health cycle probes port 80.
   */
  static async connect(agentUrl: string, token: string, hello: { httpPort?: number } = {}): Promise<FakeAgent> {
    const agent = new FakeAgent(agentUrl, token);
    await waitFor(() => agent.opened.then(() => true), 'the upgrade', WAIT_MS);
    agent.send({ type: 'agent/hello', payload: { protocol: PROTOCOL_VERSION, agentVersion: 'fake-0.0.1', runningRevision: null, ...hello } });
    await agent.snapshot(() => true, 'the first snapshot');
    return agent;
  }

  send(message: unknown): void {
    this.ws.send(JSON.stringify(message));
  }

  of<T extends ServiceMessage['type']>(type: T): Of<T>['payload'][] {
    return this.received.filter((m): m is Of<T> => m.type === type).map((m) => m.payload as Of<T>['payload']);
  }

  snapshots(): ServerSnapshot[] {
    return this.of('config/snapshot');
  }

  /** The first snapshot (already received or still to come) that satisfies pred. */
  snapshot(pred: (s: ServerSnapshot) => boolean, what: string): Promise<ServerSnapshot> {
    return waitFor(() => this.snapshots().find(pred), what, WAIT_MS, 10);
  }

  /** Sends acme/slot-request and waits for its reply. */
  async requestSlot(domain: string): Promise<{ granted: boolean; message: string | null }> {
    const requestId = this.sendSlotRequest(domain);
    return this.slotReply(requestId);
  }

  sendSlotRequest(domain: string): string {
    const requestId = `slot-${++requestCounter}`;
    this.send({ type: 'acme/slot-request', payload: { requestId, domain } });
    return requestId;
  }

  async slotReply(requestId: string): Promise<{ granted: boolean; message: string | null }> {
    const reply = await waitFor(() => this.of('acme/slot-reply').find((r) => r.requestId === requestId), `the slot reply ${requestId}`, WAIT_MS, 10);
    return { granted: reply.granted, message: reply.message };
  }

  /** Sends acme/challenge-publish and waits for the hub's reply (the number of agents it relayed to). */
  async publish(challenge: { domain: string; token: string; keyAuthorization: string; action: 'add' | 'remove' }): Promise<number> {
    const requestId = `pub-${++requestCounter}`;
    this.send({ type: 'acme/challenge-publish', payload: { requestId, ...challenge } });
    const reply = await waitFor(() => this.of('acme/challenge-reply').find((r) => r.requestId === requestId), `the challenge reply ${requestId}`, WAIT_MS, 10);
    return reply.relayedTo;
  }

  reportCert(domain: string, status: 'pending' | 'active' | 'error', expiresAt: number | null, message: string | null = null): void {
    this.send({ type: 'cert/status', payload: { domain, status, expiresAt, message } });
  }

  /**
   * A round trip through the hub: the hub handles one agent's messages in order, so once this
   * answer is back, everything this agent sent before has been handled.
   */
  async barrier(): Promise<void> {
    await this.requestSlot('barrier.invalid');
  }

  /** The close code and reason, waiting for the close (with a deadline). */
  closedWithin(what: string): Promise<{ code: number; reason: string }> {
    let closed: { code: number; reason: string } | undefined;
    void this.closed.then((c) => (closed = c));
    return waitFor(() => closed, what, WAIT_MS, 10);
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  close(): void {
    this.ws.terminate();
  }
}

export type DomainView = { id: string; domain: string; status: string; sslEnabled: boolean; sslStatus: string; sslError: string | null; sslExpires: string | null };

/** Servers and domains made through the API of one in-process control plane, for the hub tests. */
export function apiFixtures(app: App) {
  return {
    async newServer(key: string, name: string) {
      const r = await call(app, 'POST', '/api/servers', { key, body: { name } });
      assert.equal(r.status, 201);
      return r.body as { id: string; connectionToken: string };
    },
    async newDomain(key: string, domain: string, serverIds: string[], sslEnabled = true) {
      const r = await call(app, 'POST', '/api/domains', { key, body: { domain, origins: [{ ip: '10.0.0.1', port: 80 }], serverIds, sslEnabled } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body as DomainView;
    },
    async domain(key: string, name: string): Promise<DomainView> {
      const r = await call(app, 'GET', '/api/domains', { key });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const d = (r.body as DomainView[]).find((x) => x.domain === name);
      assert.ok(d, `${name} listed`);
      return d;
    },
  };
}

/**
 * A control plane on a free loopback port for hub tests, its agent URL, and the list the suite
 * puts its fake agents in: they are closed, then the server, once the suite is done.
 */
export async function hubServer(options: Partial<ServerOptions> = {}) {
  const srv = await startServer({ port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, ...options });
  const agentUrl = `${srv.url.replace(/^http/, 'ws')}/agent`;
  const agents: FakeAgent[] = [];
  after(async () => {
    for (const a of agents) a.ws.terminate();
    await srv.close();
  });
  return { srv, agentUrl, agents };
}
