import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ServerSnapshot, SnapshotDomain } from '@rampart/protocol';
import { renderHaproxyConfig } from '../src/haproxy-config.js';
import { freePort, startProcess, waitFor, type Proc } from '../../../test/support/processes.js';

// Host routing through a real HAProxy, both ways the renderer writes it: a server with one domain
// routes it with one ACL, a server with several through domains.map. Either way the Host header is
// lowercased and its port dropped; anything else (another name, a suffix, none) gets the 404.

const HAPROXY = process.env.RAMPART_HAPROXY ?? '/usr/sbin/haproxy';

/** The status and body of one raw HTTP/1.x request. */
function raw(port: number, request: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port }, () => s.write(request));
    let text = '';
    s.setTimeout(5_000, () => s.destroy(new Error('timed out')));
    s.on('data', (d) => (text += d));
    s.on('error', reject);
    s.on('end', () => resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0), body: text.slice(text.indexOf('\r\n\r\n') + 4) }));
  });
}
const get = (port: number, host: string | undefined) => raw(port, `GET / HTTP/1.${host === undefined ? '0' : '1'}\r\n${host === undefined ? '' : `Host: ${host}\r\n`}Connection: close\r\n\r\n`);

let n = 0;
const domain = (name: string, port: number): SnapshotDomain => ({
  id: `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`,
  domain: name,
  origins: [{ ip: '127.0.0.1', port }],
  sslEnabled: false,
  wafEnabled: false,
  wafLevel: 'low',
});

for (const names of [['a.example.com'], ['a.example.com', 'b.example.com', 'c.example.com']]) {
  describe(`host routing of a real HAProxy, ${names.length === 1 ? 'one domain (an ACL)' : 'three domains (domains.map)'}`, () => {
    let dir: string;
    let port: number;
    let haproxy: Proc;
    const origins: Server[] = [];

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'rampart-routing-'));
      const domains: SnapshotDomain[] = [];
      for (const name of names) {
        const origin = createServer((_req, res) => res.end(`origin of ${name}`));
        await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
        origins.push(origin);
        domains.push(domain(name, (origin.address() as { port: number }).port));
      }
      port = await freePort();
      const snapshot: ServerSnapshot = { serverId: 'srv-1', revision: 1, rules: [], domains };
      const { files } = renderHaproxyConfig(snapshot, { httpBind: { address: '127.0.0.1', port }, runDir: dir }, { configDir: dir });
      assert.equal(files['haproxy.cfg']!.includes('domains.map,default_404'), names.length > 1, 'the way this case routes');
      for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content);
      haproxy = startProcess(HAPROXY, ['-db', '-f', join(dir, 'haproxy.cfg')]);
      await waitFor(
        async () => {
          if (haproxy.child.exitCode !== null) throw new Error(`haproxy exited: ${haproxy.output()}`);
          return (await get(port, names[0]).catch(() => undefined))?.status === 200;
        },
        'HAProxy to route',
        20_000,
      );
    });

    after(async () => {
      await haproxy?.stop();
      for (const o of origins) o.close();
      rmSync(dir, { recursive: true, force: true });
    });

    test('each domain, in any case and with any port, reaches its own origin', async () => {
      for (const name of names) {
        for (const host of [name, name.toUpperCase(), `${name}:8080`, `${name.replace('a', 'A')}:80`]) {
          assert.deepEqual(await get(port, host), { status: 200, body: `origin of ${name}` }, host);
        }
      }
    });

    test('any other Host, or none, gets the 404', async () => {
      for (const host of [undefined, 'example.com', `x${names[0]}`, `${names[0]}.evil.test`, `${names[0]}.`, '127.0.0.1', '']) {
        const r = await get(port, host);
        assert.equal(r.status, 404, String(host));
        assert.match(r.body, /^Not Found: no site is set up for this name here\./);
      }
    });
  });
}
