-- Request parts: the headers not inspected (STRUCTURED_HEADERS, read by the native gate,
-- packages/proxy/src/gate.ts), query strings and forms, cookies, JSON (D.json_walk, with the
-- structure checks on its keys), multipart bodies, XML, and values cut short (D.before_cut).

local D = require("rampart_detect_base")
require("rampart_detect_decode")
require("rampart_detect_structure")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local key_kind, QUERY_CONTAINERS = D.key_kind, D.QUERY_CONTAINERS

---------------------------------------------------------------------------------------------------
-- Request parts
---------------------------------------------------------------------------------------------------

-- Headers whose values have a fixed structure and are not inspected (the rest are).
D.STRUCTURED_HEADERS = {}
for w in gmatch([[host accept accept-encoding accept-language accept-charset connection content-length
  cache-control pragma upgrade-insecure-requests te upgrade if-modified-since if-unmodified-since
  if-none-match if-match if-range range dnt priority sec-fetch-site sec-fetch-mode sec-fetch-user
  sec-fetch-dest sec-ch-ua sec-ch-ua-mobile sec-ch-ua-platform sec-ch-ua-platform-version
  sec-ch-ua-full-version-list sec-ch-ua-arch sec-ch-ua-model sec-ch-ua-bitness sec-ch-ua-wow64
  sec-ch-prefers-color-scheme sec-purpose purpose sec-gpc sec-websocket-key sec-websocket-version
  sec-websocket-extensions sec-websocket-protocol content-encoding transfer-encoding keep-alive
  expect date x-requested-with authorization proxy-authorization x-forwarded-for x-forwarded-proto
  x-forwarded-port x-real-ip forwarded via x-request-id traceparent tracestate cookie
  access-control-request-method access-control-request-headers save-data viewport-width
  device-memory rtt downlink ect x-csrf-token x-xsrf-token if-schedule-tag-match
  content-md5 x-http-method-override baggage sentry-trace]], "%S+") do
  D.STRUCTURED_HEADERS[w] = true
end

-- Splits a query string or form body into (name, value) pairs, percent- and plus-decoded.
-- (the pairs between '&'s found by plain searches, empty ones skipped: what gmatch(s, "[^&]+")
-- yields, without a pattern's test of every byte)
function D.form_pairs(s, out, limit)
  out = out or {}
  local n = #out
  local i, len = 1, #s
  while i <= len do
    local amp = find(s, "&", i, true)
    local e = amp and amp - 1 or len
    if e >= i then
      local pair = sub(s, i, e)
      local eq = find(pair, "=", 1, true)
      local name, value
      if eq then name, value = sub(pair, 1, eq - 1), sub(pair, eq + 1) else name, value = pair, "" end
      n = n + 1
      out[n] = { D.url_decode(name, true), D.url_decode(value, true) }
      if limit and n >= limit then break end
    end
    if not amp then break end
    i = amp + 1
  end
  return out
end

function D.cookie_pairs(s, out)
  out = out or {}
  for pair in gmatch(s, "[^;]+") do
    local name, value = match(pair, "^%s*([^=]*)=?(.*)$")
    name = gsub(name or "", "%s+$", "")
    value = gsub(value or "", "^\"(.*)\"$", "%1")
    out[#out + 1] = { name, D.url_decode(value, false) }
  end
  return out
end

-- The part of a value cut short by the end of a body that the application will read as it is:
-- up to its last delimiter (blank, punctuation that ends a token); the token the cut went through
-- ("https://w", half a host) is left out, what came before it is kept ("<script>...</script>"
-- followed by padding past the buffer is still inspected).
local function before_cut(s)
  return match(s, "^(.*[%s&,;:<>()'\"=/|`])") or ""
end
D.before_cut = before_cut

-- JSON: every string (keys and values, at any depth) with the key it belongs to, JSON escapes
-- decoded, and the structure checks on every key (D.key_kind with the key's owner and
-- ancestors). A scanner, not a parser: it never builds the document, malformed JSON is still
-- scanned, and it walks the text once. Nesting is followed to DEPTH_LIMIT levels; deeper keys
-- are still read and checked on their own ("__proto__", an operator after a field) but no longer
-- against their ancestors; past `nesting` levels (when given: a body's NESTING_LIMIT) the walk
-- stops. Returns the list of {name, string[, true for a key]}, the first structure finding as
-- {position, name}, and the position of the bracket past `nesting` when there is one. A JSON
-- value inside a parameter is walked to its end (VALUE_LIMIT bytes at most).
-- JSON's escapes as tables gsub reads in C, without a call a character: \n \t \r \b \f decoded,
-- \u kept for the second round, any other character as itself (\" \\ \/ and what JSON does not
-- define); then \uXXXX as UTF-8, the ASCII ones (the most an attacker repeats) from the table,
-- others computed.
local JSON_ESCAPES = {}
for b = 0, 255 do JSON_ESCAPES[char(b)] = char(b) end
JSON_ESCAPES.n, JSON_ESCAPES.t, JSON_ESCAPES.r, JSON_ESCAPES.b, JSON_ESCAPES.f, JSON_ESCAPES.u = "\n", "\t", "\r", "\b", "\f", "\\u"
local JSON_UNICODE = setmetatable({}, { __index = function(_, h) return D.utf8(tonumber(h, 16)) end })
for cp = 0, 127 do
  local a, b = format("%04x", cp), format("%04X", cp)
  JSON_UNICODE[a], JSON_UNICODE[b] = char(cp), char(cp)
end

function D.json_walk(s, out, owner0, cut, nesting)
  out = out or {}
  local n = #out
  local i, len = 1, #s
  local limit = D.DEPTH_LIMIT
  -- frames up to the depth limit: owner (the key this container is the value of), cur (the
  -- object's current key), contained (a query container is this container's owner or above)
  local owners, curs, contained, isobj = {}, {}, {}, {}
  local depth = 0
  local last_key = owner0 or ""
  local finding
  owners[0], curs[0], contained[0], isobj[0] = owner0 or "", owner0 or "", owner0 ~= nil and QUERY_CONTAINERS[lower(owner0)] or false, true
  -- (the next quote or bracket: a plain search for each, remembered until the walk passes it)
  local next_mark = T.places(s, '"{}[]')
  while i <= len do
    local p = next_mark(i)
    if not p then break end
    local c = byte(s, p)
    if c == 34 then
      -- the closing quote: the first not escaped, i.e. after an even run of backslashes (a run
      -- ends at the opening quote at the latest, so each byte is looked at once or twice)
      local j = p
      while true do
        local k = find(s, '"', j + 1, true)
        if not k then j = len + 1 break end
        local b = k - 1
        while byte(s, b) == 92 do b = b - 1 end
        j = k
        if (k - 1 - b) % 2 == 0 then break end
      end
      -- a body cut short (cut) ends in the middle of its last string: it is read up to the token
      -- the cut went through
      local raw = sub(s, p + 1, j - 1)
      if find(raw, "\\", 1, true) then
        raw = gsub(raw, "\\(.)", JSON_ESCAPES)
        if find(raw, "\\u", 1, true) then raw = gsub(raw, "\\u(%x%x%x%x)", JSON_UNICODE) end
      end
      if cut and j > len then raw = before_cut(raw) end
      -- a key is followed by ':'
      local _, colon = find(s, "^%s*:", j + 1)
      if colon then
        n = n + 1
        out[n] = { raw, raw, true }
        -- (only keys that can be one: '$', '_' or 'p' first, or a dotted or bracketed path)
        local b1 = byte(raw, 1)
        if not finding and (b1 == 36 or b1 == 95 or b1 == 112 or b1 == 80 or find(raw, "proto", 1, true)) then
          local owner, cont
          if depth <= limit then
            owner, cont = owners[depth], contained[depth]
          else
            -- past the depth limit: only the key just before, as if it were the owner
            owner, cont = last_key, false
          end
          local k = key_kind(raw, owner, cont)
          -- dotted and bracketed keys ({"__proto__.x": 1}, {"a[constructor][prototype]": 1})
          if not k and find(raw, "[%[%.]") and D.name_structure(raw) then k = "prototype" end
          if k then finding = { p, owner ~= "" and k == "operator" and owner or raw } end
        end
        if depth <= limit then curs[depth] = raw end
        last_key = raw
        i = colon + 1
      else
        n = n + 1
        local name
        if depth == 0 or depth > limit then name = last_key
        else name = isobj[depth] and curs[depth] or owners[depth] end
        out[n] = { name, raw }
        -- fastjson's "@type" and Json.NET's "$type": the class name is read with its key
        if (name == "@type" or name == "$type") and last_key == name then
          n = n + 1
          out[n] = { name, '"' .. name .. '":"' .. raw .. '"' }
        end
        i = j + 1
      end
    elseif c == 123 or c == 91 then -- { [
      depth = depth + 1
      -- deeper than the caller's nesting (a body's NESTING_LIMIT: deeper than any parser reads,
      -- PHP refuses past 512, .NET and Newtonsoft past 64): the walk stops, and the caller
      -- refuses the body (body_too_complex)
      if nesting and depth > nesting then return out, finding, p end
      if depth <= limit then
        local up = depth - 1
        local owner = isobj[up] and curs[up] or owners[up]
        owners[depth] = owner
        contained[depth] = contained[up] or QUERY_CONTAINERS[owner] or (find(owner, "%u") and QUERY_CONTAINERS[lower(owner)]) or false
        isobj[depth] = c == 123
        curs[depth] = ""
      end
      i = p + 1
    else -- } ]
      if depth > 0 then depth = depth - 1 end
      i = p + 1
    end
  end
  return out, finding
end

-- Every string of a JSON document with the key it belongs to (D.json_walk without the structure).
function D.json_strings(s, out)
  return (D.json_walk(s, out))
end

-- multipart/form-data: field values (name -> value) and file names.
-- The next delimiter line ("--" boundary at the start of a line) from position i: its start and
-- the position just after it. Parsers differ on the line break before it (CRLF or a bare LF), so
-- the earlier of the two counts.
local function next_delimiter(body, delim, i)
  if i == 1 and sub(body, 1, #delim) == delim then return 1, #delim + 1 end
  local a = find(body, "\n" .. delim, i, true)
  if not a then return nil end
  local start = (a > 1 and sub(body, a - 1, a - 1) == "\r") and a - 1 or a
  return start, a + 1 + #delim
end

local DISPOSITION = "[Cc][Oo][Nn][Tt][Ee][Nn][Tt]%-[Dd][Ii][Ss][Pp][Oo][Ss][Ii][Tt][Ii][Oo][Nn]:[^\r\n]*"
local FILENAME = "[Ff][Ii][Ll][Ee][Nn][Aa][Mm][Ee]%*?%s*=%s*"

-- multipart/form-data: field values (name -> value) and file names. Every Content-Disposition
-- and every filename parameter of a part counts (servers differ on which they take).
function D.multipart(body, boundary, fields, files, cut)
  local delim = "--" .. boundary
  local len = #body
  local _, pos = next_delimiter(body, delim, 1)
  while pos do
    if sub(body, pos, pos + 1) == "--" then break end
    local he, sep = find(body, "\r\n\r\n", pos, true), 4
    local lf = find(body, "\n\n", pos, true)
    if lf and (not he or lf < he) then he, sep = lf, 2 end
    if not he then break end
    local headers = sub(body, pos, he - 1)
    local nstart, npos = next_delimiter(body, delim, he + sep)
    -- (the last part of a body cut short has no delimiter after it: its content is cut too)
    local content = sub(body, he + sep, (nstart or len + 1) - 1)
    if cut and not nstart then content = before_cut(content) end
    local name, names = "", {}
    for disp in gmatch(headers, DISPOSITION) do
      name = match(disp, ';%s*[Nn][Aa][Mm][Ee]%s*=%s*"([^"]*)"') or match(disp, ";%s*[Nn][Aa][Mm][Ee]%s*=%s*([^;%s]*)") or name
      for q in gmatch(disp, ";%s*" .. FILENAME .. '"([^"]*)"') do names[#names + 1] = q end
      for q in gmatch(disp, ";%s*" .. FILENAME .. "([^;%s\"]+)") do names[#names + 1] = q end
      fields[#fields + 1] = { name, disp }
    end
    local ctype = match(headers, "[Cc][Oo][Nn][Tt][Ee][Nn][Tt]%-[Tt][Yy][Pp][Ee]:([^\r\n]*)")
    if ctype then fields[#fields + 1] = { name, ctype } end
    local named = false
    for _, fname in ipairs(names) do
      if fname ~= "" then
        named = true
        files[#files + 1] = { name, D.url_decode(fname, false), content, lower(ctype or "") }
      end
    end
    -- a file's content is not a field, unless it has no file name (filename="" reads as a field)
    if not named then fields[#fields + 1] = { name, content } end
    pos = npos
  end
end

-- Text content and attribute values of an XML document.
function D.xml_values(body, out)
  out = out or {}
  local i = 1
  while true do
    local a, e, tag = find(body, "<([%w:_%-%.]+)", i)
    if not a then break end
    local close = find(body, "[<>]", e + 1) or #body + 1
    local attrs = sub(body, e + 1, close - 1)
    -- each '=' then its quoted value (found with plain searches: linear in the tag's length)
    local j = 1
    while true do
      local eq = find(attrs, "=", j, true)
      if not eq then break end
      local name = match(sub(attrs, eq > 64 and eq - 64 or 1, eq - 1), "([%w:_%-%.]*)%s*$") or ""
      local _, qe, q = find(attrs, "^%s*([\"'])", eq + 1)
      if q then
        local cq = find(attrs, q, qe + 1, true) or #attrs + 1
        out[#out + 1] = { name, D.html_decode(sub(attrs, qe + 1, cq - 1)) }
        j = cq + 1
      else
        j = eq + 1
      end
    end
    i = close
  end
  for tag, textv in gmatch(body, "<([%w:_%-%.]+)[^>]*>([^<]+)") do
    if find(textv, "%S") then out[#out + 1] = { tag, D.html_decode(textv) } end
  end
  local i = 1
  while true do
    local s0, e0 = find(body, "<![CDATA[", i, true)
    if not s0 then break end
    local e1 = find(body, "]]>", e0 + 1, true)
    if not e1 then out[#out + 1] = { "cdata", sub(body, e0 + 1) } break end
    out[#out + 1] = { "cdata", sub(body, e0 + 1, e1 - 1) }
    i = e1 + 3
  end
  return out
end

return D
