import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor } from '../../../test/support/processes.js';
import { BoundedQueue, hashPassword, passwordHashing, verifyPassword } from '../src/crypto.js';
import { call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md "Browser sessions" and docs/architecture.md "Security rules": password hashing
// (scrypt, on libuv's threadpool) runs at most one hash per CPU and never on the whole pool, with
// at most 64 more waiting; beyond that a sign-in is refused at once (503, Retry-After) instead of
// queueing without bound, so a burst of bad sign-ins does not hold up the rest of the API.

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('BoundedQueue', () => {
  test('runs at most `concurrency` tasks, lets at most `maxWaiting` wait in order, refuses the rest at once', async () => {
    const q = new BoundedQueue(2, 3, () => new Error('full'));
    const gates = Array.from({ length: 10 }, deferred);
    const started: number[] = [];
    const results = gates.map((g, i) =>
      q
        .run(async () => {
          started.push(i);
          await g.promise;
          return i;
        })
        .then(
          (v) => ({ ok: true, v }),
          (err: Error) => ({ ok: false, v: err.message }),
        ),
    );
    // Refusals are settled without any task finishing.
    const refused = await Promise.all(results.slice(5));
    assert.deepEqual(
      refused,
      Array.from({ length: 5 }, () => ({ ok: false, v: 'full' })),
    );
    assert.deepEqual(started, [0, 1]);
    assert.deepEqual(q.stats, { running: 2, waiting: 3, peak: 2, started: 2 });

    // Each finished task hands its slot to the oldest waiting one.
    gates[1]!.resolve();
    await results[1];
    await waitFor(() => started.length === 3, 'task 2 started', 5000, 1);
    assert.deepEqual(started, [0, 1, 2]);
    for (const g of gates) g.resolve();
    assert.deepEqual(
      (await Promise.all(results.slice(0, 5))).map((r) => r.v),
      [0, 1, 2, 3, 4],
    );
    assert.deepEqual(started, [0, 1, 2, 3, 4]);
    assert.deepEqual(q.stats, { running: 0, waiting: 0, peak: 2, started: 5 });

    // A failing task frees its slot too.
    await assert.rejects(
      q.run(async () => Promise.reject(new Error('boom'))),
      /boom/,
    );
    assert.equal(q.stats.running, 0);
  });

  test('the password queue: one hash per CPU at most, never the whole threadpool, 64 waiting', async () => {
    assert.ok(passwordHashing.concurrency >= 1);
    assert.ok(passwordHashing.concurrency <= (Number(process.env.UV_THREADPOOL_SIZE) || 4) - 1 || passwordHashing.concurrency === 1);
    assert.equal(passwordHashing.maxWaiting, 64);
    // And it still hashes and verifies.
    const stored = await hashPassword('correct horse battery');
    assert.equal(await verifyPassword('correct horse battery', stored), true);
    assert.equal(await verifyPassword('wrong horse battery', stored), false);
  });
});

describe('a burst of bad sign-ins', () => {
  test('300 concurrent bad sign-ins: at most the queue is hashed, the rest 503 with Retry-After at once; an API-key request meanwhile is not held up', async () => {
    const t = await makeTestApp();
    const { key } = await newAccount(t.app, 'pro');
    const capacity = passwordHashing.concurrency + passwordHashing.maxWaiting;
    const burst = Math.max(300, capacity + 100);
    passwordHashing.peak = 0;
    let maxWaiting = 0;
    const watch = setInterval(() => (maxWaiting = Math.max(maxWaiting, passwordHashing.stats.waiting)), 1);

    const order: string[] = [];
    // Every attempt from its own address with its own email: the sign-in limits play no part here.
    const logins = Array.from({ length: burst }, (_, i) =>
      t.app
        .inject({
          method: 'POST',
          url: '/api/auth/login',
          remoteAddress: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify({ email: `nobody${i}@example.com`, password: 'not the password' }),
        })
        .then((r) => {
          order.push(`login ${r.statusCode}`);
          return r;
        }),
    );
    // Once the queue is full, an API-key request.
    await waitFor(() => passwordHashing.stats.waiting === passwordHashing.maxWaiting, 'the hashing queue full', 60_000, 1);
    const get = call(t.app, 'GET', '/api/settings/api-keys', { key }).then((r) => {
      order.push('get');
      return r;
    });
    const replies = await Promise.all(logins);
    const listed = await get;
    clearInterval(watch);

    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    const refused = replies.filter((r) => r.statusCode === 503);
    const checked = replies.filter((r) => r.statusCode === 401);
    assert.equal(refused.length + checked.length, burst, `only 401 and 503: ${[...new Set(replies.map((r) => r.statusCode))]}`);
    assert.ok(refused.length > 0, 'some sign-ins were refused rather than queued');
    for (const r of refused) {
      assert.deepEqual(JSON.parse(r.body), { error: 'Too many password checks at once, try again in a moment' });
      assert.equal(r.headers['retry-after'], '1');
    }
    assert.ok(passwordHashing.peak <= passwordHashing.concurrency, `at most ${passwordHashing.concurrency} hashes at once, saw ${passwordHashing.peak}`);
    assert.ok(maxWaiting <= passwordHashing.maxWaiting, `at most ${passwordHashing.maxWaiting} waiting, saw ${maxWaiting}`);

    // The API-key request answered while most of the hashed sign-ins were still waiting for a turn.
    const at = order.indexOf('get');
    const checkedAfterGet = order.slice(at + 1).filter((x) => x === 'login 401').length;
    assert.ok(checkedAfterGet > checked.length / 2, `${checkedAfterGet} of ${checked.length} checked sign-ins answered after the API-key request`);
  });
});
