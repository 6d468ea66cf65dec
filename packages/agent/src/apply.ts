import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, readlink, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ServerSnapshot } from '@rampart/protocol';
import { inputHash, renderHaproxyConfig, type RenderOptions } from '@rampart/proxy';
import { checkConfig, type ConfigError, type HaproxyProcess } from './haproxy.js';

/**
 * Where an apply failed: `prepare` (render and write the files), `validate` (`haproxy -c`),
 * `reload` (the new configuration did not go live; the previous one was restored and runs), or
 * `rollback` (restoring the previous configuration failed too: HAProxy may not be serving).
 */
export type ApplyStage = 'prepare' | 'validate' | 'reload' | 'rollback';

export type ApplyResult = { ok: true; revision: number; hash: string; skipped: boolean } | { ok: false; revision: number; stage: ApplyStage; errors: ConfigError[] };

export interface AgentState {
  revision: number | null;
  hash: string | null;
  eventsPort?: number;
  /** The secret every WAF event line carries (packages/agent/src/events.ts), part of the configuration. */
  eventsSecret?: string;
  acmePort?: number;
}

export interface ApplierPaths {
  /** <data>/haproxy: one directory per configuration, and the `current` symlink HAProxy runs. */
  configRoot: string;
  runDir: string;
  stateFile: string;
}

const RELOAD_VERIFY_MS = 10_000;

/**
 * Applies snapshots all or nothing: render -> write into a fresh directory -> `haproxy -c` on the
 * exact files -> swap the `current` symlink -> reload through the master socket -> check the new
 * worker answers with the new hash. On a failed reload the previous directory is swapped back
 * and reloaded, so the last-known-good configuration keeps serving.
 */
export class Applier {
  state: AgentState = { revision: null, hash: null };

  constructor(
    private readonly haproxyBin: string,
    private readonly proxy: HaproxyProcess,
    private readonly paths: ApplierPaths,
    private readonly renderOptions: RenderOptions,
    /**
     * The search crawler addresses verified so far (crawlers.ts), written into each configuration
     * rendered; not part of its hash, so a verification never causes a reload.
     */
    private readonly verifiedCrawlers?: () => ReadonlyMap<string, string>,
  ) {}

  get currentLink(): string {
    return join(this.paths.configRoot, 'current');
  }

  /** The configuration directory `current` points to: the one HAProxy runs, or is about to. */
  runningDir(): Promise<string | undefined> {
    return readlink(this.currentLink).catch(() => undefined);
  }

  async loadState(): Promise<void> {
    try {
      this.state = JSON.parse(await readFile(this.paths.stateFile, 'utf8')) as AgentState;
    } catch {
      this.state = { revision: null, hash: null };
    }
  }

  private async saveState(): Promise<void> {
    const tmp = `${this.paths.stateFile}.tmp`;
    await writeFile(tmp, JSON.stringify(this.state), { mode: 0o600 });
    await rename(tmp, this.paths.stateFile);
  }

  /** Makes sure there is a runnable configuration before HAProxy first starts: the last applied one, or an empty one. */
  async ensureBootConfig(serverId: string): Promise<void> {
    await mkdir(this.paths.configRoot, { recursive: true });
    await mkdir(this.paths.runDir, { recursive: true });
    if (existsSync(join(this.currentLink, 'haproxy.cfg'))) return;
    const empty: ServerSnapshot = { serverId, revision: 0, domains: [], rules: [] };
    const { dir, hash } = await this.write(empty);
    await this.swap(dir);
    this.state = { ...this.state, revision: null, hash };
  }

  private async write(snapshot: ServerSnapshot): Promise<{ dir: string; hash: string }> {
    const hash = inputHash(snapshot, this.renderOptions);
    const dir = join(this.paths.configRoot, `cfg-${hash.slice(0, 16)}`);
    const rendered = renderHaproxyConfig(snapshot, this.renderOptions, { configDir: dir, verifiedCrawlers: this.verifiedCrawlers?.() });
    const tmp = `${dir}.tmp-${process.pid}`;
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    for (const [name, content] of Object.entries(rendered.files)) await writeFile(join(tmp, name), content);
    // The files name their own directory, so they are rendered for `dir` and moved there whole.
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
    return { dir, hash };
  }

  /** Points `current` at dir atomically (a new symlink renamed over the old one). */
  private async swap(dir: string): Promise<void> {
    const tmpLink = `${this.currentLink}.tmp-${process.pid}`;
    await rm(tmpLink, { force: true });
    await symlink(dir, tmpLink);
    await rename(tmpLink, this.currentLink);
  }

  async apply(snapshot: ServerSnapshot): Promise<ApplyResult> {
    const revision = snapshot.revision;
    const hash = inputHash(snapshot, this.renderOptions);
    if (hash === this.state.hash && this.proxy.running) {
      this.state = { ...this.state, revision, hash };
      await this.saveState();
      return { ok: true, revision, hash, skipped: true };
    }
    let dir: string;
    try {
      ({ dir } = await this.write(snapshot));
    } catch (err) {
      return { ok: false, revision, stage: 'prepare', errors: [{ line: null, message: String((err as Error).message ?? err) }] };
    }
    const check = await checkConfig(this.haproxyBin, join(dir, 'haproxy.cfg'));
    if (!check.ok) {
      await rm(dir, { recursive: true, force: true });
      return { ok: false, revision, stage: 'validate', errors: check.errors };
    }
    const previous = await readlink(this.currentLink).catch(() => undefined);
    const previousHash = this.state.hash;
    await this.swap(dir);
    const mark = this.proxy.outputMark();
    if (await this.reloadAndVerify(hash)) {
      this.state = { ...this.state, revision, hash };
      await this.saveState();
      await this.prune([dir, previous]);
      return { ok: true, revision, hash, skipped: false };
    }
    const errors = this.proxy.alertsSince(mark);
    const reloadErrors = errors.length ? errors : [{ line: null, message: 'HAProxy did not start a worker on the new configuration' }];
    // Roll back, and say truthfully whether that worked.
    const restored =
      previous !== undefined &&
      previousHash !== null &&
      (await this.swap(previous).then(
        () => this.reloadAndVerify(previousHash),
        () => false,
      ));
    if (!restored) {
      return {
        ok: false,
        revision,
        stage: 'rollback',
        errors: [
          ...reloadErrors,
          {
            line: null,
            message: previous
              ? 'restoring the previous configuration failed too: HAProxy may not be serving; the agent restarts it on its next health check'
              : 'there was no previous configuration to restore',
          },
        ],
      };
    }
    return { ok: false, revision, stage: 'reload', errors: reloadErrors };
  }

  private async reloadAndVerify(hash: string): Promise<boolean> {
    if (!this.proxy.running) return false;
    try {
      await this.proxy.reload();
    } catch {
      return false;
    }
    return this.proxy.waitForHash(hash, RELOAD_VERIFY_MS);
  }

  /** Keeps the running and the previous configuration directories; removes the rest. */
  private async prune(keep: (string | undefined)[]): Promise<void> {
    const names = new Set(keep.filter(Boolean).map((p) => p!.split('/').pop()));
    for (const name of await readdir(this.paths.configRoot)) {
      if (name.startsWith('cfg-') && !names.has(name)) await rm(join(this.paths.configRoot, name), { recursive: true, force: true });
    }
  }
}
