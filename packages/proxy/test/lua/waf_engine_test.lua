-- Unit tests of the Rampart WAF engine (lua/rampart_waf.lua) in plain Lua 5.3, outside HAProxy.
-- Usage: lua5.3 waf_engine_test.lua path/to/rampart_waf.lua
-- `core` is nil, so only the pure module loads (the challenge token, its answer check, the pass
-- cookie's MAC, the page); the HAProxy glue behind `if core ~= nil` is skipped. The WAF's decisions
-- and their order are native and tested through HAProxy (test/waf-order.test.ts, test/e2e/waf.test.ts).

core = nil
local path = assert(arg[1], "usage: lua5.3 waf_engine_test.lua <path to rampart_waf.lua>")
local M = dofile(path)

local H = dofile((arg[0]:match("^(.*)/") or ".") .. "/harness.lua")
local show, fail, eq, truthy, falsy, test = H.show, H.fail, H.eq, H.truthy, H.falsy, H.test

local function setup()
  M.settings = {
    bot = "10000000-0000-4000-8000-000000000005",
    keys = { { id = "k2", secret = "c2VjcmV0" }, { id = "k1", secret = "b2xk" } },
    difficulty = 12,
    cookie_ttl = 86400,
    challenge_ttl = 300,
  }
end

test("the module loads without HAProxy and exposes the documented constants", function()
  eq(M.decide, nil, "no decisions in Lua: they are native (waf.ts)")
  eq(type(M.check_answer), "function", "M.check_answer")
  eq(M.ANSWER_PATH, "/.well-known/rampart/bot", "the answer path")
end)

test("rampart_waf_configure (called by the generated data file) replaces the settings", function()
  setup()
  rampart_waf_configure({ bot = nil, keys = {}, difficulty = 18, cookie_ttl = 60, challenge_ttl = 300 })
  eq(M.settings.difficulty, 18, "difficulty")
  eq(M.key("k2"), nil, "the old keys are gone")
end)

test("event fields are percent-encoded: no blank, control or '%' byte reaches the syslog line", function()
  eq(M.log_escape("/a b%c\n\"", 256), "/a%20b%25c%0A\"", "escaped")
  eq(M.log_escape("", 16), "-", "empty")
  eq(M.log_escape(nil, 16), "-", "absent")
  eq(M.log_escape(string.rep("x", 300), 256), string.rep("x", 256), "capped before escaping")
end)

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

local function token(ip, ua, kid, secret, expiry, difficulty, domain)
  local nonce = "00ff00ff00ff00ff"
  local mac = fake_hmac(secret, M.challenge_payload(domain or "a.test", ip, ua, kid, expiry, difficulty, nonce))
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
  truthy(M.check_answer("c=" .. t .. "&n=4412", "a.test", "192.0.2.1", "UA/1", 1000, fake_hmac, fake_sha), "12 bits at difficulty 12")
  truthy(M.check_answer("x=1&n=4416&c=" .. t, "a.test", "192.0.2.1", "UA/1", 1000, fake_hmac, fake_sha), "parameters in any order, more work")
  local old = token("192.0.2.1", "UA/1", "k1", "b2xk", 1100, 12)
  truthy(M.check_answer("c=" .. old .. "&n=12", "a.test", "192.0.2.1", "UA/1", 1000, fake_hmac, fake_sha), "a token of the previous key")
end)

test("check_answer refuses replays elsewhere, forgeries, expired or easy tokens and too little work", function()
  setup({ bot = true })
  local t = token("192.0.2.1", "UA/1", "k2", "c2VjcmV0", 1100, 12)
  local function refused(query, ip, ua, now, why, domain)
    local ok, reason = M.check_answer(query, domain or "a.test", ip, ua, now, fake_hmac, fake_sha)
    if ok then fail("accepted: " .. why) end
    return reason
  end
  eq(refused("c=" .. t .. "&n=11", "192.0.2.1", "UA/1", 1000, "11 bits"), "not enough work", "too little work")
  eq(refused("c=" .. t .. "&n=12", "192.0.2.2", "UA/1", 1000, "another address"), "forged or for another client", "other address")
  eq(refused("c=" .. t .. "&n=12", "192.0.2.1", "UA/2", 1000, "another user-agent"), "forged or for another client", "other UA")
  eq(refused("c=" .. t .. "&n=12", "192.0.2.1", "UA/1", 1000, "another domain", "b.test"), "forged or for another client", "work done for one site is worth nothing on another")
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

test("the pass cookie's MAC: SHA-256 over the outer key and the inner digest's upper-case hex", function()
  -- The MAC's composition, with a stand-in hash that shows its input.
  local calls = {}
  local mac = M.cookie_mac({ inner = "IN", outer = "OUT" }, "a.test", "192.0.2.1", "UA/1.0", 123, function(d) calls[#calls + 1] = d; return "H(" .. d .. ")" end)
  eq(calls[1], "IN|a.test|192.0.2.1|UA/1.0|123", "inner input: inner key, domain, address, user-agent, expiry")
  eq(calls[2], "OUTH(IN|a.test|192.0.2.1|UA/1.0|123)", "outer input: outer key and the inner hex")
  eq(mac, "h(outh(in|a.test|192.0.2.1|ua/1.0|123))", "lower case")
end)

test("request ids: only the generated form is ever put in a page", function()
  eq(M.request_id("3f9c0a12b4e5d6f7"), "3f9c0a12b4e5d6f7", "hex id")
  eq(M.request_id("Ab_-9"), "Ab_-9", "the protocol alphabet")
  for _, bad in ipairs({ "", "<script>", "a b", "a\nb", string.rep("a", 65), "a%2Fb" }) do
    eq(M.request_id(bad), nil, "refused: " .. show(bad))
  end
  eq(M.request_id(nil), nil, "nil")
end)

H.finish()
