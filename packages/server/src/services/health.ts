import http from 'node:http';
import { formatHostPort, HEALTH_PATH } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { iso } from '../values.js';
import { healthCandidates, PROXY_NOT_SERVING, writeHealthVerdicts, type HealthVerdict } from '../data/servers.js';
import { jobIntervalFromEnv } from '../jobs.js';
import { mapBounded } from '../map-bounded.js';
import { notifyExpiringCertificates, pruneCertificateOrders } from './certificates.js';
import { publishFailoverAddresses, type DnsFailoverOptions, type FailoverOutcome } from './dns-failover.js';
import { NOTIFICATION_ADVICE, notificationMessages, notifyFromServer, quotedName } from './notifications.js';
import { AGENT_CONNECTION_TIMEOUT_MS, NOT_CONNECTED, serverAddress } from './servers.js';

/** The server health check runs every 5 minutes by default (docs/api.md, "HTTPS certificates"). */
export const DEFAULT_HEALTH_INTERVAL_SECONDS = 300;

/** RAMPART_HEALTH_INTERVAL: seconds between health cycles (default 300). */
export function healthIntervalFromEnv(raw: string | undefined): number {
  return jobIntervalFromEnv('RAMPART_HEALTH_INTERVAL', raw, DEFAULT_HEALTH_INTERVAL_SECONDS);
}

/** Probes in flight at once, and how long each may take. */
export const PROBE_CONCURRENCY = 50;
export const PROBE_TIMEOUT_MS = 3_000;
/** The probe's answer must be exactly this (HAProxy's HEALTH_LINES); more than a few bytes is not it. */
const PROBE_BODY = 'ok';
const PROBE_READ_LIMIT = 64;

export interface ProbeTarget {
  address: string;
  port: number;
}

/** ok, or why not: a phrase that follows "the health probe of <url>". */
export type ProbeResult = { ok: true } | { ok: false; reason: string };
export type Probe = (target: ProbeTarget, timeoutMs: number) => Promise<ProbeResult>;

export const probeUrl = (t: ProbeTarget) => `http://${formatHostPort(t.address, t.port)}${HEALTH_PATH}`;

/**
 * GET http://<address>:<port>/.well-known/rampart/health, which the server's HAProxy answers
 * itself: healthy on 200 `ok`. It sends no credentials, follows no redirect, reads at most 64
 * bytes of the answer, and gives up after `timeoutMs`. What it reports is coarse (the status,
 * refused, no answer), never the answer's content.
 */
export const httpProbe: Probe = (target, timeoutMs) =>
  new Promise((resolve) => {
    const signal = AbortSignal.timeout(timeoutMs);
    let settled = false;
    const done = (r: ProbeResult) => {
      if (settled) return;
      settled = true;
      resolve(r);
    };
    const req = http.request(
      { host: target.address, port: target.port, path: HEALTH_PATH, method: 'GET', agent: false, signal, headers: { 'user-agent': 'Rampart-Health/1', accept: 'text/plain' } },
      (res) => {
        const status = res.statusCode ?? 0;
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
          if (body.length > PROBE_READ_LIMIT) res.destroy();
        });
        res.on('error', () => {});
        res.on('close', () => {
          if (status !== 200) done({ ok: false, reason: `answered HTTP ${status}` });
          else if (body !== PROBE_BODY) done({ ok: false, reason: 'answered HTTP 200 with another body than Rampart HAProxy\'s "ok" (is another web server on that address and port?)' });
          else done({ ok: true });
        });
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (signal.aborted) done({ ok: false, reason: `got no answer within ${timeoutMs / 1000} s` });
      else if (err.code === 'ECONNREFUSED') done({ ok: false, reason: 'was refused (nothing listens on that address and port)' });
      else done({ ok: false, reason: `failed (${err.code ?? err.message})` });
    });
    req.end();
  });

export interface HealthCycleOptions {
  /** The probe (httpProbe); tests and the bench may point it elsewhere. */
  probe?: Probe;
  probeConcurrency?: number;
  probeTimeoutMs?: number;
  /** DNS failover's step of the cycle (services/dns-failover.ts). */
  dns?: DnsFailoverOptions;
  log?: { info(msg: string): void; warn(msg: string): void };
}

export interface HealthCycleResult {
  servers: number;
  healthy: number;
  /** server_down and server_recovered raised by this cycle. */
  down: string[];
  recovered: string[];
  dns: FailoverOutcome;
}

/**
 * One health cycle, every RAMPART_HEALTH_INTERVAL seconds: warns of certificates about to expire
 * (ssl_expiring) and forgets orders the authority no longer counts; decides every live server's
 * health (checkServers); then publishes the healthy servers' addresses of the domains with DNS
 * failover. Idempotent, so processes sharing a database may each run it (the job runs it on one
 * at a time).
 */
export async function runHealthCycle(ctx: ServiceContext, now: Date = ctx.now(), options: HealthCycleOptions = {}): Promise<HealthCycleResult> {
  await notifyExpiringCertificates(ctx, now);
  await pruneCertificateOrders(ctx, now);
  const servers = await checkServers(ctx, now, options);
  const dns = await publishFailoverAddresses(ctx, { log: options.log, ...options.dns });
  return { ...servers, dns };
}

type Candidate = Awaited<ReturnType<typeof healthCandidates>>[number];
const ms = (t: Date | string) => (t instanceof Date ? t : new Date(t)).getTime();

/** What to tell the account when the verdict turns the server down: the cause, then what to do. */
type Cause = 'probe' | 'proxy' | 'gone';

/**
 * Every live server's health, in a few set-based steps: one query reads the fleet with its
 * connections, the probes run with at most PROBE_CONCURRENCY at once, and one statement writes
 * every verdict (see writeHealthVerdicts). A server is healthy when its agent is connected with a
 * heartbeat younger than AGENT_CONNECTION_TIMEOUT_MS, has not reported HAProxy down, and its
 * HAProxy answers the probe on publicIp (else the address its agent connected from) and the HTTP
 * port its agent reported (80 for agents that do not say).
 *
 * Notifications, once per outage: server_down when a server turns unhealthy while connected (its
 * probe fails, HAProxy is not serving) or stays disconnected past the timeout without the
 * disconnect having raised it; server_recovered when a server that was down is healthy again,
 * whichever raised the down. A disconnect raises its own server_down (services/servers.ts) and
 * marks the server down, so the cycle does not raise a second. A server not connected for less
 * than the timeout keeps its verdict (its agent may be reconnecting after a control-plane
 * restart, which raises nothing), and one whose agent never connected has none (null).
 */
export async function checkServers(ctx: ServiceContext, now: Date, options: HealthCycleOptions = {}) {
  const probe = options.probe ?? httpProbe;
  const timeoutMs = options.probeTimeoutMs ?? PROBE_TIMEOUT_MS;
  const cutoff = new Date(now.getTime() - AGENT_CONNECTION_TIMEOUT_MS);
  const candidates = await healthCandidates(ctx.db);
  const causes = new Map<string, { cause: Cause; target?: ProbeTarget }>();

  const decide = async (s: Candidate): Promise<HealthVerdict> => {
    const connected = s.last_heartbeat_at !== null && ms(s.last_heartbeat_at) > cutoff.getTime();
    if (!connected) {
      if (s.last_seen_at === null) return { id: s.id, healthy: null, error: 'The agent has never connected', keep: false, connected: false };
      const since = `last heard from at ${iso(s.last_seen_at)}`;
      if (ms(s.last_seen_at) > cutoff.getTime()) return { id: s.id, healthy: null, error: `${NOT_CONNECTED} (${since})`, keep: true, connected: false };
      causes.set(s.id, { cause: 'gone' });
      return { id: s.id, healthy: false, error: `${NOT_CONNECTED} (${since})`, keep: false, connected: false };
    }
    if (s.proxy_serving === false) {
      causes.set(s.id, { cause: 'proxy' });
      return { id: s.id, healthy: false, error: PROXY_NOT_SERVING, keep: false, connected: true };
    }
    const address = serverAddress(s);
    const target = { address: address ?? '', port: s.http_port ?? 80 };
    const result: ProbeResult = address ? await probe(target, timeoutMs) : { ok: false, reason: 'has no address to go to' };
    if (result.ok) return { id: s.id, healthy: true, error: null, keep: false, connected: true };
    causes.set(s.id, { cause: 'probe', target });
    return { id: s.id, healthy: false, error: `The health probe of ${probeUrl(target)} ${result.reason}`, keep: false, connected: true };
  };

  const verdicts = await mapBounded(candidates, options.probeConcurrency ?? PROBE_CONCURRENCY, decide);
  const errors = new Map(verdicts.map((v) => [v.id, v.error]));
  const down: string[] = [];
  const recovered: string[] = [];
  let healthy = 0;
  await withDeadlockRetry(() =>
    ctx.db.transaction().execute(async (tx) => {
      down.length = recovered.length = healthy = 0;
      for (const row of await writeHealthVerdicts(tx, verdicts, now, cutoff)) {
        if (row.healthy === true) healthy++;
        let kind: 'server_down' | 'server_recovered' | undefined;
        let message = '';
        if (row.healthy === false && row.was !== false) {
          kind = 'server_down';
          message = downMessage(row.name, errors.get(row.id) ?? '', causes.get(row.id));
          down.push(row.id);
        } else if (row.healthy === true && row.was === false) {
          kind = 'server_recovered';
          message = notificationMessages.serverRecovered(row.name, 'its agent is connected, HAProxy serves and it answers the health probe');
          recovered.push(row.id);
        }
        if (kind) await notifyFromServer({ ...ctx, db: tx }, { accountId: row.account_id, serverId: row.id, kind, message });
      }
    }),
  );
  if (down.length || recovered.length) options.log?.info(`health cycle: ${down.length} server(s) down, ${recovered.length} recovered`);
  return { servers: candidates.length, healthy, down, recovered };
}

function downMessage(name: string, error: string, cause: { cause: Cause; target?: ProbeTarget } | undefined): string {
  switch (cause?.cause) {
    case 'probe':
      return (
        `Shield server ${quotedName(name)} is connected but failed its health check: ${lowerFirst(error)}. ` +
        `Check that its HAProxy runs and that port ${cause.target!.port} of ${cause.target!.address} is reachable from the control plane (a firewall, or a publicIp that is not the server's).`
      );
    case 'proxy':
      return notificationMessages.proxyNotServing(name);
    default:
      return `Shield server ${quotedName(name)} has not been connected for over ${AGENT_CONNECTION_TIMEOUT_MS / 60_000} minute(s) (${lowerFirst(error)}). ${NOTIFICATION_ADVICE.server_down}`;
  }
}

const lowerFirst = (s: string) => s.charAt(0).toLowerCase() + s.slice(1);

/** The verdicts lock many server rows; should another transaction lock two of them the other way round, PostgreSQL cancels one: try again once. */
async function withDeadlockRetry<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if ((err as { code?: unknown }).code !== '40P01') throw err;
    return fn();
  }
}
