import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { call, makeTestApp } from './helpers.js';

// The web dashboard (packages/dashboard) served by the control plane: the page at /, its two
// assets under /dashboard/, each with the right content type and a strict Content-Security-Policy,
// no authentication needed to load them, nothing else under /dashboard/.

function header(headers: Record<string, unknown>, name: string): string {
  const v = headers[name];
  return Array.isArray(v) ? v.join(', ') : String(v ?? '');
}

describe('dashboard', async () => {
  const { app } = await makeTestApp();

  test('GET / is the dashboard page with the sign-in form, without credentials', async () => {
    const r = await call(app, 'GET', '/');
    assert.equal(r.status, 200);
    assert.match(header(r.headers, 'content-type'), /^text\/html; charset=utf-8/);
    const html = String(r.body);
    assert.match(html, /<form id="signin-form"/);
    assert.match(html, /<input type="email" name="email"/);
    assert.match(html, /<input type="password" name="password"/);
    assert.match(html, /<script src="\/dashboard\/app\.js" defer><\/script>/);
    assert.match(html, /<link rel="stylesheet" href="\/dashboard\/style\.css">/);
  });

  test('GET /dashboard/app.js is JavaScript and /dashboard/style.css is CSS', async () => {
    const js = await call(app, 'GET', '/dashboard/app.js');
    assert.equal(js.status, 200);
    assert.match(header(js.headers, 'content-type'), /^text\/javascript; charset=utf-8/);
    assert.match(String(js.body), /credentials: 'same-origin'/);
    assert.match(String(js.body), /\/api\/auth\/login/);

    const css = await call(app, 'GET', '/dashboard/style.css');
    assert.equal(css.status, 200);
    assert.match(header(css.headers, 'content-type'), /^text\/css; charset=utf-8/);
  });

  test('every dashboard response carries a strict Content-Security-Policy and nosniff', async () => {
    for (const url of ['/', '/dashboard/app.js', '/dashboard/style.css']) {
      const r = await call(app, 'GET', url);
      const csp = header(r.headers, 'content-security-policy');
      assert.match(csp, /(^|; )default-src 'self'(;|$)/, url);
      assert.match(csp, /frame-ancestors 'none'/, url);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/, url);
      assert.equal(header(r.headers, 'x-content-type-options'), 'nosniff', url);
    }
  });

  test('the page works under that CSP: no inline script or style, nothing from another origin, no innerHTML', async () => {
    const html = String((await call(app, 'GET', '/')).body);
    const js = String((await call(app, 'GET', '/dashboard/app.js')).body);
    const css = String((await call(app, 'GET', '/dashboard/style.css')).body);
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline <script>');
    assert.doesNotMatch(html, /<style|\sstyle=|\son[a-z]+=/i, 'no inline style or event handler attributes');
    for (const [name, text] of [['index.html', html], ['app.js', js], ['style.css', css]]) {
      assert.doesNotMatch(text, /https?:\/\/|url\(\s*['"]?\/\//, `${name} loads nothing from another origin`);
    }
    assert.doesNotMatch(js, /innerHTML|outerHTML|insertAdjacentHTML|document\.write/, 'data never reaches the DOM as HTML');
  });

  test('HEAD / answers like GET without a body', async () => {
    const r = await app.inject({ method: 'HEAD', url: '/' });
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^text\/html/);
    assert.equal(r.body, '');
  });

  test('anything else under /dashboard/ is a 404', async () => {
    for (const url of ['/dashboard/x', '/dashboard/', '/dashboard/index.html', '/dashboard/../package.json', '/dashboard/%2e%2e/package.json', '/dashboard/app.js/x']) {
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
