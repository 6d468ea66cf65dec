import { parseArgs } from 'node:util';

export class UsageError extends Error {}

export type Flags = { [name: string]: string | undefined } & { help?: boolean };

/** String flags by name, switches (flags without a value), plus --help; usage errors name the flag; no positional arguments. */
export function parseFlags<S extends string = never>(args: string[], names: readonly string[], switches: readonly S[] = []): Flags & { [K in S]?: boolean } {
  const options = Object.fromEntries<{ type: 'string' | 'boolean' }>([
    ...names.map((n) => [n, { type: 'string' as const }] as const),
    ...switches.map((n) => [n, { type: 'boolean' as const }] as const),
  ]);
  try {
    const { values } = parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: false });
    return values as Flags & { [K in S]?: boolean };
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export function portFrom(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`${flag} must be a port number from 0 to 65535`);
  return n;
}

/** A whole number flag within [min, max]; the usage error names the flag and the range. */
export function intFrom(value: string, flag: string, min: number, max: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max) throw new UsageError(`${flag} must be a whole number from ${min} to ${max}`);
  return n;
}
