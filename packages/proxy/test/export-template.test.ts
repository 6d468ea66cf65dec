import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { renderExportTemplate, UnsafeValueError } from '../src/index.js';
import { goldenSuite } from './golden.js';

goldenSuite(fileURLToPath(new URL('./golden/export-template', import.meta.url)), (input) => renderExportTemplate(input.domains));

test('the renderer refuses a value that is not a validated token', () => {
  const hostile = ['example.com\n    bind *:1', 'example.com #', 'exa"mple.com', 'example.com\\', 'exam\u0000ple.com', '%[src].example.com'];
  for (const domain of hostile) {
    assert.throws(() => renderExportTemplate([{ domain, origins: [{ ip: '10.0.0.1', port: 80 }] }]), UnsafeValueError, domain);
  }
  for (const ip of ['10.0.0.1 check', '10.0.0.1\n', 'fe80::1%eth0', '[::1]', 'localhost']) {
    assert.throws(() => renderExportTemplate([{ domain: 'example.com', origins: [{ ip, port: 80 }] }]), UnsafeValueError, ip);
  }
  assert.throws(() => renderExportTemplate([{ domain: 'example.com', origins: [{ ip: '10.0.0.1', port: 0 }] }]), UnsafeValueError);
});
