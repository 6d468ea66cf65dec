import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Backoff, delay, reconnectBackoff } from '../src/backoff.js';

// docs/architecture.md, "The flow of one change": reconnect uses exponential backoff with full jitter, 1 s
// doubling to 60 s; capped, jittered, reset on success, cancellable with an
// AbortSignal, random source injected so these tests are deterministic.

const ALMOST_ONE = 0.999999;
const CEILINGS = [1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000, 60_000];

/** The wait is floor(random * ceiling): with random just under 1 it is just under the ceiling. */
function assertNearCeiling(wait: number, ceiling: number, n: number) {
  assert.ok(Number.isInteger(wait), `wait ${n} is whole milliseconds: ${wait}`);
  assert.ok(wait < ceiling, `wait ${n} = ${wait} stays below its ceiling ${ceiling}`);
  assert.ok(wait >= ceiling - Math.ceil(ceiling * 1e-5) - 1, `wait ${n} = ${wait} approaches its ceiling ${ceiling}`);
}

describe('Backoff', () => {
  test('with the largest random the waits approach 1 s, 2 s, 4 s, ... and are capped at 60 s', () => {
    const b = new Backoff({ baseMs: 1000, capMs: 60_000, random: () => ALMOST_ONE });
    CEILINGS.forEach((ceiling, n) => assertNearCeiling(b.next(), ceiling, n));
  });

  test('the defaults are 1 s doubling to 60 s', () => {
    const b = reconnectBackoff({ random: () => ALMOST_ONE });
    CEILINGS.forEach((ceiling, n) => assertNearCeiling(b.next(), ceiling, n));
  });

  test('the cap holds after very many failures (no overflow, no NaN)', () => {
    const b = new Backoff({ baseMs: 1000, capMs: 60_000, random: () => ALMOST_ONE });
    for (let i = 0; i < 2000; i++) {
      const wait = b.next();
      assert.ok(Number.isFinite(wait) && wait >= 0 && wait < 60_000, `attempt ${i}: ${wait}`);
    }
    assertNearCeiling(b.next(), 60_000, 2000);
  });

  test('with random 0 every wait is 0 (full jitter reaches the floor)', () => {
    const b = new Backoff({ baseMs: 1000, capMs: 60_000, random: () => 0 });
    for (let i = 0; i < 40; i++) assert.equal(b.next(), 0, `attempt ${i}`);
  });

  test('the wait is the random fraction of the ceiling (full jitter, not equal jitter)', () => {
    const b = new Backoff({ baseMs: 1000, capMs: 60_000, random: () => 0.5 });
    assert.deepEqual([b.next(), b.next(), b.next(), b.next()], [500, 1000, 2000, 4000]);
  });

  test('reset() brings the ceiling back to 1 s', () => {
    const b = new Backoff({ baseMs: 1000, capMs: 60_000, random: () => ALMOST_ONE });
    for (let i = 0; i < 10; i++) b.next();
    assertNearCeiling(b.next(), 60_000, 10);
    b.reset();
    assertNearCeiling(b.next(), 1000, 0);
    assertNearCeiling(b.next(), 2000, 1);
    b.reset();
    b.reset();
    assertNearCeiling(b.next(), 1000, 0);
  });

  test('spread: the next waits are the random fraction of the window, then the steps go on from the window; reset ends it', () => {
    let r = 0.5;
    const b = new Backoff({ baseMs: 1000, capMs: 60_000, random: () => r });
    for (let i = 0; i < 6; i++) b.next(); // deep into the steps
    b.spread(10_000, 3);
    assert.deepEqual([b.next(), b.next(), b.next()], [5000, 5000, 5000], 'three waits over the window, whatever the attempt');
    assert.deepEqual([b.next(), b.next()], [8000, 16_000], 'then the steps from the first whose ceiling reaches 10 s (16 s)');
    b.spread(10_000, 3);
    b.reset();
    assert.equal(b.next(), 500, 'a reset (a healthy connection) ends the spread');
    r = ALMOST_ONE;
    b.spread(10_000);
    assert.ok(b.next() >= 9999);
  });

  test('the random source is called once per wait', () => {
    let calls = 0;
    const b = new Backoff({
      baseMs: 1000,
      capMs: 60_000,
      random: () => {
        calls++;
        return 0.25;
      },
    });
    b.next();
    b.next();
    b.next();
    assert.equal(calls, 3);
  });
});

/** 'timeout' if p has not settled within ms: a guard so a broken delay fails fast instead of hanging. */
async function settlesWithin(p: Promise<void>, ms: number): Promise<'settled' | 'timeout'> {
  let t: NodeJS.Timeout | undefined;
  const guard = new Promise<'timeout'>((resolve) => (t = setTimeout(() => resolve('timeout'), ms)));
  try {
    return await Promise.race([p.then(() => 'settled' as const), guard]);
  } finally {
    clearTimeout(t);
  }
}

describe('delay', () => {
  test('resolves at once when the signal aborts while it waits', async () => {
    const controller = new AbortController();
    const started = performance.now();
    const waiting = delay(60_000, controller.signal);
    let settled = false;
    void waiting.then(() => (settled = true));
    await Promise.resolve();
    assert.equal(settled, false, 'still waiting before the abort');
    controller.abort();
    assert.equal(await settlesWithin(waiting, 1000), 'settled');
    assert.ok(performance.now() - started < 1000, 'resolved long before its 60 s');
  });

  test('resolves at once when the signal is already aborted', async () => {
    const started = performance.now();
    assert.equal(await settlesWithin(delay(60_000, AbortSignal.abort()), 1000), 'settled');
    assert.ok(performance.now() - started < 1000);
  });

  test('resolves after the time without a signal, and leaves no listener behind', async () => {
    const controller = new AbortController();
    let removed = 0;
    const signal = controller.signal;
    const remove = signal.removeEventListener.bind(signal);
    signal.removeEventListener = ((...args: Parameters<AbortSignal['removeEventListener']>) => {
      removed++;
      return remove(...args);
    }) as AbortSignal['removeEventListener'];
    await delay(5, signal);
    await delay(0);
    assert.equal(removed, 1, 'the abort listener is removed once the timer fires');
  });
});

describe('Backoff on an injected clock', () => {
  test('equal jitter never waits less than half the step, and wait() sleeps on the given clock', async () => {
    const { FakeClock } = await import('./fake-clock.js');
    const clock = new FakeClock(0);
    const b = new Backoff({ baseMs: 1000, capMs: 8000, jitter: 'equal', random: () => 0, clock });
    assert.deepEqual([b.next(), b.next(), b.next(), b.next(), b.next()], [500, 1000, 2000, 4000, 4000]);
    b.reset();
    let woke = false;
    const waiting = b.wait().then((ms) => ((woke = true), ms));
    await new Promise((r) => setImmediate(r));
    clock.advance(499);
    await new Promise((r) => setImmediate(r));
    assert.equal(woke, false, 'still asleep before its time');
    clock.advance(1);
    assert.equal(await waiting, 500);
    assert.equal(woke, true);
  });
});
