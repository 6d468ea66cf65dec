import { once } from 'node:events';
import http, { type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';

// Real receivers for notification delivery tests: a webhook endpoint and an SMTP server, both on
// 127.0.0.1, each keeping what it received.

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** The raw body, as the signature covers it. */
  body: string;
}

/**
 * An HTTP receiver: records every request and answers with `answer` when given, otherwise with
 * the next of `statuses` (push some to answer those first, one per request), then 204.
 */
export async function webhookReceiver(answer?: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
  const requests: ReceivedRequest[] = [];
  const statuses: number[] = [];
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    requests.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
    if (answer) answer(req, res);
    else res.writeHead(statuses.shift() ?? 204).end();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  return { port, url: `http://127.0.0.1:${port}`, requests, statuses };
}

export interface ReceivedMail {
  from: string;
  to: string[];
  raw: string;
}

/** An SMTP server (smtp-server, no TLS, no authentication) that keeps every message it accepts. */
export async function smtpReceiver(options: Partial<SMTPServerOptions> = {}) {
  const messages: ReceivedMail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    // A client a test left hanging (a message never answered) is cut at the end, not waited for 30 s.
    closeTimeout: 100,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const from = session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
        messages.push({ from, to: session.envelope.rcptTo.map((a) => a.address), raw: Buffer.concat(chunks).toString() });
        callback();
      });
    },
    ...options,
  });
  server.listen(0, '127.0.0.1');
  await once(server.server, 'listening');
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.server.address() as AddressInfo;
  return { port, url: `smtp://127.0.0.1:${port}`, messages };
}

/** A quoted-printable mail body as text, lines joined with \n. */
export function mailText(raw: string): string {
  const body = raw.slice(raw.indexOf('\r\n\r\n') + 4);
  return body
    .replace(/=\r?\n/g, '')
    .replace(/=([0-9A-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)))
    .replace(/\r\n/g, '\n');
}
