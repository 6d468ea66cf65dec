-- The whole request (D.inspect): the detectors run over one value (D.check, D.DETECTORS,
-- D.REASONS), exceptions, the per-thread cache of clean values, the budget of one request, and
-- the walk over path, query, headers and body.

local D = require("rampart_detect_base")
require("rampart_detect_decode")
require("rampart_detect_sqli")
require("rampart_detect_xss")
require("rampart_detect_cmdi")
require("rampart_detect_traversal")
require("rampart_detect_ssrf")
require("rampart_detect_xxe")
require("rampart_detect_injection")
require("rampart_detect_upload")
require("rampart_detect_structure")
require("rampart_detect_parts")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local before_cut = D.before_cut

---------------------------------------------------------------------------------------------------
-- Running the detectors over one value.
---------------------------------------------------------------------------------------------------

D.DETECTORS = { "sqli", "xss", "cmdi", "traversal", "injection", "ssrf", "xxe" }
D.REASONS = { sqli = "sqli_detected", xss = "xss_detected", cmdi = "cmdi_detected",
  traversal = "traversal_detected", ssrf = "ssrf_detected", xxe = "xxe_detected",
  injection = "injection_detected", upload = "upload_blocked", budget = "body_too_complex" }

-- Values made of letters, digits, blanks (not line breaks) and harmless punctuation: only
-- keyword SQL ("1 union select 2") and serialized objects (base64 or hex) can hide in them.
local function plain(v)
  -- (letters, digits and blanks first: a class of two items tests a byte faster than the whole one)
  local p = find(v, "[^%w ]")
  if not p then return true end
  -- not \192, \193, \224 (overlong forms of ASCII) nor \239 (fullwidth forms): they fold to ASCII
  return not find(v, "[^%w \t,_@:%-\128-\191\194-\223\225-\238\240-\255]", p)
end

-- Of the plain values, those an attack could still be: keyword SQL after a number or with
-- UNION/SELECT ("1 or true", "1 order by 5", "1 union select 2"), lookups and markers (":", "@"),
-- serialized objects (rO0AB..., aced0005..., pickles).
-- (A truth value; the words without case as plain searches over the value lowered once.)
local function plain_suspect(v)
  if (find(v, "^%s*%-?%.?%d") and find(v, "%a")) or find(v, ":", 1, true) or find(v, "@", 1, true) or find(v, "rO0AB", 1, true) or
    find(v, "^gA[SJNR][VjW]") or find(v, "AAEAAAD", 1, true) or find(v, "BAhvOk", 1, true) then
    return true
  end
  local lv = lower(v)
  return find(lv, "union", 1, true) or find(lv, "select", 1, true) or
    (find(lv, "ac", 1, true) and find(lv, "ac%s?ed%s?00%s?05"))
end

local PLAIN_DETECTORS = { "sqli", "injection" }

-- The first detector of names, not excepted (skip(detector) true), that recognises v (each
-- given v lowered, once for all of them).
local function first_detection(names, v, skip)
  local lv = lower(v)
  for _, name in ipairs(names) do
    if not (skip and skip(name)) then
      local p = D[name](v, lv)
      if p then return name, p, v end
    end
  end
  return nil
end

-- Runs every detector not excepted over v; returns detector, position, the value it read.
-- kind: what the caller already found of v (at most VALUE_LIMIT bytes): "suspect" (plain but
-- suspect) or "rich" (not plain); nil to find it here.
local function check(v, skip, only, kind)
  if kind == nil then
    if #v > D.VALUE_LIMIT then v = sub(v, 1, D.VALUE_LIMIT) end
    if plain(v) then
      if not plain_suspect(v) then return nil end
      kind = "suspect"
    end
  end
  if kind == "suspect" then return first_detection(PLAIN_DETECTORS, v, skip) end
  return first_detection(only or D.DETECTORS, D.canonical(v), skip)
end
function D.check(v, skip, only) return check(v, skip, only) end

---------------------------------------------------------------------------------------------------
-- The whole request
---------------------------------------------------------------------------------------------------

local function excerpt(v, p)
  local from = p or 1
  if from > 8 then from = from - 8 else from = 1 end
  return sub(v, from, from + D.MATCH_LEN - 1)
end

-- exceptions: array of { path = prefix, loc = location or nil, det = detector or nil }
local function exception_filter(exceptions, path, loc)
  if not exceptions then return nil end
  local all, dets = false, nil
  for _, x in ipairs(exceptions) do
    if sub(path, 1, #x.path) == x.path then
      local lm = x.loc == nil or x.loc == loc
      if not lm and sub(x.loc, -2) == ":*" then
        local prefix = sub(x.loc, 1, -2)
        lm = sub(loc, 1, #prefix) == prefix
      end
      if lm then
        if x.det == nil then all = true else dets = dets or {}; dets[x.det] = true end
      end
    end
  end
  if all then return function() return true end end
  if dets then return function(d) return dets[d] == true end end
  return nil
end

-- The per-thread cache of values already found clean (User-Agent, cookies, ...).
local clean_cache, clean_count = {}, 0
local CLEAN_MAX = 4096
local CLEAN_KEY_MAX = 4096 -- bytes: longer values are inspected every time (at most 16 MB per thread)
local function cached_clean(key)
  return clean_cache[key] == true
end
local function remember_clean(key)
  if #key > CLEAN_KEY_MAX then return end
  if clean_count >= CLEAN_MAX then clean_cache, clean_count = {}, 0 end
  clean_cache[key] = true
  clean_count = clean_count + 1
end
function D.cache_reset() clean_cache, clean_count = {}, 0 end

-- Inspects one value at a location; returns a finding or nil.
-- The budget of one request (D.inspect): values given to the detectors. Past VALUES_LIMIT, a value
-- is not inspected on its own but kept, and the values kept are inspected together, once, as one
-- text (joined by blanks, at most VALUE_LIMIT bytes) under the location "<part>:*": the work stays
-- linear in the bytes, and a payload is not hidden behind 2,000 dummy fields.
local function over_budget(ctx, loc, v)
  -- one rest per part (query, cookie, header, body), in the order the parts came
  local part = (match(loc, "^[^:]*") or loc) .. ":*"
  local rests = ctx.rest
  if not rests then
    rests = {}
    ctx.rest = rests
  end
  local rest = rests[part]
  if not rest then
    rest = { n = 0, bytes = 0, loc = part }
    rests[part] = rest
    rests[#rests + 1] = rest
  end
  if rest.bytes + #v + 1 <= D.VALUE_LIMIT then
    rest.n = rest.n + 1
    rest[rest.n] = v
    rest.bytes = rest.bytes + #v + 1
  end
end

-- ctx.seen's key for a value given to every detector
local ALL = {}

local function inspect_value(ctx, loc, v, only)
  if v == nil or v == "" then return nil end
  local count = ctx.count + 1
  ctx.count = count
  if count > D.VALUES_LIMIT then over_budget(ctx, loc, v) return nil end
  local kind = "rich"
  if plain(v) then
    if not plain_suspect(v) then return nil end -- cheaper than the cache
    kind = "suspect"
  end
  -- (D.check finds it again in its first VALUE_LIMIT bytes)
  if #v > D.VALUE_LIMIT then kind = nil end
  -- short values found clean are remembered (per thread): a browser sends the same cookies and
  -- headers with every request; with exceptions the answer also depends on path and location
  -- (not a body's values: they seldom come again, and thousands of them would push the
  -- headers' and cookies' entries out of the cache)
  local key
  if #v <= 512 and not ctx.exceptions and not ctx.in_body then
    key = (only and concat(only, ",") or "") .. "\0" .. v
    if cached_clean(key) then return nil end
  end
  -- a value this request already had found clean (a body repeats keys and values): D.check is a
  -- function of the value and the detectors asked, so it is clean again (without exceptions, whose
  -- answer depends on the location)
  local seen
  if not ctx.exceptions then
    seen = ctx.seen[only or ALL]
    if seen == nil then
      seen = {}
      ctx.seen[only or ALL] = seen
    elseif seen[v] then
      return nil
    end
  end
  local skip = exception_filter(ctx.exceptions, ctx.path, loc)
  if skip and skip("*all*") == true and skip("sqli") and skip("xss") and skip("cmdi") and skip("traversal") and
    skip("ssrf") and skip("xxe") and skip("injection") then return nil end
  local det, p, c = check(v, skip, only, kind)
  if det then return { detector = det, reason = D.REASONS[det], location = loc, matched = excerpt(c, p) } end
  if key then remember_clean(key) end
  if seen then seen[v] = true end
  return nil
end

-- A finding of the structure checks (operators, prototype pollution) at loc, unless excepted.
local function structure_finding(ctx, loc, text, p)
  local skip = exception_filter(ctx.exceptions, ctx.path, loc)
  if skip and skip("injection") then return nil end
  return { detector = "injection", reason = D.REASONS.injection, location = loc, matched = excerpt(text, p) }
end

-- A parameter's name and, when it holds a JSON object, that object's keys (user={"$ne":null},
-- where={"age":{"$gt":18}} is a query container's): the structure checks.
local function pair_structure(ctx, loc, name, value)
  local p = D.name_structure(name)
  if p then return structure_finding(ctx, loc, name, p) end
  if byte(value, 1) == 123 or find(value, "^%s+{") then
    if find(value, '"%s*%$') or find(value, "__proto__", 1, true) or find(value, "prototype", 1, true) then
      local _, sf = D.json_walk(sub(value, 1, D.VALUE_LIMIT), {}, name)
      if sf then return structure_finding(ctx, loc, value, sf[1]) end
    end
  end
  return nil
end

-- pairs_: {name, value[, true when the name is a JSON key and the value the same key]}.
-- nojoin: the pairs are JSON strings or XML values (no repeated names to join, no names to
-- read as parameter paths).
local function inspect_pairs(ctx, prefix, pairs_, nojoin)
  local seen, repeated = {}, nil
  for _, kv in ipairs(pairs_) do
    local name, value = kv[1], kv[2]
    local loc = prefix .. name
    if not nojoin and (#name > 0 or byte(value, 1) == 123) then
      local f = pair_structure(ctx, loc, name, value)
      if f then return f end
    end
    local f = inspect_value(ctx, loc, value)
    if f then return f end
    -- parameter names are user input too (PHP's _(new java...)=x)
    if #name > 0 and not kv[3] then
      f = inspect_value(ctx, loc, name)
      if f then return f end
    end
    -- repeated names: joined as frameworks join them (not the keys of JSON objects in an array);
    -- the values of a name are collected and joined once (at most JOIN_LIMIT bytes)
    if not nojoin then
      local list = seen[name]
      if list == nil then
        seen[name] = value -- a name seen once keeps its value alone (no table)
      elseif type(list) == "string" then
        if #list + #value < D.JOIN_LIMIT then
          seen[name] = { list, value, n = 2, bytes = #list + #value + 1 }
          repeated = true
        end
      elseif list.bytes + #value < D.JOIN_LIMIT then
        list.n = list.n + 1
        list[list.n] = value
        list.bytes = list.bytes + #value + 1
      end
    end
  end
  if not repeated then return nil end
  for _, kv in ipairs(pairs_) do
    local name = kv[1]
    local list = seen[name]
    if type(list) == "table" then
      seen[name] = nil
      local joined = concat(list, ",", 1, list.n)
      local f = inspect_value(ctx, prefix .. name, joined)
      if f then return f end
      -- and without the separator, as concatenating frameworks do
      f = inspect_value(ctx, prefix .. name, concat(list, " ", 1, list.n))
      if f then return f end
    end
  end
  return nil
end

local function header_value(h, name)
  local v = h[name]
  if v == nil then return nil end
  if type(v) == "table" then return v[0] or v[1] end
  return v
end

local inspect_request

-- A body past the budget's structure limits (NESTING_LIMIT, FIELDS_LIMIT) is refused as
-- body_too_complex at p (an excerpt from there), unless an exception covers every detector in
-- every part of the body: then the body is not inspected at all (false, which callers answer
-- with nil), as the exception says.
local function too_complex(ctx, body, p)
  local skip = exception_filter(ctx.exceptions, ctx.path, "body:*")
  if skip and skip("*all*") == true then return false end
  return { detector = "budget", reason = D.REASONS.budget, location = "body", matched = excerpt(body, p) }
end

-- A form body of more than FIELDS_LIMIT fields (counted as its '&' plus one): its refusal (or
-- false, excepted), or nil when it is within the budget.
local function too_many_fields(ctx, body)
  local p = 0
  for _ = 1, D.FIELDS_LIMIT do
    p = find(body, "&", p + 1, true)
    if not p then return nil end
  end
  return too_complex(ctx, body, p)
end

-- req: { method, path (raw, without query), query (raw or nil), headers = { lname = value or
-- {[0]=v1, v2...} }, body (or nil) }; exceptions: the domain's waf_exception rules, { {path=,
-- loc=, det=}, ... } or nil. Returns a finding or nil: { detector, reason, location, matched }.
--
-- The budget of one request (docs/detection.md, "The budget of one request"): at most
-- BODY_LIMIT bytes of the body, VALUES_LIMIT values inspected one by one (the rest together, as
-- one text), JSON nesting followed DEPTH_LIMIT levels deep, DECODE_ROUNDS rounds of decoding a
-- value; every step walks its input once, so the work is linear in the request's size.
function D.inspect(req, exceptions)
  if exceptions and #exceptions == 0 then exceptions = nil end
  local ctx = { exceptions = exceptions, path = req.path or "/", count = 0, seen = {} }
  local f = inspect_request(req, ctx)
  if f then return f end
  if ctx.rest then
    ctx.count = -math.huge
    for _, rest in ipairs(ctx.rest) do
      f = inspect_value(ctx, rest.loc, concat(rest, " ", 1, rest.n))
      if f then return f end
    end
  end
  return nil
end

inspect_request = function(req, ctx)
  local exceptions = ctx.exceptions
  -- 1. the path
  local np = D.normalize_path(req.path or "/")
  ctx.path = np
  local skip = exception_filter(exceptions, np, "path")
  if not (skip and skip("traversal")) then
    local lp = lower(np)
    local p = D.path_traversal(lp)
    if not p and find(req.path or "", "%.%.", 1) then
      local raw = lower(D.url_decode(req.path, false))
      p = find(gsub(raw, "\\", "/"), "/%.%./") or find(raw, "/%.%.$")
    end
    if p then return { detector = "traversal", reason = D.REASONS.traversal, location = "path", matched = excerpt(np, p) } end
  end
  -- path parameters (;x=... , read by JAX-RS and Spring as matrix variables) are values too
  if find(req.path or "", ";", 1, true) or find(req.path or "", "%%3[bB]") then
    for param in gmatch(D.url_decode(req.path, false), ";([^/;]+)") do
      local f = inspect_value(ctx, "path", param)
      if f then return f end
    end
  end
  -- CR or LF in the path: response splitting and header injection
  local crlf = find(np, "[\r\n]")
  if crlf and not (skip and skip("injection")) then
    return { detector = "injection", reason = D.REASONS.injection, location = "path", matched = excerpt(np, crlf) }
  end
  local f = inspect_value(ctx, "path", np, { "sqli", "xss", "cmdi", "injection" })
  if f then return f end
  -- 2. the query string (remembered whole when clean, like the headers below)
  local q = req.query
  if q and q ~= "" then
    local key = not exceptions and #q <= 4096 and "?" .. q
    if not (key and cached_clean(key)) then
      f = inspect_pairs(ctx, "query:", D.form_pairs(q))
      if f then return f end
      if key and not ctx.rest then remember_clean(key) end
    end
  end
  -- 3. headers: cookies, Referer (and its query string), everything not well-known
  local h = req.headers or {}
  for name, vals in pairs(h) do
    local list = type(vals) == "table" and vals or { [0] = vals }
    local i = list[0] ~= nil and 0 or 1
    while list[i] ~= nil do
      local v = list[i]
      if name == "cookie" then
        local key = not exceptions and #v <= 4096 and "cookie\0" .. v
        if not (key and cached_clean(key)) then
          f = inspect_pairs(ctx, "cookie:", D.cookie_pairs(v))
          if f then return f end
          if key and not ctx.rest then remember_clean(key) end
        end
      elseif D.STRUCTURED_HEADERS[name] then
        -- structured, but applications log them: Log4j and template lookups still count
        if find(v, "[%$%%#{]{") then
          f = inspect_value(ctx, "header:" .. name, v, { "injection" })
          if f then return f end
        end
      else
        local key = name .. "\0" .. v
        if not cached_clean(key) then
          if name == "referer" or name == "origin" then
            local q = match(v, "%?([^#]*)")
            if q then
              f = inspect_pairs(ctx, "header:" .. name .. ":", D.form_pairs(q))
              if f then f.location = "header:" .. name; return f end
            end
            local pathpart = match(v, "^%a[%w+.-]*://[^/]*(/[^?#]*)") or ""
            f = inspect_value(ctx, "header:" .. name, pathpart, { "xss", "sqli", "traversal", "injection" })
          else
            f = inspect_value(ctx, "header:" .. name, v)
          end
          if f then return f end
          if not exceptions and not ctx.rest then remember_clean(key) end
        end
      end
      i = i + 1
    end
  end
  -- 4. the body
  local body = req.body
  if body and body ~= "" then
    ctx.in_body = true
    -- A body cut short (longer than BODY_LIMIT, or longer than HAProxy's buffer: Content-Length
    -- says more than arrived) ends in the middle of its last value, and half a token is not what
    -- the application will read ("https://w" is a one-label host): the last value is read up to
    -- the token the cut went through (before_cut).
    -- (An inflated body, req.inflated: its Content-Length counts the compressed bytes, and
    -- req.cut says whether the stream stopped short.)
    local length = not req.inflated and tonumber(header_value(h, "content-length") or "") or nil
    local cut = req.cut or #body > D.BODY_LIMIT or (length ~= nil and length > #body)
    if #body > D.BODY_LIMIT then body = sub(body, 1, D.BODY_LIMIT) end
    local ct = lower(header_value(h, "content-type") or "")
    local fields = {}
    if find(ct, "multipart/form-data", 1, true) then
      local boundaries = {}
      for b in gmatch(header_value(h, "content-type") or "", "[Bb][Oo][Uu][Nn][Dd][Aa][Rr][Yy]%s*=%s*\"?([^\";]+)") do
        boundaries[#boundaries + 1] = (gsub(b, "%s+$", ""))
      end
      if #boundaries > 0 then
        local files = {}
        for _, boundary in ipairs(boundaries) do D.multipart(body, boundary, fields, files, cut) end
        for _, fl in ipairs(files) do
          local loc = "body:" .. fl[1]
          local sk = exception_filter(exceptions, np, loc)
          if not (sk and sk("upload")) then
            if D.upload(fl[2]) then
              return { detector = "upload", reason = D.REASONS.upload, location = loc, matched = excerpt(fl[2], 1) }
            end
            local p = D.webshell(fl[2], fl[3])
            if p then return { detector = "upload", reason = D.REASONS.upload, location = loc, matched = excerpt(fl[3], p) } end
          end
          -- an SVG is XML and HTML a browser or an image library will parse: its content is inspected
          if find(lower(fl[2]), "%.svgz?$") or find(fl[4], "svg", 1, true) then
            f = inspect_value(ctx, loc, fl[3], { "xxe", "xss", "injection" })
            if f then return f end
          end
          f = inspect_value(ctx, loc, fl[2], { "traversal", "xss", "sqli", "cmdi" })
          if f then return f end
        end
        return inspect_pairs(ctx, "body:", fields)
      end
    end
    -- UTF-16 (a byte-order mark, or NULs between ASCII characters): read as its ASCII characters
    if find(body, "^\255\254") or find(body, "^\254\255") or find(sub(body, 1, 16), "^%z[\1-\127]%z[\1-\127]") or
      find(sub(body, 1, 16), "^[\1-\127]%z[\1-\127]%z") then
      body = gsub(gsub(body, "^[\254\255][\254\255]", ""), "%z", "")
    end
    local first = match(body, "^%s*(.)")
    -- binary bodies (protobuf, compressed, images) are not text an application parses as such;
    -- only a serialized Java object (AC ED 00 05) is looked for in them
    if not find(ct, "form", 1, true) and find(sub(body, 1, 512), "[%z\1-\8\14-\31]") then
      if sub(body, 1, 4) == "\172\237\0\5" then
        return { detector = "injection", reason = D.REASONS.injection, location = "body", matched = "aced0005" }
      end
      return nil
    end
    if find(ct, "json", 1, true) or ((first == "{" or first == "[") and not find(ct, "x-www-form-urlencoded", 1, true)) then
      local strings, sf, deep = D.json_walk(body, nil, nil, cut, D.NESTING_LIMIT)
      if sf then
        f = structure_finding(ctx, "body:" .. sf[2], body, sf[1])
        if f then return f end
      end
      if deep then return too_complex(ctx, body, deep) end
      f = inspect_pairs(ctx, "body:", strings, true)
      if f then return f end
      -- JSON5 and lenient parsers take single-quoted strings: without double quotes, read it as
      -- text (a body without any quote, [[[...]]], holds no string at all)
      if #strings == 0 and find(body, "'", 1, true) then return inspect_value(ctx, "body", body) end
      return nil
    elseif find(ct, "xml", 1, true) or first == "<" then
      -- HTML (text/html, or markup without an XML type) is markup a browser runs: all detectors
      local html = find(ct, "html", 1, true) or not find(ct, "xml", 1, true)
      f = inspect_value(ctx, "body", body, not html and { "xxe", "injection" } or nil)
      if f then return f end
      return inspect_pairs(ctx, "body:", D.xml_values(body), true)
    elseif find(ct, "x-www-form-urlencoded", 1, true) then
      if cut then body = before_cut(body) end
      local many = too_many_fields(ctx, body)
      if many ~= nil then return many or nil end
      return inspect_pairs(ctx, "body:", D.form_pairs(body))
    else
      -- text/plain or no type: the whole body, and as form data when it looks like it (cut
      -- short, up to its last blank, line break or '&')
      if cut then body = before_cut(body) end
      -- form data starts with a name (no blank, quote or brace before its '='); event lines such
      -- as c{"type":...}\np{...} with URLs inside are not read a second time as pairs
      if find(body, "^[^=&%s{}\"'<]*=") then
        local many = too_many_fields(ctx, body)
        if many ~= nil then return many or nil end
        f = inspect_pairs(ctx, "body:", D.form_pairs(body))
        if f then return f end
      end
      return inspect_value(ctx, "body", body)
    end
  end
  return nil
end

return D
