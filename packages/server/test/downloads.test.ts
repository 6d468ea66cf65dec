import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { call, makeTestApp } from './helpers.js';

// GET /downloads/...: the control plane serves the Debian packages in its RAMPART_DOWNLOADS_DIR,
// without credentials, by their exact name or as rampart_all.deb (the newest); nothing else of the
// directory, and nothing at all without one.

describe('downloads', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-downloads-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const older = Buffer.from('!<arch>\nolder package');
  const newer = Buffer.from('!<arch>\nnewer package, a little longer');
  writeFileSync(join(dir, 'rampart_0.1.0_all.deb'), older);
  writeFileSync(join(dir, 'rampart_0.2.0_all.deb'), newer);
  writeFileSync(join(dir, 'secret.env'), 'RAMPART_ADMIN_TOKEN=x');
  utimesSync(join(dir, 'rampart_0.1.0_all.deb'), new Date(1_000_000), new Date(1_000_000));
  const { app } = await makeTestApp('pglite', { downloadsDir: dir });
  const { app: without } = await makeTestApp('pglite');

  test('a package by its name, without credentials, as a Debian package download', async () => {
    const r = await app.inject({ method: 'GET', url: '/downloads/rampart_0.1.0_all.deb' });
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.rawPayload, older);
    assert.equal(r.headers['content-type'], 'application/vnd.debian.binary-package');
    assert.equal(r.headers['content-disposition'], 'attachment; filename="rampart_0.1.0_all.deb"');
    assert.equal(r.headers['content-length'], String(older.length));
  });

  test('rampart_all.deb is the newest package, never cached', async () => {
    const r = await app.inject({ method: 'GET', url: '/downloads/rampart_all.deb' });
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.rawPayload, newer);
    assert.equal(r.headers['content-disposition'], 'attachment; filename="rampart_0.2.0_all.deb"');
    assert.equal(r.headers['cache-control'], 'no-cache');
  });

  test('nothing else of the directory, and no path out of it', async () => {
    for (const url of ['/downloads/secret.env', '/downloads/..%2Fsecret.env', '/downloads/rampart_0.1.0_all.deb%2F..%2F..%2Fsecret.env', '/downloads/rampart_9.9.9_all.deb']) {
      const r = await call(app, 'GET', url);
      assert.equal(r.status, 404, url);
      assert.match(r.body.error, /no package/);
    }
  });

  test('a control plane without a downloads directory answers 404 naming RAMPART_DOWNLOADS_DIR', async () => {
    const r = await call(without, 'GET', '/downloads/rampart_all.deb');
    assert.equal(r.status, 404);
    assert.match(r.body.error, /RAMPART_DOWNLOADS_DIR/);
  });
});
