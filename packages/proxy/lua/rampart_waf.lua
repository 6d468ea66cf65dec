-- Rampart WAF engine, loaded into every HAProxy thread's own Lua state (`lua-load-per-thread`):
-- it keeps no state of its own, so threads never wait for each other.
--
-- The native part of the configuration looks things up (IP maps, user-agent lists, the country
-- map) and leaves the results in txn variables; this engine applies docs/architecture.md's
-- processing order to them, first decisive step wins:
--   1 whitelist -> pass   2 blacklist/country -> 403   3 bad bot / AI crawler -> 403, challenge -> 200
-- then, natively, 4 the rate limit (a stick table shared by all threads; its 429 is
-- rampart_rate_limited below), and 5 attack detection at level high (rampart_detect.lua).
-- Decisions are pure functions (M.decide); I/O (txn, core) stays in the action at the bottom.

local M = {}

M.settings = { domains = {}, countries = {}, bot = nil, keys = nil, difficulty = 14, all_paths = true, cookie_ttl = 86400, challenge_ttl = 300 }

---------------------------------------------------------------------------------------------------
-- Decision: r holds what the native lookups found; returns {action, status, reason, rule}.
--   r.wl, r.bl, r.ai: rule ids or nil; r.country: ISO code or nil; r.badbot, r.crawler:
--   booleans (r.crawler: a search crawler whose address the agent verified); r.cookie_ok: the
--   pass cookie verified; r.guarded: the path is one bot protection guards; r.answer: the request
--   is a challenge answer (M.ANSWER_PATH); r.ip, r.now.
---------------------------------------------------------------------------------------------------
local PASS = { action = "pass" }

function M.decide(domain_id, r)
  local d = M.settings.domains[domain_id]
  if d == nil or not d.enabled then return PASS end
  -- 1. whitelist: bypass everything, never counted
  if r.wl then return PASS end
  -- 2. blacklist, then countries
  if r.bl then return { action = "deny", status = 403, reason = "ip_blocked", rule = r.bl } end
  if r.country then
    local rule = d.countries[r.country] or M.settings.countries[r.country]
    if rule then return { action = "deny", status = 403, reason = "country_blocked", rule = rule } end
  end
  -- 3. bots: known-bad user-agents and the JavaScript challenge (when a block_bot rule is on),
  --    and AI crawlers named by block_ai_bot rules
  local bot = M.settings.bot
  if bot and r.badbot then return { action = "deny", status = 403, reason = "bot_blocked", rule = bot } end
  if r.ai then return { action = "deny", status = 403, reason = "ai_bot_blocked", rule = r.ai } end
  if bot and not r.crawler and not r.cookie_ok then
    if r.answer then return { action = "verify", status = 403, reason = "bot_challenge", rule = bot } end
    if M.settings.all_paths or r.guarded then
      return { action = "challenge", status = 200, reason = "bot_challenge", rule = bot }
    end
  end
  -- 4. the rate limit is counted natively after this engine has passed the request (waf.ts)
  return PASS
end

---------------------------------------------------------------------------------------------------
-- Proof of work (docs/bots.md). The challenge page carries a token, never a cookie:
--   "<key id>.<expiry>.<difficulty>.<nonce>.<hex HMAC-SHA256(key, c|ip|ua|key id|expiry|difficulty|nonce)>"
-- The browser finds a counter n such that SHA-256(token .. n) starts with `difficulty` zero bits
-- and sends both to M.ANSWER_PATH; the engine checks the MAC, the expiry and the work (HAProxy's
-- own hmac and sha2 converters, no call out) and answers with the pass cookie:
--   "<key id>.<expiry>.<MAC over ip|ua|expiry>" (M.cookie_mac)
-- checked natively on every later request (waf.ts). Both are bound to the client's address and
-- User-Agent, and valid on every shield server of the account (they share its keys).
---------------------------------------------------------------------------------------------------
-- Lifetimes (cookie_ttl, challenge_ttl) come with the settings (waf.ts, from the protocol).
M.COOKIE = "rampart_bot"
M.ANSWER_PATH = "/.well-known/rampart/bot"

-- The pass cookie's MAC (pow.ts passCookieMac): HMAC's nested construction with plain SHA-256 and
-- the key's two derived block-sized keys, which HAProxy checks fast on every request (waf.ts).
-- sha256_hex(data): upper-case hex, as HAProxy's hex converter writes it.
function M.cookie_mac(key, ip, ua, expiry, sha256_hex)
  local inner = sha256_hex(key.inner .. "|" .. ip .. "|" .. ua .. "|" .. tostring(expiry))
  return string.lower(sha256_hex(key.outer .. inner))
end

function M.challenge_payload(ip, ua, kid, expiry, difficulty, nonce)
  return "c|" .. ip .. "|" .. ua .. "|" .. kid .. "|" .. tostring(expiry) .. "|" .. tostring(difficulty) .. "|" .. nonce
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
function M.check_answer(query, ip, ua, now, hmac, sha256)
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
  if hmac(key.secret, M.challenge_payload(ip, ua, t.kid, t.expiry, t.difficulty, t.nonce)) ~= t.mac then
    return false, "forged or for another client"
  end
  if M.zero_bits(sha256(token .. n)) < t.difficulty then return false, "not enough work" end
  return true
end

-- A pass cookie for this client: valid, not expired, signed with a key the server holds. Returns
-- true and the expiry, or false.
function M.check_cookie(value, ip, ua, now, sha256_hex)
  local kid, expiry, mac = M.parse_cookie(value)
  if kid == nil or expiry <= now then return false end
  local key = M.key(kid)
  if key == nil then return false end
  if M.cookie_mac(key, ip, ua, expiry, sha256_hex) ~= mac then return false end
  return true, expiry
end

function M.parse_cookie(value)
  if value == nil then return nil end
  local kid, expiry, mac = string.match(value, "^([0-9a-z]+)%.(%d+)%.(%x+)$")
  if kid == nil then return nil end
  return kid, tonumber(expiry), string.lower(mac)
end

local BODIES = {
  [403] = "Forbidden: the request was blocked by the web application firewall.\n",
  [429] = "Too Many Requests: the rate limit was exceeded. Try again in a minute.\n",
}

-- Every answer of the WAF names the request (HAProxy's unique-id, waf.ts REQUEST_ID_FORMAT) so a
-- visitor can quote it to the site owner, who finds the event by it.
M.REQUEST_ID_HEADER = "x-rampart-request-id"

-- The request id as HAProxy made it, or nil when it is not of the expected form (never reflected).
function M.request_id(id)
  if type(id) ~= "string" or #id < 1 or #id > 64 or string.find(id, "[^A-Za-z0-9_-]") then return nil end
  return id
end

-- A reason in plain words, for the page a browser shows.
M.REASON_WORDS = {
  ip_blocked = "your network address is blocked",
  country_blocked = "requests from your country are not accepted",
  bot_blocked = "automated clients are not accepted",
  bot_challenge = "the browser check did not pass",
  ai_bot_blocked = "AI crawlers are not accepted",
  rate_limited = "too many requests came from your network in a short time",
  sqli_detected = "SQL injection",
  xss_detected = "cross-site scripting",
  cmdi_detected = "command injection",
  traversal_detected = "path traversal",
  ssrf_detected = "server-side request forgery",
  xxe_detected = "XML external entity",
  injection_detected = "code injection",
  upload_blocked = "a dangerous file upload",
}

-- Whether an Accept header asks for HTML (a browser).
function M.wants_html(accept)
  return type(accept) == "string" and string.find(string.lower(accept), "text/html", 1, true) ~= nil
end

local function html_page(status, title, sentence, id)
  return "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">" ..
    "<title>" .. title .. "</title><style>body{margin:0;font:16px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:#f4f5f7;color:#1d2330}" ..
    "main{max-width:34rem;margin:12vh auto;padding:2rem;background:#fff;border-radius:12px;box-shadow:0 2px 12px rgba(0,0,0,.08)}" ..
    "h1{margin:0 0 .5rem;font-size:1.4rem}.s{color:#c0392b;font-weight:600}code{background:#eef0f3;padding:.1rem .35rem;border-radius:4px}" ..
    "footer{margin-top:1.5rem;font-size:.8rem;color:#7a8190}</style></head><body><main>" ..
    "<p class=\"s\">" .. status .. "</p><h1>" .. title .. "</h1><p>" .. sentence .. "</p>" ..
    "<p>If you think this is a mistake, give the site owner this request id: <code id=\"request-id\">" .. id .. "</code></p>" ..
    "<footer>Protected by Rampart</footer></main></body></html>\n"
end

-- The answer to a refused request: content type and body. html: the client asked for HTML;
-- id: the request id (already checked by M.request_id, or nil); retry: seconds for a 429.
-- Nothing of the request but the generated id is ever put in the body.
function M.answer(status, reason, html, id, retry)
  local words = M.REASON_WORDS[reason]
  if html then
    local title, sentence
    if status == 429 then
      title = "Too many requests"
      sentence = "This request was refused by the site's firewall: " .. (words or "too many requests") ..
        ". Try again in " .. tostring(retry or 60) .. " seconds."
    else
      title = "Access denied"
      sentence = "This request was blocked by the site's firewall" .. (words and (" (" .. words .. ")") or "") .. "."
    end
    return "text/html; charset=utf-8", html_page(status, title, sentence, id or "-")
  end
  local body = BODIES[status] or ""
  if id then body = body .. "Request id: " .. id .. "\n" end
  return "text/plain; charset=utf-8", body
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

-- Retry-After of a 429: the seconds left in the client's fixed window (age: seconds since the
-- window began), at least 1; 60 (a whole window) when the age is unknown.
M.WINDOW = 60
function M.retry_after(age)
  if type(age) ~= "number" or age < 0 or age >= M.WINDOW then return M.WINDOW end
  return math.max(1, M.WINDOW - math.floor(age))
end

function M.body(status)
  return BODIES[status] or ""
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
  local function var(txn, name)
    local v = txn:get_var(name)
    if v == nil or v == "" then return nil end
    return v
  end

  -- HAProxy's own converters: HMAC-SHA256 with a base64 key (hex out) and SHA-256 (binary out).
  local function hmac_of(txn)
    return function(key, data) return string.lower(txn.c:hex(txn.c:hmac(data, "sha256", key))) end
  end
  local function sha256_of(txn)
    return function(data) return txn.c:sha2(data, 256) end
  end

  local function sha256_hex_of(txn)
    return function(data) return txn.c:hex(txn.c:sha2(data, 256)) end
  end

  -- The pass cookie of the request, checked against the keys the server holds (current and
  -- previous); a valid one is remembered for the connection (session variables, see waf.ts).
  local function verify_cookie(txn)
    local value = txn.f:req_cook(M.COOKIE)
    if value == nil or value == "" or #value > 128 then return false end
    local ua = txn.f:req_fhdr("user-agent") or ""
    local ok, expiry = M.check_cookie(value, txn.f:src(), ua, os.time(), sha256_hex_of(txn))
    if not ok then return false end
    txn:set_var("sess.rp_okck", value)
    txn:set_var("sess.rp_okua", ua)
    txn:set_var("sess.rp_okexp", expiry)
    return true
  end

  -- What the native lookups found, read from txn variables only when a step asks (a request
  -- that passes early never pays for the later ones).
  local FIELDS = {
    wl = function(txn) return var(txn, "txn.rp_wl") end,
    bl = function(txn) return var(txn, "txn.rp_bl") end,
    ai = function(txn) return var(txn, "txn.rp_ai") end,
    country = function(txn) return var(txn, "txn.rp_cc") end,
    badbot = function(txn) return var(txn, "txn.rp_badbot") ~= nil end,
    crawler = function(txn) return var(txn, "txn.rp_crawler") ~= nil end,
    -- a cookie this connection already showed passes natively (waf.ts); any other is verified here
    cookie_ok = function(txn) return var(txn, "txn.rp_cookie_ok") ~= nil or verify_cookie(txn) end,
    guarded = function(txn) return var(txn, "txn.rp_guarded") ~= nil end,
    answer = function(txn) return txn.f:path() == M.ANSWER_PATH end,
  }
  local LAZY = {
    __index = function(t, k)
      local f = FIELDS[k]
      if f == nil then return nil end
      local v = f(rawget(t, "_txn"))
      rawset(t, k, v)
      return v
    end,
  }

  -- Answers decision d: the challenge page, or the block page / text with the request id.
  local function reply(txn, d, ip, now)
    local id = M.request_id(txn.f:unique_id())
    local headers = { ["cache-control"] = { "no-store" } }
    if id then headers[M.REQUEST_ID_HEADER] = { id } end
    local body
    if d.action == "challenge" then
      local key = M.settings.keys[1]
      local expiry = now + M.settings.challenge_ttl
      local difficulty = M.settings.difficulty
      local ua = txn.f:req_fhdr("user-agent") or ""
      local nonce = string.format("%08x%08x", txn.f:rand(2147483647), txn.f:rand(2147483647))
      local mac = hmac_of(txn)(key.secret, M.challenge_payload(ip, ua, key.id, expiry, difficulty, nonce))
      body = M.challenge_page(table.concat({ key.id, tostring(expiry), tostring(difficulty), nonce, mac }, "."), difficulty)
      headers["content-type"] = { "text/html; charset=utf-8" }
    else
      if d.retry then headers["retry-after"] = { tostring(d.retry) } end
      local ctype
      ctype, body = M.answer(d.status, d.reason, M.wants_html(txn.f:req_fhdr("accept")), id, d.retry)
      headers["content-type"] = { ctype }
    end
    txn:done(txn:reply({ status = d.status, headers = headers, body = body }))
  end

  -- Ends the transaction with decision d (deny or challenge) and marks it for the event log.
  local function refuse(txn, d, ip, now)
    txn:set_var("txn.rp_reason", d.reason)
    txn:set_var("txn.rp_rule", d.rule or "-")
    txn:set_var("txn.rp_action", "block")
    txn:set_var("txn.rp_method", M.log_escape(txn.f:method(), 16))
    txn:set_var("txn.rp_path", M.log_escape(txn.f:path(), 256))
    txn:set_loglevel(core.info)
    reply(txn, d, ip, now)
  end

  -- For rampart_detect.lua, loaded into the same Lua state: its 403 is answered the same way
  -- (the detector has marked the transaction for the event log itself).
  function rampart_waf_answer(txn, reason)
    reply(txn, { action = "deny", status = 403, reason = reason })
  end

  -- A challenge answer: the pass cookie (signed with the current key) when the work and the token
  -- check out, else a 403 logged as bot_challenge.
  local function verify(txn, d, ip, now)
    local ua = txn.f:req_fhdr("user-agent") or ""
    if not M.check_answer(txn.f:query(), ip, ua, now, hmac_of(txn), sha256_of(txn)) then
      return refuse(txn, d, ip, now)
    end
    local key = M.settings.keys[1]
    local expiry = now + M.settings.cookie_ttl
    local value = key.id .. "." .. tostring(expiry) .. "." .. M.cookie_mac(key, ip, ua, expiry, sha256_hex_of(txn))
    local cookie = M.COOKIE .. "=" .. value .. "; Path=/; Max-Age=" .. M.settings.cookie_ttl .. "; SameSite=Lax; HttpOnly"
    local tls = txn.f:ssl_fc() -- a boolean sample (0/1 in some builds)
    if tls == true or tls == 1 then cookie = cookie .. "; Secure" end
    txn:done(txn:reply({ status = 204, headers = { ["set-cookie"] = { cookie }, ["cache-control"] = { "no-store" } } }))
  end

  local function waf(txn, domain_id)
    local now = os.time()
    local ip = txn.f:src()
    local r = setmetatable({ _txn = txn, ip = ip, now = now }, LAZY)
    local d = M.decide(domain_id, r)
    if d.action == "verify" then return verify(txn, d, ip, now) end
    if d.action ~= "pass" then refuse(txn, d, ip, now) end
  end

  -- Step 4's answer, once the stick table has counted the address over the limit.
  local function rate_limited(txn, rule_id)
    refuse(txn, { action = "deny", status = 429, reason = "rate_limited", rule = rule_id,
      retry = M.retry_after(tonumber(txn:get_var("txn.rp_age"))) })
  end

  core.register_action("rampart_waf", { "http-req" }, waf, 1)
  core.register_action("rampart_rate_limited", { "http-req" }, rate_limited, 1)
end

return M
