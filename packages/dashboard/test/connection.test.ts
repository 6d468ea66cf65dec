import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConnectionLost, ok, onConnection } from '../src/api/client.js';

const answer = { data: [], response: new Response('[]', { status: 200 }) };

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

test('the connection is lost at a failed request and back only at an answer to a request sent after it, not at a slow answer sent before', async () => {
  const seen: boolean[] = [];
  const off = onConnection((online) => seen.push(online));
  try {
    const slow = deferred<typeof answer>();
    const before = ok(slow.promise);
    const failing = deferred<typeof answer>();
    const failed = ok(failing.promise);
    failing.reject(new TypeError('Failed to fetch'));
    await assert.rejects(failed, ConnectionLost);
    assert.deepEqual(seen, [false]);

    slow.resolve(answer);
    await before;
    assert.deepEqual(seen, [false], 'an answer to a request sent before the failure does not say the server is back');

    await ok(Promise.resolve(answer));
    assert.deepEqual(seen, [false, true], 'a request sent after it does');
  } finally {
    off();
  }
});
