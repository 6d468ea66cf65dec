-- Rampart's bot challenge, loaded into every HAProxy thread's own Lua state (`lua-load-per-thread`):
-- it keeps no state of its own, so threads never wait for each other.
--
-- Every WAF decision is taken natively by the generated configuration (waf.ts): the whitelist,
-- blacklist and countries, bad bots and AI crawlers, verified crawlers, the pass cookie, the rate
-- limiter, and the answer pages. What nothing native can do is here: the challenge page (a fresh
-- token signed with the account's key) and the check of its answer, which earns the pass cookie.
-- The pure parts are module functions (tested in test/lua/waf_engine_test.lua); I/O (txn, core)
-- stays in the action at the bottom.

local M = {}

M.settings = { bot = nil, keys = nil, difficulty = 14, cookie_ttl = 86400, challenge_ttl = 300 }

---------------------------------------------------------------------------------------------------
-- Proof of work (docs/bots.md). The challenge page carries a token, never a cookie:
--   "<key id>.<expiry>.<difficulty>.<nonce>.<hex HMAC-SHA256(key, c|ip|ua|key id|expiry|difficulty|nonce)>"
-- The browser finds a counter n such that SHA-256(token .. n) starts with `difficulty` zero bits
-- and sends both to M.ANSWER_PATH; the engine checks the MAC, the expiry and the work (HAProxy's
-- own hmac and sha2 converters, no call out) and answers with the pass cookie:
--   "<key id>.<expiry>.<MAC over domain|ip|ua|expiry>" (M.cookie_mac)
-- Both the token and the cookie are bound to the domain (its configured name, txn.rp_domain): work
-- done or a pass earned on one site of the shield server is worth nothing on another.
-- checked natively on every later request (waf.ts). Both are bound to the client's address and
-- User-Agent, and valid on every shield server of the account (they share its keys).
---------------------------------------------------------------------------------------------------
-- Lifetimes (cookie_ttl, challenge_ttl) come with the settings (waf.ts, from the protocol).
M.COOKIE = "rampart_bot"
M.ANSWER_PATH = "/.well-known/rampart/bot"

-- The pass cookie's MAC (pow.ts passCookieMac): HMAC's nested construction with plain SHA-256 and
-- the key's two derived block-sized keys, which HAProxy checks fast on every request (waf.ts).
-- sha256_hex(data): upper-case hex, as HAProxy's hex converter writes it.
function M.cookie_mac(key, domain, ip, ua, expiry, sha256_hex)
  local inner = sha256_hex(key.inner .. "|" .. domain .. "|" .. ip .. "|" .. ua .. "|" .. tostring(expiry))
  return string.lower(sha256_hex(key.outer .. inner))
end

function M.challenge_payload(domain, ip, ua, kid, expiry, difficulty, nonce)
  return "c|" .. domain .. "|" .. ip .. "|" .. ua .. "|" .. kid .. "|" .. tostring(expiry) .. "|" .. tostring(difficulty) .. "|" .. nonce
end

-- The parts of a challenge token, or nil when it is not of the form above.
function M.parse_token(token)
  if type(token) ~= "string" or #token > 200 then return nil end
  local kid, expiry, difficulty, nonce, mac = string.match(token, "^([0-9a-z]+)%.(%d+)%.(%d+)%.(%x+)%.(%x+)$")
  if kid == nil or #kid > 16 or #expiry > 12 or #difficulty > 2 or #nonce > 32 or #mac ~= 64 then return nil end
  return { kid = kid, expiry = tonumber(expiry), difficulty = tonumber(difficulty), nonce = nonce, mac = string.lower(mac) }
end

-- The key named kid, from settings.keys (current first); nil for an unknown or retired id.
function M.key(kid)
  for _, k in ipairs(M.settings.keys or {}) do
    if k.id == kid then return k end
  end
  return nil
end

-- Leading zero bits of a binary string (a digest).
function M.zero_bits(digest)
  local bits = 0
  for i = 1, #digest do
    local b = string.byte(digest, i)
    if b == 0 then
      bits = bits + 8
    else
      while b < 128 do
        bits = bits + 1
        b = b * 2
      end
      return bits
    end
  end
  return bits
end

-- Checks an answer: query is the request's query string, hmac(key, data) a hex MAC, sha256(data)
-- a binary digest. Returns true, or false and why (for tests and logs; never sent to the client).
function M.check_answer(query, domain, ip, ua, now, hmac, sha256)
  query = "&" .. (query or "") .. "&"
  local token = string.match(query, "&c=([0-9a-z.]+)&")
  local n = string.match(query, "&n=(%d+)&")
  if token == nil or n == nil or #n > 12 then return false, "malformed" end
  local t = M.parse_token(token)
  if t == nil then return false, "malformed" end
  local key = M.key(t.kid)
  if key == nil then return false, "unknown key" end
  if t.expiry <= now or t.expiry > now + M.settings.challenge_ttl then return false, "expired" end
  if t.difficulty < M.settings.difficulty then return false, "too easy" end
  if hmac(key.secret, M.challenge_payload(domain, ip, ua, t.kid, t.expiry, t.difficulty, t.nonce)) ~= t.mac then
    return false, "forged or for another client"
  end
  if M.zero_bits(sha256(token .. n)) < t.difficulty then return false, "not enough work" end
  return true
end

-- Every answer of the WAF names the request (txn.rp_id, waf-pages.ts REQUEST_ID_FORMAT) so a
-- visitor can quote it to the site owner, who finds the event by it.
M.REQUEST_ID_HEADER = "x-rampart-request-id"

-- A request id of the expected form, or nil (never reflected).
function M.request_id(id)
  if type(id) ~= "string" or #id < 1 or #id > 64 or string.find(id, "[^A-Za-z0-9_-]") then return nil end
  return id
end

-- The request's id: the one the configuration made, else one made now (16 hex digits from two
-- 32-bit random numbers, as REQUEST_ID_FORMAT) and kept in txn.rp_id, where the event line reads it.
function M.make_request_id(txn)
  local id = M.request_id(txn:get_var("txn.rp_id"))
  if id then return id end
  id = string.format("%08x%08x", txn.f:rand(4294967295), txn.f:rand(4294967295))
  txn:set_var("txn.rp_id", id)
  return id
end

-- The page: starts one worker per core (at most 4), shows the hashes tried, sends the first
-- counter found to M.ANSWER_PATH, then reloads the page with the pass cookie. The token holds only
-- [0-9a-z.] and the difficulty is a number: nothing else reaches the script.
function M.challenge_page(token, difficulty)
  return "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">" ..
    "<title>Checking your browser</title><style>body{margin:0;font:16px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:#f4f5f7;color:#1d2330}" ..
    "main{max-width:34rem;margin:12vh auto;padding:2rem;background:#fff;border-radius:12px;box-shadow:0 2px 12px rgba(0,0,0,.08)}" ..
    "h1{margin:0 0 .5rem;font-size:1.4rem}#progress{color:#4a5160;font-variant-numeric:tabular-nums}footer{margin-top:1.5rem;font-size:.8rem;color:#7a8190}</style></head><body><main>" ..
    "<h1>Checking your browser&hellip;</h1><p>This site makes sure its visitors are people, with a short computation in your browser. It takes a moment, once a day.</p>" ..
    "<noscript><p><strong>JavaScript is needed for this check.</strong> Please turn on JavaScript (and allow cookies) for this site, then reload the page. " ..
    "Without it the site cannot tell you from an automated client.</p></noscript>" ..
    "<p id=\"progress\" aria-live=\"polite\"></p><footer>Protected by Rampart</footer></main>" ..
    "<script type=\"text/plain\" id=\"rampart-pow\">" .. (M.worker or "") .. "</script>" ..
    "<script>(function(){var T=\"" .. token .. "\",D=" .. tostring(difficulty) .. ",P=document.getElementById(\"progress\");" ..
    "if(!window.Worker||!window.Blob||!window.URL){P.textContent=\"This browser cannot run the check (it needs Web Workers).\";return}" ..
    "var u=URL.createObjectURL(new Blob([document.getElementById(\"rampart-pow\").textContent],{type:\"text/javascript\"}));" ..
    "var k=Math.min(4,navigator.hardwareConcurrency||2),w=[],tried=0,t0=Date.now(),done=false;" ..
    "function stop(){w.forEach(function(x){x.terminate()})}" ..
    "for(var i=0;i<k;i++){var x=new Worker(u);x.onmessage=function(e){if(done)return;if(e.data.p){tried+=e.data.p;P.textContent=\"Working… \"+tried.toLocaleString()+\" hashes tried\";return}" ..
    "done=true;stop();var ms=Date.now()-t0;window.rampartPow={ms:ms,hashes:e.data.n+1,webCrypto:!!e.data.webCrypto};P.textContent=\"Done in \"+ms+\" ms. Loading the page…\";" ..
    "fetch(\"" .. M.ANSWER_PATH .. "?c=\"+T+\"&n=\"+e.data.n,{credentials:\"same-origin\",cache:\"no-store\"}).then(function(r){" ..
    "if(r.ok){location.reload()}else{P.textContent=\"The check did not pass. Reload the page to try again.\"}})};" ..
    "x.postMessage({t:T,d:D,s:i,k:k});w.push(x)}})();</script></body></html>\n"
end

-- An event field in the syslog line: percent-encoded, so it holds no blank or control byte
-- (the same encoding as rampart_detect.lua's, which the agent decodes).
function M.log_escape(s, max)
  if s == nil or s == "" then return "-" end
  if #s > max then s = string.sub(s, 1, max) end
  return (string.gsub(s, "[^\33-\36\38-\126]", function(c) return string.format("%%%02X", string.byte(c)) end))
end

-- Called by the generated data file. The challenge page's worker script (assets/pow-worker.js,
-- written next to it) is read once here, when HAProxy loads the configuration.
function rampart_waf_configure(settings)
  M.settings = settings
  if settings.worker_file then
    local f = io.open(settings.worker_file, "r")
    if f then
      M.worker = f:read("a")
      f:close()
    end
  end
end

---------------------------------------------------------------------------------------------------
-- HAProxy glue (only when running inside HAProxy).
---------------------------------------------------------------------------------------------------
if core ~= nil and core.register_action ~= nil then
  -- HAProxy's own converters: HMAC-SHA256 with a base64 key (hex out), SHA-256 (binary or hex out).
  local function hmac_of(txn)
    return function(key, data) return string.lower(txn.c:hex(txn.c:hmac(data, "sha256", key))) end
  end
  local function sha256_of(txn)
    return function(data) return txn.c:sha2(data, 256) end
  end
  local function sha256_hex_of(txn)
    return function(data) return txn.c:hex(txn.c:sha2(data, 256)) end
  end

  -- Marks the transaction refused as bot_challenge; the configuration's answer block answers it
  -- (403 with the request id) and logs it.
  local function refuse(txn, rule)
    txn:set_var("txn.rp_hit", "bot_challenge:" .. rule)
  end

  -- The challenge page, logged as a bot_challenge event with status 200.
  local function challenge(txn, rule, domain, ip, now)
    local key = M.settings.keys[1]
    local expiry = now + M.settings.challenge_ttl
    local difficulty = M.settings.difficulty
    local ua = txn.f:req_fhdr("user-agent") or ""
    local nonce = string.format("%08x%08x", txn.f:rand(2147483647), txn.f:rand(2147483647))
    local mac = hmac_of(txn)(key.secret, M.challenge_payload(domain, ip, ua, key.id, expiry, difficulty, nonce))
    local body = M.challenge_page(table.concat({ key.id, tostring(expiry), tostring(difficulty), nonce, mac }, "."), difficulty)
    txn:set_var("txn.rp_reason", "bot_challenge")
    txn:set_var("txn.rp_rule", rule)
    txn:set_var("txn.rp_action", "block")
    txn:set_var("txn.rp_method", M.log_escape(txn.f:method(), 16))
    txn:set_var("txn.rp_path", M.log_escape(txn.f:path(), 256))
    txn:set_var("txn.rp_query", M.log_escape(txn.f:query(), 192))
    txn:set_loglevel(core.info)
    local headers = { ["cache-control"] = { "no-store" }, ["content-type"] = { "text/html; charset=utf-8" } }
    headers[M.REQUEST_ID_HEADER] = { M.make_request_id(txn) }
    txn:done(txn:reply({ status = 200, headers = headers, body = body }))
  end

  -- A challenge answer: the pass cookie (signed with the current key) when the work and the token
  -- check out, else a refusal.
  local function verify(txn, rule, domain, ip, now)
    local ua = txn.f:req_fhdr("user-agent") or ""
    if not M.check_answer(txn.f:query(), domain, ip, ua, now, hmac_of(txn), sha256_of(txn)) then return refuse(txn, rule) end
    local key = M.settings.keys[1]
    local expiry = now + M.settings.cookie_ttl
    local value = key.id .. "." .. tostring(expiry) .. "." .. M.cookie_mac(key, domain, ip, ua, expiry, sha256_hex_of(txn))
    local cookie = M.COOKIE .. "=" .. value .. "; Path=/; Max-Age=" .. M.settings.cookie_ttl .. "; SameSite=Lax; HttpOnly"
    local tls = txn.f:ssl_fc() -- a boolean sample (0/1 in some builds)
    if tls == true or tls == 1 then cookie = cookie .. "; Secure" end
    txn:done(txn:reply({ status = 204, headers = { ["set-cookie"] = { cookie }, ["cache-control"] = { "no-store" } } }))
  end

  -- Called natively for a request bot protection stops (no valid pass cookie, no verified crawler):
  -- the answer to a challenge is checked, any other request gets the challenge. The rule is the
  -- argument, or with "-" the custom rule that decided to challenge (txn.rp_ch, custom-rules.ts).
  local function bot(txn, rule)
    if M.settings.bot == nil or M.settings.keys == nil or M.settings.keys[1] == nil then return end
    if rule == "-" then rule = txn:get_var("txn.rp_ch") or "-" end
    local now = os.time()
    local ip = txn.f:src()
    -- The domain's configured name, set first thing in its backend (waf.ts).
    local domain = txn:get_var("txn.rp_domain") or ""
    if txn.f:path() == M.ANSWER_PATH then return verify(txn, rule, domain, ip, now) end
    challenge(txn, rule, domain, ip, now)
  end

  -- For rampart_detect.lua, loaded into the same Lua state, in block mode: its finding (already in
  -- the transaction's event variables) becomes a hit, which the configuration's answer block answers.
  function rampart_waf_answer(txn, reason)
    txn:set_var("txn.rp_hit", reason .. ":-")
  end

  -- rampart_detect.lua's detect-mode events (logged, not answered) carry an id too.
  rampart_request_id = M.make_request_id

  core.register_action("rampart_bot", { "http-req" }, bot, 1)
end

return M
