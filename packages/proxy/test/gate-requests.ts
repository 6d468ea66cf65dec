import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// Requests for the gate's property test (test/gate.test.ts): a value of our corpora placed in
// every part of a request the detectors read, and the encodings an attacker would use.

const CORPUS = fileURLToPath(new URL('./corpus', import.meta.url));

/** Every value of test/corpus: the ordinary ones, the upload names and each attack class. */
export function corpusValues(): { file: string; value: string }[] {
  const files = [
    'benign.jsonl',
    'benign-upload-names.jsonl',
    ...readdirSync(`${CORPUS}/attacks`)
      .filter((f) => f.endsWith('.jsonl'))
      .map((f) => `attacks/${f}`),
  ];
  return files.flatMap((file) =>
    readFileSync(`${CORPUS}/${file}`, 'utf8')
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => ({ file, value: JSON.parse(l) as string })),
  );
}

const utf8 = (s: string) => Buffer.from(s, 'utf8');
/** Bytes as a string of Latin-1 characters (one character a byte): how raw requests are built. */
export const latin1 = (b: Buffer) => b.toString('latin1');

/** Percent-encodes every byte of s's UTF-8 that `keep` does not accept (or `also` does). */
export function pct(s: string | Buffer, keep: RegExp, also?: RegExp): string {
  const bytes = typeof s === 'string' ? utf8(s) : s;
  let out = '';
  for (const b of bytes) {
    const c = String.fromCharCode(b);
    out += b < 0x80 && keep.test(c) && !also?.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}
/** As encodeURIComponent (on bytes, so lone surrogates and NULs are fine). */
export const pctAll = (s: string | Buffer) => pct(s, /[A-Za-z0-9\-_.!~*'()]/);
/** Only what would break a query string, or what HAProxy refuses in a URI. */
export const pctQueryMin = (s: string | Buffer) => pct(s, /[!-~]/, /[#&%+]/);
/** Only what would break a path, or what HAProxy refuses in a URI. */
export const pctPathMin = (s: string | Buffer) => pct(s, /[!-~]/, /[#?%]/);
/** As a form encoder writes it: blanks as '+'. */
export const formEnc = (s: string | Buffer) => pct(s, /[A-Za-z0-9\-_.*]/).replace(/%20/g, '+');

export interface RawRequest {
  method: string;
  target: string;
  headers: [string, string][];
  body?: Buffer | string;
}

const BROWSER: [string, string][] = [
  ['Host', 'gate.test'],
  ['User-Agent', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36'],
  ['Accept', 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8'],
  ['Accept-Language', 'en-US,en;q=0.9'],
  ['Accept-Encoding', 'gzip, deflate, br'],
];

/** The raw bytes of a request (Content-Length from the body; Connection: close). */
export function build(r: RawRequest): Buffer {
  const body = r.body === undefined ? undefined : typeof r.body === 'string' ? Buffer.from(r.body, 'latin1') : r.body;
  const lines = [`${r.method} ${r.target} HTTP/1.1`, ...r.headers.map(([n, v]) => `${n}: ${v}`)];
  if (body !== undefined) lines.push(`Content-Length: ${body.length}`);
  lines.push('Connection: close');
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body ?? Buffer.alloc(0)]);
}

/** A header value: CR, LF and NUL cannot travel in one, so they go percent-encoded (the detectors decode them). */
const headerSafe = (s: string) => latin1(utf8(s)).replace(/[\r\n\0]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
/** A cookie value: what would end it or the header, percent-encoded. */
const cookieSafe = (s: string) => latin1(utf8(s)).replace(/[;\r\n\0%]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
/** A quoted multipart parameter: quotes and line breaks percent-encoded (file names are decoded). */
const quotedParam = (s: string) => latin1(utf8(s)).replace(/["\r\n\0]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);

export const PLACEMENTS = [
  'query',
  'query-raw',
  'form',
  'json',
  'json-key',
  'cookie',
  'cookie-raw',
  'header',
  'referer',
  'user-agent',
  'path',
  'path-raw',
  'multipart-name',
  'multipart-field',
  'text',
  'binary-late',
  'binary-form',
] as const;
export type Placement = (typeof PLACEMENTS)[number];

/** The value v placed in one part of an ordinary browser request. */
export function place(v: string, where: Placement): Buffer {
  const h = [...BROWSER];
  switch (where) {
    case 'query':
      return build({ method: 'GET', target: `/search?q=${pctAll(v)}&page=2`, headers: h });
    case 'query-raw':
      return build({ method: 'GET', target: `/search?page=2&q=${pctQueryMin(v)}`, headers: h });
    case 'form':
      return build({ method: 'POST', target: '/form', headers: [...h, ['Content-Type', 'application/x-www-form-urlencoded']], body: `name=x&q=${formEnc(v)}` });
    case 'json':
      return build({ method: 'POST', target: '/api', headers: [...h, ['Content-Type', 'application/json']], body: latin1(utf8(JSON.stringify({ id: 1, q: v, tags: ['a', v] }))) });
    case 'json-key':
      return build({ method: 'POST', target: '/api', headers: [...h, ['Content-Type', 'application/json']], body: latin1(utf8(JSON.stringify({ [v]: 'x' }))) });
    case 'cookie':
      return build({ method: 'GET', target: '/', headers: [...h, ['Cookie', `_ga=GA1.2.12345.67890; q=${pctAll(v)}; session=abc123def`]] });
    case 'cookie-raw':
      return build({ method: 'GET', target: '/', headers: [...h, ['Cookie', `q=${cookieSafe(v)}`]] });
    case 'header':
      return build({ method: 'GET', target: '/', headers: [...h, ['X-Data', headerSafe(v)]] });
    case 'referer':
      return build({ method: 'GET', target: '/', headers: [...h, ['Referer', `https://gate.test/p/${pctAll(v)}?q=${pctAll(v)}`]] });
    case 'user-agent':
      return build({
        method: 'GET',
        target: '/',
        headers: [
          ['Host', 'gate.test'],
          ['User-Agent', headerSafe(v)],
        ],
      });
    case 'path':
      return build({ method: 'GET', target: `/files/${pctAll(v)}`, headers: h });
    case 'path-raw':
      return build({ method: 'GET', target: `/files/${pctPathMin(v)}`, headers: h });
    case 'multipart-name':
    case 'multipart-field': {
      const b = '----gateBoundary7MA4YWxkTrZu0gW';
      const part =
        where === 'multipart-name'
          ? `Content-Disposition: form-data; name="file"; filename="${quotedParam(v)}"\r\nContent-Type: application/octet-stream\r\n\r\nhello\r\n`
          : `Content-Disposition: form-data; name="q"\r\n\r\n${latin1(utf8(v))}\r\n`;
      return build({ method: 'POST', target: '/upload', headers: [...h, ['Content-Type', `multipart/form-data; boundary=${b}`]], body: `--${b}\r\n${part}--${b}--\r\n` });
    }
    case 'text':
      return build({ method: 'POST', target: '/t', headers: [...h, ['Content-Type', 'text/plain;charset=UTF-8']], body: latin1(utf8(v)) });
    // a control character just past the first 512 bytes: not binary for the detectors (text)
    case 'binary-late': {
      const text = latin1(utf8(v));
      return build({ method: 'POST', target: '/b', headers: [...h, ['Content-Type', 'application/octet-stream']], body: `${text}${' '.repeat(Math.max(0, 512 - text.length))}\x01tail` });
    }
    // a control character in a form body: still read as form fields
    case 'binary-form':
      return build({ method: 'POST', target: '/f', headers: [...h, ['Content-Type', 'application/x-www-form-urlencoded']], body: `a=\x01\x1f&q=${formEnc(v)}` });
  }
}

/**
 * The detectors' own vocabulary, read from the engine's source (every module): every word of its [[...]]
 * word lists (SQL keywords and functions, commands, event handlers, code calls...) and every string
 * of its { "...", ... } lists (sensitive files, schemes, code markers). A word added to the engine
 * is thus tried by the fuzzer without anyone updating the test.
 */
export function engineVocabulary(source: string): string[] {
  const words = new Set<string>();
  for (const m of source.matchAll(/\[\[([\s\S]*?)\]\]/g)) for (const w of m[1]!.split(/\s+/)) if (w) words.add(w);
  for (const m of source.matchAll(/\{\s*("(?:[^"\\\n]|\\.)*"\s*,\s*)+"(?:[^"\\\n]|\\.)*"\s*,?\s*\}/g)) {
    for (const s of m[0].matchAll(/"((?:[^"\\\n]|\\.)*)"/g)) {
      const v = s[1]!.replace(/\\(n|t|r|\\|"|')/g, (_, c: string) => ({ n: '\n', t: '\t', r: '\r', '\\': '\\', '"': '"', "'": "'" })[c]!);
      if (v.length >= 2 && !/^[%\[]/.test(v)) words.add(v);
    }
  }
  return [...words];
}
