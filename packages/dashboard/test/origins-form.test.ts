import assert from 'node:assert/strict';
import { test } from 'node:test';
import { originText, parseOrigins } from '../src/views/domains.js';

// The Add-domain form's origins: address:port or name:port a line, as the API takes them.

test('addresses and names parse to { ip, port } and { host, port }; names lowercased', () => {
  assert.deepEqual(parseOrigins('192.0.2.10:8080\n[2001:db8::10]:80\nOrigin.Example.com:8080\nlocalhost:3000\n'), {
    ok: true,
    origins: [
      { ip: '192.0.2.10', port: 8080 },
      { ip: '2001:db8::10', port: 80 },
      { host: 'origin.example.com', port: 8080 },
      { host: 'localhost', port: 3000 },
    ],
  });
});

test('a line that is neither is named', () => {
  for (const bad of ['not an origin', 'bad_name:80', 'origin.example.com', '10.0.0.1:0', 'a..b:80', '123:80']) {
    const r = parseOrigins(`192.0.2.1:80\n${bad}`);
    assert.equal(r.ok, false, bad);
    assert.match((r as { message: string }).message, /^Line 2 is not address:port or name:port/);
  }
});

test('originText shows either kind as the form takes it back', () => {
  assert.equal(originText({ host: 'origin.example.com', port: 8080 }), 'origin.example.com:8080');
  assert.equal(originText({ ip: '2001:db8::10', port: 80 }), '[2001:db8::10]:80');
});
