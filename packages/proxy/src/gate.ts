// The native gate in front of the attack detectors (level high; docs/architecture.md, "Attack
// detection"). HAProxy ACLs (PCRE2 regexes, JIT) pick the requests that could hold something
// the detectors (rampart_detect.lua and its modules) recognise; only those run the Lua detectors.
// The gate must never hide an attack: whenever D.inspect would return a finding, some rp_gate line
// matches. Everything here errs on the side of firing; test/gate.test.ts checks the property through a real HAProxy against
// D.inspect under Lua 5.3 (our corpora in every part of a request, a fuzzer built from the
// detectors' own word lists, and the BlazeHTTP corpus when it is present).
//
// How it is derived. D.check hands a "plain" value (letters, digits, blanks, , _ @ : -) only to
// D.sqli and D.injection, and every other value goes through D.canonical (percent escapes, entities,
// backslash escapes, UTF-7, overlong UTF-8) and then all the detectors. So:
//   1. Characters. A value may hold only the characters of an alphabet W (letters, digits, UTF-8
//      text, and blank _ - . , / : @ + = ~ ( ) ; & ? # ! ^ | { } [ ] * " ') and the percent escapes
//      that decode into W (also double-encoded, %2520). Anything else fires: < > $ ` \ %, controls,
//      escapes of letters, digits or other ASCII, overlong and fullwidth forms of ASCII. That is
//      where markup, shell substitution, template lookups, string escapes and encodings begin.
//      Narrower per part: the path has no blank ( ) ; & ? # ! ^ | { } [ ] " '; a JSON body has no
//      raw ' (its " are structure; a value's " arrives as \") and only the escapes \/, \" and \u
//      of non-ASCII characters; no part but a JSON body's ends has a line break or a tab. A value's
//      " is a quote to the detectors, so every rule that reads a quote also reads \" (QUOTE, DQ,
//      SKIP): JSON inside a JSON string (analytics beacons) need not fire for its escaped quotes.
//      A JSON body also takes a raw $ (prices, "$schema" keys, hashes): the word rules fire on what
//      a $ starts for the detectors (${ $( $' $IFS, a database operator, "$type", $7*7}).
//   2. Words. Over W each detector can still recognise a few things, all spelled with letters or
//      anchored on a separator: SQL keywords, functions and what follows a quote or a number,
//      JavaScript sinks, a command after ; | &, file names and schemes, internal hosts after http:,
//      serialized-object and code markers, character references. The word files fire on each (case
//      insensitive; each punctuation also as it arrives percent-encoded); every pattern says which
//      detector it stands for.
//   3. Shapes the gate cannot bound fire: multipart bodies (file names and contents), a NUL in the
//      body (HAProxy's text matchers stop at the first NUL; req.body,length sees it), a JSON-looking
//      body sent as a form, so many values that the detectors' budget (VALUES_LIMIT) would join the
//      rest into one text.
//   4. A binary body (a control character other than a tab or a line break in its first 512 bytes)
//      is one the detectors read nothing in unless its Content-Type names a form (then it fires):
//      the body rules see it as "x" (BODY_FETCH).
//
// Every pattern is linear in its input: no nested quantifiers over overlapping classes (a regex that
// fails on PCRE2's match limit or JIT stack does not match, and would hide what it guards); searches
// that pair two things anchor on the first ((?=(?<first>...))\k<first> keeps PCRE2 from trying every start).

import { detectEngineSource } from './detect-lua.js';

/**
 * The engine's own lists, read from its Lua modules when this module loads (as waf.ts reads the
 * engine): a word or marker added to one of them is guarded without a change here. Each list the
 * gate uses is this file's copy joined with the engine's (only STRUCTURED_HEADERS, the headers the
 * gate may skip, is the engine's alone, and loading fails without it). Three shapes are read: a word list
 * `NAME = {}` then `for w in gmatch([[...]]`, a list of strings `NAME = { "a", "b" }`, and a set
 * `NAME = { a = true, ["b.c"] = true }`; a list the reader cannot find leaves the copy alone.
 */
export function readEngineLists(source: string): Map<string, string[]> {
  const lists = new Map<string, string[]>();
  for (const m of source.matchAll(/^(?:local\s+)?((?:D\.)?[A-Z_]+)\s*=\s*\{\}\s*\nfor w in gmatch\(\[\[([\s\S]*?)\]\]/gm)) {
    lists.set(m[1]!, m[2]!.split(/\s+/).filter(Boolean));
  }
  for (const m of source.matchAll(/^(?:local\s+)?((?:D\.)?[A-Z_]+)\s*=\s*\{/gm)) {
    if (lists.has(m[1]!)) continue;
    const items = tableItems(source, m.index + m[0].length);
    if (items && items.length > 0) lists.set(m[1]!, items);
  }
  return lists;
}

/** The strings (a list) or keys (a set) of a Lua table constructor whose body starts at i; undefined for anything else. */
function tableItems(src: string, i: number): string[] | undefined {
  const strings: string[] = [];
  const keys: string[] = [];
  for (;;) {
    const rest = src.slice(i);
    const blank = /^[\s,]*/.exec(rest)![0].length;
    i += blank;
    const c = src[i];
    if (c === '}') return keys.length > 0 ? keys : strings;
    if (c === '"' || c === "'") {
      const s = luaString(src, i);
      if (!s) return undefined;
      i = s.end;
      if (/^\s*=/.test(src.slice(i))) return undefined;
      strings.push(s.value);
      continue;
    }
    const key = /^(?:([A-Za-z_][A-Za-z0-9_]*)|\[\s*(["'])((?:[^"'\\\n]|\\.)*)\2\s*\])\s*=\s*(?:true|false|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')/.exec(src.slice(i));
    if (!key) return undefined;
    keys.push(key[1] ?? unescapeLua(key[3]!));
    i += key[0].length;
  }
}

function luaString(src: string, i: number): { value: string; end: number } | undefined {
  const q = src[i];
  let j = i + 1;
  while (j < src.length && src[j] !== q) {
    if (src[j] === '\n') return undefined;
    j += src[j] === '\\' ? 2 : 1;
  }
  return j < src.length ? { value: unescapeLua(src.slice(i + 1, j)), end: j + 1 } : undefined;
}

const unescapeLua = (s: string) =>
  s.replace(/\\(\d{1,3}|.)/g, (_, e: string) => (/^\d/.test(e) ? String.fromCharCode(Number(e)) : (({ n: '\n', t: '\t', r: '\r' } as Record<string, string>)[e] ?? e)));

// Every module of the engine (detect-lua.ts): a list is read from whichever module holds it. A
// module not shipped next to this one is left out: the copies below stand alone.
const ENGINE_LISTS = readEngineLists(detectEngineSource(true));
/** This file's copy of an engine list, joined with the engine's own. */
const list = (name: string, copy: readonly string[]) => [...new Set([...copy, ...(ENGINE_LISTS.get(name) ?? [])])];
const words = (s: string) => s.split(/\s+/).filter(Boolean);
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** Longest first, so an alternation tries "python3" before "python". */
/**
 * An alternation of literals (each a list of tokens: a character, or a pattern fragment such as SL)
 * as a prefix tree: PCRE2 tries the branches of an alternation one by one at each position; a tree
 * has one branch per next token, so a position costs a few comparisons instead of one per item.
 */
function trie(items: readonly (readonly string[])[]): string {
  interface Node {
    end: boolean;
    next: Map<string, Node>;
  }
  const root: Node = { end: false, next: new Map() };
  for (const item of items) {
    let n = root;
    for (const t of item) {
      let c = n.next.get(t);
      if (!c) n.next.set(t, (c = { end: false, next: new Map() }));
      n = c;
    }
    n.end = true;
  }
  const emit = (n: Node): string => {
    const branches = [...n.next.entries()].map(([t, c]) => t + emit(c));
    if (branches.length === 0) return '';
    const body = branches.length === 1 && !n.end ? branches[0]! : `(?:${branches.join('|')})`;
    return n.end ? `(?:${body})?` : body;
  };
  return emit(root);
}
/** Literal items as a prefix tree; `as` turns an item into its tokens (by default: its characters, escaped, letters lowercase). */
const alternation = (items: readonly string[], as: (s: string) => string[] = (s) => [...s.toLowerCase()].map(escape)) => trie([...new Set(items)].map(as));

/**
 * A percent escape of the byte whose hex digits `h` matches, also encoded again (%2F, %252F): %[25]*
 * is looser than (?:25)* and one class (compact, and JIT-safe); what it takes beyond real escapes
 * (%52F) is an escape of a letter, which the character rules fire on.
 */
const pe = (h: string) => `%[25]*${h}`;
/** Hex digits of the escapes that decode into W: its punctuation, and bytes 80-FF but C0 and C1 (overlong ASCII). */
const ESC = String.raw`(?:2[0-36-9aAbBcCfF]|3[aAbBdDfF]|40|5[bBdDeE]|7[bBcCdDeE]|[89abdefABDEF][0-9a-fA-F]|[cC][2-9a-fA-F])`;
/** An escape that does not decode into W. */
const BAD_ESC = String.raw`%(?!(?:25){0,8}${ESC})`;
/** W as raw bytes, inside a character class, without the quotes (a JSON body has its own). */
const W_NOQ = String.raw`A-Za-z0-9 _.,/:@=+~();&?#!^|{}\[\]*\x80-\xbf\xc2-\xff\-`;

/** W's punctuation as it may arrive: raw, or percent-encoded (and / as JSON's \/). */
const SL = String.raw`(?:/|${pe('2[fF]')}|\\/)`;
const CO = String.raw`(?::|${pe('3[aA]')})`;
const EQ = String.raw`(?:=|${pe('3[dD]')})`;
const PL = String.raw`(?:\+|${pe('2[bB]')})`;
const SEMI = String.raw`(?:;|${pe('3[bB]')})`;
const LP = String.raw`(?:\(|${pe('28')})`;
const RP = String.raw`(?:\)|${pe('29')})`;
const CM = String.raw`(?:,|${pe('2[cC]')})`;
const AMP = String.raw`(?:&|${pe('26')})`;
const HASH = String.raw`(?:#|${pe('23')})`;
const QM = String.raw`(?:\?|${pe('3[fF]')})`;
const LBR = String.raw`(?:\[|${pe('5[bB]')})`;
const RBR = String.raw`(?:\]|${pe('5[dD]')})`;
const LC = String.raw`(?:\{|${pe('7[bB]')})`;
const RC = String.raw`(?:\}|${pe('7[dD]')})`;
const BANG = String.raw`(?:!|${pe('21')})`;
const PIPE = String.raw`(?:\||${pe('7[cC]')})`;
const AT = String.raw`(?:@|${pe('40')})`;
const STAR = String.raw`(?:\*|${pe('2[aA]')})`;
const CARET = String.raw`(?:\^|${pe('5[eE]')})`;
const QUOTE = String.raw`(?:["']|\\"|${pe('2[27]')})`;
/** A double quote: raw, as a JSON string's \" (json_walk decodes it to "), or percent-encoded. */
const DQ = String.raw`(?:\\?"|${pe('22')})`;
/** Blanks between SQL and JavaScript words as they arrive: blank, tab, + (a blank in query strings and forms), %20, NBSP (a blank to MySQL's tokenizer). */
const WS = String.raw`(?:[ \t+]|${pe('(?:20|[aA]0)')}|\xa0)`;
/**
 * After a word of n bytes just matched: it started a word, that is the byte before it is no letter
 * (of the SQL tokenizer's words: digits may precede, 1union), or the last hex digit of an escape
 * (%3Bdrop, or encoded again up to five times as the path is decoded: %25253Bdrop). Checked after
 * the word, so that a position where the word does not start costs one comparison.
 */
const startedWord = (n: number) => {
  const w = `[\\s\\S]{${n}}`;
  return String.raw`(?:(?<![A-Za-z_$\x80-\x9f\xa1-\xff]${w})|(?<=%[0-9a-fA-F]{2}${w}|%25[0-9a-fA-F]{2}${w}|%2525[0-9a-fA-F]{2}${w}|%252525[0-9a-fA-F]{2}${w}|%25252525[0-9a-fA-F]{2}${w}))`;
};
/** A word (literal letters) that starts a word of the value. */
const word = (w: string) => `${w}${startedWord(w.length)}`;
/** No word character after: the word ends here. */
const RB = String.raw`(?![A-Za-z0-9_$\x80-\x9f\xa1-\xff])`;
/** An identifier of the SQL tokenizer (a word that is not a number), its text bytes raw or encoded: one class, so no repeated group. */
const IDENT = String.raw`[a-z_$\x80-\x9f\xa1-\xff%][a-z0-9_$.\x80-\x9f\xa1-\xff%]*`;
/** Where a value starts: after a separator of query strings, cookies and forms, a JSON string's quote, a header's colon. */
const START = String.raw`(?:^|[&=;?":\n])`;
/** D.sqli's numeric context: a value that starts with a number ("^%s*[%-%(]?%s*%.?%d"), the number token (0x hex, digits, fraction, exponent), blanks and ')'. */
const NUMBER = String.raw`${WS}*(?:-${WS}*)?(?:${LP}${WS}*)?(?:0[xX][0-9a-fA-F]+|\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE](?:[-+]|${PL})?[0-9]+)?(?:${WS}|${RP})*`;
/** What D.sqli's numeric context needs right after the number (sql_tail): a logic word or operator, a clause, UNION (a raw && only in TEXT: in a URL it separates parameters). */
const TAIL = String.raw`(?:(?:and|or|xor|union|having|procedure|into|order|group|limit)${RB}|${pe('26')}${AMP}|&${pe('26')}|${PIPE}${PIPE})`;
/** Any byte, in both PCRE2 and JavaScript. */
const ANY = String.raw`[\s\S]`;
const JSON_START = String.raw`^[ \t\n\v\f\r]*[{\[]`;
const NOT_JSON = String.raw`^(?![ \t\n\v\f\r]*[{\[])`;

export interface Pattern {
  re: string;
  why: string;
}

/** Overlong and fullwidth forms of ASCII, raw or percent-encoded, byte by byte (D.canonical's overlong(), traversal's folding). */
const FORMS: Pattern[] = [
  { re: String.raw`[\xc0\xc1]|${pe('[cC][01]')}`, why: 'C0 and C1 start overlong forms of ASCII (%c0%ae is ".", %c0%bc "<")' },
  { re: String.raw`(?:\xe0|${pe('[eE]0')})(?:\x80|${pe('80')})`, why: 'E0 80 xx is an overlong form of ASCII' },
  {
    re: String.raw`(?:\xef|${pe('[eE][fF]')})(?:\xbc|${pe('[bB][cC]')})(?:[\x8e\x8f\xbc]|${pe('(?:8[eEfF]|[bB][cC])')})`,
    why: 'fullwidth . / \\ (EF BC 8E, 8F, BC), which the traversal detector folds to ASCII',
  },
  { re: String.raw`(?:\xe2|${pe('[eE]2')})(?:\x88|${pe('88')})(?:\x95|${pe('95')})`, why: 'the division slash (E2 88 95), which the traversal detector folds to /' },
];

const PATH: Pattern[] = [
  { re: String.raw`[^A-Za-z0-9/_.,:@=+~*\x80-\xbf\xc2-\xff%-]`, why: "a character outside the path's part of W: quotes, markup, ;matrix parameters, entities, backslashes, blanks, controls" },
  {
    re: String.raw`%(?!(?:25){0,8}(?:2[0aAbBcCfF]|3[aAdD]|40|[89abdefABDEF][0-9a-fA-F]|[cC][2-9a-fA-F]))`,
    why: "a percent escape of anything but the path's part of W (the path is decoded twice, then canonicalised)",
  },
  ...FORMS,
  { re: String.raw`^[^/]`, why: 'a path that does not start with / (asterisk form, or something HAProxy let through)' },
  { re: String.raw`(?:/|${pe('2[fF]')})(?:/|${pe('2[fF]')}|\.)`, why: '// and /. : dot segments and dot files (/.git, /.env, /./), which normalize_path and path_traversal look at' },
  { re: String.raw`\.\.`, why: '.. anywhere: traversal, in the path or its raw form' },
];

const QUERY: Pattern[] = [
  { re: String.raw`[^${W_NOQ}"'%]`, why: 'a character outside W: < > $ ` \\ and controls' },
  { re: BAD_ESC, why: 'a percent escape of anything but W (%3C <, %24 $, %5C \\, %25 of such, %u...)' },
  ...FORMS,
  { re: String.raw`^(?:[^&]*&){150}`, why: 'so many parameters that, with the other parts, the detectors would exceed VALUES_LIMIT and join the rest' },
];

/**
 * The engine's STRUCTURED_HEADERS (rampart_detect_parts.lua), without cookie: only ${ %{ #{ {{ in them reach a
 * detector. Read from the engine only: a copy here could skip a header the engine inspects.
 */
export const GATE_STRUCTURED_HEADERS: readonly string[] = (() => {
  const headers = ENGINE_LISTS.get('D.STRUCTURED_HEADERS');
  if (!headers || headers.length < 20) throw new Error('gate.ts: D.STRUCTURED_HEADERS not found in the detection engine (lua/rampart_detect_parts.lua)');
  return headers.filter((h) => h !== 'cookie');
})();

/** The start of a header line whose value the detectors read (HTX: "name: value", names lowercase). */
const INSPECTED_LINE = String.raw`(?:^|\n)(?!(?:${GATE_STRUCTURED_HEADERS.map((h) => h.replace(/-/g, '\\-')).join('|')}):)`;

const HEADERS: Pattern[] = [
  {
    re: String.raw`${INSPECTED_LINE}[^:\r\n]*:[^\r\n]*?(?:[^${W_NOQ}"'%\r\n]|${BAD_ESC})`,
    why: 'an inspected header (User-Agent, Cookie, Referer, Content-Type, custom ones) with a character or escape outside W',
  },
  { re: String.raw`[$%#{]\{`, why: '${ %{ #{ {{ in any header: the structured ones still go to the injection detector' },
  ...FORMS,
  { re: String.raw`^(?:[^;&]*[;&]){150}`, why: 'so many cookies or Referer parameters that the detectors would exceed VALUES_LIMIT' },
];

const BODY: Pattern[] = [
  {
    re: String.raw`${NOT_JSON}${ANY}*?(?:[^${W_NOQ}"'%]|${BAD_ESC})`,
    why: 'a form or text body (not starting with { or [) with a character outside W (no line breaks: the whole body is also one text value)',
  },
  {
    re: String.raw`${JSON_START}${ANY}*?(?:[^${W_NOQ}"\\%$\t\n\r]|${BAD_ESC}|\\(?![/"]|u(?!00[0-7]|[fF][fF]0[eEfF]|[fF][fF]3[cC]|2215)[0-9a-fA-F]{4}))`,
    why: 'a JSON body with a character outside W and $, a \' (JSON strings hold no raw quote), or an escape other than \\/, \\" and \\u of a non-ASCII character (json_walk decodes \\x to x; a value\'s \\" is its " to the detectors, and every rule that reads a quote reads \\" too)',
  },
  {
    re: String.raw`${JSON_START}[^\t\n\r]*[\t\n\r][ \t\n\r]*[^ \t\n\r]`,
    why: 'a JSON body with a tab or line break before its end: it could be inside a string (a shell separator, what a browser strips from javascript:)',
  },
  { re: String.raw`^(?:\xff\xfe|\xfe\xff|\xac\xed)`, why: 'a UTF-16 byte-order mark (the detectors drop it and the NULs); a serialized Java object (AC ED 00 05)' },
  ...FORMS,
  { re: String.raw`^(?:[^&]*&){150}`, why: 'so many form fields that the detectors would exceed VALUES_LIMIT' },
];

/** A control character that makes a body binary for the detectors (with NUL, which fires by itself). */
const BINARY_CHAR = String.raw`[\x01-\x08\x0e-\x1f]`;
/** A body with such a character in its first 512 bytes, as the detectors test it (sub(body, 1, 512)). */
const BINARY_START = String.raw`^[^\x01-\x08\x0e-\x1f]{0,511}${BINARY_CHAR}`;

/** The first 512 bytes of the body, "|", then the first Content-Type in lowercase. */
const FORM_JSON: Pattern[] = [
  { re: String.raw`${JSON_START}${ANY}*x-www-form-urlencoded`, why: 'a body starting with { or [ sent as a form: the detectors read it as form fields, where its quotes are SQL strings' },
  {
    re: String.raw`${BINARY_START}${ANY}*form`,
    why: 'a binary body (a control character in its first 512 bytes) whose Content-Type names a form: the detectors read it as text, so the body rules must see it (they see binary bodies as "x")',
  },
];

/** A shell separator in W: ; | or & (not &name=, a parameter or an entity), raw or encoded. */
const SEP = String.raw`(?:[;|]|&(?![a-z0-9_-]*${EQ})|${pe('(?:3[bB]|7[cC])')}|${pe('26')}(?![a-z0-9_-]*${EQ}))`;
/** What D.cmdi's command_at skips before a command: blanks, quotes, { ( !, and a $ (;$'id', ;$"id"). */
const SKIP = String.raw`(?:[ \t+\xa0({!'"$]|\\"|${pe('(?:20|[aA]0|2[1278]|7[bB])')})`;
/** A run of the word command_at reads ([%w_.-/\\:'"?*]; quotes are dropped from it), escapes included as their characters. */
const WORD_RUN = String.raw`[a-z0-9_.?*:/'"%\\-]*`;
/** Commands (CMD_STRONG, CMD_WEAK, INTERPRETERS). */
const CMDS = alternation([
  ...list(
    'CMD_STRONG',
    words(`wget curl nc ncat netcat bash sh zsh ksh csh tcsh dash busybox powershell pwsh cmd whoami uname ifconfig ipconfig
  nslookup base64 python python2 python3 perl php ruby lua certutil bitsadmin mkfifo telnet xterm systeminfo tasklist netstat
  chmod chown crontab passwd sudo useradd rm wmic reg regsvr32 mshta rundll32 cscript wscript nmap tftp ftp socat openssl
  getent id hostname msiexec schtasks docker tclsh kubectl`),
  ),
  ...list(
    'CMD_WEAK',
    words(`cat ls echo ping sleep find head tail more less type dir net env printenv kill ps touch cp mv awk sed xargs
  sort who date pwd uptime dig host ssh scp expr eval exec timeout grep od xxd strings nohup tar zip unzip gzip which export node`),
  ),
  ...list('INTERPRETERS', words('python python2 python3 perl php ruby lua bash sh zsh ksh csh tcsh dash node tclsh')),
]);

/** The engine's CODE_MARKERS (rampart_detect_injection.lua). */
const CODE_MARKERS = list('CODE_MARKERS', [
  'java.lang.runtime',
  'java.lang.processbuilder',
  'java.lang.system',
  'java.lang.class',
  'javax.script',
  'scriptenginemanager',
  'getruntime()',
  '.getruntime',
  'processbuilder(',
  '#_memberaccess',
  '#context[',
  '@java.lang.',
  '@ognl',
  'ognl.ognlcontext',
  'xwork2.',
  'freemarker.template.utility',
  '?new()',
  'child_process',
  'process.mainmodule',
  'process.binding',
  '__globals__',
  '__builtins__',
  '__subclasses__',
  '__class__',
  '__mro__',
  '__init__.',
  'os.system(',
  'os.popen(',
  'subprocess.',
  '$_get[',
  '$_post[',
  '$_request[',
  '$_cookie[',
  '$_server[',
  '<?php',
  '<?=',
  'com.sun.rowset.',
  'jdbcrowsetimpl',
  'com.mchange.v2.c3p0',
  'org.apache.commons.collections',
  'org.apache.xalan',
  'templatesimpl',
  'bsh.interpreter',
  'groovy.lang.',
  'java.net.url',
  'java.io.file',
  'getclass(',
  'classloader',
  '.forname(',
  '$class.inspect',
  '#set(',
  '#foreach',
  '<#assign',
  '${class',
  '<%=',
  '<%@',
  'java.beans.xmldecoder',
  'org.springframework.context.support',
  'javax.naming',
  'jndi:',
  '@type":"com.',
  '@type":"java.',
  '@type":"org.',
  '"@type":"',
  '"$type":"system.',
  'objectdataprovider',
  'system.diagnostics.process',
  '!!python/',
  '!ruby/',
  'kernel.exec',
  'kernel.system',
  'io.popen',
  '{php}',
  'cos\nsystem',
  'cposix\nsystem',
  'cbuiltins\n',
  'c__builtin__\n',
  'csubprocess\n',
  '_$$nd_func$$_',
  '|map(',
  '|filter(',
  '|sort(',
  '|reduce(',
  '|map (',
  '|filter (',
  '".execute()',
  "'.execute()",
]);
const FRAGMENT: Record<string, string> = {
  '/': SL,
  ':': CO,
  '=': EQ,
  '+': PL,
  ';': SEMI,
  '(': LP,
  ')': RP,
  ',': CM,
  '&': AMP,
  '#': HASH,
  '?': QM,
  '[': LBR,
  ']': RBR,
  '{': LC,
  '}': RC,
  '!': BANG,
  '|': PIPE,
  '@': AT,
  '*': STAR,
  '^': CARET,
  ' ': WS,
  '"': DQ,
  "'": `(?:'|${pe('27')})`,
  '\n': String.raw`(?:\n|\\n|${pe('0[aA]')})`,
};
/** A marker's tokens: each punctuation also as it may arrive encoded. */
const marker = (m: string) => [...m.toLowerCase()].map((c) => FRAGMENT[c] ?? escape(c));

/** A sensitive file (SENSITIVE) as a pattern: traversal_common collapses // and /./ before looking, so a run of them may stand for each / (a longer run fires by itself). */
const sensitive = (f: string) =>
  f
    .toLowerCase()
    .split('/')
    .flatMap((piece, i) => [...(i > 0 ? [String.raw`${SL}(?:\.?${SL})*`] : []), ...[...piece].map(escape)]);
const SENSITIVE = list('SENSITIVE', [
  '/etc/passwd',
  '/etc/shadow',
  '/etc/group',
  '/etc/hosts',
  '/etc/issue',
  '/proc/self/',
  '/proc/version',
  'win.ini',
  'boot.ini',
  'system32/',
  'web-inf/',
  'meta-inf/',
  '.htaccess',
  '.htpasswd',
  '/.git/',
  '/.svn/',
  '/.hg/',
  '/.env',
  'id_rsa',
  'wp-config.php',
  '/etc/mysql/',
  '/var/log/',
  '/.ssh/',
  '.bash_history',
  '.aws/',
  'web.config',
  '.svn/',
  'wwwroot/',
  '/etc/nginx/',
  '/etc/apache2/',
  '/usr/local/etc/',
]);
const SCHEMES = [
  ...list('INCLUDE_SCHEMES', [
    'php://',
    'file://',
    'zip://',
    'phar://',
    'expect://',
    'data://',
    'glob://',
    'compress.zlib://',
    'compress.bzip2://',
    'jar:file:',
    'ogg://',
    'rar://',
    'ssh2.',
    'data:text/plain;base64,',
    'data:;base64,',
    'data:text/plain,',
  ]),
  ...list('SSRF_SCHEMES', [
    'gopher://',
    'dict://',
    'ldap://',
    'ldaps://',
    'tftp://',
    'sftp://',
    'netdoc://',
    'jar:http',
    'rmi://',
    'iiop://',
    'ftp://127.',
    'ftp://localhost',
    'file://',
    'smb://',
    'telnet://',
  ]),
];
const CODE_CALLS = list(
  'CODE_CALLS',
  words(`system passthru shell_exec popen proc_open pcntl_exec phpinfo assert call_user_func call_user_func_array create_function
  base64_decode file_put_contents file_get_contents fputs fwrite preg_replace include_once require_once str_rot13 gzinflate __import__ getruntime
  processbuilder exec_command exec`),
);
/** The engine's NOSQL_OPS (rampart_detect_structure.lua), each with its $. */
const NOSQL_OPS = list(
  'NOSQL_OPS',
  words('$ne $eq $gt $gte $lt $lte $in $nin $regex $options $where $exists $expr $or $and $nor $not $elemmatch $all $size $mod $jsonschema $function $accumulator $geowithin $near'),
);
const SQL_DANGER_ALONE = list(
  'SQL_DANGER_ALONE',
  words(`sleep benchmark pg_sleep extractvalue updatexml load_file xp_cmdshell xp_dirtree sys_eval sys_exec
  dbms_pipe.receive_message utl_inaddr.get_host_address utl_http.request dbms_lock.sleep pg_read_file pg_ls_dir ctxsys.drithsx.sn gtid_subset name_const`),
);
const STACKED = [...list('STACKED', []), ...list('STATEMENT_AFTER_SEMI', words('select drop delete insert update exec execute declare create alter truncate shutdown waitfor set union replace copy'))];
const JS_SINKS = [...list('JS_SINKS', words('alert prompt confirm eval settimeout setinterval atob fetch import execscript msgbox')), ...list('JS_STRING_SINKS', [])];
const SINK_VALUES = list('SINK_VALUES', words('alert eval prompt confirm'));
const JS_GLOBALS = list('JS_GLOBALS', words('window self top parent frames globalthis this document content opener'));
const ENTITY_NAMES = list(
  'ENTITIES',
  words(`lt gt amp quot apos sol bsol lpar rpar colon semi comma period excl quest equals plus num percnt lsqb rsqb lbrack
  rbrack lcub rcub grave Tab NewLine nbsp dollar ast midast vert verbar lowbar hyphen dash bne`),
).map((e) => e.toLowerCase());

const INTERNAL_TLD = ['internal', 'local', 'localhost', 'svc', 'consul', 'corp', 'lan', 'intranet', 'arpa'].map((t) => `\\.${t}`).join('|');
/** Where D.ssrf's authority ends ([/\?#%s"'<>]), raw or encoded. */
const AUTHORITY_END = String.raw`(?:[/?#'"<>\\ \t\n\v\f\r]|${pe('(?:2[fF237]|3[fF]|20|09)')})`;
/**
 * A public host name: dotted, a letter in its last label (not an address), not starting like a
 * private or loopback address (127. 10. 0. 169. 172. 192. 100.) or 0x, no internal suffix, no
 * nip.io-style wrapper, an optional port; then the rest of the authority holds no @ (which would
 * start the real host), no : (so each URL's look-ahead stops at the next URL) and at most 16
 * escapes. A label starting 0x, an internal suffix in that rest: the suffix rule.
 */
const SAFE_HOST =
  String.raw`(?![a-z0-9.-]*(?:localtest\.me|lvh\.me|vcap\.me|nip\.io|xip\.io|sslip\.io)(?![a-z0-9-]))(?!(?:127|10|0[0-9]*|169|172|192|100)\.)(?!0x)` +
  String.raw`[a-z0-9.-]*\.[0-9-]*[a-z][a-z0-9-]*(?<!${INTERNAL_TLD})(?:${CO}[0-9]*)?` +
  String.raw`[^/?#'"<>\\ \t\n\v\f\r@%:]*(?:%(?!(?:25){0,8}(?:40|2[fF237]|3[fFaA]|20|09))[^/?#'"<>\\ \t\n\v\f\r@%:]*){0,16}(?:${AUTHORITY_END}|$)`;

/**
 * Runs that would wear a pattern out: PCRE2's JIT gives up on a group repeated a few thousand
 * times, and a regex that gives up does not match (a line of alternatives gives up whole). The word
 * rules repeat groups of blanks, parentheses, quotes and slashes; these lines come first on each
 * sample, so the word lines only ever read samples without such a run.
 */
const RUNS: Pattern[] = [
  {
    re: String.raw`(?:[ \t+\xa0()'"{!$]|\\"|${pe('(?:20|[aA]0|2[12789]|7[bB])')}){64}`,
    why: 'a run of 64 blanks, parentheses, quotes (also a JSON string\'s \\"), { ! or $ (raw or encoded)',
  },
  { re: String.raw`${SL}(?:\.?${SL}){7}`, why: 'a run of 8 slashes or /. (traversal_common collapses them)' },
];

/** Case-insensitive, over url, req.hdrs and req.body (JSON included). */
const WORDS: Pattern[] = [
  // SQL injection (D.sqli): keyword structures, the numeric context (the string context is in QUOTE_TAIL)
  { re: String.raw`${word('union')}(?:${WS}|${LP}|${CM})`, why: 'sqli: UNION [ALL] SELECT, UNION (SELECT' },
  {
    re: String.raw`${word('select')}(?:${WS}|${CM}|${QUOTE}|${STAR}|\.[0-9]|${AT}[a-z0-9_.$@]*(?:${WS}|${CM}|$))`,
    why: 'sqli: SELECT followed by a select list (select case, select @@version, select 1,2, select x from dual, select *)',
  },
  { re: String.raw`${word('waitfor')}${WS}`, why: 'sqli: WAITFOR DELAY' },
  { re: String.raw`${AT}${AT}(?:version|hostname|datadir|basedir|servername|tmpdir|global\.|session\.)`, why: 'sqli: @@version and the other system variables sql_structure knows' },
  { re: String.raw`information_schema|master\.\.|mysql\.user|pg_catalog|all_tables|${word('sys')}\.`, why: 'sqli: system schemas and tables' },
  {
    re: String.raw`(?:(?<![a-z0-9_$.\x80-\x9f\xa1-\xff])|(?<=%[0-9a-f]{2}))0x[0-9a-f]+[g-z_$\x80-\x9f\xa1-\xff]`,
    why: 'sqli: a hex number glued to a word (0x1Fsys.x, 0x1Funion): the SQL tokenizer reads a number and a word where the word rules see one word, not started (a 0x inside a word or a number is no number; after a percent escape it may be: %200x1F)',
  },
  // (sql_structure's INSERT INTO, DELETE FROM, DROP TABLE and UPDATE t SET: the second word is the
  // very next token; between them blanks, or comments, which fire by themselves)
  { re: String.raw`(?:${word('insert')}${WS}+into|${word('delete')}${WS}+from|${word('drop')}${WS}+(?:table|database))${RB}`, why: 'sqli: INSERT INTO, DELETE FROM, DROP TABLE, DROP DATABASE' },
  { re: String.raw`${word('update')}${WS}+[a-z0-9_$.\x80-\xff%]+${WS}+set${RB}`, why: 'sqli: UPDATE t SET' },
  { re: String.raw`${SEMI}${WS}*(?:${alternation(STACKED)})${RB}`, why: 'sqli: a statement stacked after ;' },
  { re: String.raw`${SEMI}${WS}*(?:--|${HASH})`, why: 'sqli: a comment after ; (1;-- )' },
  { re: String.raw`(?:${alternation(SQL_DANGER_ALONE)})${WS}*${LP}`, why: 'sqli: calls that alone make an injection (SQL_DANGER_ALONE; pg_sleep and dbms_lock.sleep end in sleep)' },
  { re: String.raw`${START}${NUMBER}${TAIL}`, why: 'sqli: a value that starts with a number followed by OR/AND/&&/UNION/ORDER BY/LIMIT... (1 or true, 1 order by 5, 0x1for 1)' },
  // cross-site scripting (D.xss, D.js): W has no < > or backtick, so script URLs and sinks
  { re: String.raw`script${WS}*${CO}`, why: 'xss: javascript: vbscript: livescript: ecmascript:' },
  { re: String.raw`data${CO}(?:${SL}|${SEMI}|text|image|application)`, why: 'xss and traversal: data: URLs (data:text/html, data:image/svg, data://, data:;base64, data:text/plain)' },
  { re: String.raw`(?:${alternation(JS_SINKS)})${WS}*(?:${LP}|\x60)`, why: 'xss: a sink called (alert(1), eval(...), setTimeout(...))' },
  { re: String.raw`(?:${SINK_VALUES.map(word).join('|')})${WS}*(?:${RP}|${CM}|${SEMI}|${RBR})`, why: 'xss: a sink used as a value ((alert)(1), [1].find(alert), x=alert,...)' },
  { re: String.raw`document${WS}*\.`, why: 'xss: document.cookie, document.write, document.location, document.domain' },
  {
    re: String.raw`constructor|fromcharcode|innerhtml|outerhtml|srcdoc|insertadjacenthtml|importscripts|__proto__|location${WS}*(?:\.${WS}*href|${EQ}${WS}*${QUOTE})|\.source${WS}*${PL}`,
    why: 'xss: constructor chains, String.fromCharCode, DOM sinks, location.href=, /x/.source+; __proto__ and constructor.prototype (prototype pollution)',
  },
  { re: String.raw`(?:[/ \t+"']|${pe('(?:20|2[fF]|2[27])')})on[a-z]+${WS}*${EQ}`, why: 'xss: an event handler attribute written after a blank, a quote or / (" onfocus=x.y autofocus")' },
  { re: String.raw`(?:${alternation(JS_GLOBALS)})${WS}*${LBR}`, why: 'xss: window[...], top[...]' },
  { re: String.raw`(?:[\[\]()!+]|${pe('(?:5[bBdD]|2[189bB])')}){12}`, why: 'xss: JSFuck, a run of a dozen of [ ] ( ) ! + (D.js also wants [] and ! or + in it)' },
  // command injection (D.cmdi): W has no ` $ < > or line break, so ; | & then a command: command_at
  // skips blanks, quotes, { ( !, then reads a word of [%w_.-/\:'"?*] (quotes dropped, the part after
  // its last / is the command). The word is scanned as one class that also takes %XX (so an encoded
  // / or quote is read, and the scan repeats no group: a long word cannot wear the regex out).
  {
    re: String.raw`${SEP}${SKIP}*(?:${WORD_RUN}${SL})?(?:${CMDS})(?:\.exe)?(?![a-z0-9_.:/?*-])`,
    why: 'cmdi: a command after ; | or & (not &name=), bare, quoted or after a path (; id, |/usr/bin/whoami, & cmd.exe, ;"cat", ;*/pwsh)',
  },
  { re: String.raw`${SEP}${SKIP}*${WORD_RUN}?(?<!%|%[0-9a-f])[a-z0-9]${QUOTE}+[a-z0-9]`, why: 'cmdi: a word split by quotes after a separator (; c\'a\'t, | who""ami): the shell drops them' },
  {
    // command_at drops the word's quotes before it looks for the glob: ;/bin"/"ca*
    re: String.raw`${SEP}${SKIP}*${SL}[a-z0-9/%\\'"]*?(?:${QM}|${STAR})`,
    why: 'cmdi: a globbed path after a separator, quotes inside it dropped (; /???/c?t, | /bin/ca*, ;/bin"/"ca*)',
  },
  { re: 'localgroup', why: 'cmdi: net localgroup (command_at accepts any word before localgroup)' },
  { re: String.raw`${SL}dev${SL}(?:tcp|udp)`, why: 'cmdi: /dev/tcp/ and /dev/udp/ reverse shells' },
  { re: String.raw`${LP}${WS}*${RP}${WS}*${LC}`, why: 'cmdi: Shellshock () {' },
  // path traversal and file inclusion (D.traversal, D.path_traversal)
  { re: String.raw`\.\.(?:${SL}|${SEMI})`, why: 'traversal: ../ and ..;/ (the path also fires on any ..)' },
  {
    re: String.raw`${SL}(?:etc|proc|var)${SL}|${alternation(SENSITIVE, sensitive)}`,
    why: 'traversal: the sensitive files (SENSITIVE), each / also as // or /./ (which traversal_common removes); /etc/ /proc/ /var/ whatever follows',
  },
  { re: String.raw`\.env|\.git${SL}`, why: 'traversal: a value that is .env or starts with .git/ (D.traversal)' },
  {
    re: String.raw`${alternation(SCHEMES, marker)}|jar${CO}|compress\.|ssh2\.`,
    why: 'traversal and ssrf: inclusion wrappers and schemes that reach internal services (INCLUDE_SCHEMES, SSRF_SCHEMES: php:// file:// gopher:// jar: compress.zlib:// ...)',
  },
  // server-side request forgery (D.ssrf)
  { re: String.raw`unix${CO}`, why: "ssrf: Apache's unix: socket (unix:...|http://...)" },
  {
    re: String.raw`(?:https?|wss?|ftp)(?<!^referer: http|\nreferer: http|^origin: http|\norigin: http|^referer: https|\nreferer: https|^origin: https|\norigin: https)${CO}(?!${SL}*${SAFE_HOST})`,
    why: 'ssrf: an http(s)/ws(s)/ftp URL whose host is not plainly public (an address, one label, an internal suffix, user@); not the host of Referer and Origin, which D.inspect does not read',
  },
  {
    re: String.raw`\.(?:internal|local|localhost|svc|consul|corp|lan|intranet|arpa)(?![a-z0-9-])|\.0x[0-9a-f]|(?:nip|xip|sslip)\.io|localtest\.me|lvh\.me|vcap\.me`,
    why: 'ssrf: internal suffixes anywhere (what follows a public host up to the end of the authority belongs to the host: http://a.com,x.internal/)',
  },
  // XML external entities (D.xxe): without < only XInclude
  { re: String.raw`xi${CO}include|xinclude`, why: 'xxe: XInclude' },
  // code, template and expression injection, serialized objects (D.injection)
  { re: alternation(CODE_MARKERS, marker), why: 'injection: the code markers (CODE_MARKERS: Java, OGNL, Python, PHP, Node, gadget classes)' },
  { re: String.raw`(?:${alternation(CODE_CALLS)})${WS}*${LP}`, why: 'injection: calls of functions that run code (CODE_CALLS)' },
  { re: String.raw`${LP}${WS}*java\.|${LP}${HASH}|${HASH}${LC}`, why: 'injection: SpEL T(java.lang...), OGNL (#x=...), EL #{...}' },
  { re: String.raw`${AT}type${DQ}`, why: 'injection: fastjson\'s "@type"' },
  { re: String.raw`ac${WS}?ed${WS}?00${WS}?05`, why: 'injection: a serialized Java object in hex' },
  { re: String.raw`${LC}${LC}|(?:${LC}|${HASH}|\$)${WS}*[0-9]+${WS}*(?:[-*]|${STAR}|${SL}|${PL})`, why: 'injection: {{ templates, {7*7} #{7*7} $7*7}' },
  // what a $ starts (a raw $ reaches the detectors only inside a JSON body's strings; anywhere else it fires by itself)
  {
    // (what follows the $ raw or percent-encoded: the detectors decode %7B, %28 and %69fs before they read it)
    re: String.raw`\$(?:${LC}|${LP}|'|${pe('27')}|(?:i|${pe('[46]9')})(?:f|${pe('[46]6')})(?:s|${pe('[57]3')}))`,
    why: "cmdi and injection: ${ (Log4j lookups, EL expressions, ${IFS}), $( substitution, $'...' strings, $IFS, each also percent-encoded",
  },
  {
    re: String.raw`\$(?:${alternation([...NOSQL_OPS.map((o) => o.replace(/^\$/, '')), 'type'])})(?![a-z0-9_])`,
    why: 'structure and injection: a document database operator (NOSQL_OPS: $ne, $where, ...; as a JSON key, or a segment of a dotted key), Json.NET\'s "$type"',
  },
];

/**
 * D.sqli's string context: the value read as the rest of a string the application quoted. What
 * follows the quote that ends it (sql_tail from the breakout): a logic word, a clause, a comment,
 * ;, ), a comparison, arithmetic on a call or subquery. Over a JSON body only after an encoded
 * quote: its raw quotes are structure (its values hold none raw; \" fires).
 */
const quoteTail = (quote: string) =>
  String.raw`${quote}${WS}*(?:(?:and|or|xor|having|procedure|into|union)${RB}|(?:order|group)${WS}+by${RB}|limit${WS}*\.?[0-9]|(?:like|rlike|regexp|in|is|between|sounds)${WS}*(?:${QUOTE}|${LP}|\.?[0-9])|--|${HASH}|${SEMI}|${RP}|[=<>!]|${EQ}|${BANG}|${AMP}${AMP}|${PIPE}${PIPE}|(?:-|${STAR}|${PL}|${SL}|${PIPE}|${CARET})${WS}*(?:${IDENT}${WS}*)?${LP})`;
const QUOTE_TAIL = quoteTail(QUOTE);
/** A block comment: it separates SQL words like a blank (UNION, a comment, SELECT; MySQL's executable comments). */
const COMMENT = String.raw`${SL}${STAR}`;
const VALUES: Pattern[] = [
  { re: String.raw`${NOT_JSON}${ANY}*?${QUOTE_TAIL}`, why: "sqli: what follows a quote that ends a string (' or 1=1, \"--, '=', ')) union...)" },
  {
    re: String.raw`${JSON_START}${ANY}*?${quoteTail(String.raw`(?:\\"|${pe('2[27]')})`)}`,
    why: 'sqli: the same after an escaped or percent-encoded quote in a JSON body (its raw quotes are structure; a value\'s quote is \\")',
  },
  { re: COMMENT, why: 'sqli: a block comment (UNION/**/SELECT, /*!50000 ...*/): it separates words like a blank' },
];

/** Case-insensitive, over req.hdrs and req.body (where a raw & may be inside a value; in a URL it only separates parameters). */
const TEXT: Pattern[] = [
  { re: String.raw`${START}${NUMBER}&&`, why: 'sqli: a value that starts with a number followed by && (1 && 1=1)' },
  { re: String.raw`${AMP}(?:${HASH}|${alternation(ENTITY_NAMES)})(?![a-z])`, why: 'an HTML character reference, which D.canonical decodes (&lt; &#60; &lpar;)' },
];
/** Case-insensitive, over url: an encoded & is a & inside a value. */
const URL_TEXT: Pattern[] = [
  { re: String.raw`${pe('26')}(?:${HASH}|${alternation(ENTITY_NAMES)})(?![a-z])`, why: 'an HTML character reference inside a value (%26lt; %26%2360;), which D.canonical decodes' },
];

/**
 * Repeated names (case-sensitive): the detectors join the values of a name that comes again (with
 * "," and with a blank, as ASP.NET does), and a joined value holds what no single one does
 * ("id=1&id=or true", "q=x|&q=id", "u=alert&u=(1)"). A name is compared as it is written, so a
 * name with an escape or + fires too when there is another (it may decode to the other's spelling).
 * Each name looks ahead to the end of its line once: the budget rules (earlier ACL lines) keep the
 * names of one part under 150.
 */
/** A name with an escape or +: it may decode to the spelling of another one. */
const ODD_NAME = String.raw`[^=&;?#\s%+]*[%+][^=&;\s]*=`;
const REPEATED_URL: Pattern[] = [
  { re: String.raw`(?:^[^?]*\?|&)[ ]*(?<name>[^=&;?#\s]*)=(?=[^\r\n]*?&[ ]*\k<name>=)`, why: 'a name of the query string that comes again (after the first ? and after each &: a ? is no separator)' },
  { re: String.raw`^(?=[^?]*\?[^#]*&)[^?]*\?(?:[^&]*&)*?[ ]*${ODD_NAME}`, why: 'a name with an escape or + in a query string of two parameters or more' },
];
const REPEATED_HEADERS: Pattern[] = [
  {
    re: String.raw`(?:(?:^|\n)cookie:(?:[^\r\n]*?;)?|(?:^|\n)referer:[^?\r\n]*\?(?:[^\r\n]*?&)?)[ ]*(?<name>[^=&;?#\s]*)=(?=[^\r\n]*?[&;][ ]*\k<name>=)`,
    why: "a cookie name, or a name of the Referer's query string, that comes again (no other header is read as pairs)",
  },
  {
    re: String.raw`(?:(?:^|\n)cookie:(?=[^\r\n]*;)(?:[^\r\n]*?;)?|(?:^|\n)referer:[^?\r\n]*\?(?=[^\r\n]*&)(?:[^\r\n]*?&)?)[ ]*${ODD_NAME}`,
    why: 'a name with an escape or + among two cookies or Referer parameters or more',
  },
];
const REPEATED_BODY: Pattern[] = [
  { re: String.raw`${NOT_JSON}(?:[^&\r\n]*&)*?[ ]*(?<name>[^=&;?#\s]*)=(?=[^\r\n]*?&[ ]*\k<name>=)`, why: 'a form field name that comes again (not in a JSON body: it is never read as form fields)' },
  { re: String.raw`${NOT_JSON}(?=[^\r\n]*&)(?:[^&\r\n]*&)*?[ ]*${ODD_NAME}`, why: 'a form field name with an escape or + among two fields or more' },
];

/** Case-sensitive markers, over url, req.hdrs and req.body. */
const MARKS: Pattern[] = [
  {
    re: String.raw`rO0AB|AAEAAAD${SL}{5}|BAhvOk|gA[SJNR][VjW](?<![A-Za-z0-9+/_-][\s\S]{4})`,
    why: 'injection: serialized Java (base64), .NET BinaryFormatter, Ruby Marshal, Python pickles (at the start of a value)',
  },
  { re: String.raw`[Oa]${CO}[0-9]+${CO}`, why: 'injection: serialized PHP objects and arrays (O:8:"...", a:2:{...})' },
  { re: `${PL}AD[w4]-`, why: 'xss: UTF-7 < and > (+ADw- +AD4-), which D.canonical decodes' },
];

/** HAProxy reads a pattern file's lines into a 16 KB buffer: a line longer than that is cut (and no longer compiles). */
export const GATE_LINE_MAX = 8000;

/**
 * A pattern file: its patterns joined into alternations (one scan of the sample instead of one per
 * pattern; HAProxy tries each line in turn), as few lines as GATE_LINE_MAX allows, each
 * alternative's reason in the comments, numbered. Named groups get the number too, so that they stay
 * unique within a line.
 */
function file(title: string, patterns: readonly Pattern[], wrap: (alternation: string) => string = (a) => a): string {
  const alternatives = patterns.map((p, i) => `(?:${p.re.replace(/\(\?<([a-z]+)>|\\k<([a-z]+)>/g, (m: string, open?: string, ref?: string) => (open ? `(?<${open}${i}>` : `\\k<${ref}${i}>`))})`);
  const lines: string[] = [];
  const room = GATE_LINE_MAX - wrap('').length;
  for (const a of alternatives) {
    if (a.length > room) throw new Error(`gate.ts: a pattern of ${a.length} bytes (${title})`);
    const last = lines.length - 1;
    if (last >= 0 && lines[last]!.length + 1 + a.length <= room) lines[last] += `|${a}`;
    else lines.push(a);
  }
  return [
    `# ${title}`,
    '# Generated by Rampart (packages/proxy/src/gate.ts): each line is the alternation of some of the numbered patterns below.',
    ...patterns.map((p, i) => `#   ${i + 1}. ${p.why}`),
    ...lines.map(wrap),
    '',
  ].join('\n');
}

/** The patterns of each file, one by one, with their reasons (GATE_FILES joins them into alternations). */
export const GATE_PATTERNS: Readonly<Record<string, readonly Readonly<Pattern>[]>> = {
  'gate_path.lst': PATH,
  'gate_query.lst': QUERY,
  'gate_headers.lst': HEADERS,
  'gate_body.lst': BODY,
  'gate_form_json.lst': FORM_JSON,
  'gate_runs.lst': RUNS,
  'gate_words.lst': WORDS,
  'gate_values.lst': VALUES,
  'gate_text.lst': TEXT,
  'gate_url_text.lst': URL_TEXT,
  'gate_repeated_url.lst': REPEATED_URL,
  'gate_repeated_headers.lst': REPEATED_HEADERS,
  'gate_repeated_body.lst': REPEATED_BODY,
  'gate_marks.lst': MARKS,
};

/** The gate's pattern files (file name -> content, one PCRE2 pattern per line), written into the config directory. */
export const GATE_FILES: Readonly<Record<string, string>> = {
  'gate_path.lst': file('The request path (HAProxy path): fires on what only an attack needs in a path.', PATH),
  'gate_query.lst': file("The query string (HAProxy query): characters and escapes outside the gate's alphabet.", QUERY),
  'gate_headers.lst': file('The request headers (HAProxy req.hdrs, HTX: "name: value" lines, lowercase names).', HEADERS),
  'gate_body.lst': file('The body (HAProxy req.body, up to its first NUL; "x" when binary, BODY_FETCH): characters and shapes.', BODY),
  'gate_form_json.lst': file('The first 512 bytes of the body, "|", the first Content-Type in lowercase.', FORM_JSON),
  'gate_runs.lst': file('Long runs of what the word rules repeat; over url, headers and body, before them.', RUNS),
  'gate_words.lst': file("Words the detectors recognise over the gate's alphabet; case-insensitive, over url, the inspected headers and body.", WORDS),
  'gate_values.lst': file('What follows a quote, block comments; case-insensitive, over url, the inspected headers and body.', VALUES),
  'gate_text.lst': file('Character references and && where a raw & is inside a value: headers and body; case-insensitive.', TEXT),
  'gate_url_text.lst': file('Character references inside URL values (%26); case-insensitive.', URL_TEXT),
  'gate_repeated_url.lst': file('Names of the query string that come again (their values are joined); over url.', REPEATED_URL),
  'gate_repeated_headers.lst': file('Cookie and Referer names that come again (their values are joined); over req.hdrs.', REPEATED_HEADERS),
  'gate_repeated_body.lst': file('Form field names that come again (their values are joined); over req.body.', REPEATED_BODY),
  'gate_marks.lst': file('Case-sensitive markers, over url, headers and body.', MARKS),
};

/**
 * The body as the body rules read it: a binary body (a control character other than a tab or a
 * line break in its first 512 bytes, BINARY_START) becomes "x". The detectors read nothing in such
 * a body when its Content-Type does not name a form (then FORM_JSON fires) except a serialized Java
 * object, whose magic AC ED 00 05 holds a NUL (which fires by itself); a UTF-16 body they convert
 * first starts with a byte-order mark or holds NULs (both fire). The regex is in double quotes for
 * the converter's arguments (its comma) and in single quotes for the configuration's line (its
 * backslashes go to PCRE2 as written).
 */
const BODY_FETCH = `req.body,regsub('"${BINARY_START}${ANY}*"',x)`;

/**
 * The request headers the detectors read: req.hdrs without the lines of structured headers
 * (GATE_STRUCTURED_HEADERS, which only ${ %{ #{ {{ take to a detector, and HEADERS fires on those in
 * any header). The word and value rules read this text with the very pattern files they use for the
 * URL and the body: HAProxy compiles a pattern file once for every ACL that uses it with the same
 * flags, and the gate's cost is mostly the machine code of its compiled patterns (about 1 MB for the
 * words), which a request pulls into the CPU's caches once per distinct pattern file it meets.
 */
const INSPECTED_HEADERS = `req.hdrs,regsub('"(?:^|\\n)(?:${GATE_STRUCTURED_HEADERS.map((h) => h.replace(/-/g, '\\-')).join('|')}):[^\\r\\n]*"',,g)`;

/**
 * The gate for a backend: two variables read once (the inspected headers, and the body as the body
 * rules read it), then the `acl` lines, all named `rp_gate` (OR'ed by HAProxy); each line indented 4
 * spaces. `cond`: the condition under which the gate will be asked (so the variables are not made
 * for a request already decided), as an `if` clause's words with a leading blank, or ''.
 * dir = absolute config directory.
 */
export function gateAcls(dir: string, cond = ''): string[] {
  const f = (name: string) => `${dir}/${name}`;
  const when = cond ? ` if${cond}` : '';
  const headers = 'var(txn.rp_gh)';
  const body = 'var(txn.rp_gb)';
  return [
    `    http-request set-var(txn.rp_gh) ${INSPECTED_HEADERS}${when}`,
    `    http-request set-var(txn.rp_gb) ${BODY_FETCH}${cond ? `${when} { req.body_len gt 0 }` : ' if { req.body_len gt 0 }'}`,
    `    acl rp_gate path -m reg -f ${f('gate_path.lst')}`,
    `    acl rp_gate query -m reg -f ${f('gate_query.lst')}`,
    `    acl rp_gate req.hdrs -m reg -f ${f('gate_headers.lst')}`,
    // multipart bodies fire (file names and contents); the Content-Type is kept for the form check below
    '    acl rp_gate req.fhdr(content-type,1),lower,set-var(txn.rp_gate_ct) -m sub multipart',
    `    acl rp_gate ${body} -m reg -f ${f('gate_body.lst')}`,
    // so many JSON strings (4,000 quotes: at most 4,000 values) that, with what the other parts may
    // hold (under 1,400 values: the 150-parameter rules, HAProxy's 101 headers), the detectors would
    // exceed VALUES_LIMIT (6,000) and join the rest; the quotes are counted by deleting everything
    // else (a pattern repeating a group thousands of times gives up on PCRE2's JIT, and would not fire)
    `    acl rp_gate ${body},regsub('"[^\\x22]+"',,g),length -m int ge 4000`,
    // JSON nested past NESTING_LIMIT (512) levels, which the detectors refuse, has more brackets
    // than that (counted in the same way); form fields past FIELDS_LIMIT fire BODY's 150-field rule
    `    acl rp_gate ${body},regsub('"[^[{]+"',,g),length -m int gt 512`,
    // a NUL: HAProxy's text matchers stop at it (req.body,length counts up to it), the detectors do not
    '    acl rp_gate req.body,length,set-var(txn.rp_gate_len) -m int lt 0',
    '    acl rp_gate req.body_len,sub(txn.rp_gate_len) -m int gt 0',
    `    acl rp_gate req.body,bytes(0,512),concat(|,txn.rp_gate_ct,) -m reg -f ${f('gate_form_json.lst')}`,
    `    acl rp_gate url -m reg -f ${f('gate_runs.lst')}`,
    `    acl rp_gate req.hdrs -m reg -f ${f('gate_runs.lst')}`,
    `    acl rp_gate ${body} -m reg -f ${f('gate_runs.lst')}`,
    `    acl rp_gate url -m reg -i -f ${f('gate_words.lst')}`,
    `    acl rp_gate ${headers} -m reg -i -f ${f('gate_words.lst')}`,
    `    acl rp_gate ${body} -m reg -i -f ${f('gate_words.lst')}`,
    `    acl rp_gate url -m reg -i -f ${f('gate_values.lst')}`,
    `    acl rp_gate ${headers} -m reg -i -f ${f('gate_values.lst')}`,
    `    acl rp_gate ${body} -m reg -i -f ${f('gate_values.lst')}`,
    `    acl rp_gate url -m reg -i -f ${f('gate_url_text.lst')}`,
    `    acl rp_gate req.hdrs -m reg -i -f ${f('gate_text.lst')}`,
    `    acl rp_gate ${body} -m reg -i -f ${f('gate_text.lst')}`,
    `    acl rp_gate url -m reg -f ${f('gate_repeated_url.lst')}`,
    `    acl rp_gate req.hdrs -m reg -f ${f('gate_repeated_headers.lst')}`,
    `    acl rp_gate ${body} -m reg -f ${f('gate_repeated_body.lst')}`,
    `    acl rp_gate url -m reg -f ${f('gate_marks.lst')}`,
    `    acl rp_gate req.hdrs -m reg -f ${f('gate_marks.lst')}`,
    `    acl rp_gate ${body} -m reg -f ${f('gate_marks.lst')}`,
  ];
}
