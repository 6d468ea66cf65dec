import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { Agent, TOKEN_REFUSALS_MAX } from '../src/agent.js';
import { bindFailures, explainBindFailure, portHolders } from '../src/port-holder.js';
import { FakeClock } from './fake-clock.js';

describe('bind failures', () => {
  test("HAProxy 2.6's alert is read as address, port and reason", () => {
    const alert = 'Binding [/x/haproxy.cfg:68] for frontend http_in: cannot bind socket (Address already in use) for [127.0.0.1:8081]';
    assert.deepEqual(bindFailures([alert, "unknown keyword 'foo'"]), [{ address: '127.0.0.1', port: 8081, reason: 'Address already in use' }]);
    assert.deepEqual(bindFailures(['Starting frontend http_in: cannot bind socket (Permission denied) [0.0.0.0:80]']), [{ address: '0.0.0.0', port: 80, reason: 'Permission denied' }]);
  });

  test('the process listening on a port is found in /proc: this one', async () => {
    const server = createServer().listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    try {
      const holders = await portHolders(port);
      assert.ok(
        holders.some((h) => h.pid === process.pid),
        JSON.stringify(holders),
      );
      const text = await explainBindFailure({ address: '0.0.0.0', port, reason: 'Address already in use' }, '--http-port');
      assert.match(text, new RegExp(`^HAProxy cannot listen on port ${port}: it is already in use by \\S+ \\(pid ${process.pid}\\)\\. Stop that process or give this agent another --http-port$`));
    } finally {
      server.close();
    }
  });

  test('a holder that cannot be seen, and a permission, are explained without guessing', async () => {
    const hidden = await explainBindFailure({ address: '192.0.2.1', port: 8081, reason: 'Address already in use' }, '--http-port', async () => []);
    assert.equal(
      hidden,
      "HAProxy cannot listen on port 8081 on 192.0.2.1: it is already in use by another process (not visible to this user: `sudo ss -ltnp 'sport = :8081'` names it). Stop that process or give this agent another --http-port",
    );
    const denied = await explainBindFailure({ address: '0.0.0.0', port: 443, reason: 'Permission denied' }, '--https-port');
    assert.match(denied, /^HAProxy cannot listen on port 443: permission denied .* with --https-port$/);
  });
});

describe('a refused token', () => {
  test(`is tried again after 30 s, doubling to minutes; after ${TOKEN_REFUSALS_MAX} refusals the agent gives up`, async () => {
    let refusals = 0;
    const service = createHttpServer((_req, res) => res.writeHead(404).end());
    service.on('upgrade', (_req, socket) => {
      refusals++;
      socket.end('HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    });
    service.listen(0, '127.0.0.1');
    await once(service, 'listening');
    const tmp = await mkdtemp(join(tmpdir(), 'rampart-refused-'));
    const clock = new FakeClock();
    const logs: string[] = [];
    let gaveUp: string | undefined;
    const agent = new Agent({
      serverUrl: `ws://127.0.0.1:${(service.address() as { port: number }).port}/agent`,
      token: 'wrong',
      dataDir: tmp,
      httpPort: 1,
      httpsPort: 2,
      haproxyBin: 'haproxy',
      clock,
      onGiveUp: (reason) => (gaveUp = reason),
      log: (_level, msg) => logs.push(msg),
    });
    try {
      const loop = (agent as unknown as { connectLoop(): Promise<void> }).connectLoop();
      const waits: number[] = [];
      for (let i = 1; i < TOKEN_REFUSALS_MAX; i++) {
        while (clock.sleeping === 0) await new Promise((r) => setTimeout(r, 5));
        assert.equal(refusals, i);
        const before = clock.now();
        // Not before half the step: nothing connects in the first 15 s.
        clock.advance(14_999);
        await new Promise((r) => setTimeout(r, 20));
        assert.equal(refusals, i, 'no try before half the step');
        clock.advance(600_000);
        waits.push(clock.now() - before);
        while (!logs.some((l) => l.startsWith(`token refused (${i} of ${TOKEN_REFUSALS_MAX}`))) await new Promise((r) => setTimeout(r, 5));
      }
      await loop;
      assert.equal(refusals, TOKEN_REFUSALS_MAX);
      assert.match(gaveUp ?? '', new RegExp(`refused this agent's token ${TOKEN_REFUSALS_MAX} times in a row: giving up`));
      const tried = logs.filter((l) => l.startsWith('token refused')).map((l) => Number(/after (\d+) s/.exec(l)![1]));
      assert.ok(tried[0]! >= 15 && tried[0]! <= 30, `first wait ${tried[0]} s`);
      assert.ok(Math.max(...tried) >= 300 && Math.max(...tried) <= 600, `waits reach minutes, capped at 10: ${tried.join(', ')}`);
      assert.ok(logs.some((l) => /HTTP 401 \(the token is wrong, was regenerated, or the server was decommissioned\)/.test(l)));
    } finally {
      service.close();
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
