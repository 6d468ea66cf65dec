-- Rampart attack detection (level high), loaded into every HAProxy thread with
-- `lua-load-per-thread`: each thread has its own Lua state, so detection never serialises the
-- threads (like rampart_waf.lua; the only thing threads share, the rate limiter's counters, is a
-- native stick table).
--
-- This file is the glue: it loads the engine's modules with `require` (found through the
-- `lua-prepend-path <config dir>/?.lua` the configuration sets before loading this file; each
-- thread's state loads them once, at start), registers the HAProxy action and takes the settings
-- (generated detect_data.lua). The modules, each pure and tested on its own (test/lua/detect_test.lua),
-- share one table D (rampart_detect_base.lua):
--   rampart_detect_base       D and the budget of one request (the limits)
--   rampart_detect_decode     decoders: percent (+ twice where double encoding is common), '+', HTML
--                             entities, \uXXXX / %uXXXX / \xHH / \u{...} / octal escapes, UTF-7
--                             brackets, overlong UTF-8; the request path as the origin sees it
--   rampart_detect_text       text helpers the detectors share (calls, marker finders, prose)
--   rampart_detect_sqli, _xss, _cmdi, _traversal, _ssrf, _xxe, _injection, _upload
--                             one detector each: takes one decoded value and returns the byte
--                             offset of what it recognised, or nil
--   rampart_detect_structure  the keys of a request: document-database operators
--                             ({"password":{"$ne":null}}, password[$ne]=x) and prototype pollution
--                             (__proto__, constructor.prototype)
--   rampart_detect_parts      request parts: query parameters and forms, cookies, the headers not
--                             inspected (STRUCTURED_HEADERS), JSON with its keys' owners, multipart,
--                             XML, values cut short
--   rampart_detect_inspect    the whole request (D.inspect): the path, query parameters (repeated
--                             names also joined), cookies, the headers that carry user input, and the
--                             body up to BODY_LIMIT; detectors over each value, exceptions, the
--                             per-thread cache of clean values, the budget
--
-- Every loop walks its input once and every pattern is anchored, starts with a literal or looks
-- at a bounded window, so the cost stays linear in the size of the request (the fuzz tests of
-- test/lua/detect_test.lua and detect_attacks_test.lua check it); D.inspect keeps a budget per
-- request (BODY_LIMIT, VALUES_LIMIT, DEPTH_LIMIT, DECODE_ROUNDS: docs/detection.md).

local D = require("rampart_detect_base")
require("rampart_detect_inspect") -- and through it every other module

local sub, byte, gsub, format = string.sub, string.byte, string.gsub, string.format

---------------------------------------------------------------------------------------------------
-- Events: fields travel in a syslog line, so they are percent-encoded (no blanks, no controls).
---------------------------------------------------------------------------------------------------

function D.log_escape(s, max)
  if s == nil or s == "" then return "-" end
  if max and #s > max then s = sub(s, 1, max) end
  return (gsub(s, "[^\33-\36\38-\126]", function(c) return format("%%%02X", byte(c)) end))
end

---------------------------------------------------------------------------------------------------
-- Settings (generated detect_data.lua) and the HAProxy glue.
---------------------------------------------------------------------------------------------------

D.domains = {}

-- domains: { [domain id] = { mode = "block"|"detect", exceptions = { {path=, loc=, det=}, ... } } }
function rampart_detect_configure(domains)
  D.domains = domains or {}
end

if core ~= nil and core.register_action ~= nil then
  local function detect(txn, domain_id)
    local d = D.domains[domain_id] or {}
    local req = {
      method = txn.f:method(),
      path = txn.f:path() or "/",
      query = txn.f:query(),
      headers = txn.http:req_get_headers(),
      body = txn.f:req_body(),
    }
    -- A body of one gzip or deflate coding (the configuration names it in txn.rp_inflate) is read
    -- as sent (an application that ignores Content-Encoding parses those bytes: a gzip header's
    -- name and comment fields are text in them), then each way it inflates. One that does not
    -- inflate is refused as compressed_body, unless the domain allows compressed bodies.
    local ok, finding = pcall(D.inspect, req, d.exceptions)
    local coding = txn:get_var("txn.rp_inflate")
    if ok and finding == nil and coding ~= nil and req.body ~= nil and req.body ~= "" then
      local readings = D.inflations(req.body, coding)
      if readings[1] == nil and d.compressed ~= "allow" then
        finding = { reason = "compressed_body", location = "body", matched = coding }
      end
      for _, r in ipairs(readings) do
        req.body, req.cut, req.inflated = r[1], r[2], true
        ok, finding = pcall(D.inspect, req, d.exceptions)
        if not ok or finding ~= nil then break end
      end
    end
    if not ok then
      core.Warning("rampart detect: " .. tostring(finding))
      return
    end
    if finding == nil then return end
    local block = d.mode ~= "detect"
    txn:set_var("txn.rp_reason", finding.reason)
    txn:set_var("txn.rp_rule", "-")
    txn:set_var("txn.rp_action", block and "block" or "detect")
    txn:set_var("txn.rp_method", D.log_escape(req.method, 16))
    txn:set_var("txn.rp_loc", D.log_escape(finding.location, 80))
    txn:set_var("txn.rp_path", D.log_escape(req.path, 256))
    txn:set_var("txn.rp_query", D.log_escape(req.query, 192))
    txn:set_var("txn.rp_match", D.log_escape(finding.matched, D.MATCH_LEN))
    txn:set_loglevel(core.info)
    -- (a detect-mode event has its id from rampart_waf.lua, loaded beside it; a block gets it from the answer block)
    if not block then
      if rampart_request_id ~= nil then rampart_request_id(txn) end
      return
    end
    -- rampart_waf.lua (same Lua state) answers with the request id and the browser page.
    if rampart_waf_answer ~= nil then return rampart_waf_answer(txn, finding.reason) end
    txn:done(txn:reply({
      status = 403,
      headers = { ["content-type"] = { "text/plain; charset=utf-8" }, ["cache-control"] = { "no-store" } },
      body = "Forbidden: the request was blocked by the web application firewall.\n",
    }))
  end
  core.register_action("rampart_detect", { "http-req" }, detect, 1)
end

return D
