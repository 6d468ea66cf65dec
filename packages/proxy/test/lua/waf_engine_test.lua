-- Unit tests of the Rampart WAF engine (lua/rampart_waf.lua) in plain Lua 5.3, outside HAProxy.
-- Usage: lua5.3 waf_engine_test.lua path/to/rampart_waf.lua
-- `core` is nil, so only the pure module loads (decide, the cookie parser); the HAProxy glue behind
-- `if core ~= nil` is skipped. Checks docs/architecture.md "The WAF": the processing order of steps
-- 1 to 3 (first decisive step wins) and the levels. Step 4 (a stick table) and its rules are
-- tested through HAProxy (test/e2e/waf.test.ts); a request the engine refuses never reaches it.

core = nil
local path = assert(arg[1], "usage: lua5.3 waf_engine_test.lua <path to rampart_waf.lua>")
local M = dofile(path)

local H = dofile((arg[0]:match("^(.*)/") or ".") .. "/harness.lua")
local show, fail, eq, truthy, falsy, test = H.show, H.fail, H.eq, H.truthy, H.falsy, H.test

-- Asserts a decision: expected is { action, status, reason, rule } (absent keys not compared,
-- except that a "pass" must carry no status/reason).
local function decision(d, expected, what)
  what = what or "decision"
  if type(d) ~= "table" then fail(what .. ": not a table: " .. show(d)) end
  for _, k in ipairs({ "action", "status", "reason", "rule" }) do
    if expected[k] ~= nil and d[k] ~= expected[k] then
      fail(string.format("%s: expected %s, got %s", what, show(expected), show(d)))
    end
  end
  if expected.action == "pass" and (d.status ~= nil or d.reason ~= nil) then
    fail(string.format("%s: a pass must not carry a status or reason, got %s", what, show(d)))
  end
end

---------------------------------------------------------------------------------------------------
-- Fixtures
---------------------------------------------------------------------------------------------------
local LOW = "00000000-0000-4000-8000-00000000000a"
local MED = "00000000-0000-4000-8000-00000000000b"
local HIGH = "00000000-0000-4000-8000-00000000000c"
local OFF = "00000000-0000-4000-8000-00000000000d"
local UNKNOWN = "00000000-0000-4000-8000-0000000000ff"

local RULE_WL = "10000000-0000-4000-8000-000000000001"
local RULE_BL = "10000000-0000-4000-8000-000000000002"
local RULE_AI = "10000000-0000-4000-8000-000000000003"
local RULE_RATE = "10000000-0000-4000-8000-000000000004"
local RULE_BOT = "10000000-0000-4000-8000-000000000005"
local RULE_CC_DOMAIN = "10000000-0000-4000-8000-000000000006"
local RULE_CC_GLOBAL = "10000000-0000-4000-8000-000000000007"
local RULE_CC_GLOBAL_FR = "10000000-0000-4000-8000-000000000008"

-- Fresh settings (shaped like the generated waf_data.lua). opts.bot: bot protection on.
local function setup(opts)
  opts = opts or {}
  M.settings = {
    domains = {
      [LOW] = { enabled = true, level = "low", countries = {} },
      [MED] = { enabled = true, level = "medium", countries = { CN = RULE_CC_DOMAIN } },
      [HIGH] = { enabled = true, level = "high", countries = {} },
      [OFF] = { enabled = false, level = "high", countries = { CN = RULE_CC_DOMAIN } },
    },
    countries = { CN = RULE_CC_GLOBAL, FR = RULE_CC_GLOBAL_FR },
    bot = opts.bot and RULE_BOT or nil,
    secret = opts.bot and "c2VjcmV0" or nil,
  }
end

-- A request as the native lookups leave it; defaults: a clean request from 192.0.2.1 at t=1000.
local function req(fields)
  local r = { ip = "192.0.2.1", now = 1000, badbot = false, crawler = false, cookie_ok = false }
  for k, v in pairs(fields or {}) do r[k] = v end
  return r
end

local PASS = { action = "pass" }
local function pass(d, what) decision(d, PASS, what) end


---------------------------------------------------------------------------------------------------
-- Module shape and constants
---------------------------------------------------------------------------------------------------
test("the module loads without HAProxy and exposes the documented constants", function()
  eq(type(M.decide), "function", "M.decide")
  eq(type(M.parse_cookie), "function", "M.parse_cookie")
  eq(M.limiter_hit, nil, "no rate limiter in Lua: the counters are a stick table shared by all threads")
end)

test("rampart_waf_configure (called by the generated data file) replaces the settings", function()
  setup()
  rampart_waf_configure({
    domains = { [MED] = { enabled = true, level = "medium", countries = {} } },
    countries = { FR = RULE_CC_GLOBAL_FR }, bot = nil, secret = nil,
  })
  pass(M.decide(MED, req({ country = "CN" })), "CN is no longer blocked")
  decision(M.decide(MED, req({ country = "FR" })), { status = 403, rule = RULE_CC_GLOBAL_FR }, "FR is")
  pass(M.decide(LOW, req({ now = 1 })), "a domain no longer configured")
end)

---------------------------------------------------------------------------------------------------
-- Step 6 and domains the engine does not enforce
---------------------------------------------------------------------------------------------------
test("step 6: a clean request passes at every level", function()
  setup({ rpm = 100, bot = false })
  for _, d in ipairs({ LOW, MED, HIGH }) do pass(M.decide(d, req()), d) end
end)

test("an unknown domain id passes everything and is not counted", function()
  setup({ rpm = 1, bot = true })
  for i = 1, 5 do
    pass(M.decide(UNKNOWN, req({ bl = RULE_BL, badbot = true, ai = RULE_AI, country = "CN" })), "request " .. i)
  end
end)

test("a disabled domain (enabled=false) passes everything and is not counted", function()
  setup({ rpm = 1, bot = true })
  local bad = { bl = RULE_BL, country = "CN", badbot = true, ai = RULE_AI }
  for i = 1, 5 do pass(M.decide(OFF, req(bad)), "everything bad, request " .. i) end
  for i = 1, 5 do pass(M.decide(OFF, req()), "clean without cookie, request " .. i) end
  -- the same level when enabled does block: only the switch differs
  M.settings.domains[OFF].enabled = true
  decision(M.decide(OFF, req(bad)), { status = 403, reason = "ip_blocked" }, "after switching on")
end)

---------------------------------------------------------------------------------------------------
-- Step 1: whitelist
---------------------------------------------------------------------------------------------------
test("step 1: the whitelist beats the blacklist, countries, bots, the challenge, the rate limit and OWASP", function()
  setup({ rpm = 1, bot = true })
  local everything = { wl = RULE_WL, bl = RULE_BL, country = "CN", badbot = true, ai = RULE_AI }
  for _, d in ipairs({ LOW, MED, HIGH }) do
    for i = 1, 5 do pass(M.decide(d, req(everything)), d .. " request " .. i) end
  end
end)

---------------------------------------------------------------------------------------------------
-- Step 2: blacklist and countries
---------------------------------------------------------------------------------------------------
test("step 2: a blacklisted address gets 403 ip_blocked with its rule, at every level", function()
  setup()
  for _, d in ipairs({ LOW, MED, HIGH }) do
    decision(M.decide(d, req({ bl = RULE_BL })), { action = "deny", status = 403, reason = "ip_blocked", rule = RULE_BL }, d)
  end
end)

test("step 2: the blacklist beats bots, the challenge, the rate limit and OWASP", function()
  setup({ rpm = 1, bot = true })
  local d = M.decide(HIGH, req({ bl = RULE_BL, badbot = true, ai = RULE_AI }))
  decision(d, { action = "deny", status = 403, reason = "ip_blocked", rule = RULE_BL }, "blacklisted bad bot with sqli")
  decision(M.decide(HIGH, req({ bl = RULE_BL })), { reason = "ip_blocked" }, "blacklisted, would be challenged")
  for i = 1, 10 do
    decision(M.decide(MED, req({ bl = RULE_BL, cookie_ok = true })), { status = 403, reason = "ip_blocked" }, "over the rate, request " .. i)
  end
end)

test("step 2: countries, per-domain rule first, then global; unlisted countries pass", function()
  setup()
  decision(M.decide(MED, req({ country = "CN" })), { action = "deny", status = 403, reason = "country_blocked", rule = RULE_CC_DOMAIN }, "CN on a domain with its own CN rule")
  decision(M.decide(HIGH, req({ country = "CN" })), { action = "deny", status = 403, reason = "country_blocked", rule = RULE_CC_GLOBAL }, "CN by the global rule")
  decision(M.decide(LOW, req({ country = "FR" })), { action = "deny", status = 403, reason = "country_blocked", rule = RULE_CC_GLOBAL_FR }, "FR by the global rule at low")
  pass(M.decide(MED, req({ country = "DE" })), "DE")
  pass(M.decide(MED, req({ country = nil })), "unknown country")
end)

test("step 2: the IP blacklist is reported before the country; a blocked country is not counted", function()
  setup({ rpm = 1, bot = true })
  decision(M.decide(MED, req({ bl = RULE_BL, country = "CN" })), { reason = "ip_blocked", rule = RULE_BL }, "both")
  for i = 1, 5 do decision(M.decide(MED, req({ country = "CN", badbot = true })), { status = 403, reason = "country_blocked" }, "country before bots " .. i) end
end)

---------------------------------------------------------------------------------------------------
-- Step 3: bots
---------------------------------------------------------------------------------------------------
test("step 3: with a block_bot rule a known-bad user-agent gets 403 bot_blocked, before the challenge", function()
  setup({ bot = true })
  for _, d in ipairs({ LOW, MED, HIGH }) do
    decision(M.decide(d, req({ badbot = true })), { action = "deny", status = 403, reason = "bot_blocked", rule = RULE_BOT }, d .. " without cookie")
    decision(M.decide(d, req({ badbot = true, cookie_ok = true })), { status = 403, reason = "bot_blocked" }, d .. " even with a valid cookie")
    decision(M.decide(d, req({ badbot = true, crawler = true })), { status = 403, reason = "bot_blocked" }, d .. " even when it also looks like a crawler")
  end
end)

test("step 3: without a block_bot rule bad user-agents are not blocked and nobody is challenged", function()
  setup({ bot = false })
  pass(M.decide(MED, req({ badbot = true })), "bad user-agent")
  pass(M.decide(MED, req()), "no cookie")
end)

test("step 3: an AI crawler named by a block_ai_bot rule gets 403 ai_bot_blocked, with or without bot protection", function()
  setup({ bot = false })
  decision(M.decide(LOW, req({ ai = RULE_AI })), { action = "deny", status = 403, reason = "ai_bot_blocked", rule = RULE_AI }, "bot protection off")
  setup({ bot = true })
  decision(M.decide(HIGH, req({ ai = RULE_AI })), { action = "deny", status = 403, reason = "ai_bot_blocked", rule = RULE_AI }, "bot protection on, no cookie: refused, not challenged")
  decision(M.decide(HIGH, req({ ai = RULE_AI, cookie_ok = true })), { status = 403, reason = "ai_bot_blocked" }, "even with a valid cookie")
  decision(M.decide(HIGH, req({ ai = RULE_AI, badbot = true })), { status = 403 }, "AI crawler that is also a bad bot")
end)

test("step 3: the challenge (200) when bot protection is on and the cookie is not valid, at every level", function()
  setup({ bot = true })
  for _, d in ipairs({ LOW, MED, HIGH }) do
    decision(M.decide(d, req()), { action = "challenge", status = 200, reason = "bot_challenge", rule = RULE_BOT }, d)
  end
end)

test("step 3: a valid cookie passes the challenge; a search crawler is exempt from it", function()
  setup({ bot = true })
  pass(M.decide(MED, req({ cookie_ok = true })), "valid cookie")
  pass(M.decide(MED, req({ crawler = true })), "search crawler")
end)

test("step 3: the challenge beats the rate limit and OWASP", function()
  setup({ rpm = 1, bot = true })
  for i = 1, 5 do
    decision(M.decide(HIGH, req()), { action = "challenge", status = 200 }, "challenge " .. i)
  end
end)

test("step 3: bot_blocked and ai_bot_blocked requests are not counted either", function()
  setup({ rpm = 2, bot = true })
  for i = 1, 10 do M.decide(MED, req({ badbot = true })); M.decide(MED, req({ ai = RULE_AI })) end
end)

---------------------------------------------------------------------------------------------------
-- Step 4: rate limit
---------------------------------------------------------------------------------------------------
test("step 4: low stores the rule but never limits nor counts", function()
  setup({ rpm = 1 })
  for i = 1, 30 do pass(M.decide(LOW, req({ now = 1000 })), "low request " .. i) end
end)

test("step 4: without a rate_limit rule nothing is limited nor counted", function()
  setup({ rpm = nil })
  for i = 1, 30 do pass(M.decide(HIGH, req()), "request " .. i) end
end)

test("the shared engine leaves attack detection to the per-thread engine", function()
  setup()
  for _, d in ipairs({ LOW, MED, HIGH }) do pass(M.decide(d, req()), d) end
end)

test("event fields are percent-encoded: no blank, control or '%' byte reaches the syslog line", function()
  eq(M.log_escape("/a b%c\n\"", 256), "/a%20b%25c%0A\"", "escaped")
  eq(M.log_escape("", 16), "-", "empty")
  eq(M.log_escape(nil, 16), "-", "absent")
  eq(M.log_escape(string.rep("x", 300), 256), string.rep("x", 256), "capped before escaping")
end)

---------------------------------------------------------------------------------------------------
-- Rate limiter rule 1: fixed 60 s window per IP from its first request
---------------------------------------------------------------------------------------------------
---------------------------------------------------------------------------------------------------
-- Rate limiter rule 2: at most 50,000 IPs, then a full reset
---------------------------------------------------------------------------------------------------
---------------------------------------------------------------------------------------------------
-- Rate limiter rule 3: entries idle over 5 minutes are evicted
---------------------------------------------------------------------------------------------------
---------------------------------------------------------------------------------------------------
-- Challenge cookie
---------------------------------------------------------------------------------------------------
test("parse_cookie accepts <expiry>.<hex>", function()
  local e, mac = M.parse_cookie("123.abcdef")
  eq(e, 123, "expiry")
  eq(mac, "abcdef", "mac")
  e, mac = M.parse_cookie("1700000000.0123456789ABCDEFabcdef")
  eq(e, 1700000000, "expiry")
  eq(mac, "0123456789abcdefabcdef", "mac is lower-cased")
  eq(math.type(e), "integer", "expiry is an integer")
end)

test("parse_cookie rejects malformed values", function()
  local bad = {
    "", "abc", "123", "123.", ".abcdef", "abc.abcdef", "123.xyz", "123.abcdefg", "12a.abcdef",
    "-1.abcdef", "1.5.abcdef", "123.abc.def", " 123.abcdef", "123.abcdef ", "123.abcdef;x",
    "123,abcdef", "0x10.abcdef", "123..abcdef", "123.abc def", "123.abcdef\n",
  }
  eq(M.parse_cookie(nil), nil, "nil")
  for _, v in ipairs(bad) do
    local e, mac = M.parse_cookie(v)
    if e ~= nil or mac ~= nil then fail("accepted " .. show(v) .. " as " .. show(e) .. ", " .. show(mac)) end
  end
end)

test("cookie payload, challenge page and response bodies", function()
  eq(M.cookie_payload("192.0.2.1", "UA/1.0", 123), "192.0.2.1|UA/1.0|123", "payload")
  local page = M.challenge_page("123.abcdef")
  truthy(page:find(M.COOKIE .. "=123.abcdef", 1, true), "the page sets the cookie")
  truthy(page:find("Checking your browser", 1, true), "challenge text")
  truthy(M.body(429):lower():find("rate limit", 1, true), "429 body announces the rate limit")
  truthy(M.body(403):find("Forbidden", 1, true), "403 body")
end)

test("request ids: only the generated form is ever put in a page", function()
  eq(M.request_id("3f9c0a12b4e5d6f7"), "3f9c0a12b4e5d6f7", "hex id")
  eq(M.request_id("Ab_-9"), "Ab_-9", "the protocol alphabet")
  for _, bad in ipairs({ "", "<script>", "a b", "a\nb", string.rep("a", 65), "a%2Fb" }) do
    eq(M.request_id(bad), nil, "refused: " .. show(bad))
  end
  eq(M.request_id(nil), nil, "nil")
end)

test("browsers get the HTML page, other clients plain text, both with the request id", function()
  truthy(M.wants_html("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"), "a browser's Accept")
  truthy(M.wants_html("TEXT/HTML"), "any case")
  falsy(M.wants_html("*/*"), "curl")
  falsy(M.wants_html("application/json"), "an API client")
  falsy(M.wants_html(nil), "no Accept")
  local ctype, body = M.answer(403, "sqli_detected", false, "3f9c0a12b4e5d6f7")
  eq(ctype, "text/plain; charset=utf-8", "plain type")
  eq(body, M.body(403) .. "Request id: 3f9c0a12b4e5d6f7\n", "today's text plus the id line")
  ctype, body = M.answer(403, "sqli_detected", true, "3f9c0a12b4e5d6f7")
  eq(ctype, "text/html; charset=utf-8", "html type")
  truthy(body:find("This request was blocked by the site's firewall (SQL injection).", 1, true), "the reason in plain words")
  truthy(body:find(">3f9c0a12b4e5d6f7<", 1, true), "the id shown")
  falsy(body:find("https?://"), "no external asset")
  falsy(body:find("<script", 1, true), "no script")
  ctype, body = M.answer(429, "rate_limited", true, "abc", 42)
  truthy(body:find("Try again in 42 seconds", 1, true), "429 page says when")
  truthy(body:find("Too many requests", 1, true), "429 title")
  ctype, body = M.answer(429, "rate_limited", false, "abc", 42)
  truthy(body:lower():find("rate limit", 1, true) and body:find("Request id: abc", 1, true), "429 text")
  -- every reason the WAF answers with has words
  for _, r in ipairs({ "ip_blocked", "country_blocked", "bot_blocked", "ai_bot_blocked", "rate_limited", "sqli_detected", "xss_detected",
    "cmdi_detected", "traversal_detected", "ssrf_detected", "xxe_detected", "injection_detected", "upload_blocked" }) do
    truthy(M.REASON_WORDS[r], "words for " .. r)
  end
  ctype, body = M.answer(403, "ip_blocked", false, nil)
  eq(body, M.body(403), "no id: no id line")
end)

test("Retry-After: the seconds left in the fixed window", function()
  eq(M.retry_after(0), 60, "at the window's start")
  eq(M.retry_after(18), 42, "18 s in")
  eq(M.retry_after(59), 1, "last second")
  eq(M.retry_after(59.5), 1, "never 0")
  eq(M.retry_after(nil), 60, "unknown")
  eq(M.retry_after(-3), 60, "clock went back")
  eq(M.retry_after(600), 60, "past the window")
end)

H.finish()
