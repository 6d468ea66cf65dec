// Loaded into every Node process the test suite starts (scripts/run-tests.mjs puts it in
// NODE_OPTIONS, which the test files' processes and the rampart processes they start inherit).
//
// WebAssembly on V8's baseline compiler only. PGlite is PostgreSQL compiled to WebAssembly (9 MB):
// V8 compiles it with Liftoff, then compiles its busy functions again in the background with
// TurboFan, about 1 to 3 s of CPU in every process that opens an embedded database. A test
// process lives seconds and never earns that back; on a 2-core machine it was about a tenth of the
// suite's CPU. The product keeps V8's default: under load a control plane on PGlite answers 13 to
// 24% more requests per second with TurboFan's code (npm run bench:api). The flag changes how fast
// the code runs, never what it does.
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--liftoff-only');
