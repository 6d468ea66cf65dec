import type { ComponentChildren, JSX } from 'preact';
import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useRef, useState } from 'preact/hooks';
import { CONNECTION_LOST, errorText } from './api/client';

// Small shared pieces: data loading, dialogs, fields, copy buttons, formats.

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  loading: boolean;
  reload: () => void;
  set: (fn: (old: T | undefined) => T | undefined) => void;
}

/** Loads once (and again on reload or when deps change); the view's own data only. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): Loaded<T> {
  const [state, setState] = useState<{ data: T | undefined; error: string | undefined; loading: boolean }>({ data: undefined, error: undefined, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let alive = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => alive && setState({ data, error: undefined, loading: false }),
      (err: unknown) => alive && setState((s) => ({ ...s, error: errorText(err), loading: false })),
    );
    return () => {
      alive = false;
    };
    // `load` is left out on purpose: a view passes a new closure every render; deps name what it reads.
  }, [tick, ...deps]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  const set = useCallback((fn: (old: T | undefined) => T | undefined) => setState((s) => ({ ...s, data: fn(s.data) })), []);
  return { ...state, reload, set };
}

/** A modal dialog (native <dialog>): focus moves in, stays in, Escape closes, focus returns to the opener. */
/** `wide`: forms with a row of fields; `'extra'`: two columns side by side (the custom rule editor). */
export function Dialog(props: { title: string; onClose: () => void; children: ComponentChildren; wide?: boolean | 'extra' }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const opener = document.activeElement as HTMLElement | null;
    const d = ref.current!;
    d.showModal();
    const first = d.querySelector<HTMLElement>('[autofocus], input:not([type=hidden]):not([disabled]), select, textarea, button:not(.dialog-close)');
    first?.focus();
    return () => {
      if (d.open) d.close();
      opener?.focus?.();
    };
  }, []);
  return (
    <dialog
      ref={ref}
      class={props.wide === 'extra' ? 'dialog wide extra' : props.wide ? 'dialog wide' : 'dialog'}
      aria-labelledby="dialog-title"
      onCancel={(e) => {
        e.preventDefault();
        props.onClose();
      }}
    >
      <header class="dialog-head">
        <h2 id="dialog-title">{props.title}</h2>
        <button type="button" class="ghost dialog-close" aria-label="Close" onClick={props.onClose}>
          ×
        </button>
      </header>
      {props.children}
    </dialog>
  );
}

/** A confirmation for something that cannot be undone. */
export function Confirm(props: { title: string; message: ComponentChildren; action: string; onConfirm: () => Promise<unknown>; onClose: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const confirm = async () => {
    setBusy(true);
    try {
      await props.onConfirm();
      props.onClose();
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };
  return (
    <Dialog title={props.title} onClose={props.onClose}>
      <p>{props.message}</p>
      <ErrorNote error={error} />
      <div class="actions">
        <button type="button" onClick={props.onClose}>
          Cancel
        </button>
        <button type="button" class="danger" disabled={busy} onClick={() => void confirm()}>
          {props.action}
        </button>
      </div>
    </Dialog>
  );
}

/** True inside the signed-in shell, whose banner says when the connection is lost (with a retry). */
export const InShell = createContext(false);

/** An error of a request or form. A lost connection is said once, by the shell's banner, not by every panel. */
export function ErrorNote({ error }: { error: string | undefined }) {
  const inShell = useContext(InShell);
  if (inShell && error === CONNECTION_LOST) return null;
  return error ? (
    <p class="error" role="alert">
      {error}
    </p>
  ) : null;
}

let fieldSeq = 0;
function useId(prefix: string): string {
  const ref = useRef<string>();
  ref.current ??= `${prefix}-${++fieldSeq}`;
  return ref.current;
}

/** A labelled control; `hint` and `invalid` are tied to it with aria-describedby. */
export function Field(props: { label: string; hint?: ComponentChildren; invalid?: string | undefined; children: (id: string, describedBy: string | undefined) => JSX.Element; class?: string }) {
  const id = useId('f');
  const hintId = props.hint || props.invalid ? `${id}-hint` : undefined;
  return (
    <div class={`field ${props.class ?? ''}`}>
      <label for={id}>{props.label}</label>
      {props.children(id, hintId)}
      {props.invalid ? (
        <small id={hintId} class="invalid">
          {props.invalid}
        </small>
      ) : props.hint ? (
        <small id={hintId} class="hint">
          {props.hint}
        </small>
      ) : null}
    </div>
  );
}

/** A checkbox shown as a switch. */
export function Switch(props: { label: string; checked: boolean; onChange: (v: boolean) => void; disabled?: boolean; hint?: string }) {
  const id = useId('s');
  return (
    <div class="field switch-field">
      <input id={id} type="checkbox" role="switch" class="switch" checked={props.checked} disabled={props.disabled} onChange={(e) => props.onChange(e.currentTarget.checked)} />
      <label for={id}>{props.label}</label>
      {props.hint ? <small class="hint">{props.hint}</small> : null}
    </div>
  );
}

export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      const r = document.createRange();
      const sel = getSelection();
      const el = document.querySelector(`[data-copy="${CSS.escape(text)}"]`);
      if (el && sel) {
        r.selectNodeContents(el);
        sel.removeAllRanges();
        sel.addRange(r);
        document.execCommand('copy');
      }
    }
    setDone(true);
    setTimeout(() => setDone(false), 1500);
  };
  return (
    <button type="button" class="small" onClick={() => void copy()}>
      {done ? 'Copied' : label}
    </button>
  );
}

/** A secret or command shown once, with a copy button. */
export function Secret({ text, label }: { text: string; label: string }) {
  return (
    <div class="secret">
      <code data-copy={text} aria-label={label}>
        {text}
      </code>
      <CopyButton text={text} />
    </div>
  );
}

/** The server cannot be reached: said in words, with a button that tries again. */
export function ConnectionBanner({ onRetry }: { onRetry: () => void }) {
  return (
    <div class="error connection-lost" role="alert">
      <span>{CONNECTION_LOST}</span>
      <button type="button" class="small" onClick={onRetry}>
        Retry
      </button>
    </div>
  );
}

/** Grey blocks where content is coming (a page: a heading and panels; otherwise one panel). */
export function Skeleton({ page, lines = 3 }: { page?: boolean; lines?: number }) {
  return (
    <div class="skeleton" aria-busy="true">
      <span class="sr-only">Loading</span>
      {page ? <div class="skeleton-bar skeleton-title" /> : null}
      {Array.from({ length: lines }, (_, i) => (
        <div key={i} class="skeleton-bar" />
      ))}
    </div>
  );
}

/** A list's placeholder while its first load runs (nothing once it loaded or failed: the error says why). */
export function Pending({ of, lines = 3 }: { of: Pick<Loaded<unknown>, 'data' | 'error'>; lines?: number }) {
  return of.data === undefined && !of.error ? <Skeleton lines={lines} /> : null;
}

/**
 * A form's one message: a new one replaces the last, and a success note goes after `ms`
 * (errors stay until the next action), so old messages never pile up.
 */
export function useMessage(ms = 8000): [Message | undefined, (m: Message | undefined) => void] {
  const [message, setMessage] = useState<Message>();
  useEffect(() => {
    if (message?.kind !== 'success') return;
    const t = setTimeout(() => setMessage(undefined), ms);
    return () => clearTimeout(t);
  }, [message]);
  return [message, setMessage];
}
export interface Message {
  kind: 'success' | 'error';
  text: string;
}
export function MessageNote({ message }: { message: Message | undefined }) {
  if (!message) return null;
  return message.kind === 'error' ? (
    <ErrorNote error={message.text} />
  ) : (
    <p role="status" class="success">
      {message.text}
    </p>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

export function PageHead(props: { title: string; children?: ComponentChildren }) {
  return (
    <div class="page-head">
      <h1>{props.title}</h1>
      <div class="page-actions">{props.children}</div>
    </div>
  );
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
const timeOnly = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });

export function fmtDate(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : dateTime.format(d);
}

export function fmtTime(iso: string): string {
  const d = new Date(iso);
  return d.toDateString() === new Date().toDateString() ? timeOnly.format(d) : dateTime.format(d);
}

export function fmtAgo(iso: string | null | undefined): string {
  if (!iso) return 'never';
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return fmtDate(iso);
}

const usd = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });
export const money = (n: number) => usd.format(n);
const num = new Intl.NumberFormat();
export const count = (n: number) => num.format(n);

export function bytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

let regionNames: Intl.DisplayNames | undefined;
export function countryName(code: string): string {
  try {
    regionNames ??= new Intl.DisplayNames(undefined, { type: 'region' });
    return regionNames.of(code) ?? code;
  } catch {
    return code;
  }
}

let countries: { code: string; name: string }[] | undefined;
/** Every region code the browser has a name for, by name. */
export function allCountries(): { code: string; name: string }[] {
  if (countries) return countries;
  const names = new Intl.DisplayNames(undefined, { type: 'region', fallback: 'none' });
  const out: { code: string; name: string }[] = [];
  for (let a = 65; a <= 90; a++) {
    for (let b = 65; b <= 90; b++) {
      const code = String.fromCharCode(a, b);
      let name: string | undefined;
      try {
        name = names.of(code);
      } catch {
        name = undefined;
      }
      if (name && name !== code) out.push({ code, name });
    }
  }
  countries = out.sort((x, y) => x.name.localeCompare(y.name));
  return countries;
}

/** Words for a WAF reason code: sqli_detected -> "SQL injection detected". */
const REASON_WORDS: Record<string, string> = {
  ip_blocked: 'IP blocked',
  country_blocked: 'Country blocked',
  bot_blocked: 'Bad bot blocked',
  ai_bot_blocked: 'AI crawler blocked',
  bot_challenge: 'Bot challenge',
  rate_limited: 'Rate limited',
  sqli_detected: 'SQL injection',
  xss_detected: 'Cross-site scripting',
  cmdi_detected: 'Command injection',
  traversal_detected: 'Path traversal',
  ssrf_detected: 'Server-side request forgery',
  xxe_detected: 'XML external entity',
  injection_detected: 'Template/expression injection',
  upload_blocked: 'Upload blocked',
  compressed_body: 'Compressed body refused',
  body_too_complex: 'Body too complex',
  custom_rule_blocked: 'Custom rule: blocked',
  custom_rule_logged: 'Custom rule: logged',
};
export function reasonText(reason: string): string {
  return REASON_WORDS[reason] ?? reason.replace(/_/g, ' ');
}

export interface ViewProps {
  account: import('./api/client').Account;
  /** The unread notifications changed by this many (marked read: negative). */
  onUnreadChange: (delta: number) => void;
}
