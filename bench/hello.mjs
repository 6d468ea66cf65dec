// The baselines: a bare Fastify hello-world, and the same server answering a fixed body read from
// a file (the size of a real answer), run as its own process like the server under test.
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';

const [port, bodyFile] = process.argv.slice(2);
const body = bodyFile ? readFileSync(bodyFile, 'utf8') : '[]';
const app = Fastify({ logger: false });
app.get('/', async () => ({ hello: 'world' }));
app.get('/fixed', async (_req, reply) => reply.type('application/json; charset=utf-8').send(body));
await app.listen({ port: Number(port), host: '127.0.0.1' });
process.on('SIGTERM', () => app.close().then(() => process.exit(0)));
