import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';
import { AgentHub, type HubOptions } from '../src/hub/hub.js';
import type { ServiceContext } from '../src/context.js';
import { FakeAgent } from './fake-agent.js';

/**
 * An agent hub on its own HTTP listener over a test app's context (its database and clock), with
 * its log lines kept for the test to read. The API goes through the test app's inject.
 */
export async function hubFor(ctx: ServiceContext, options: HubOptions = {}) {
  const server = createServer();
  const logs: string[] = [];
  const hub = new AgentHub(ctx, { log: { info: (m) => logs.push(m), warn: (m) => logs.push(m) }, ...options });
  hub.attach(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}/agent`;
  const agents: FakeAgent[] = [];
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    for (const a of agents) a.close();
    await hub.close();
    await new Promise((resolve) => server.close(resolve));
  };
  after(close);
  return {
    hub,
    url,
    logs,
    close,
    async connect(token: string): Promise<FakeAgent> {
      const a = await FakeAgent.connect(url, token);
      agents.push(a);
      return a;
    },
    track(a: FakeAgent): FakeAgent {
      agents.push(a);
      return a;
    },
  };
}
