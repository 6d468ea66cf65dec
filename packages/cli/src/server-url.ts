import { isIP } from 'node:net';
import { UsageError } from './args.js';

// The control plane an agent connects to. The agent sends its connection token in the first
// request, so a plain ws:// URL is accepted only on this machine (loopback) or when the operator
// says --insecure: anywhere else the token would cross the network in clear.

function isLoopback(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1' || /^::ffff:127\./.test(host);
}

/** The agent's --server URL, checked: ws:// or wss://, and ws:// only on loopback unless insecure. */
export function checkServerUrl(value: string, insecure: boolean): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError('--server must be a ws:// or wss:// URL');
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:') throw new UsageError('--server must be a ws:// or wss:// URL');
  if (url.username || url.password) throw new UsageError('--server must not hold a user name or password (the token goes in RAMPART_AGENT_TOKEN)');
  if (url.protocol === 'ws:' && !isLoopback(url.hostname) && !insecure) {
    throw new UsageError(
      `--server ${url.protocol}//${url.host} is plain WebSocket to another machine: the connection token would cross the network in clear. ` +
        'Use wss:// (the control plane behind TLS, docs/operations.md), or --insecure on a network you trust',
    );
  }
  return value;
}
