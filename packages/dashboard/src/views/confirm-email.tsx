import { useState } from 'preact/hooks';
import { api, errorText, ok } from '../api/client';
import { ErrorNote } from '../ui';

// The page the link of a notification address's confirmation e-mail opens
// (#/confirm-email?token=...; docs/notifications.md "E-mail"). It needs no sign-in: the
// single-use token is the credential. The address is confirmed by a button, not on load, so a
// mail scanner that fetches the link confirms nothing.

/** The token of a confirmation link, when the page is one. */
export function confirmationToken(): string | undefined {
  const m = /^#\/?confirm-email\?(.*)$/.exec(location.hash);
  return (m && new URLSearchParams(m[1]).get('token')) || undefined;
}

export function ConfirmEmail({ token, onDone }: { token: string; onDone: () => void }) {
  const [confirmed, setConfirmed] = useState<string>();
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const confirm = async () => {
    setBusy(true);
    setError(undefined);
    try {
      setConfirmed((await ok(api.POST('/api/settings/notifications/email/confirm', { body: { token } }))).email);
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <div class="signin-box">
        <div class="brand big">
          <img src="/dashboard/favicon.svg" alt="" width={32} height={32} /> Rampart
        </div>
        <h1>Confirm the address</h1>
        {confirmed ? (
          <p role="status" class="success">
            {confirmed} is confirmed: the account's notifications are sent to it from now on.
          </p>
        ) : (
          <p>This address will receive the notifications of a Rampart account (shield servers down, certificates, billing).</p>
        )}
        <ErrorNote error={error} />
        {confirmed ? (
          <button type="button" class="primary" onClick={onDone}>
            Go to the dashboard
          </button>
        ) : (
          <button type="button" class="primary" disabled={busy} onClick={() => void confirm()}>
            Confirm this address
          </button>
        )}
      </div>
    </main>
  );
}
