import { WAF_REASONS, type WafReason } from '@rampart/protocol';

/**
 * What a refused visitor sees, answered natively by HAProxy (`http-request return ... lf-file` /
 * `lf-string`): an HTML page for browsers (an Accept header naming text/html), plain text for every
 * other client. Nothing of the request reaches either: only the reason's words (ours, from
 * REASON_WORDS through a map file) and the request id HAProxy generated. The pages are log-format
 * text, so a literal percent sign is written `%%`.
 */

/** A reason in plain words, for the page a browser shows. */
export const REASON_WORDS: Readonly<Record<WafReason, string>> = {
  ip_blocked: 'your network address is blocked',
  country_blocked: 'requests from your country are not accepted',
  bot_blocked: 'automated clients are not accepted',
  bot_challenge: 'the browser check did not pass',
  ai_bot_blocked: 'AI crawlers are not accepted',
  rate_limited: 'too many requests came from your network in a short time',
  sqli_detected: 'SQL injection',
  xss_detected: 'cross-site scripting',
  cmdi_detected: 'command injection',
  traversal_detected: 'path traversal',
  ssrf_detected: 'server-side request forgery',
  xxe_detected: 'XML external entity',
  injection_detected: 'code injection',
  upload_blocked: 'a dangerous file upload',
  compressed_body: 'a compressed request body, which cannot be inspected',
  custom_rule_blocked: 'a rule of this site',
  custom_rule_logged: 'a rule of this site',
};

/** reason -> words, looked up by the pages (`%[var(txn.rp_reason),map(...)]`). */
export const REASONS_MAP = WAF_REASONS.map((r) => `${r} ${REASON_WORDS[r]}\n`).join('');

/** The request id, as the pages and the X-Rampart-Request-Id header show it. */
const ID = '%[unique-id]';

function htmlPage(status: number, title: string, sentence: string): string {
  return (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">' +
    `<title>${title}</title><style>body{margin:0;font:16px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:#f4f5f7;color:#1d2330}` +
    'main{max-width:34rem;margin:12vh auto;padding:2rem;background:#fff;border-radius:12px;box-shadow:0 2px 12px rgba(0,0,0,.08)}' +
    'h1{margin:0 0 .5rem;font-size:1.4rem}.s{color:#c0392b;font-weight:600}code{background:#eef0f3;padding:.1rem .35rem;border-radius:4px}' +
    'footer{margin-top:1.5rem;font-size:.8rem;color:#7a8190}</style></head><body><main>' +
    `<p class="s">${status}</p><h1>${title}</h1><p>${sentence}</p>` +
    `<p>If you think this is a mistake, give the site owner this request id: <code id="request-id">${ID}</code></p>` +
    '<footer>Protected by Rampart</footer></main></body></html>\n'
  );
}

/** The files the answers read, written into the configuration directory dir (a checked path). */
export function answerFiles(dir: string): Record<string, string> {
  const words = `%[var(txn.rp_reason),map(${dir}/reasons.map)]`;
  return {
    'reasons.map': REASONS_MAP,
    'blocked.html': htmlPage(403, 'Access denied', `This request was blocked by the site's firewall (${words}).`),
    'limited.html': htmlPage(
      429,
      'Too many requests',
      `This request was refused by the site's firewall: ${words}. Try again in %[var(txn.rp_retry)] seconds.`,
    ),
  };
}

/** Plain-text bodies (lf-string, one line each, escapes as HAProxy's parser reads them). */
export const TEXT_403 = '"Forbidden: the request was blocked by the web application firewall.\\nRequest id: %[unique-id]\\n"';
export const TEXT_429 = '"Too Many Requests: the rate limit was exceeded. Try again in a minute.\\nRequest id: %[unique-id]\\n"';
export const REQUEST_ID_HEADER = `hdr x-rampart-request-id ${ID} hdr cache-control no-store`;
