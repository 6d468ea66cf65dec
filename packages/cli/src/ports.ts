// Checking the ports a command will listen on before anything starts (serve and up). Kept apart
// from up.ts so that `rampart serve` does not load the agent that `up` starts beside it.
import { createServer as createTcpServer } from 'node:net';

/** Whether host:port can be listened on right now; other errors (EACCES, ...) are thrown. */
async function portIsFree(port: number, host: string): Promise<boolean> {
  const probe = createTcpServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen({ port, host, exclusive: true }, resolve);
    });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') return false;
    throw new Error(`port ${port} cannot be used (${(err as Error).message}); choose another`);
  }
  await new Promise((resolve) => probe.close(resolve));
  return true;
}

/**
 * Every port a command listens on, checked before anything starts: a taken one would otherwise
 * leave a half-started stack waiting (an origin that cannot listen, an HAProxy that keeps failing
 * to bind). Port 0 means "any free port" and needs no check.
 */
export async function checkPorts(ports: readonly { flag: string; port: number }[], host: string): Promise<void> {
  const problems: string[] = [];
  const seen = new Map<number, string>();
  for (const { flag, port } of ports) {
    if (port === 0) continue;
    const other = seen.get(port);
    if (other) {
      problems.push(`${other} and ${flag} are both ${port}; choose another with ${flag}`);
      continue;
    }
    seen.set(port, flag);
    try {
      if (!(await portIsFree(port, host))) problems.push(`port ${port} is in use; choose another with ${flag}`);
    } catch (err) {
      problems.push(`${(err as Error).message} with ${flag}`);
    }
  }
  if (problems.length) throw new Error(problems.join('\nrampart: '));
}
