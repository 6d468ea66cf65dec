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
  body_too_complex: 'a request body nested too deep or with too many fields to inspect',
  custom_rule_blocked: 'a rule of this site',
  custom_rule_logged: 'a rule of this site',
};

/** reason -> words, looked up by the pages (`%[var(txn.rp_reason),map(...)]`). */
export const REASONS_MAP = WAF_REASONS.map((r) => `${r} ${REASON_WORDS[r]}\n`).join('');

/**
 * The request id every answer carries (X-Rampart-Request-Id, the body, the event): 16 lowercase hex
 * digits, two 32-bit random numbers (HAProxy's 64-bit generator, as its uuid uses), kept in
 * REQUEST_ID_VAR. It is made only where an answer or an event reads it: HAProxy makes a frontend's
 * `unique-id-format` for every request it forwards, about 1,700 instructions each (callgrind),
 * where a plain proxy makes none. An answer makes it in its body (ID); an event no answer follows,
 * with requestIdLine.
 */
export const REQUEST_ID_FORMAT = '%[rand,hex,bytes(8,8),lower]%[rand,hex,bytes(8,8),lower]';
/** The transaction variable that holds the request id once made. */
export const REQUEST_ID_VAR = 'txn.rp_id';
/** The request id as the event line and the X-Rampart-Request-Id header read it (made by then). */
const SHOWN_ID = `%[var(${REQUEST_ID_VAR})]`;

/**
 * The request id as an answer's body writes it: the one already made (an event of this request
 * logged before, a log rule or a detection in detect mode), else one made here into REQUEST_ID_VAR
 * (set-var's ifnotexists; the two halves write nothing), which the answer's header and the event
 * line then read: HAProxy builds an answer's body before its headers. So a rule that answers needs
 * no line of its own to make it, which every request would pass.
 */
const ID = `%[rand,hex,bytes(8,8),lower,set-var(txn.rp_ia),field(2,-)]%[rand,hex,bytes(8,8),lower,concat(,txn.rp_ia),set-var(${REQUEST_ID_VAR},ifnotexists),field(2,-)]${SHOWN_ID}`;

/**
 * The event line's fields of a refusal (txn.rp_hit, "<reason>:<rule id>"), set by the answer's body
 * as HAProxy writes it (each piece sets its variable and writes nothing: bytes(0,0)), before the
 * words the body reads and the headers; the event line reads them when the request is logged. Six
 * rules under the hit's condition did this, and every clean request passed them (about 1,350
 * instructions, callgrind).
 */
const HIT_FIELDS = [
  'var(txn.rp_hit),field(1,:),set-var(txn.rp_reason)',
  'var(txn.rp_hit),field(2,:),set-var(txn.rp_rule)',
  'str(block),set-var(txn.rp_action)',
  'method,url_enc,set-var(txn.rp_method)',
  'path,bytes(0,256),url_enc,set-var(txn.rp_path)',
  'query,bytes(0,192),url_enc,set-var(txn.rp_query)',
]
  .map((e) => `%[${e},bytes(0,0)]`)
  .join('');

/** The rule that makes the request id when `cond` holds (an event no answer follows will read it) and none is made yet. */
export function requestIdLine(cond: string): string {
  return `    http-request set-var-fmt(${REQUEST_ID_VAR}) "${REQUEST_ID_FORMAT}" if ${cond} !{ var(${REQUEST_ID_VAR}) -m found }`;
}

/** An answer page's HTML: status, title, sentence, and the request id to give the site owner. */
function htmlPage(status: number, title: string, sentence: string, mistake = 'If you think this is a mistake, give', fields = ''): string {
  return (
    `${fields}<!doctype html>` +
    '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">' +
    `<title>${title}</title><style>body{margin:0;font:16px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:#f4f5f7;color:#1d2330}` +
    'main{max-width:34rem;margin:12vh auto;padding:2rem;background:#fff;border-radius:12px;box-shadow:0 2px 12px rgba(0,0,0,.08)}' +
    'h1{margin:0 0 .5rem;font-size:1.4rem}.s{color:#c0392b;font-weight:600}code{background:#eef0f3;padding:.1rem .35rem;border-radius:4px}' +
    'footer{margin-top:1.5rem;font-size:.8rem;color:#7a8190}</style></head><body><main>' +
    `<p class="s">${status}</p><h1>${title}</h1><p>${sentence}</p>` +
    `<p>${mistake} the site owner this request id: <code id="request-id">${ID}</code></p><footer>Protected by Rampart</footer></main></body></html>\n`
  );
}

/**
 * The answers HAProxy makes itself when the origin fails (502 bad answer, 503 no origin up, 504 no
 * answer in time), in words a visitor understands: one HTML page for every client, as HAProxy's own
 * error pages and Cloudflare's are (the request id is also in the X-Rampart-Request-Id header for
 * tools). A page by client kind would cost every forwarded request: a 502 or 504 is made after the
 * request is gone, so its Accept header would have to be captured on the way in (about 1,000
 * instructions a request, callgrind) and its content type fixed on the way out.
 */
export const ORIGIN_ERRORS: Readonly<Record<502 | 503 | 504, { title: string; sentence: string }>> = {
  502: { title: 'Bad gateway', sentence: "The site's server sent an answer that could not be understood. Try again in a moment." },
  503: { title: 'Site temporarily unavailable', sentence: "The site's server is not answering right now. Try again in a moment." },
  504: { title: 'Gateway timeout', sentence: "The site's server took too long to answer. Try again in a moment." },
};

/** The frontend lines of the origin error pages (dir: the configuration directory, a checked path). */
export function errorLines(dir: string): string[] {
  return Object.keys(ORIGIN_ERRORS).map((code) => `    http-error status ${code} content-type "text/html; charset=utf-8" lf-file ${dir}/error${code}.lf ${REQUEST_ID_HEADER}`);
}

/** The origin error pages, log-format HTML (errorLines). */
function errorFiles(): Record<string, string> {
  const files: Record<string, string> = {};
  for (const [code, e] of Object.entries(ORIGIN_ERRORS)) files[`error${code}.lf`] = htmlPage(Number(code), e.title, e.sentence, 'If this goes on, give');
  return files;
}
/** The files the answers read, written into the configuration directory dir (a checked path). */
export function answerFiles(dir: string): Record<string, string> {
  const words = `%[var(txn.rp_reason),map(${dir}/reasons.map)]`;
  return {
    ...errorFiles(),
    'notfound.html': htmlPage(404, 'Site not found', 'This address is not served here: no site is set up for this name.'),
    'reasons.map': REASONS_MAP,
    'blocked.html': htmlPage(403, 'Access denied', `This request was blocked by the site's firewall (${words}).`, undefined, HIT_FIELDS),
    'limited.html': htmlPage(429, 'Too many requests', `This request was refused by the site's firewall: ${words}. Try again in %[var(txn.rp_retry)] seconds.`, undefined, HIT_FIELDS),
  };
}

/** Plain-text bodies (lf-string, one line each, escapes as HAProxy's parser reads them). */
export const TEXT_403 = `"${HIT_FIELDS}Forbidden: the request was blocked by the web application firewall.\\nRequest id: ${ID}\\n"`;
export const TEXT_429 = `"${HIT_FIELDS}Too Many Requests: the rate limit was exceeded. Try again in a minute.\\nRequest id: ${ID}\\n"`;
export const TEXT_404 = `"Not Found: no site is set up for this name here.\\nRequest id: ${ID}\\n"`;
export const REQUEST_ID_HEADER = `hdr x-rampart-request-id ${SHOWN_ID} hdr cache-control no-store`;
