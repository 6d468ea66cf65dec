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
    keys = opts.bot and { { id = "k2", secret = "c2VjcmV0" }, { id = "k1", secret = "b2xk" } } or {},
    difficulty = 12,
    all_paths = opts.paths == nil,
    cookie_ttl = 86400,
    challenge_ttl = 300,
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

test("step 3: with paths, only guarded paths are challenged; bad bots are refused everywhere", function()
  setup({ bot = true, paths = true })
  pass(M.decide(MED, req()), "an unguarded path")
  decision(M.decide(MED, req({ guarded = true })), { action = "challenge", status = 200, reason = "bot_challenge" }, "a guarded path")
  pass(M.decide(MED, req({ guarded = true, cookie_ok = true })), "a guarded path with a valid cookie")
  decision(M.decide(MED, req({ badbot = true })), { status = 403, reason = "bot_blocked" }, "a bad bot on an unguarded path")
end)

test("step 3: a challenge answer is verified (action verify), whatever the path setting", function()
  for _, paths in ipairs({ false, true }) do
    setup({ bot = true, paths = paths or nil })
    decision(M.decide(MED, req({ answer = true })), { action = "verify", reason = "bot_challenge", rule = RULE_BOT }, "answer")
    pass(M.decide(MED, req({ answer = true, cookie_ok = true })), "an answer with a valid cookie already")
    decision(M.decide(MED, req({ answer = true, bl = RULE_BL })), { reason = "ip_blocked" }, "a blacklisted address never gets a cookie")
  end
  setup({})
  pass(M.decide(MED, req({ answer = true })), "bot protection off: an ordinary path")
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
test("parse_cookie accepts <key id>.<expiry>.<hex>", function()
  local kid, e, mac = M.parse_cookie("k1.123.abcdef")
  eq(kid, "k1", "key id")
  eq(e, 123, "expiry")
  eq(mac, "abcdef", "mac")
  kid, e, mac = M.parse_cookie("0.1700000000.0123456789ABCDEFabcdef")
  eq(e, 1700000000, "expiry")
  eq(mac, "0123456789abcdefabcdef", "mac is lower-cased")
  eq(math.type(e), "integer", "expiry is an integer")
end)

test("parse_cookie rejects malformed values", function()
  local bad = {
    "", "abc", "123", "123.", ".abcdef", "abc.abcdef", "123.abcdef", "k.123.xyz", "k.123.abcdefg", "k.12a.abcdef",
    "k.-1.abcdef", "K.5.abcdef", "k.123.abc.def", " k.123.abcdef", "k.123.abcdef ", "k.123.abcdef;x",
    "k,123,abcdef", "k.0x10.abcdef", "k..123.abcdef", "k.123.abc def", "k.123.abcdef\n",
  }
  eq(M.parse_cookie(nil), nil, "nil")
  for _, v in ipairs(bad) do
    local kid = M.parse_cookie(v)
    if kid ~= nil then fail("accepted " .. show(v)) end
  end
end)

---------------------------------------------------------------------------------------------------
-- Proof of work: the answer check, with stand-ins for HAProxy's hmac and sha2 converters
---------------------------------------------------------------------------------------------------
-- A stand-in MAC: 64 hex digits that depend on key and data (not cryptographic; the real one is
-- HAProxy's hmac converter, tested end to end).
local function fake_hmac(key, data)
  local h = 5381
  local s = key .. "\0" .. data
  for i = 1, #s do h = (h * 33 + string.byte(s, i)) % 4294967296 end
  return string.rep(string.format("%08x", h), 8)
end
-- A stand-in digest: as many zero bits as the counter's last digits say ("...:12" -> 12 bits).
local function fake_sha(data)
  local bits = tonumber(string.match(data, "(%d%d)$")) or 0
  return string.rep("\0", bits // 8) .. string.char(255 >> (bits % 8)) .. string.rep("\255", 31 - bits // 8)
end

local function token(ip, ua, kid, secret, expiry, difficulty)
  local nonce = "00ff00ff00ff00ff"
  local mac = fake_hmac(secret, M.challenge_payload(ip, ua, kid, expiry, difficulty, nonce))
  return table.concat({ kid, tostring(expiry), tostring(difficulty), nonce, mac }, ".")
end

test("zero_bits counts the leading zero bits of a digest", function()
  eq(M.zero_bits("\255"), 0, "none")
  eq(M.zero_bits("\0\128"), 8, "one zero byte")
  eq(M.zero_bits("\0\0\1"), 23, "23")
  eq(M.zero_bits("\0\15\255"), 12, "12")
  eq(M.zero_bits("\0\0"), 16, "all zero")
end)

test("check_answer: a token of this client with enough work passes", function()
  setup({ bot = true })
  local t = token("192.0.2.1", "UA/1", "k2", "c2VjcmV0", 1100, 12)
  truthy(M.check_answer("c=" .. t .. "&n=4412", "192.0.2.1", "UA/1", 1000, fake_hmac, fake_sha), "12 bits at difficulty 12")
  truthy(M.check_answer("x=1&n=4416&c=" .. t, "192.0.2.1", "UA/1", 1000, fake_hmac, fake_sha), "parameters in any order, more work")
  local old = token("192.0.2.1", "UA/1", "k1", "b2xk", 1100, 12)
  truthy(M.check_answer("c=" .. old .. "&n=12", "192.0.2.1", "UA/1", 1000, fake_hmac, fake_sha), "a token of the previous key")
end)

test("check_answer refuses replays elsewhere, forgeries, expired or easy tokens and too little work", function()
  setup({ bot = true })
  local t = token("192.0.2.1", "UA/1", "k2", "c2VjcmV0", 1100, 12)
  local function refused(query, ip, ua, now, why)
    local ok, reason = M.check_answer(query, ip, ua, now, fake_hmac, fake_sha)
    if ok then fail("accepted: " .. why) end
    return reason
  end
  eq(refused("c=" .. t .. "&n=11", "192.0.2.1", "UA/1", 1000, "11 bits"), "not enough work", "too little work")
  eq(refused("c=" .. t .. "&n=12", "192.0.2.2", "UA/1", 1000, "another address"), "forged or for another client", "other address")
  eq(refused("c=" .. t .. "&n=12", "192.0.2.1", "UA/2", 1000, "another user-agent"), "forged or for another client", "other UA")
  eq(refused("c=" .. t .. "&n=12", "192.0.2.1", "UA/1", 1100, "at expiry"), "expired", "expired")
  local far = token("192.0.2.1", "UA/1", "k2", "c2VjcmV0", 1000 + M.settings.challenge_ttl + 1, 12)
  eq(refused("c=" .. far .. "&n=12", "192.0.2.1", "UA/1", 1000, "expiry beyond the challenge lifetime"), "expired", "too far")
  local easy = token("192.0.2.1", "UA/1", "k2", "c2VjcmV0", 1100, 8)
  eq(refused("c=" .. easy .. "&n=08", "192.0.2.1", "UA/1", 1000, "below the configured difficulty"), "too easy", "easy")
  local retired = token("192.0.2.1", "UA/1", "k0", "c2VjcmV0", 1100, 12)
  eq(refused("c=" .. retired .. "&n=12", "192.0.2.1", "UA/1", 1000, "an unknown key id"), "unknown key", "unknown key")
  local forged = t:gsub("%.1100%.", ".1299.")
  eq(refused("c=" .. forged .. "&n=12", "192.0.2.1", "UA/1", 1000, "a changed expiry"), "forged or for another client", "forged")
  for _, q in ipairs({ "", "c=" .. t, "n=12", "c=" .. t .. "&n=", "c=" .. t .. "&n=1e9", "c=x.y&n=12", "c=" .. t .. "x&n=12", "c=" .. string.rep("a", 300) .. "&n=1" }) do
    eq(refused(q, "192.0.2.1", "UA/1", 1000, "malformed " .. q), "malformed", "malformed: " .. q:sub(1, 40))
  end
  -- Attacks on the query: a repeated parameter is read once (the first), an encoded dot or an
  -- overlong counter is no token or counter at all.
  eq(refused("c=" .. t .. "&n=11&n=12", "192.0.2.1", "UA/1", 1000, "a second n"), "not enough work", "repeated n: the first")
  eq(refused("c=" .. forged .. "&c=" .. t .. "&n=12", "192.0.2.1", "UA/1", 1000, "a second c"), "forged or for another client", "repeated c: the first")
  for _, q in ipairs({ "c=" .. t:gsub("%.", "%%2e") .. "&n=12", "c=" .. t .. "&n=" .. string.rep("0", 11) .. "12" }) do
    eq(refused(q, "192.0.2.1", "UA/1", 1000, "encoded " .. q), "malformed", "malformed: " .. q:sub(1, 40))
  end
end)

test("the challenge page carries the token and difficulty, never a cookie, and explains itself without JavaScript", function()
  M.worker = "onmessage=function(){/*the solver*/}"
  local page = M.challenge_page("k2.1100.12.00ff.abcdef", 12)
  M.worker = nil
  falsy(page:find("document.cookie", 1, true), "no cookie in the page")
  falsy(page:find(M.COOKIE .. "=", 1, true), "no cookie value in the page")
  truthy(page:find("\"k2.1100.12.00ff.abcdef\"", 1, true), "the token")
  truthy(page:find("D=12", 1, true), "the difficulty")
  truthy(page:find(M.ANSWER_PATH, 1, true), "the answer path")
  truthy(page:find("<noscript>", 1, true) and page:find("turn on JavaScript", 1, true), "noscript explains what to do")
  truthy(page:find("Checking your browser", 1, true), "challenge text")
  truthy(page:find("new Worker", 1, true) and page:find("<script type=\"text/plain\" id=\"rampart-pow\">onmessage=function(){/*the solver*/}</script>", 1, true), "the solver runs in Web Workers")
end)

test("check_cookie: this client's unexpired cookie of a held key passes; anything else does not", function()
  setup({ bot = true })
  M.settings.keys = { { id = "k2", inner = "I2", outer = "O2" }, { id = "k1", inner = "I1", outer = "O1" } }
  -- A stand-in digest in upper-case hex (the cookie carries hex; not cryptographic).
  local sha = function(d) local h = 0 for i = 1, #d do h = (h * 31 + string.byte(d, i)) % 4294967296 end return string.format("%08X", h) end
  local function cookie(kid, key, ip, ua, expiry)
    return kid .. "." .. expiry .. "." .. M.cookie_mac(key, ip, ua, expiry, sha)
  end
  local c = cookie("k2", M.settings.keys[1], "192.0.2.1", "UA/1", 2000)
  local ok, expiry = M.check_cookie(c, "192.0.2.1", "UA/1", 1000, sha)
  truthy(ok, "valid")
  eq(expiry, 2000, "its expiry")
  truthy(M.check_cookie(cookie("k1", M.settings.keys[2], "192.0.2.1", "UA/1", 2000), "192.0.2.1", "UA/1", 1000, sha), "the previous key")
  falsy(M.check_cookie(c, "192.0.2.2", "UA/1", 1000, sha), "another address")
  falsy(M.check_cookie(c, "192.0.2.1", "UA/2", 1000, sha), "another user-agent")
  falsy(M.check_cookie(c, "192.0.2.1", "UA/1", 2000, sha), "expired")
  falsy(M.check_cookie(cookie("k0", M.settings.keys[1], "192.0.2.1", "UA/1", 2000), "192.0.2.1", "UA/1", 1000, sha), "an unknown key id")
  falsy(M.check_cookie((c:gsub("%.2000%.", ".2999.")), "192.0.2.1", "UA/1", 1000, sha), "a changed expiry")
  falsy(M.check_cookie("k2.2000.zz", "192.0.2.1", "UA/1", 1000, sha), "malformed")
end)

test("response bodies", function()
  -- The MAC's composition, with a stand-in hash that shows its input.
  local calls = {}
  local mac = M.cookie_mac({ inner = "IN", outer = "OUT" }, "192.0.2.1", "UA/1.0", 123, function(d) calls[#calls + 1] = d; return "H(" .. d .. ")" end)
  eq(calls[1], "IN|192.0.2.1|UA/1.0|123", "inner input: inner key, address, user-agent, expiry")
  eq(calls[2], "OUTH(IN|192.0.2.1|UA/1.0|123)", "outer input: outer key and the inner hex")
  eq(mac, "h(outh(in|192.0.2.1|ua/1.0|123))", "lower case")
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
