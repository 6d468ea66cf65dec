/**
 * `fn` over every item with at most `limit` calls in flight (the health cycle's probes, its DNS
 * provider calls); results in the items' order. `fn` should not throw: a rejection rejects the
 * whole map once the calls in flight have settled.
 */
export async function mapBounded<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  if (!(limit >= 1)) throw new RangeError('mapBounded: limit must be at least 1');
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
