import { readdir, readFile, readlink } from 'node:fs/promises';

/** A process listening on a TCP port, as /proc shows it. */
export interface PortHolder {
  pid: number;
  /** The process's command name (/proc/PID/comm), e.g. `haproxy`. */
  name: string;
}

/**
 * The socket inodes listening on `port` in /proc/net/tcp and tcp6 (state 0A, LISTEN); empty when
 * none, or when /proc is not there (not Linux).
 */
export async function listeningInodes(port: number, procRoot = '/proc'): Promise<Set<string>> {
  const inodes = new Set<string>();
  for (const file of ['net/tcp', 'net/tcp6']) {
    const text = await readFile(`${procRoot}/${file}`, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== '0A') continue;
      const localPort = parseInt(f[1]!.split(':')[1] ?? '', 16);
      if (localPort === port) inodes.add(f[9]!);
    }
  }
  return inodes;
}

/**
 * The processes holding a listening socket on `port`: /proc/net/tcp{,6} give the sockets' inodes,
 * /proc/PID/fd the processes that have them open. Only processes this user may look into are
 * found (another user's need root): the answer may be empty although the port is taken.
 */
export async function portHolders(port: number, procRoot = '/proc'): Promise<PortHolder[]> {
  const inodes = await listeningInodes(port, procRoot);
  if (inodes.size === 0) return [];
  const holders: PortHolder[] = [];
  const pids = (await readdir(procRoot).catch(() => [] as string[])).filter((n) => /^\d+$/.test(n));
  for (const pid of pids) {
    const fds = await readdir(`${procRoot}/${pid}/fd`).catch(() => [] as string[]);
    for (const fd of fds) {
      const link = await readlink(`${procRoot}/${pid}/fd/${fd}`).catch(() => '');
      const m = /^socket:\[(\d+)\]$/.exec(link);
      if (m && inodes.has(m[1]!)) {
        const name = (await readFile(`${procRoot}/${pid}/comm`, 'utf8').catch(() => '?')).trim();
        holders.push({ pid: Number(pid), name });
        break;
      }
    }
  }
  return holders.sort((a, b) => a.pid - b.pid);
}

/** A listener HAProxy could not open: "cannot bind socket (Address already in use) for [0.0.0.0:8081]". */
export interface BindFailure {
  address: string;
  port: number;
  /** The system's reason, e.g. `Address already in use`, `Permission denied`. */
  reason: string;
}

/** HAProxy's bind failures among its alert messages (2.6: "... cannot bind socket (REASON) for [ADDR:PORT]"). */
export function bindFailures(messages: readonly string[]): BindFailure[] {
  const out: BindFailure[] = [];
  for (const text of messages) {
    const m = /cannot bind socket \(([^)]*)\)(?: for)? \[(.*):(\d+)\]/.exec(text);
    if (m) out.push({ reason: m[1]!, address: m[2]!, port: Number(m[3]) });
  }
  return out;
}

/**
 * What a bind failure means for the operator, in one sentence naming the port, the process
 * holding it when it can be found, and what to do: a problem of the host, not of the configuration.
 */
export async function explainBindFailure(f: BindFailure, flag: string, find: (port: number) => Promise<PortHolder[]> = portHolders): Promise<string> {
  const where = `port ${f.port}${f.address === '0.0.0.0' || f.address === '*' || f.address === '::' ? '' : ` on ${f.address}`}`;
  if (/in use/i.test(f.reason)) {
    const holders = await find(f.port).catch(() => [] as PortHolder[]);
    const who = holders.length ? `by ${holders.map((h) => `${h.name} (pid ${h.pid})`).join(', ')}` : `by another process (not visible to this user: \`sudo ss -ltnp 'sport = :${f.port}'\` names it)`;
    return `HAProxy cannot listen on ${where}: it is already in use ${who}. Stop that process or give this agent another ${flag}`;
  }
  if (/permission/i.test(f.reason)) {
    return `HAProxy cannot listen on ${where}: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE). Run the agent as the packaged service does, or give it a port above 1023 with ${flag}`;
  }
  return `HAProxy cannot listen on ${where}: ${f.reason}. Check the address and port (${flag})`;
}
