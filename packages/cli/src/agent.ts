import { Agent } from '@rampart/agent';
import { parseFlags, portFrom, UsageError } from './args.js';

export const AGENT_HELP = `Usage: rampart agent --server ws://HOST:PORT/agent --token T [--data-dir DIR] [--http-port 80]
                     [--https-port 443] [--haproxy PATH] [--bind ADDR]

One shield server's agent. It starts and owns its HAProxy, keeps an outbound WebSocket to the
service (reconnecting with capped, jittered backoff), and applies every configuration it is sent.

Options:
  --server URL       the service's agent endpoint, e.g. ws://127.0.0.1:8080/agent
  --token T          this server's connection token (env RAMPART_AGENT_TOKEN)
  --data-dir DIR     where HAProxy's files, sockets and the agent's state live (default ./agent-data)
  --http-port N      HAProxy's HTTP port (default 80)
  --https-port N     HAProxy's HTTPS port (default 443; used once certificates exist)
  --haproxy PATH     the haproxy binary (default haproxy on PATH)
  --bind ADDR        address HAProxy listens on (default all)
  --nbthread N       HAProxy worker threads (default: one per CPU)
  --country-map FILE a CIDR -> country map ("<cidr> <CC>" lines) instead of the bundled data set's
`;

export async function agentCommand(args: string[]): Promise<void> {
  const flags = parseFlags(args, ['server', 'token', 'data-dir', 'http-port', 'https-port', 'haproxy', 'bind', 'nbthread', 'country-map', 'acme-directory', 'resolver']);
  if (flags.help) {
    process.stdout.write(AGENT_HELP);
    return;
  }
  const token = flags.token ?? process.env.RAMPART_AGENT_TOKEN;
  if (!flags.server) throw new UsageError('--server is required');
  if (!token) throw new UsageError('--token (or RAMPART_AGENT_TOKEN) is required');
  if (!/^wss?:\/\//.test(flags.server)) throw new UsageError('--server must be a ws:// or wss:// URL');
  const agent = new Agent({
    serverUrl: flags.server,
    token,
    dataDir: flags['data-dir'] ?? './agent-data',
    httpPort: portFrom(flags['http-port'], '--http-port', 80),
    httpsPort: portFrom(flags['https-port'], '--https-port', 443),
    haproxyBin: flags.haproxy ?? 'haproxy',
    ...(flags.bind ? { bindAddress: flags.bind } : {}),
    ...(flags['country-map'] ? { countryMap: flags['country-map'] } : {}),
    ...(flags.nbthread ? { nbthread: portFrom(flags.nbthread, '--nbthread', 0) } : {}),
  });
  await agent.start();
  const stop = async () => {
    await agent.stop();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
