import { render, type JSX } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, ConnectionLost, errorText, ok, onConnection, onUnauthorized, type Account } from './api/client';
import { closeStream, openStream, subscribe } from './api/stream';
import { ConnectionBanner, ErrorNote, Field, InShell, Skeleton, type ViewProps } from './ui';
import { Analytics } from './views/analytics';
import { ConfirmEmail, confirmationToken } from './views/confirm-email';
import { Domains } from './views/domains';
import { Events } from './views/events';
import { Notifications } from './views/notifications';
import { Overview } from './views/overview';
import { Servers } from './views/servers';
import { Settings } from './views/settings';
import { Waf } from './views/waf';
import './style.css';

type View = (props: ViewProps) => JSX.Element;

/** A view whose code loads on its first visit, keeping it out of the first view's bundle. */
function lazyView(load: () => Promise<View>): View {
  let loaded: View | undefined;
  return function Lazy(props: ViewProps) {
    const [Loaded, setLoaded] = useState<View | undefined>(() => loaded);
    const [failed, setFailed] = useState(false);
    useEffect(() => {
      if (!Loaded)
        load().then(
          (v) => setLoaded(() => (loaded = v)),
          () => setFailed(true),
        );
    }, []);
    if (failed) return <ErrorNote error="This page could not be loaded; reload to try again." />;
    return Loaded ? <Loaded {...props} /> : <Skeleton page />;
  };
}
// The custom rules editor brings the expression parser: loaded when it is opened.
const Rules = lazyView(() => import('./views/rules').then((m) => m.Rules));
// The audit log is read now and then: loaded when it is opened.
const Audit = lazyView(() => import('./views/audit').then((m) => m.Audit));

const VIEWS = [
  { id: 'overview', label: 'Overview', view: Overview },
  { id: 'domains', label: 'Domains', view: Domains },
  { id: 'servers', label: 'Servers', view: Servers },
  { id: 'waf', label: 'WAF', view: Waf },
  { id: 'rules', label: 'Custom rules', view: Rules },
  { id: 'events', label: 'Events', view: Events },
  { id: 'analytics', label: 'Analytics', view: Analytics },
  { id: 'notifications', label: 'Notifications', view: Notifications },
  { id: 'audit', label: 'Audit log', view: Audit },
  { id: 'settings', label: 'Settings', view: Settings },
] as const;
type ViewId = (typeof VIEWS)[number]['id'];

function currentView(): ViewId {
  const id = location.hash.replace(/^#\/?/, '').split('?')[0];
  return VIEWS.find((v) => v.id === id)?.id ?? 'overview';
}

// Theme: the system's (prefers-color-scheme) until the toggle picks one, remembered in localStorage.
type Theme = 'light' | 'dark';
function systemTheme(): Theme {
  return matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}
function storedTheme(): Theme | null {
  const t = localStorage.getItem('rampart-theme');
  return t === 'light' || t === 'dark' ? t : null;
}
function applyTheme(t: Theme | null) {
  if (t) document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
}
applyTheme(storedTheme());

function ThemeToggle() {
  const [theme, setTheme] = useState<Theme>(storedTheme() ?? systemTheme());
  const next: Theme = theme === 'dark' ? 'light' : 'dark';
  return (
    <button
      type="button"
      class="ghost theme-toggle"
      aria-label={`Switch to ${next} theme`}
      onClick={() => {
        localStorage.setItem('rampart-theme', next);
        applyTheme(next);
        setTheme(next);
      }}
    >
      {theme === 'dark' ? '☀' : '☾'}
    </button>
  );
}

type Signup = 'closed' | 'invite' | 'open';

/** Sign in, or register when the server lets people (GET /api/auth/signup: the operator's RAMPART_SIGNUP). */
/** A text field's value: the form's inputs are text (a missing one reads as ''). */
function formText(f: FormData, name: string): string {
  const v = f.get(name);
  return typeof v === 'string' ? v : '';
}

function SignIn({ onSignedIn }: { onSignedIn: (a: Account) => void }) {
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const [signup, setSignup] = useState<Signup>();
  const [registering, setRegistering] = useState(false);
  useEffect(() => {
    ok(api.GET('/api/auth/signup')).then(
      (r) => setSignup(r.signup),
      () => setSignup('closed'),
    );
  }, []);
  const submit = (send: (f: FormData) => Promise<unknown>) => (e: Event) => void sendForm(e, send);
  const sendForm = async (e: Event, send: (f: FormData) => Promise<unknown>) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget as HTMLFormElement);
    setBusy(true);
    setError(undefined);
    try {
      await send(f);
      onSignedIn(await ok(api.GET('/api/account')));
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  const credentials = (f: FormData) => ({ email: formText(f, 'email'), password: formText(f, 'password') });
  const switchTo = (next: boolean) => () => {
    setError(undefined);
    setRegistering(next);
  };
  return (
    <main class="signin">
      <div class="signin-box">
        <div class="brand big">
          <img src="/dashboard/favicon.svg" alt="" width={32} height={32} /> Rampart
        </div>
        {registering && signup !== 'closed' ? (
          <>
            <h1>Create an account</h1>
            <form
              onSubmit={submit((f) => {
                const invitation = signup === 'invite' ? formText(f, 'invitation').trim() : '';
                return ok(api.POST('/api/auth/register', { body: { ...credentials(f), ...(invitation ? { invitation } : {}) } }));
              })}
            >
              <Field label="Email">{(id) => <input id={id} name="email" type="email" autocomplete="username" required />}</Field>
              <Field label="Password" hint="8 characters or more">
                {(id, hint) => <input id={id} name="password" type="password" autocomplete="new-password" minLength={8} required aria-describedby={hint} />}
              </Field>
              {signup === 'invite' ? (
                <Field label="Invitation" hint="Sign-up on this server is by invitation: paste the one its operator gave you">
                  {(id, hint) => <input id={id} name="invitation" autocomplete="off" required aria-describedby={hint} />}
                </Field>
              ) : null}
              <ErrorNote error={error} />
              <button type="submit" class="primary" disabled={busy}>
                Create account
              </button>
            </form>
            <p class="signin-alt">
              Have an account?{' '}
              <button type="button" class="link" onClick={switchTo(false)}>
                Sign in
              </button>
            </p>
          </>
        ) : (
          <>
            <h1>Sign in</h1>
            <form onSubmit={submit((f) => ok(api.POST('/api/auth/login', { body: credentials(f) })))}>
              <Field label="Email">{(id) => <input id={id} name="email" type="email" autocomplete="username" required />}</Field>
              <Field label="Password">{(id) => <input id={id} name="password" type="password" autocomplete="current-password" required />}</Field>
              <ErrorNote error={error} />
              <button type="submit" class="primary" disabled={busy}>
                Sign in
              </button>
            </form>
            {signup === undefined ? null : signup === 'closed' ? (
              <p class="signin-alt muted">Accounts on this server are created by its operator.</p>
            ) : (
              <p class="signin-alt">
                No account?{' '}
                <button type="button" class="link" onClick={switchTo(true)}>
                  {signup === 'invite' ? 'Create one with an invitation' : 'Create one'}
                </button>
              </p>
            )}
          </>
        )}
      </div>
      <div class="signin-theme">
        <ThemeToggle />
      </div>
    </main>
  );
}

function useUnread(): [number, (n: number) => void] {
  const [unread, setUnread] = useState(0);
  useEffect(() => {
    // One page of the newest: the badge counts unread ones up to 200 ("200+" past that).
    ok(api.GET('/api/notifications', { params: { query: { limit: '200' } } })).then(
      (list) => setUnread(list.filter((n) => !n.read).length),
      () => {},
    );
    return subscribe('notification', (n) => {
      if (!n.read && n.count === 1) setUnread((u) => u + 1);
    });
  }, []);
  return [unread, setUnread];
}

/** The header and navigation: the same while the account loads (no account yet), so nothing jumps. */
function Frame(props: { account?: Account; view: ViewId; unread?: number; onSignOut?: () => void; children: JSX.Element }) {
  const [menu, setMenu] = useState(false);
  const { account, view, unread = 0 } = props;
  useEffect(() => {
    const onHash = () => setMenu(false);
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  return (
    <div class="shell">
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main')?.focus())}>
        Skip to content
      </a>
      <header class="topbar">
        <button type="button" class="ghost menu-toggle" aria-expanded={menu} aria-controls="nav" onClick={() => setMenu(!menu)}>
          Menu
        </button>
        <a class="brand" href="#/overview" aria-label="Rampart home">
          <img src="/dashboard/favicon.svg" alt="" width={24} height={24} /> Rampart
        </a>
        <div class="topbar-right">
          {account?.state === 'frozen' ? <span class="badge bad">Frozen</span> : null}
          {account ? <span class="who">{account.email}</span> : <span class="who skeleton-text" aria-hidden="true" />}
          <ThemeToggle />
          {props.onSignOut ? (
            <button type="button" class="ghost" onClick={props.onSignOut}>
              Sign out
            </button>
          ) : null}
        </div>
      </header>
      <nav id="nav" class={menu ? 'nav open' : 'nav'} aria-label="Main">
        <ul>
          {VIEWS.map((v) => (
            <li key={v.id}>
              <a href={`#/${v.id}`} aria-current={v.id === view ? 'page' : undefined}>
                {v.label}
                {v.id === 'notifications' && unread > 0 ? (
                  <span class="count-badge" aria-hidden="true">
                    {unread >= 200 ? '200+' : unread}
                  </span>
                ) : null}
              </a>
            </li>
          ))}
        </ul>
        {unread > 0 ? <p class="sr-only" aria-live="polite">{`${unread} unread notifications`}</p> : null}
      </nav>
      <main id="main" class="main" tabIndex={-1}>
        {props.children}
      </main>
    </div>
  );
}

/** Whether the server answers: false from the first request that could not reach it until one does. */
function useOnline(): boolean {
  const [online, setOnline] = useState(true);
  useEffect(() => onConnection(setOnline), []);
  return online;
}

function Shell({ account, onSignOut }: { account: Account; onSignOut: () => void }) {
  const [view, setView] = useState<ViewId>(currentView());
  const [unread, setUnread] = useUnread();
  const online = useOnline();
  // Retry after a lost connection: the view is mounted anew, so it loads all its data again.
  const [attempt, setAttempt] = useState(0);
  useEffect(() => {
    const onHash = () => {
      setView(currentView());
      document.getElementById('main')?.focus();
    };
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  useEffect(() => {
    const label = VIEWS.find((v) => v.id === view)!.label;
    document.title = `${label} · Rampart`;
  }, [view]);
  const View = VIEWS.find((v) => v.id === view)!.view;
  return (
    <Frame account={account} view={view} unread={unread} onSignOut={onSignOut}>
      <InShell.Provider value={true}>
        {online ? null : <ConnectionBanner onRetry={() => setAttempt((a) => a + 1)} />}
        <View key={`${view}-${attempt}`} account={account} onUnreadChange={(d: number) => setUnread(Math.max(0, unread + d))} />
      </InShell.Provider>
    </Frame>
  );
}

function App() {
  const [confirming, setConfirming] = useState(confirmationToken());
  // undefined while loading; 'offline' when the server could not be reached (not a reason to sign in again).
  const [account, setAccount] = useState<Account | null | undefined | 'offline'>(undefined);
  const loadAccount = () => {
    setAccount(undefined);
    ok(api.GET('/api/account')).then(setAccount, (err: unknown) => setAccount(err instanceof ConnectionLost ? 'offline' : null));
  };
  useEffect(() => {
    loadAccount();
    return onUnauthorized(() => setAccount(null));
  }, []);
  useEffect(() => {
    if (account && account !== 'offline') openStream();
    else closeStream();
  }, [account]);
  if (confirming)
    return (
      <ConfirmEmail
        token={confirming}
        onDone={() => {
          location.hash = '#/notifications';
          setConfirming(undefined);
        }}
      />
    );
  if (account === undefined || account === 'offline')
    return (
      <Frame view={currentView()}>
        <>
          {account === 'offline' ? <ConnectionBanner onRetry={loadAccount} /> : null}
          <Skeleton page />
        </>
      </Frame>
    );
  if (account === null) return <SignIn onSignedIn={setAccount} />;
  const signOut = async () => {
    await api.POST('/api/auth/logout').catch(() => {});
    setAccount(null);
  };
  return <Shell account={account} onSignOut={() => void signOut()} />;
}

render(<App />, document.getElementById('app')!);
