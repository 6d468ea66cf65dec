-- Unit tests of the Rampart WAF engine (lua/rampart_waf.lua) in plain Lua 5.3, outside HAProxy.
-- Usage: lua5.3 waf_engine_test.lua path/to/rampart_waf.lua
-- `core` is nil, so only the pure module loads (decide, the rate limiter, the cookie parser); the
-- HAProxy glue behind `if core ~= nil` is skipped. Checks docs/architecture.md "The WAF": the processing
-- order (first decisive step wins), the levels, and the rate limiter rules.

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

local REAL_MAX_TRACKED = M.MAX_TRACKED

-- Fresh settings (shaped like the generated waf_data.lua) and an empty rate limiter.
-- opts.rpm: rate limit per minute (nil = no rate_limit rule); opts.bot: bot protection on.
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
    rate_limit = opts.rpm and { rpm = opts.rpm, id = RULE_RATE } or nil,
    bot = opts.bot and RULE_BOT or nil,
    secret = opts.bot and "c2VjcmV0" or nil,
  }
  M.MAX_TRACKED = REAL_MAX_TRACKED
  M.limiter_reset()
end

-- A request as the native lookups leave it; defaults: a clean request from 192.0.2.1 at t=1000.
local function req(fields)
  local r = { ip = "192.0.2.1", now = 1000, badbot = false, crawler = false, cookie_ok = false }
  for k, v in pairs(fields or {}) do r[k] = v end
  return r
end

local PASS = { action = "pass" }
local function pass(d, what) decision(d, PASS, what) end

-- n allowed requests, then the next one limited.
local function expect_quota(domain, ip, now, n, what)
  for i = 1, n do
    pass(M.decide(domain, req({ ip = ip, now = now })), string.format("%s: request %d of %d", what or "quota", i, n))
  end
  decision(M.decide(domain, req({ ip = ip, now = now })), { action = "deny", status = 429, reason = "rate_limited", rule = RULE_RATE },
    string.format("%s: request %d", what or "quota", n + 1))
end

---------------------------------------------------------------------------------------------------
-- Module shape and constants
---------------------------------------------------------------------------------------------------
test("the module loads without HAProxy and exposes the documented constants", function()
  eq(type(M.decide), "function", "M.decide")
  eq(type(M.limiter_hit), "function", "M.limiter_hit")
  eq(type(M.limiter_cleanup), "function", "M.limiter_cleanup")
  eq(type(M.limiter_reset), "function", "M.limiter_reset")
  eq(type(M.parse_cookie), "function", "M.parse_cookie")
  eq(M.WINDOW, 60, "fixed window (s)")
  eq(M.MAX_TRACKED, 50000, "tracked IPs before a full reset")
  eq(M.IDLE, 300, "idle eviction (s)")
end)

test("rampart_waf_configure (called by the generated data file) replaces the settings", function()
  setup()
  rampart_waf_configure({
    domains = { [MED] = { enabled = true, level = "medium", countries = {} } },
    countries = {}, rate_limit = { rpm = 1, id = RULE_RATE }, bot = nil, secret = nil,
  })
  pass(M.decide(MED, req({ now = 1 })), "first request")
  decision(M.decide(MED, req({ now = 1 })), { status = 429 }, "second request with rpm 1")
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
  eq(M.limiter_size(), 0, "tracked IPs")
end)

test("a disabled domain (enabled=false) passes everything and is not counted", function()
  setup({ rpm = 1, bot = true })
  local bad = { bl = RULE_BL, country = "CN", badbot = true, ai = RULE_AI }
  for i = 1, 5 do pass(M.decide(OFF, req(bad)), "everything bad, request " .. i) end
  for i = 1, 5 do pass(M.decide(OFF, req()), "clean without cookie, request " .. i) end
  eq(M.limiter_size(), 0, "tracked IPs")
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

test("step 1: whitelisted addresses are never rate-limited nor counted", function()
  setup({ rpm = 2 })
  for i = 1, 20 do pass(M.decide(MED, req({ wl = RULE_WL, now = 1000 + i })), "whitelisted request " .. i) end
  eq(M.limiter_size(), 0, "tracked IPs")
  -- once off the whitelist the same address has its whole quota
  expect_quota(MED, "192.0.2.1", 1030, 2, "after the whitelist")
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

test("step 2: blacklisted requests do not increment the rate counter", function()
  setup({ rpm = 3 })
  for i = 1, 50 do decision(M.decide(MED, req({ bl = RULE_BL, now = 1000 })), { status = 403, reason = "ip_blocked" }, "blacklisted " .. i) end
  eq(M.limiter_size(), 0, "tracked IPs after 50 blacklisted requests")
  -- the rule is removed: the address has its full quota in the same minute
  expect_quota(MED, "192.0.2.1", 1001, 3, "after the blacklist")
  eq(M.limiter_size(), 1, "tracked IPs")
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
  eq(M.limiter_size(), 0, "tracked IPs")
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

test("step 3: challenged requests do not increment the rate counter", function()
  setup({ rpm = 3, bot = true })
  for i = 1, 50 do decision(M.decide(MED, req({ now = 1000 })), { action = "challenge" }, "challenged " .. i) end
  eq(M.limiter_size(), 0, "tracked IPs after 50 challenges")
  -- with the cookie from the page the same address has its full quota in the same minute
  for i = 1, 3 do pass(M.decide(MED, req({ now = 1001, cookie_ok = true })), "with cookie " .. i) end
  decision(M.decide(MED, req({ now = 1001, cookie_ok = true })), { status = 429, reason = "rate_limited" }, "with cookie 4")
end)

test("step 3: bot_blocked and ai_bot_blocked requests are not counted either", function()
  setup({ rpm = 2, bot = true })
  for i = 1, 10 do M.decide(MED, req({ badbot = true })); M.decide(MED, req({ ai = RULE_AI })) end
  eq(M.limiter_size(), 0, "tracked IPs")
end)

test("step 3 then 4: crawlers and cookie holders are still rate-limited", function()
  setup({ rpm = 2, bot = true })
  pass(M.decide(MED, req({ ip = "192.0.2.7", crawler = true })), "crawler 1")
  pass(M.decide(MED, req({ ip = "192.0.2.7", crawler = true })), "crawler 2")
  decision(M.decide(MED, req({ ip = "192.0.2.7", crawler = true })), { status = 429, reason = "rate_limited", rule = RULE_RATE }, "crawler 3")
end)

---------------------------------------------------------------------------------------------------
-- Step 4: rate limit
---------------------------------------------------------------------------------------------------
test("step 4: medium and high limit with 429 rate_limited and the rule id", function()
  setup({ rpm = 3 })
  expect_quota(MED, "192.0.2.10", 1000, 3, "medium")
  expect_quota(HIGH, "192.0.2.11", 1000, 3, "high")
  decision(M.decide(MED, req({ ip = "192.0.2.10" })), { action = "deny", status = 429, reason = "rate_limited", rule = RULE_RATE }, "still limited")
end)

test("step 4: low stores the rule but never limits nor counts", function()
  setup({ rpm = 1 })
  for i = 1, 30 do pass(M.decide(LOW, req({ now = 1000 })), "low request " .. i) end
  eq(M.limiter_size(), 0, "tracked IPs")
end)

test("step 4: without a rate_limit rule nothing is limited nor counted", function()
  setup({ rpm = nil })
  for i = 1, 30 do pass(M.decide(HIGH, req()), "request " .. i) end
  eq(M.limiter_size(), 0, "tracked IPs")
end)

test("step 4: the count is per IP", function()
  setup({ rpm = 2 })
  expect_quota(MED, "192.0.2.20", 1000, 2, "first IP")
  expect_quota(MED, "192.0.2.21", 1000, 2, "second IP")
  eq(M.limiter_size(), 2, "tracked IPs")
end)

test("step 4: the count is shared by all domains of the server (server-wide rule)", function()
  setup({ rpm = 4 })
  pass(M.decide(MED, req()), "medium 1")
  pass(M.decide(HIGH, req()), "high 1")
  pass(M.decide(MED, req()), "medium 2")
  pass(M.decide(HIGH, req()), "high 2")
  decision(M.decide(MED, req()), { status = 429 }, "medium 3 is the 5th request")
  decision(M.decide(HIGH, req()), { status = 429 }, "high 3")
  pass(M.decide(LOW, req()), "low is never limited")
end)

test("step 4: the rate limit comes before detection: every request within the quota counts", function()
  -- detection (step 5) runs after this engine has passed the request (rampart_detect.lua), so a
  -- request over the quota is refused with 429 whatever it carries
  setup({ rpm = 2 })
  pass(M.decide(HIGH, req()), "1st")
  pass(M.decide(HIGH, req()), "2nd")
  decision(M.decide(HIGH, req()), { status = 429, reason = "rate_limited" }, "3rd: over the quota")
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
test("rule 1: the window starts at the first request and the count resets when it expires", function()
  setup({ rpm = 2 })
  local ip = "198.51.100.1"
  pass(M.decide(MED, req({ ip = ip, now = 1010 })), "t=1010 (window starts)")
  pass(M.decide(MED, req({ ip = ip, now = 1040 })), "t=1040")
  decision(M.decide(MED, req({ ip = ip, now = 1069 })), { status = 429 }, "t=1069, last second of the window")
  pass(M.decide(MED, req({ ip = ip, now = 1070 })), "t=1070, the window expired: new window")
  pass(M.decide(MED, req({ ip = ip, now = 1071 })), "t=1071")
  decision(M.decide(MED, req({ ip = ip, now = 1072 })), { status = 429 }, "t=1072, 3rd in the new window")
  decision(M.decide(MED, req({ ip = ip, now = 1129 })), { status = 429 }, "t=1129, still the window from 1070")
  pass(M.decide(MED, req({ ip = ip, now = 1130 })), "t=1130, next window")
end)

test("rule 1: the window is fixed, not sliding: limited requests do not extend it", function()
  setup({ rpm = 1 })
  local ip = "198.51.100.2"
  pass(M.decide(MED, req({ ip = ip, now = 0 })), "t=0")
  for t = 1, 59 do decision(M.decide(MED, req({ ip = ip, now = t })), { status = 429 }, "t=" .. t) end
  pass(M.decide(MED, req({ ip = ip, now = 60 })), "t=60")
end)

test("rule 1: windows are per IP, each from its own first request", function()
  setup({ rpm = 1 })
  pass(M.decide(MED, req({ ip = "198.51.100.3", now = 100 })), "A at 100")
  pass(M.decide(MED, req({ ip = "198.51.100.4", now = 130 })), "B at 130")
  pass(M.decide(MED, req({ ip = "198.51.100.3", now = 160 })), "A at 160: A's window (100) expired")
  decision(M.decide(MED, req({ ip = "198.51.100.4", now = 160 })), { status = 429 }, "B at 160: B's window (130) still open")
  pass(M.decide(MED, req({ ip = "198.51.100.4", now = 190 })), "B at 190")
end)

test("rule 1: a long gap starts a fresh window", function()
  setup({ rpm = 1 })
  pass(M.decide(MED, req({ now = 1000 })), "t=1000")
  decision(M.decide(MED, req({ now = 1001 })), { status = 429 }, "t=1001")
  pass(M.decide(MED, req({ now = 5000 })), "t=5000")
  decision(M.decide(MED, req({ now = 5059 })), { status = 429 }, "t=5059")
end)

test("limiter_hit directly: true only above the limit", function()
  setup()
  falsy(M.limiter_hit("203.0.113.1", 10, 2), "1st")
  falsy(M.limiter_hit("203.0.113.1", 10, 2), "2nd")
  truthy(M.limiter_hit("203.0.113.1", 10, 2), "3rd")
  falsy(M.limiter_hit("203.0.113.1", 70, 2), "1st of the next window")
end)

---------------------------------------------------------------------------------------------------
-- Rate limiter rule 2: at most 50,000 IPs, then a full reset
---------------------------------------------------------------------------------------------------
test("rule 2 (MAX_TRACKED = 5): a 6th new IP resets the whole tracker", function()
  setup({ rpm = 1 })
  M.MAX_TRACKED = 5
  local ok, err = pcall(function()
    for i = 1, 5 do pass(M.decide(MED, req({ ip = "10.0.0." .. i, now = 1000 })), "IP " .. i) end
    eq(M.limiter_size(), 5, "tracked at the limit")
    decision(M.decide(MED, req({ ip = "10.0.0.1", now = 1001 })), { status = 429 }, "a known IP at the limit is still counted")
    eq(M.limiter_size(), 5, "a known IP does not reset the tracker")
    pass(M.decide(MED, req({ ip = "10.0.0.6", now = 1002 })), "6th IP")
    eq(M.limiter_size(), 1, "after the reset only the new IP is tracked")
    pass(M.decide(MED, req({ ip = "10.0.0.1", now = 1003 })), "IP 1 lost its count in the reset")
    eq(M.limiter_size(), 2, "tracked after IP 1 comes back")
  end)
  M.MAX_TRACKED = REAL_MAX_TRACKED
  if not ok then error(err, 0) end
end)

test("rule 2 (MAX_TRACKED = 5): requests that do not reach the limiter do not fill the tracker", function()
  setup({ rpm = 1, bot = true })
  M.MAX_TRACKED = 5
  local ok, err = pcall(function()
    for i = 1, 4 do pass(M.decide(MED, req({ ip = "10.0.1." .. i, cookie_ok = true })), "IP " .. i) end
    for i = 1, 20 do
      M.decide(MED, req({ ip = "10.0.2." .. i }))               -- challenged
      M.decide(MED, req({ ip = "10.0.3." .. i, bl = RULE_BL })) -- blacklisted
      M.decide(MED, req({ ip = "10.0.4." .. i, wl = RULE_WL })) -- whitelisted
      M.decide(LOW, req({ ip = "10.0.5." .. i, cookie_ok = true })) -- low level
    end
    eq(M.limiter_size(), 4, "tracked")
    decision(M.decide(MED, req({ ip = "10.0.1.1", cookie_ok = true })), { status = 429 }, "IP 1 kept its count")
  end)
  M.MAX_TRACKED = REAL_MAX_TRACKED
  if not ok then error(err, 0) end
end)

test("rule 2 (real limit): 50,000 IPs are tracked; the 50,001st resets the tracker", function()
  setup({ rpm = 1 })
  eq(M.MAX_TRACKED, 50000, "MAX_TRACKED")
  for i = 1, 49999 do
    local ip = string.format("10.%d.%d.%d", i // 65536, (i // 256) % 256, i % 256)
    local d = M.decide(MED, req({ ip = ip, now = 1000 }))
    if d.action ~= "pass" then fail("IP " .. ip .. " was not passed: " .. show(d)) end
  end
  eq(M.limiter_size(), 49999, "tracked one below the limit")
  pass(M.decide(MED, req({ ip = "172.16.0.1", now = 1000 })), "the 50,000th IP")
  eq(M.limiter_size(), 50000, "tracked at the limit: no reset yet")
  decision(M.decide(MED, req({ ip = "172.16.0.1", now = 1000 })), { status = 429 }, "the 50,000th IP keeps its count")
  decision(M.decide(MED, req({ ip = "10.0.0.1", now = 1000 })), { status = 429 }, "the first IP keeps its count")
  eq(M.limiter_size(), 50000, "known IPs do not reset")
  pass(M.decide(MED, req({ ip = "172.16.0.2", now = 1000 })), "the 50,001st IP")
  eq(M.limiter_size(), 1, "the whole tracker was reset")
  pass(M.decide(MED, req({ ip = "172.16.0.1", now = 1000 })), "the 50,000th IP starts over")
  pass(M.decide(MED, req({ ip = "10.0.0.1", now = 1000 })), "the first IP starts over")
  eq(M.limiter_size(), 3, "tracked after the reset")
end)

---------------------------------------------------------------------------------------------------
-- Rate limiter rule 3: entries idle over 5 minutes are evicted
---------------------------------------------------------------------------------------------------
test("rule 3: cleanup evicts entries idle over 300 s and keeps fresh ones with their counts", function()
  setup({ rpm = 2 })
  pass(M.decide(MED, req({ ip = "198.51.100.10", now = 0 })), "old: t=0")
  pass(M.decide(MED, req({ ip = "198.51.100.11", now = 100 })), "busy: t=100")
  pass(M.decide(MED, req({ ip = "198.51.100.11", now = 250 })), "busy: t=250 (last seen)")
  pass(M.decide(MED, req({ ip = "198.51.100.12", now = 200 })), "boundary: t=200")
  pass(M.decide(MED, req({ ip = "198.51.100.13", now = 490 })), "fresh: t=490")
  pass(M.decide(MED, req({ ip = "198.51.100.13", now = 491 })), "fresh: t=491")
  eq(M.limiter_size(), 4, "tracked before cleanup")
  M.limiter_cleanup(500)
  eq(M.limiter_size(), 3, "only the entry idle for 500 s is evicted (idle exactly 300 s is kept)")
  decision(M.decide(MED, req({ ip = "198.51.100.13", now = 510 })), { status = 429 }, "the fresh entry kept its count")
  eq(M.limiter_size(), 3, "still tracked")
  pass(M.decide(MED, req({ ip = "198.51.100.10", now = 510 })), "the evicted IP starts over")
  eq(M.limiter_size(), 4, "the evicted IP is tracked again")
  M.limiter_cleanup(801)
  eq(M.limiter_size(), 2, "at t=801 the entries last seen at 250 and 491 are idle over 300 s")
  M.limiter_cleanup(100000)
  eq(M.limiter_size(), 0, "everything idle")
end)

test("rule 3: idleness counts from the last request, not from the window start", function()
  setup({ rpm = 1000 })
  for t = 0, 600, 60 do M.decide(MED, req({ ip = "198.51.100.20", now = t })) end
  M.limiter_cleanup(700)
  eq(M.limiter_size(), 1, "seen at t=600, kept at t=700")
end)

test("limiter_reset empties the tracker", function()
  setup({ rpm = 1 })
  M.decide(MED, req({ ip = "a" }))
  M.decide(MED, req({ ip = "b" }))
  eq(M.limiter_size(), 2, "tracked")
  M.limiter_reset()
  eq(M.limiter_size(), 0, "after reset")
  pass(M.decide(MED, req({ ip = "a" })), "a starts over")
end)

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

H.finish()
