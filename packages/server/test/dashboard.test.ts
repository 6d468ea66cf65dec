import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { describe, test } from 'node:test';
import { dashboardDir } from '../src/routes/dashboard.js';
import { call, makeTestApp } from './helpers.js';
import { skipUnless } from '../../../test/support/processes.js';

// The web dashboard (packages/dashboard, built by Vite into dist/ by `npm run build`) served by the
// control plane: the page at /, its content-hashed assets under /dashboard/assets/, the favicon,
// each with the right content type, caching and a strict Content-Security-Policy, no
// authentication needed to load them, nothing else under /dashboard/.

function header(headers: Record<string, unknown>, name: string): string {
  const v = headers[name];
  return Array.isArray(v) ? v.join(', ') : String(v ?? '');
}

const built = existsSync(join(dashboardDir(), 'index.html'));

describe('dashboard', { skip: skipUnless(built, 'packages/dashboard is not built (npm run build)') }, async () => {
  const { app } = await makeTestApp();
  const html = String((await call(app, 'GET', '/')).body);
  const scripts = [...html.matchAll(/<script[^>]*\bsrc="([^"]+)"/g)].map((m) => m[1]!);
  const styles = [...html.matchAll(/<link rel="stylesheet"[^>]*\bhref="([^"]+)"/g)].map((m) => m[1]!);
  const assets = readdirSync(join(dashboardDir(), 'assets')).map((f) => `/dashboard/assets/${f}`);

  test('GET / is the dashboard page, without credentials, revalidated on every load', async () => {
    const r = await call(app, 'GET', '/');
    assert.equal(r.status, 200);
    assert.match(header(r.headers, 'content-type'), /^text\/html; charset=utf-8/);
    assert.equal(header(r.headers, 'cache-control'), 'no-cache');
    assert.match(html, /<div id="app"><\/div>/);
    assert.match(html, /<link rel="icon" type="image\/svg\+xml" href="\/dashboard\/favicon\.svg">/);
    assert.equal(scripts.length, 1, 'one entry script');
    assert.match(scripts[0]!, /^\/dashboard\/assets\/index-[A-Za-z0-9_-]+\.js$/);
    assert.equal(styles.length, 1, 'one stylesheet');
    assert.match(styles[0]!, /^\/dashboard\/assets\/index-[A-Za-z0-9_-]+\.css$/);
  });

  test('hashed assets are served with their content type and cached for good', async () => {
    assert.ok(assets.some((a) => a.endsWith('.js')) && assets.some((a) => a.endsWith('.css')));
    for (const url of [...scripts, ...styles, ...assets]) {
      const r = await call(app, 'GET', url);
      assert.equal(r.status, 200, url);
      assert.match(header(r.headers, 'content-type'), url.endsWith('.js') ? /^text\/javascript; charset=utf-8/ : /^text\/css; charset=utf-8/, url);
      assert.equal(header(r.headers, 'cache-control'), 'public, max-age=31536000, immutable', url);
    }
    const js = String((await call(app, 'GET', scripts[0]!)).body);
    assert.match(js, /\/api\/auth\/login/);
  });

  test('text files go compressed to browsers that accept it (brotli before gzip), as they are to others', async () => {
    for (const url of ['/', scripts[0]!, styles[0]!, '/dashboard/favicon.svg']) {
      const plain = await app.inject({ method: 'GET', url });
      assert.equal(plain.headers['content-encoding'], undefined, `${url}: no encoding asked for`);
      assert.equal(plain.headers.vary, 'accept-encoding', url);
      const br = await app.inject({ method: 'GET', url, headers: { 'accept-encoding': 'gzip, deflate, br' } });
      assert.equal(br.headers['content-encoding'], 'br', url);
      assert.ok(br.rawPayload.length < plain.rawPayload.length, `${url}: smaller`);
      assert.deepEqual(brotliDecompressSync(br.rawPayload), plain.rawPayload, `${url}: the same file`);
      const gz = await app.inject({ method: 'GET', url, headers: { 'accept-encoding': 'gzip' } });
      assert.equal(gz.headers['content-encoding'], 'gzip', url);
      assert.deepEqual(gunzipSync(gz.rawPayload), plain.rawPayload, url);
      assert.equal(gz.headers['content-security-policy'], plain.headers['content-security-policy'], `${url}: the same CSP`);
    }
  });

  test('the favicon is an SVG', async () => {
    const r = await call(app, 'GET', '/dashboard/favicon.svg');
    assert.equal(r.status, 200);
    assert.equal(header(r.headers, 'content-type'), 'image/svg+xml');
    assert.match(String(r.body), /^<svg /);
  });

  test('every dashboard response carries a strict Content-Security-Policy and nosniff', async () => {
    for (const url of ['/', '/dashboard/favicon.svg', ...assets]) {
      const r = await call(app, 'GET', url);
      const csp = header(r.headers, 'content-security-policy');
      assert.match(csp, /(^|; )default-src 'self'(;|$)/, url);
      assert.match(csp, /frame-ancestors 'none'/, url);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/, url);
      assert.equal(header(r.headers, 'x-content-type-options'), 'nosniff', url);
    }
  });

  test('the page works under that CSP: no inline script or style, nothing from another origin, no code made at run time', async () => {
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline <script>');
    assert.doesNotMatch(html, /<style|\sstyle=|\son[a-z]+=/i, 'no inline style or event handler attributes');
    assert.doesNotMatch(html, /https?:\/\//, 'index.html loads nothing from another origin');
    for (const url of assets) {
      const text = String((await call(app, 'GET', url)).body);
      assert.doesNotMatch(text, /url\(\s*['"]?(https?:)?\/\//, `${url} loads nothing from another origin`);
      if (url.endsWith('.js')) {
        assert.doesNotMatch(text, /new Function\(|\beval\(/, `${url} makes no code at run time (no unsafe-eval)`);
      }
    }
  });

  test('HEAD / answers like GET without a body', async () => {
    const r = await app.inject({ method: 'HEAD', url: '/' });
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^text\/html/);
    assert.equal(r.body, '');
  });

  test('anything else under /dashboard/ is a 404', async () => {
    for (const url of [
      '/dashboard/x',
      '/dashboard/',
      '/dashboard/index.html',
      '/dashboard/assets/',
      '/dashboard/assets/x.js',
      '/dashboard/app.js',
      '/dashboard/../package.json',
      '/dashboard/%2e%2e/package.json',
      '/dashboard/assets/%2e%2e%2fpackage.json',
      `${scripts[0]}/x`,
    ]) {
      const r = await call(app, 'GET', url);
      assert.equal(r.status, 404, url);
      assert.deepEqual(r.body, { error: 'Not found' }, url);
    }
  });

  test('the dashboard routes stay out of the OpenAPI document', async () => {
    const doc = (await call(app, 'GET', '/api/openapi.json')).body;
    const paths = Object.keys(doc.paths);
    assert.ok(!paths.includes('/'));
    assert.ok(!paths.some((p) => p.startsWith('/dashboard')));
  });
});
