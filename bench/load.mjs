// The load generator of the benchmarks, in a process of its own so that it never shares an event
// loop (or a CPU core's time slices) with a server it measures. Prints one JSON line.
// Usage: node bench/load.mjs <url> <connections> <seconds> [<header name> <value>]...
import autocannon from 'autocannon';

const [url, connections, seconds, ...pairs] = process.argv.slice(2);
const headers = {};
for (let i = 0; i + 1 < pairs.length; i += 2) headers[pairs[i]] = pairs[i + 1];
const run = (duration) => autocannon({ url, headers, connections: Number(connections), duration });
await run(1); // warm-up: JIT and connection pools settle before the measured run
const r = await run(Number(seconds));
process.stdout.write(`${JSON.stringify({ rps: r.requests.average, p99: r.latency.p99, errors: r.errors + r.non2xx })}\n`);
