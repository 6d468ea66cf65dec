import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { request } from 'node:http';
import { connect } from 'node:net';
import { HEALTH_SOCKET, MASTER_SOCKET } from '@rampart/proxy';
import { Backoff, systemClock, type Clock } from './backoff.js';

export interface ConfigError {
  line: number | null;
  message: string;
}

/** HAProxy's [ALERT] lines as {line, message}, e.g. "Parsing [x.cfg:12]: unknown keyword 'foo'". */
export function parseAlerts(output: string): ConfigError[] {
  const errors: ConfigError[] = [];
  for (const raw of output.split('\n')) {
    const m = /\[ALERT\]\s*\(\d+\)\s*:\s*(.*)$/.exec(raw);
    if (!m) continue;
    const text = m[1]!.trim();
    if (/Fatal errors found in configuration|Error\(s\) found in configuration file/.test(text)) continue;
    const line = /\[[^\]]*:(\d+)\]/.exec(text);
    errors.push({ line: line ? Number(line[1]) : null, message: text.replace(/^config\s*:\s*/, '') });
  }
  return errors;
}

/** `haproxy -c` on the exact file that would run. */
export async function checkConfig(bin: string, cfgPath: string): Promise<{ ok: boolean; errors: ConfigError[] }> {
  const child = spawn(bin, ['-c', '-f', cfgPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code === 0) return { ok: true, errors: [] };
  const errors = parseAlerts(out);
  return { ok: false, errors: errors.length ? errors : [{ line: null, message: out.trim().slice(0, 2000) || `haproxy -c exited with ${code}` }] };
}

/**
 * One HAProxy in master-worker mode, owned by the agent: started on a config path (a symlink the
 * agent swaps), reloaded through the master CLI socket, asked over a unix health socket which
 * configuration its worker runs.
 */
export class HaproxyProcess extends EventEmitter {
  private child: ChildProcess | undefined;
  /** Resolves once the current child exited and its output was read to the end. */
  private closed: Promise<void> = Promise.resolve();
  private stderrTail: string[] = [];

  constructor(
    private readonly bin: string,
    private readonly cfgPath: string,
    private readonly runDir: string,
    private readonly clock: Clock = systemClock,
  ) {
    super();
  }

  get running(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Alert lines HAProxy printed since the mark (used to explain a refused reload). */
  alertsSince(mark: number): ConfigError[] {
    return parseAlerts(this.stderrTail.slice(mark).join('\n'));
  }

  outputMark(): number {
    return this.stderrTail.length;
  }

  start(): void {
    const child = spawn(this.bin, ['-W', '-S', `${this.runDir}/${MASTER_SOCKET},mode,600`, '-f', this.cfgPath], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child = child;
    this.closed = new Promise((resolve) => child.once('close', () => resolve()));
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => {
      this.stderrTail.push(...d.split('\n').filter(Boolean));
      if (this.stderrTail.length > 2000) this.stderrTail = this.stderrTail.slice(-1000);
    });
    child.on('exit', (code, signal) => {
      if (this.child === child) this.emit('exit', { code, signal });
    });
  }

  /** Once the current child exited (or at once, when it runs no longer): all its output was read. */
  outputComplete(): Promise<void> {
    return this.closed;
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(t);
  }

  /**
   * A command on the master CLI; resolves with its whole answer. While the master re-executes
   * itself after a reload its socket briefly refuses connections, so those are retried for a
   * short while instead of being taken for a failure.
   */
  async masterCommand(command: string, timeoutMs = 5000): Promise<string> {
    const deadline = this.clock.now() + timeoutMs;
    const backoff = new Backoff({ baseMs: 20, capMs: 200, jitter: 'equal', clock: this.clock });
    for (;;) {
      try {
        return await this.masterCommandOnce(command, Math.max(100, deadline - this.clock.now()));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if ((code !== 'ECONNREFUSED' && code !== 'ENOENT') || this.clock.now() >= deadline || !this.running) throw err;
        await backoff.wait();
      }
    }
  }

  private masterCommandOnce(command: string, timeoutMs: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const sock = connect(`${this.runDir}/${MASTER_SOCKET}`);
      let out = '';
      const t = setTimeout(() => {
        sock.destroy();
        reject(new Error(`master CLI '${command}' timed out`));
      }, timeoutMs);
      sock.setEncoding('utf8');
      sock.on('connect', () => sock.end(`${command}\n`)); // the master answers once we finish sending
      sock.on('data', (d: string) => (out += d));
      sock.on('error', (err) => {
        clearTimeout(t);
        reject(err);
      });
      sock.on('close', (hadError) => {
        clearTimeout(t);
        if (!hadError) resolve(out);
      });
    });
  }

  reload(): Promise<string> {
    return this.masterCommand('reload');
  }

  /** The configuration hash the serving worker answers with, or undefined if none answers. */
  health(timeoutMs = 1000): Promise<string | undefined> {
    return new Promise((resolve) => {
      const req = request({ socketPath: `${this.runDir}/${HEALTH_SOCKET}`, path: '/', timeout: timeoutMs, headers: { connection: 'close' } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve(res.statusCode === 200 ? body.trim() : undefined));
        res.on('error', () => resolve(undefined));
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(undefined));
      req.end();
    });
  }

  /** Polls the health socket until the worker runs `hash`. */
  async waitForHash(hash: string, timeoutMs: number): Promise<boolean> {
    const deadline = this.clock.now() + timeoutMs;
    while (this.clock.now() < deadline) {
      if (!this.running) return false;
      if ((await this.health(500)) === hash) return true;
      await this.clock.sleep(50);
    }
    return false;
  }
}
