import { useEffect, useState } from 'preact/hooks';
import { fmtDate, money, Secret } from '../ui';

/** What a deposit announced by POST /api/billing/deposits (or listed pending) says about paying it. */
export interface Payable {
  amount: number;
  address: string | null;
  network: string | null;
  token: string | null;
  tokenContract?: string | null;
  expiresAt: string | null;
}

/** "50.00 USDC": the amount in the token (a dollar stablecoin, one token a dollar). */
export function payAmount(d: Payable): string {
  return d.token ? `${d.amount.toFixed(2)} ${d.token}` : money(d.amount);
}

/** A QR code of the deposit's address, for a wallet's camera (the encoder loads when first needed). */
function Qr({ text, label }: { text: string; label: string }) {
  const [code, setCode] = useState<{ size: number; path: string }>();
  useEffect(() => {
    let alive = true;
    import('../qr').then(
      ({ qrCode }) => alive && setCode(qrCode(text)),
      () => {},
    );
    return () => {
      alive = false;
    };
  }, [text]);
  if (!code) return <div class="qr" aria-hidden="true" />;
  const { size, path } = code;
  return (
    <svg class="qr" viewBox={`0 0 ${size} ${size}`} role="img" aria-label={label} shape-rendering="crispEdges">
      <path d={path} fill="#000" />
    </svg>
  );
}

/** A pending on-chain deposit: what to pay (amount and token), where (address, QR code) and on which network. */
export function PaymentDetails({ deposit }: { deposit: Payable }) {
  if (!deposit.address) return <p>It is credited once the payment is confirmed.</p>;
  return (
    <>
      <p>
        Send exactly <strong>{payAmount(deposit)}</strong> on <strong>{deposit.network ?? 'the network below'}</strong> to the address below
        {deposit.expiresAt ? `, before ${fmtDate(deposit.expiresAt)}` : ''}. It is credited once the transfer is confirmed on the chain.
      </p>
      <div class="pay">
        <Qr text={deposit.address} label={`QR code of the deposit address ${deposit.address}`} />
        <dl class="details">
          <dt>Amount</dt>
          <dd>{payAmount(deposit)}</dd>
          <dt>Token</dt>
          <dd>{deposit.token ?? '—'}</dd>
          <dt>Network</dt>
          <dd>{deposit.network ?? '—'}</dd>
          <dt>Address</dt>
          <dd>
            <Secret text={deposit.address} label="Deposit address" />
          </dd>
          {deposit.tokenContract ? (
            <>
              <dt>Token contract</dt>
              <dd>
                <code>{deposit.tokenContract}</code>
              </dd>
            </>
          ) : null}
        </dl>
      </div>
    </>
  );
}
