import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { after } from 'node:test';

/** What a probe target answers at the health path: HAProxy's "ok", an error status, another body, or nothing at all. */
export type TargetMode = 'ok' | '503' | 'other-body' | 'hang';

export interface ProbeTarget {
  address: string;
  port: number;
  mode: TargetMode;
  /** Requests for the health path, and for anything else. */
  hits: number;
  otherHits: number;
  close(): Promise<void>;
}

/**
 * A stand-in for a shield server's HAProxy on a loopback address (127.0.0.x are all loopback on
 * Linux): answers GET /.well-known/rampart/health as the mode says. Closed after the file's tests.
 */
export async function startProbeTarget(address = '127.0.0.1', mode: TargetMode = 'ok'): Promise<ProbeTarget> {
  const hanging = new Set<import('node:http').ServerResponse>();
  const target = { address, port: 0, mode, hits: 0, otherHits: 0, close: async () => {} } as ProbeTarget;
  const server: Server = createServer((req, res) => {
    if (req.url !== '/.well-known/rampart/health') {
      target.otherHits++;
      res.statusCode = 404;
      return res.end('not here');
    }
    target.hits++;
    switch (target.mode) {
      case 'ok':
        res.setHeader('content-type', 'text/plain');
        return res.end('ok');
      case '503':
        res.statusCode = 503;
        return res.end('unavailable');
      case 'other-body':
        return res.end('<html>welcome to nginx</html>');
      case 'hang':
        hanging.add(res);
        return;
    }
  });
  server.listen(0, address);
  await once(server, 'listening');
  target.port = (server.address() as { port: number }).port;
  let closed = false;
  target.close = async () => {
    if (closed) return;
    closed = true;
    for (const res of hanging) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  };
  after(() => target.close());
  return target;
}
