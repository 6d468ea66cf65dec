import type { Database } from '../db/database.js';
import { lockAllDnsCredentials, setDnsCredentialsEnc } from '../data/dns-settings.js';
import { lockAllWebhookSecrets, setWebhookSecretEnc } from '../data/notification-settings.js';
import { decryptSecret, encryptSecret, type SecretKey } from '../secret-box.js';

// A new RAMPART_SECRET_KEY (docs/operations.md "Rotating secrets"): every stored secret encrypted
// under the current key is decrypted and encrypted again under the new one, in one transaction, with
// the control plane stopped. A secret that the new key already opens is left as it is, so running
// it twice is harmless; one that neither key opens stops it all, naming the row.

export interface RekeySummary {
  /** Rows encrypted again, per table. */
  reencrypted: { notification_settings: number; dns_settings: number };
  /** Rows already under the new key. */
  alreadyNew: number;
}

export class RekeyError extends Error {}

function reencrypt(stored: string, from: SecretKey, to: SecretKey, where: string): string | undefined {
  try {
    return encryptSecret(to, decryptSecret(from, stored));
  } catch {
    try {
      decryptSecret(to, stored);
      return undefined;
    } catch {
      throw new RekeyError(`${where}: neither the current RAMPART_SECRET_KEY nor the new one decrypts it; nothing was changed`);
    }
  }
}

export async function reencryptSecrets(db: Database, from: SecretKey, to: SecretKey): Promise<RekeySummary> {
  return db.transaction().execute(async (trx) => {
    const summary: RekeySummary = { reencrypted: { notification_settings: 0, dns_settings: 0 }, alreadyNew: 0 };
    const webhooks = await lockAllWebhookSecrets(trx);
    for (const row of webhooks) {
      const next = reencrypt(row.webhook_secret_enc!, from, to, `notification_settings of account ${row.account_id} (webhook secret)`);
      if (next === undefined) summary.alreadyNew++;
      else {
        await setWebhookSecretEnc(trx, row.account_id, next);
        summary.reencrypted.notification_settings++;
      }
    }
    const dns = await lockAllDnsCredentials(trx);
    for (const row of dns) {
      const next = reencrypt(row.credentials_enc, from, to, `dns_settings of account ${row.account_id} (DNS provider credentials)`);
      if (next === undefined) summary.alreadyNew++;
      else {
        await setDnsCredentialsEnc(trx, row.account_id, next);
        summary.reencrypted.dns_settings++;
      }
    }
    return summary;
  });
}
