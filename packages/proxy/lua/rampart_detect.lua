-- Rampart attack detection (level high), loaded into every HAProxy thread with
-- `lua-load-per-thread`: each thread has its own Lua state, so detection never serialises the
-- threads (like rampart_waf.lua; the only thing threads share, the rate limiter's counters, is a
-- native stick table).
--
-- Three layers, each pure and tested on its own (test/lua/detect_test.lua):
--   decoders   percent (+ twice where double encoding is common), '+', HTML entities,
--              \uXXXX / %uXXXX / \xHH / \u{...} / octal escapes, UTF-7 brackets, overlong UTF-8
--   parts      the path, query parameters (repeated names also joined), cookies, the headers that
--              carry user input, and the body (form, JSON, multipart, XML, text) up to BODY_LIMIT
--   detectors  sqli, xss, cmdi, traversal, ssrf, xxe, injection, upload: each takes one decoded
--              value and returns the byte offset of what it recognised, or nil
--   structure  the keys of a request: document-database operators ({"password":{"$ne":null}},
--              password[$ne]=x) and prototype pollution (__proto__, constructor.prototype), from
--              JSON keys with their owners (D.json_walk) and parameter names (D.name_structure)
--
-- Every loop walks its input once and every pattern is anchored, starts with a literal or looks
-- at a bounded window, so the cost stays linear in the size of the request (the fuzz tests of
-- test/lua/detect_test.lua and detect_attacks_test.lua check it); D.inspect keeps a budget per
-- request (BODY_LIMIT, VALUES_LIMIT, DEPTH_LIMIT, DECODE_ROUNDS: docs/detection.md).

local D = {}

local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat

D.BODY_LIMIT = 65536      -- bytes of a request body that are inspected
D.VALUE_LIMIT = 65536     -- bytes of one value given to the detectors (a whole inspected body)
D.MATCH_LEN = 48          -- bytes of the excerpt an event shows
D.DEPTH_LIMIT = 64        -- levels of JSON nesting (and parameter-name segments) followed for key paths
D.VALUES_LIMIT = 2000     -- values of one request inspected one by one; the rest together, as one text
D.DECODE_ROUNDS = 3       -- rounds of decoding one value (percent, entities, escapes, ...)
D.JOIN_LIMIT = 8192       -- bytes of the values of a repeated name joined (as ASP.NET joins them)

---------------------------------------------------------------------------------------------------
-- Decoders
---------------------------------------------------------------------------------------------------

local function hexbyte(h) return char(tonumber(h, 16)) end

-- Percent-decoding as frameworks do it: a malformed escape stays as it is; '+' is a space in
-- form data (plus = true).
function D.url_decode(s, plus)
  if plus and find(s, "+", 1, true) then s = gsub(s, "+", " ") end
  if not find(s, "%", 1, true) then return s end
  s = gsub(s, "%%[uU](%x%x%x%x)", function(h) return D.utf8(tonumber(h, 16)) end)
  return (gsub(s, "%%(%x%x)", hexbyte))
end

function D.utf8(cp)
  if cp < 0 or cp > 0x10FFFF then return "" end
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)) end
  if cp < 0x10000 then return char(0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)) end
  return char(0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F))
end

local ENTITIES = {
  lt = "<", gt = ">", amp = "&", quot = '"', apos = "'", sol = "/", bsol = "\\", lpar = "(", rpar = ")",
  colon = ":", semi = ";", comma = ",", period = ".", excl = "!", quest = "?", equals = "=", plus = "+",
  num = "#", percnt = "%", lsqb = "[", rsqb = "]", lbrack = "[", rbrack = "]", lcub = "{", rcub = "}",
  grave = "`", Tab = "\t", NewLine = "\n", nbsp = " ", dollar = "$", ast = "*", midast = "*", vert = "|",
  verbar = "|", lowbar = "_", hyphen = "-", dash = "-", bne = "=",
}

-- HTML character references as a browser reads them: the ';' is optional, leading zeros allowed.
function D.html_decode(s)
  if not find(s, "&", 1, true) then return s end
  s = gsub(s, "&#[xX]0*(%x%x?%x?%x?%x?%x?);?", function(h) return D.utf8(tonumber(h, 16)) end)
  s = gsub(s, "&#0*(%d%d?%d?%d?%d?%d?%d?);?", function(d) return D.utf8(tonumber(d)) end)
  return (gsub(s, "&(%a%a+);?", function(name) return ENTITIES[name] or ENTITIES[lower(name)] end))
end

-- Escapes of JavaScript, JSON, C and PHP strings.
function D.unescape(s)
  if not find(s, "\\", 1, true) then return s end
  s = gsub(s, "\\[uU]{0*(%x%x?%x?%x?%x?%x?)}", function(h) return D.utf8(tonumber(h, 16)) end)
  s = gsub(s, "\\[uU](%x%x%x%x)", function(h) return D.utf8(tonumber(h, 16)) end)
  s = gsub(s, "\\[xX](%x%x)", hexbyte)
  s = gsub(s, "\\([0-3][0-7][0-7])", function(o) return char(tonumber(o, 8)) end)
  -- two-digit octal only where it makes markup (\74 is '<'): "\16" in a Windows path stays
  s = gsub(s, "\\([0-7][0-7])", function(o)
    local c = char(tonumber(o, 8))
    if find(c, "[<>\"'()/=]") then return c end
  end)
  return s
end

-- UTF-7's encodings of '<' and '>' (+ADw- and +AD4-), which old browsers honoured.
local function utf7(s)
  if not find(s, "+AD", 1, true) then return s end
  return (gsub(gsub(s, "%+ADw%-", "<"), "%+AD4%-", ">"))
end

-- Overlong UTF-8 forms of ASCII characters, which some decoders accept: C0/C1 xx is
-- (first & 1) << 6 | (xx & 0x3F) (%c0%ae is '.'), E0 80 xx is xx & 0x3F.
local function overlong(s)
  if not find(s, "[\192\193\224]") then return s end
  s = gsub(s, "([\192\193])([\128-\191])", function(a, b) return char(((byte(a) & 1) << 6) | (byte(b) & 0x3F)) end)
  return (gsub(s, "\224\128([\128-\191])", function(b) return char(byte(b) & 0x3F) end))
end

-- The value an application may end up with: percent-decoded again (double encoding), entities,
-- string escapes, UTF-7 brackets, overlong forms, until nothing changes (at most 3 rounds).
function D.canonical(s)
  for _ = 1, D.DECODE_ROUNDS do
    local t = s
    if find(t, "%%%x%x") or find(t, "%%[uU]%x%x%x%x") then t = D.url_decode(t, false) end
    t = D.html_decode(t)
    t = D.unescape(t)
    t = utf7(t)
    t = overlong(t)
    if t == s then break end
    s = t
  end
  return s
end

-- The identifier (letters, digits, _ and $) that ends just before position p, blanks between
-- allowed; scans back at most 40 bytes, so looking at every '(' of a value stays linear.
local function word_before(s, p)
  local e = p - 1
  local stop = p - 40
  while e > stop and e > 0 do
    local b = byte(s, e)
    if b ~= 32 and b ~= 9 and b ~= 10 and b ~= 13 then break end
    e = e - 1
  end
  local st = e
  while st > stop and st > 0 do
    local b = byte(s, st)
    if not ((b >= 97 and b <= 122) or (b >= 65 and b <= 90) or (b >= 48 and b <= 57) or b == 95 or b == 36) then break end
    st = st - 1
  end
  if st == e then return nil end
  return sub(s, st + 1, e), st + 1
end

-- Calls fn(name, name_pos, punct_pos) for every identifier followed by one of the characters
-- of class (a Lua pattern class such as "[%(`]"); stops at the first truthy result.
local function each_call(s, class, fn)
  local i = 1
  while true do
    local p = find(s, class, i)
    if not p then return nil end
    local name, at = word_before(s, p)
    if name then
      local r = fn(name, at, p)
      if r then return r end
    end
    i = p + 1
  end
end
D.word_before = word_before

-- A finder for a list of literal markers: each marker is filed under its first word (letters and
-- digits), and a value's words are looked up in that index, so a value meets only the searches of
-- markers whose word it contains (a handful) instead of every marker's. Markers without a word
-- ("<?=") are searched for always. Returns function(lv) -> position of the first marker found.
local function marker_finder(markers)
  local by_word, always = {}, {}
  for _, m in ipairs(markers) do
    local w = match(m, "%a%w*")
    if w then
      by_word[w] = by_word[w] or {}
      table.insert(by_word[w], m)
    else
      always[#always + 1] = m
    end
  end
  return function(lv)
    for _, m in ipairs(always) do
      local p = find(lv, m, 1, true)
      if p then return p end
    end
    local seen = nil
    for w in gmatch(lv, "%a%w*") do
      local list = by_word[w]
      if list and not (seen and seen[w]) then
        seen = seen or {}
        seen[w] = true
        for _, m in ipairs(list) do
          local p = find(lv, m, 1, true)
          if p then return p end
        end
      end
    end
    return nil
  end
end

---------------------------------------------------------------------------------------------------
-- SQL injection: a tokenizer and the structures an injection leaves behind.
---------------------------------------------------------------------------------------------------

-- Token kinds: s string, n number, k keyword, f function (word followed by '('), w other word,
-- o operator, l logic (and/or/xor/&&/||), c comment, ( ) , ; v variable (@x, @@x).
local SQL_KEYWORDS = {}
for w in gmatch([[select union from where insert into values update set delete drop table database
  schema view exec execute declare create alter truncate shutdown waitfor delay having group order
  by limit offset like rlike regexp sounds between is not null true false case when then else end
  as distinct distinctrow all any exists procedure outfile dumpfile load_file information_schema
  cast convert char nchar varchar join inner outer left right on desc asc collate escape div mod
  begin returns function replace grant revoke top dual sysdate current_user session_user in copy program]], "%S+") do
  SQL_KEYWORDS[w] = true
end
local SQL_LOGIC = { ["and"] = true, ["or"] = true, xor = true, ["&&"] = true, ["||"] = true, ["not"] = false }

-- Functions no ordinary value calls: time delays, error-based extraction, file and network access.
local SQL_DANGER = {}
for w in gmatch([[sleep benchmark pg_sleep extractvalue updatexml load_file xp_cmdshell xp_dirtree
  xp_regread sp_oacreate sp_executesql sys_eval sys_exec dbms_pipe.receive_message
  utl_inaddr.get_host_address utl_http.request dbms_lock.sleep randomblob make_set elt
  name_const geometrycollection multipoint polygon linestring exp floor rand gtid_subset
  json_keys pg_read_file pg_ls_dir lo_import copy dblink_connect utl_file.fopen
  dbms_xmlgen.getxml xmltype ctxsys.drithsx.sn version database user schema current_database
  group_concat concat_ws concat char chr ascii substring substr mid ord hex unhex if iif
  count length instr]], "%S+") do
  SQL_DANGER[w] = true
end
-- of those, the ones that alone make a value an attack (the others need SQL around them)
local SQL_DANGER_ALONE = {
  sleep = true, benchmark = true, pg_sleep = true, extractvalue = true, updatexml = true, load_file = true,
  xp_cmdshell = true, xp_dirtree = true, sys_eval = true, sys_exec = true, ["dbms_pipe.receive_message"] = true,
  ["utl_inaddr.get_host_address"] = true, ["utl_http.request"] = true, ["dbms_lock.sleep"] = true,
  pg_read_file = true, pg_ls_dir = true, ["ctxsys.drithsx.sn"] = true, gtid_subset = true, name_const = true,
}

-- Tokenizes s from position i (a string already open with quote q when q is given).
-- Returns an array of {kind, text, pos}; at most max tokens.
local function sql_tokens(s, q, max)
  local toks, n, i, len = {}, 0, 1, #s
  local function push(kind, text, pos)
    n = n + 1
    toks[n] = { kind, text, pos }
  end
  if q then
    -- the value continues a string opened by the application: it ends at the first unescaped q
    local j = 1
    while true do
      local k = find(s, q, j, true)
      if not k then return toks, true end -- never broke out
      if sub(s, k + 1, k + 1) == q then j = k + 2 -- doubled quote: still inside
      elseif k > 1 and sub(s, k - 1, k - 1) == "\\" then j = k + 1
      else i = k + 1 break end
    end
    push("s", "", 1)
    toks.breakout = i - 1
  end
  while i <= len and n < max do
    local c = sub(s, i, i)
    local b = byte(c)
    if find(c, "^[%s\v\f]") or b < 32 or b == 160 then
      i = i + 1
    elseif c == "/" and sub(s, i + 1, i + 1) == "*" then
      if n == 1 and q then toks.comment_first = true end
      if sub(s, i + 2, i + 2) == "!" then
        -- MySQL executable comment: its content is SQL
        local _, e = find(s, "^/%*!%d*", i)
        i = e + 1
        toks.comment = true
      else
        -- a block comment separates tokens like a blank (UNION/**/SELECT)
        local e = find(s, "*/", i + 2, true)
        toks.comment = true
        i = e and e + 2 or len + 1
      end
    elseif c == "*" and sub(s, i + 1, i + 1) == "/" then
      i = i + 2 -- end of an executable comment
    elseif c == "#" or (c == "-" and find(s, "^%-%-[%s%c%+%-]", i)) or (c == "-" and i == len - 1 and sub(s, i + 1) == "-") then
      -- "--" comments need a blank, a control or the end after them (MySQL's rule; "--save-dev" is not one)
      local e = find(s, "\n", i, true)
      push("c", c, i)
      toks.comment = true
      i = e and e + 1 or len + 1
    elseif c == "'" or c == '"' or c == "`" then
      local j = i + 1
      while true do
        local k = find(s, c, j, true)
        if not k then j = len + 1 break end
        if sub(s, k + 1, k + 1) == c then j = k + 2 else j = k + 1 break end
      end
      push(c == "`" and "w" or "s", sub(s, i + 1, j - 2), i)
      i = j
    elseif find(c, "^%d") or (c == "." and find(s, "^%.%d", i)) then
      -- digits, an optional fraction, an optional exponent, each run found once (no backtracking
      -- over a long run of digits)
      local _, e = find(s, "^0[xX]%x+", i)
      if not e then
        _, e = find(s, "^%d*", i)
        local _, f = find(s, "^%.%d*", e + 1)
        if f then e = f end
        local _, x = find(s, "^[eE][%+%-]?%d+", e + 1)
        if x then e = x end
      end
      push("n", sub(s, i, e), i)
      i = e + 1
    elseif c == "@" then
      local _, e = find(s, "^@@?[%w_%.$]*", i)
      push("v", lower(sub(s, i, e)), i)
      i = e + 1
    elseif find(c, "^[%a_$]") or b >= 128 then
      -- (byte A0, a blank to MySQL in latin1, ends a word)
      local _, e = find(s, "^[%w_$\128-\159\161-\255]+", i)
      -- qualified names: dbms_pipe.receive_message, master..xp_dirtree
      local _, e2 = find(s, "^%.%.?[%a_][%w_$]*", e + 1)
      while e2 do e = e2; _, e2 = find(s, "^%.%.?[%a_][%w_$]*", e + 1) end
      local w = lower(sub(s, i, e))
      local _, p = find(s, "^[%s]*%(", e + 1)
      if not p then
        -- MySQL allows comments between a function name and its '('
        local _, p2 = find(s, "^/%*[^*]*%*/%(", e + 1)
        p = p2
      end
      local bare = w
      local dot = find(w, "%.[^%.]*$")
      if dot and not SQL_DANGER[w] then bare = sub(w, dot + 1) end
      if p and (SQL_DANGER[w] or SQL_DANGER[bare] or not (SQL_KEYWORDS[w] or SQL_LOGIC[w] ~= nil)) then
        push("f", w, i)
      elseif SQL_LOGIC[w] then
        push("l", w, i)
      elseif SQL_KEYWORDS[w] then
        push("k", w, i)
      else
        push("w", w, i)
      end
      i = e + 1
    elseif c == "(" or c == ")" or c == "," or c == ";" then
      push(c, c, i)
      i = i + 1
    elseif c == "|" and sub(s, i + 1, i + 1) == "|" then
      push("l", "||", i)
      i = i + 2
    elseif c == "&" and sub(s, i + 1, i + 1) == "&" then
      push("l", "&&", i)
      i = i + 2
    else
      local _, e = find(s, "^[=<>!]+", i)
      if e then
        push("o", sub(s, i, e), i)
        i = e + 1
      else
        push("o", c, i)
        i = i + 1
      end
    end
  end
  return toks, false
end

local COMPARE = { ["="] = true, ["<"] = true, [">"] = true, ["<>"] = true, ["!="] = true, ["<="] = true,
  [">="] = true, ["<=>"] = true, ["=="] = true }
local COMPARE_WORD = { like = true, rlike = true, regexp = true, ["in"] = true, is = true, between = true, sounds = true }
local STATEMENT_AFTER_SEMI = { select = true, drop = true, delete = true, insert = true, update = true,
  exec = true, execute = true, declare = true, create = true, alter = true, truncate = true, shutdown = true,
  waitfor = true, set = true, union = true, replace = true, copy = true }

-- Statements an injection stacks after ";" (not "set", "begin", "grant", "replace": words of prose).
local STACKED = { select = true, drop = true, delete = true, insert = true, update = true, exec = true,
  execute = true, declare = true, shutdown = true, waitfor = true, union = true, truncate = true,
  alter = true, create = true, copy = true }

local function kind(t) return t and t[1] end
local function text(t) return t and t[2] end

-- An operand: a literal, a word, a variable, a function call or a parenthesis.
local function operand(t)
  local k = kind(t)
  return k == "s" or k == "n" or k == "w" or k == "v" or k == "f" or k == "(" or
    (k == "k" and (t[2] == "true" or t[2] == "false" or t[2] == "null" or t[2] == "select" or t[2] == "not"
      or t[2] == "exists" or t[2] == "case" or t[2] == "current_user"))
end

-- Does the expression starting at token i look like a condition an injection appends
-- (x = y, x like y, true, a function call, a subquery)?
local function condition_at(toks, i)
  local t = toks[i]
  if not t then return false end
  if t[1] == "k" and (t[2] == "true" or t[2] == "false" or t[2] == "not" or t[2] == "exists" or t[2] == "null") then return true end
  if t[1] == "f" then return true end
  if t[1] == "(" then
    -- (1=1), (select ...)
    local u = toks[i + 1]
    if kind(u) == "k" and u[2] == "select" then return true end
    return condition_at(toks, i + 1)
  end
  if operand(t) then
    local o = toks[i + 1]
    if not o then
      -- a lone literal or word that ends the value: "' or 'x", "1 or true"; words need a comment or quote
      return t[1] == "n" or t[1] == "s" or t[1] == "v"
    end
    if o[1] == "o" and COMPARE[o[2]] then return true end
    if o[1] == "k" and COMPARE_WORD[o[2]] then return true end
    if o[1] == "k" and (o[2] == "limit" or o[2] == "union" or o[2] == "having" or o[2] == "procedure") then return true end
    if o[1] == "k" and (o[2] == "order" or o[2] == "group") and kind(toks[i + 2]) == "k" and toks[i + 2][2] == "by" then return true end
    if o[1] == "w" and COMPARE_WORD[o[2]] then return true end
    if o[1] == "c" then return true end
    if o[1] == "l" and (t[1] == "n" or t[1] == "s") then return true end
    if o[1] == ")" and (t[1] == "n" or t[1] == "s") then return true end
  end
  return false
end

-- After the call at token j (a function name, then its parenthesis), prose rather than SQL:
-- "select count(*) vs count(1)" (a plain word, then neither FROM, a comma, nor the end).
local function prose_after_call(toks, j)
  if kind(toks[j + 1]) ~= "(" then return false end
  local depth, k = 0, j + 1
  while toks[k] and k <= j + 64 do
    local kk = toks[k][1]
    if kk == "(" then depth = depth + 1 elseif kk == ")" then depth = depth - 1 end
    if depth == 0 then break end
    k = k + 1
  end
  local a, b = toks[k + 1], toks[k + 2]
  return kind(a) == "w" and b ~= nil and not (kind(b) == "k" and (b[2] == "from" or b[2] == "into")) and kind(b) ~= ","
end

-- The structures; returns the position of the first one found.
local function sql_structure(all, context)
  -- line comments end a statement but separate tokens here (UNION#x\nSELECT)
  local toks, n = { comment = all.comment }, 0
  for _, t in ipairs(all) do
    if t[1] ~= "c" then n = n + 1; toks[n] = t end
  end
  for i = 1, n do
    local t = toks[i]
    local k, w = t[1], t[2]
    local nx = toks[i + 1]
    if k == "k" and w == "union" then
      local j = i + 1
      local u = toks[j]
      if kind(u) == "k" and (u[2] == "all" or u[2] == "distinct" or u[2] == "distinctrow") then j = j + 1 end
      if kind(toks[j]) == "(" then j = j + 1 end
      local sel = toks[j]
      if kind(sel) == "k" and sel[2] == "select" then
        -- what follows must be a select list, not prose ("union select 关键字怎么用")
        local a, b = toks[j + 1], toks[j + 2]
        local ka = kind(a)
        if ka == "n" or ka == "s" or ka == "f" or ka == "v" or ka == "(" or (ka == "o" and a[2] == "*") or
          (ka == "k" and (a[2] == "null" or a[2] == "case" or a[2] == "distinct" or a[2] == "all" or a[2] == "top" or a[2] == "current_user")) or
          (ka == "w" and find(a[2], "^[%a_][%w_%.]*$") and
            (kind(b) == "," or (kind(b) == "k" and (b[2] == "from" or b[2] == "into")) or b == nil and toks.comment)) then
          return t[3]
        end
      end
    elseif k == "k" and w == "select" then
      -- SELECT <list> FROM, SELECT with SQL-shaped list: *, functions, literals, variables
      local j, words, shaped = i + 1, 0, false
      while toks[j] and j <= i + 12 do
        local u = toks[j]
        if u[1] == "k" and (u[2] == "from" or u[2] == "into") then
          -- a plain "select a, b from t" is also what people search for; system tables are not
          local tbl = toks[j + 1]
          if kind(tbl) == "w" and (find(tbl[2], "^all_") or find(tbl[2], "^sys") or find(tbl[2], "^mysql%.") or
            find(tbl[2], "^pg_") or tbl[2] == "dual" or find(tbl[2], "^v%$")) and (shaped or words > 0) then
            return t[3]
          end
          break
        elseif u[1] == "f" or u[1] == "v" or u[1] == "s" or u[1] == "n" or u[2] == "*" or u[1] == "," or
          (u[1] == "k" and (u[2] == "null" or u[2] == "case" or u[2] == "distinct" or u[2] == "all" or u[2] == "top")) then
          shaped = true
          if j == i + 1 and ((u[1] == "f" and not prose_after_call(toks, j)) or (u[1] == "v" and u[2] == "@@version") or u[2] == "*" or u[2] == "case") then return t[3] end
        elseif u[1] == "w" then
          words = words + 1
        else
          break
        end
        j = j + 1
      end
    elseif k == ";" and nx and nx[1] == "f" and (nx[2] == "copy" or nx[2] == "exec" or nx[2] == "execute") then
      return t[3]
    elseif k == ";" and nx and nx[1] == "k" and STATEMENT_AFTER_SEMI[nx[2]] then
      local a = toks[i + 2]
      local sw = nx[2]
      if sw == "drop" or sw == "create" or sw == "alter" or sw == "truncate" then
        if kind(a) == "k" and (a[2] == "table" or a[2] == "database" or a[2] == "schema" or a[2] == "view"
          or a[2] == "procedure" or a[2] == "function" or a[2] == "user") then return t[3] end
      elseif sw == "shutdown" or sw == "waitfor" or sw == "declare" or sw == "exec" or sw == "execute" then
        return t[3]
      elseif sw == "set" then
        if kind(a) == "v" or (kind(a) == "w" and kind(toks[i + 3]) == "o") then return t[3] end
      elseif a ~= nil then
        if sw == "select" or sw == "union" then
          if operand(a) or kind(a) == "o" then return t[3] end
        elseif sw == "insert" or sw == "replace" then
          if kind(a) == "k" and a[2] == "into" then return t[3] end
        elseif sw == "delete" then
          if kind(a) == "k" and a[2] == "from" then return t[3] end
        elseif sw == "update" then
          if kind(toks[i + 3]) == "k" and toks[i + 3][2] == "set" then return t[3] end
        else
          return t[3]
        end
      end
    elseif k == "k" and (w == "insert" or w == "delete" or w == "update" or w == "drop") and (toks.comment or context) then
      -- statements hidden by comments (INSERT/**/INTO) or appended after a breakout
      local a, b = nx, toks[i + 2]
      if w == "insert" and kind(a) == "k" and a[2] == "into" then return t[3] end
      if w == "delete" and kind(a) == "k" and a[2] == "from" then return t[3] end
      if w == "update" and kind(b) == "k" and b[2] == "set" and kind(a) == "w" and kind(toks[i + 3]) == "w" and kind(toks[i + 4]) == "o" then return t[3] end
      if w == "drop" and kind(a) == "k" and (a[2] == "table" or a[2] == "database") then return t[3] end
    elseif k == "k" and (w == "insert" or w == "delete") and i == 1 then
      local a, b, c = nx, toks[i + 2], toks[i + 3]
      if kind(a) == "k" and (a[2] == "into" or a[2] == "from") and kind(b) == "w" and
        (kind(c) == "(" or (kind(c) == "k" and (c[2] == "values" or c[2] == "where" or c[2] == "select"))) then
        return t[3]
      end
    elseif k == "k" and w == "update" and i == 1 then
      local c, d = toks[i + 2], toks[i + 4]
      if kind(c) == "k" and c[2] == "set" and kind(d) == "o" and d[2] == "=" then return t[3] end
    elseif k == "k" and w == "drop" and i == 1 then
      local a, b, c = nx, toks[i + 2], toks[i + 3]
      if kind(a) == "k" and (a[2] == "table" or a[2] == "database") and kind(b) == "w" and (c == nil or kind(c) == ";" or kind(c) == "c") then
        return t[3]
      end
    elseif ((k == "o" and COMPARE[w]) or (k == "k" and COMPARE_WORD[w])) and kind(nx) == "(" and kind(toks[i + 2]) == "k" and toks[i + 2][2] == "select" then
      return t[3] -- = (SELECT ...)
    elseif k == "f" and SQL_DANGER_ALONE[w] and kind(toks[i + 2]) ~= ")" then
      -- sleep(5), not "sleep() in mysql" (a call needs an argument to do harm)
      return t[3]
    elseif k == "v" and (w == "@@version" or w == "@@hostname" or w == "@@datadir" or w == "@@basedir" or
      w == "@@servername" or w == "@@tmpdir" or w == "@@version_compile_os" or find(w, "^@@global%.") or
      find(w, "^@@session%.")) then
      return t[3]
    elseif k == "k" and (w == "outfile" or w == "dumpfile") and i > 1 and kind(toks[i - 1]) == "k" and toks[i - 1][2] == "into"
      and kind(nx) == "s" then
      return t[3]
    elseif k == "k" and w == "waitfor" and kind(nx) == "k" and (nx[2] == "delay" or nx[2] == "time") then
      return t[3]
    elseif k == "w" and find(w, "^information_schema") or (k == "k" and w == "information_schema") then
      return t[3]
    elseif k == "w" and (find(w, "^master%.%.") or find(w, "^sys%.") or find(w, "^mysql%.user") or find(w, "^pg_catalog") or find(w, "^all_tables$")) and i > 1 then
      return t[3]
    end
  end
  return nil
end

-- What an injection appends right after breaking out of a string or number: a condition joined
-- by a logic operator, a comment, a statement separator, a set operation, a clause.
local function sql_tail(toks, first, breakout)
  local t = toks[first]
  if not t then return nil end
  local k, w = t[1], t[2]
  if k == "l" then
    if condition_at(toks, first + 1) then return t[3] end
    -- "' or 'x" as the last token: a string compared by truthiness
    return nil
  end
  if k == "c" and breakout then
    -- admin'-- , admin'#, 1'/*: but "#" only when followed by nothing or SQL
    if w ~= "#" or not toks[first + 1] then return t[3] end
  end
  if k == ";" then
    -- a stacked statement: a comment, or a statement keyword that cannot start prose
    local u = toks[first + 1]
    if kind(u) == "c" or (kind(u) == "k" and STACKED[u[2]]) or (kind(u) == "f" and STACKED[u[2]]) then return t[3] end
  end
  if k == ";" and breakout and not toks[first + 1] then return t[3] end
  if k == "k" and w == "union" then
    local u = toks[first + 1]
    if kind(u) == "k" and (u[2] == "all" or u[2] == "distinct" or u[2] == "distinctrow") then u = toks[first + 2] end
    if kind(u) == "k" and u[2] == "select" or kind(u) == "(" or (breakout and u == nil) then return t[3] end
  end
  if k == "k" and (w == "having" or w == "procedure" or w == "into") and toks[first + 1] then return t[3] end
  if k == "k" and (w == "order" or w == "group") and kind(toks[first + 1]) == "k" and toks[first + 1][2] == "by" then
    local x = toks[first + 2]
    if kind(x) == "n" or kind(x) == "f" or (breakout and x ~= nil) then return t[3] end
  end
  if k == "k" and w == "limit" and kind(toks[first + 1]) == "n" then return t[3] end
  if breakout then
    if k == "o" and (COMPARE[w] or w == "+" or w == "-" or w == "*" or w == "/" or w == "|" or w == "^") then
      -- ' = ', '+(select...)+', '-sleep(5)-'
      local u = toks[first + 1]
      if kind(u) == "f" or (kind(u) == "(" and kind(toks[first + 2]) == "k") or (COMPARE[w] and kind(u) == "s" and toks[first + 2]) then return t[3] end
      if COMPARE[w] and (kind(u) == "s" or kind(u) == "n") and kind(toks[first + 2]) == "l" then return t[3] end
      -- the login bypass '=' (''='' is true; ''<'' is not: "Unexpected token '<'")
      if (w == "=" or w == "<=" or w == ">=" or w == "<=>" or w == "==") and kind(u) == "s" and toks[first + 2] == nil and first == 2 then return t[3] end

    end
    if k == ")" then
      -- ') or ('1'='1, ')) union select
      local j = first
      while kind(toks[j]) == ")" do j = j + 1 end
      return sql_tail(toks, j, true)
    end
    if k == "k" and (w == "and" or w == "or") then return nil end
    if k == "k" and (COMPARE_WORD[w]) then
      local u = toks[first + 1]
      if kind(u) == "s" or kind(u) == "(" or kind(u) == "n" then return t[3] end
    end
    -- (a function right after the quote is not SQL: 'x'sleep(5) is a syntax error; a quoted
    -- name then a call is what text and code hold: Cannot invoke "String.length()")
  end
  return nil
end

-- SQL injection: the value tried as it stands (a number or keyword context) and as the rest of a
-- single- or double-quoted string.
-- Words without which no structure of sql_structure can be there (plain searches: fast).
local SQL_STRUCTURE_WORDS = { "select", "union", "insert", "delete", "update", "drop", "exec", "declare",
  "create", "alter", "truncate", "shutdown", "waitfor", "grant", "replace", "begin", "copy", "set",
  "@@", "outfile", "dumpfile", "information_schema", "master.", "sys.", "mysql.", "pg_", "all_tables" }

local function sql_danger_call(name)
  return SQL_DANGER_ALONE[name] or name == "receive_message" or name == "get_host_address" or name == "sn"
end

function D.sqli(v)
  local lv = lower(v)
  -- Gates, each a necessary condition of one way in: structure words or a dangerous call (as
  -- it stands), a leading number (numeric context), a quote (string context).
  local structure = false
  if find(lv, "[%a@]") then
    for _, w in ipairs(SQL_STRUCTURE_WORDS) do
      if find(lv, w, 1, true) then structure = true break end
    end
  end
  if not structure and find(lv, "(", 1, true) then
    structure = each_call(lv, "%(", sql_danger_call) ~= nil or find(lv, "%*/%s*%(") ~= nil
  end
  -- (leading blanks skipped once: "^%s*[%-%(]?%s*" backtracks quadratically over a long run)
  local _, w0 = find(lv, "^%s*")
  local numeric = find(sub(lv, w0 + 1, w0 + 64), "^[%-%(]?%s*%.?%d") and not find(lv, "^%-?[%d%.]*%s*$", w0 + 1)
  local quoted = find(v, "['\"]")
  if not (structure or numeric or quoted) then return nil end
  local toks = (structure or numeric) and sql_tokens(v, nil, 4096) or {}
  local p = structure and sql_structure(toks, false)
  if p then return p end
  -- numeric context: a number (or a closing parenthesis) then the injected tail
  local first = toks[1]
  if numeric and first and (first[1] == "n" or (first[1] == "o" and first[2] == "-" and kind(toks[2]) == "n")) then
    local j = first[1] == "n" and 2 or 3
    while kind(toks[j]) == ")" do j = j + 1 end
    p = sql_tail(toks, j, false)
    if p then return p end
  end
  for _, q in ipairs({ "'", '"' }) do
    local qp = find(v, q, 1, true)
    -- the value continues a string only when its first quote comes early: past a line break and
    -- 64 bytes of text, the value is a document (code, a message) whose quotes are its own
    if qp and qp > 64 and find(sub(v, 1, qp - 1), "\n", 1, true) then qp = nil end
    if qp then
      -- the tail needs the few tokens after the breakout; structures the whole value
      local qt, inside = sql_tokens(v, q, structure and 4096 or 16)
      if not inside then
        if qt.comment_first then return qt.breakout + 1 end -- admin'/*
        p = sql_tail(qt, 2, true) or (structure and sql_structure(qt, true))
        if p then return p end
      end
    end
  end
  return nil
end

---------------------------------------------------------------------------------------------------
-- Cross-site scripting: what a browser would execute.
---------------------------------------------------------------------------------------------------

local EVENT_HANDLERS = {}
for w in gmatch([[abort activate afterprint afterscriptexecute animationcancel animationend
  animationiteration animationstart auxclick beforeactivate beforecopy beforecut beforedeactivate
  beforeinput beforeprint beforescriptexecute beforetoggle beforeunload begin blur bounce canplay
  canplaythrough change click close contextmenu copy cuechange cut dblclick drag dragend dragenter
  dragexit dragleave dragover dragstart drop durationchange end ended error finish focus focusin
  focusout formdata fullscreenchange hashchange input invalid keydown keypress keyup load
  loadeddata loadedmetadata loadend loadstart message mousedown mouseenter mouseleave mousemove
  mouseout mouseover mouseup mousewheel pagehide pageshow paste pause play playing pointercancel
  pointerdown pointerenter pointerleave pointermove pointerout pointerover pointerrawupdate
  pointerup popstate progress ratechange readystatechange repeat reset resize scroll scrollend
  search seeked seeking select selectionchange selectstart show start stalled storage submit
  suspend timeupdate toggle touchend touchmove touchstart transitioncancel transitionend
  transitionrun transitionstart unhandledrejection unload volumechange waiting webkitanimationend
  webkitanimationiteration webkitanimationstart webkittransitionend wheel zoom pagereveal pageswap
  beforematch command scrollsnapchange scrollsnapchanging contentvisibilityautostatechange]], "%S+") do
  EVENT_HANDLERS[w] = true
end

-- Tags that run script or load active content whatever their attributes.
local DANGER_TAGS = {}
for w in gmatch([[script iframe frame frameset embed object applet base xss import isindex portal]], "%S+") do
  DANGER_TAGS[w] = true
end

local URL_ATTRS = { href = true, src = true, action = true, formaction = true, data = true, ["xlink:href"] = true,
  from = true, to = true, values = true, background = true, lowsrc = true, dynsrc = true, poster = true,
  codebase = true, srcdoc = true, code = true, archive = true, by = true, ["attributename"] = false }


-- Removes what a browser ignores inside a URL scheme: tabs, newlines, NULs and other controls.
local function squash(s)
  return (gsub(s, "[%c]", ""))
end

-- A script URL: javascript:/vbscript:/livescript: or data:text/html, followed by code.
local function script_url(lv, from)
  local p = find(lv, "script", from, true)
  while p do
    local scheme = match(sub(lv, p > 4 and p - 4 or 1, p - 1), "([%a]*)$")
    if scheme == "java" or scheme == "vb" or scheme == "live" or scheme == "ecma" then
      local _, e = find(lv, "^script%s*:", p)
      if e then
        local s0 = p - #scheme
        local prev = s0 > 1 and sub(lv, s0 - 1, s0 - 1) or ""
        if prev == "" or not find(prev, "[%w]") then
          -- what follows looks like code: an identifier followed by ( [ . = ` or any punctuation
          local rest = sub(lv, e + 1, e + 40)
          -- javascript:void(0) and javascript:; are the web's placeholders for "no link"
          if find(rest, "^%s*[%w_$%.]*%s*[^%w%s]") and not find(rest, "^%s*void%s*%(?%s*0%s*%)?%s*;?%s*[\"'>]?$") and
            not find(rest, "^%s*void%s*%(?%s*0%s*%)?%s*;?%s*[\"'>]") and not find(rest, "^%s*;?%s*[\"'>]") and rest ~= ";" then
            return s0
          end
        end
      end
    end
    p = find(lv, "script", p + 6, true)
  end
  local d = find(lv, "data:text/html", from, true) or find(lv, "data:image/svg", from, true) or
    find(lv, "data:application/x-javascript", from, true) or find(lv, "data:text/javascript", from, true)
  return d
end

-- JavaScript that calls a sink or reaches one through a global object, the DOM or a constructor.
local JS_SINKS = { alert = true, prompt = true, confirm = true, eval = true, atob = true, import = true,
  execscript = true, msgbox = true }
-- Sinks that ordinary code calls all the time: setTimeout(fn, ms) and fetch('/api/x') are code;
-- setTimeout('alert(1)') evaluates a string, and fetch('https://evil/' + secret) sends one out.
local JS_STRING_SINKS = { settimeout = true, setinterval = true }
local SINK_VALUES = { "alert", "eval", "prompt", "confirm" }
local JS_GLOBALS = { window = true, self = true, top = true, parent = true, frames = true, globalthis = true,
  this = true, document = true, content = true, opener = true }

function D.js(lv)
  -- every construct below needs one of these characters (calls, members, assignments, JSFuck,
  -- __proto__): a value without any is not JavaScript reaching a sink
  if not find(lv, "[%(%[`%.=!+_]") then return nil end
  -- sink calls: alert(1), alert`1`, (alert)(1), eval.call
  local p = each_call(lv, "[%(`]", function(name, at, p)
    if JS_SINKS[name] then
      -- "alert(" anywhere; the words that are also prose ("please confirm (yes)") only when
      -- written as code, without a blank before the parenthesis
      if name == "alert" or name == "prompt" or name == "eval" or name == "atob" or name == "execscript" or
        byte(lv, p - 1) ~= 32 then
        -- a frame of a JavaScript stack trace: "at eval (eval at <anonymous> (app.js:1:1))"
        if not (byte(lv, p - 1) == 32 and find(sub(lv, at > 3 and at - 3 or 1, at - 1), "at $")) then return at end
      end
    elseif JS_STRING_SINKS[name] and find(lv, "^%(%s*['\"`]", p) then
      return at
    elseif name == "fetch" and (find(lv, "^%(%s*['\"`][^'\"`]*//[^'\"`]*['\"`]%s*%+", p) or
      find(match(sub(lv, p, p + 200), "^%([^;]*") or "", "cookie", 1, true) or find(match(sub(lv, p, p + 200), "^%([^;]*") or "", "localstorage", 1, true)) then
      return at
    end
  end) or each_call(lv, "%[", function(name, at, p)
    if JS_GLOBALS[name] then
      local inner = sub(lv, p + 1, p + 1)
      if find(inner, "^['\"`/%(%[%a%d!+]") then return at end
    end
  end)
  if p then return p end
  -- (alert)(1), (0,eval)('...')
  -- (alert)(1), (0,eval)('...'), [1].find(alert), (x=alert)(1), Reflect.apply(alert, ...): a sink
  -- used as a value. Each name is found first, then a few bytes around it are looked at.
  for _, sink in ipairs(SINK_VALUES) do
    local q = find(lv, sink, 1, true)
    while q do
      local before = sub(lv, q > 12 and q - 12 or 1, q - 1)
      local after = sub(lv, q + #sink, q + #sink + 12)
      if (find(before, "[%(,=%[]%s*$") or find(before, "[%(,]%s*[%d,%s]*$")) and find(after, "^%s*[%),;%]]") then return q end
      q = find(lv, sink, q + #sink, true)
    end
  end
  p = find(lv, "document%s*%.%s*[cdwl]") -- document.cookie/domain/write/location
  if p then
    local w = match(lv, "^document%s*%.%s*([%a]+)", p)
    if w == "cookie" or w == "domain" or w == "write" or w == "writeln" or w == "location" then return p end
  end
  p = find(lv, "constructor%s*[%.%(%[]") or find(lv, "fromcharcode%s*%(") or find(lv, "%.innerhtml%s*=") or
    find(lv, "%.outerhtml%s*=") or find(lv, "location%s*%.%s*href%s*=") or find(lv, "location%s*=%s*['\"`]") or
    find(lv, "__proto__") or find(lv, "%.source%s*%+") or
    find(lv, "%.srcdoc%s*=") or find(lv, "insertadjacenthtml") or find(lv, "importscripts")
  if p then return p end
  -- JSFuck: code written with []()!+ alone; a run of a dozen of them with "[]" and "!" or "+"
  -- (one "+[]" is what compressed or random bytes hold by chance)
  local i = 1
  while true do
    local a, b = find(lv, "[%[%]%(%)!%+]+", i)
    if not a then return nil end
    if b - a >= 11 then
      local run = sub(lv, a, b)
      if find(run, "[]", 1, true) and find(run, "[!+]") then return a end
    end
    i = b + 1
  end
end

-- Attributes of a tag starting at position p (after "<name"), up to the closing '>' or the end.
local function tag_attrs(lv, p)
  local close = find(lv, "[<>]", p) or #lv + 1
  local attrs = sub(lv, p, close - 1)
  return attrs, close
end

function D.xss(v)
  if not find(v, "[<>:%(`%[=&\\]") and not find(v, "document", 1, true) then return nil end
  local lv = lower(v)
  local sq = squash(lv)
  -- tags
  local i = 1
  while true do
    -- the next '<' that can open a tag (a letter after blanks and slashes), found in one search
    local lt = find(sq, "<[%s/]*%a", i)
    if not lt then break end
    -- "<", blanks, an optional '/', blanks, the name (each run of blanks read once: the pattern
    -- "^<%s*/?%s*" backtracks over a long run of them, quadratically)
    local _, b = find(sq, "^%s*", lt + 1)
    if byte(sq, b + 1) == 47 then _, b = find(sq, "^%s*", b + 2) end
    local _, e, name = find(sq, "^([%a][%w:%-]*)", b + 1)
    if e then
      local base = match(name, "([%w%-]+)$")
      local attrs = tag_attrs(sq, e + 1)
      -- a tag the browser would build: closed by '>' or with attributes ("binary<script is" is text)
      local complete = sub(sq, e + 1, e + 1) == ">" or find(attrs, "=", 1, true) or
        (find(sq, "^[%s/][^<]*>", e + 1) ~= nil)
      if (DANGER_TAGS[name] or DANGER_TAGS[base]) and complete then return lt end
      if name == "style" and complete then
        local css = sub(sq, e + 1, e + 2000)
        if find(css, "@import", 1, true) or find(css, "expression%s*%(") or find(css, "url%s*%(%s*['\"]?%s*javascript") then return lt end
      end
      -- event handlers, separated from the name by blanks, '/', quotes or nothing after a quote
      for h, q in gmatch(attrs, "[%s/\"'`]on([%a]+)%s*=%s*()") do
        -- JSX's onChange={handler} is code in a code field, not markup
        if EVENT_HANDLERS[h] and sub(attrs, q, q) ~= "{" then return lt end
      end
      if script_url(attrs, 1) then return lt end
      i = e + 1
    else
      -- "<!--" comments hiding tags, "<!ENTITY" are not scripts; a bare '<' is text
      i = lt + 1
    end
  end
  -- attribute breakouts without a tag: " onfocus=alert(1) autofocus x="
  for q, h in gmatch(sq, "([\"'`/%s])on([%a]+)%s*=") do
    if EVENT_HANDLERS[h] then
      local p = find(sq, "on" .. h, 1, true)
      local after = match(sq, "on" .. h .. "%s*=%s*(.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?)", p)
      if after and find(after, "^[\"'`]?[%w_$%.]*%s*[%(`%[=%.]") then return p end
    end
  end
  local p = script_url(sq, 1)
  if p then return p end
  return D.js(sq)
end

---------------------------------------------------------------------------------------------------
-- Shell command injection: a separator followed by a command.
---------------------------------------------------------------------------------------------------

-- Commands that are an attack wherever they follow a separator.
local CMD_STRONG = {}
for w in gmatch([[wget curl nc ncat netcat bash sh zsh ksh csh tcsh dash busybox powershell pwsh
  cmd cmd.exe whoami uname ifconfig ipconfig nslookup base64 python python2 python3 perl php ruby
  lua certutil bitsadmin mkfifo telnet xterm systeminfo tasklist netstat chmod chown crontab
  passwd sudo useradd rm wmic reg regsvr32 mshta rundll32 cscript wscript nmap tftp ftp socat
  openssl getent id hostname msiexec schtasks docker tclsh kubectl]], "%S+") do
  CMD_STRONG[w] = true
end
local INTERPRETERS = { python = true, python2 = true, python3 = true, perl = true, php = true, ruby = true,
  lua = true, bash = true, sh = true, zsh = true, ksh = true, csh = true, tcsh = true, dash = true, node = true, tclsh = true }

-- Commands that are also English words: an attack only with arguments a shell would take.
local CMD_WEAK = {}
for w in gmatch([[cat ls echo ping sleep find head tail more less type dir net env printenv kill
  ps touch cp mv awk sed xargs sort who date pwd uptime dig host ssh scp expr eval exec
  timeout grep od xxd strings nohup tar zip unzip gzip which export node]], "%S+") do
  CMD_WEAK[w] = true
end

-- What follows a command: the arguments a shell would take (-flag, /path, ~, $var, quotes, c:\),
-- or nothing at all (the command ends the value or the line).
local function shell_args(lv, e, newline)
  local rest = sub(lv, e + 1, e + 24)
  if newline then
    -- a word alone on a line is text (GraphQL's "id"); a command line has arguments
    return rest == "" or find(rest, "^[\t ]+[%-/~\\$'\"]") ~= nil or find(rest, "^[\t ]+%a:\\") ~= nil
  end
  return rest == "" or find(rest, "^%s+[%-/~%.\\$'\"%d]") ~= nil or find(rest, "^%s+%a:\\") ~= nil or
    find(rest, "^%$%{?ifs") ~= nil or find(rest, "^,") ~= nil or find(rest, "^%s*[`)]") ~= nil or find(rest, "^%s*[;|&]+%s*$") ~= nil or
    find(rest, "^[\t ]*[\r\n]") ~= nil or find(rest, "^%s*[<>]+%s*[/&%d]") ~= nil
end

-- The command starting at i (after a separator), when it is one: returns i.
-- The end of the blanks and quotes command_at skipped last (D.cmdi goes on from there: the line
-- breaks among them would lead to the same command, and scanning them again would be quadratic).
local skipped_to = 0

local function command_at(lv, i, newline, single, sep)
  -- skip blanks, quotes and the characters a shell ignores here ({ ( ! $IFS)
  local _, e = find(lv, "^[%s'\"{(!]*%$?['\"]?", i)
  skipped_to = e
  i = e + 1
  if sub(lv, i, i + 5) == "${ifs}" or sub(lv, i, i + 3) == "$ifs" then return i end
  local _, we, word = find(lv, "^([%w_%.%-/\\:'\"?*]+)", i)
  if not we then return nil end
  -- quotes and backslashes inside a word vanish in a shell: c'a't, c\at
  word = gsub(word, "['\"]", "")
  if find(word, "^/[%w?*/]*[?*]") then return i end -- /???/c?t, /bin/ca*
  word = gsub(word, "\\(%a)", "%1")
  -- /bin/cat, /usr/bin/id, c:\windows\system32\cmd.exe
  local base = match(word, "([^/\\]+)$") or word
  base = gsub(base, "%.exe$", "")
  if #base == 0 then return nil end
  -- "bash & zsh", "Java & Python developer": after a single & or |, an interpreter's name is
  -- also a word of prose; it needs shell arguments
  if single and INTERPRETERS[base] and find(sub(lv, 1, sep - 1), "%a%s*$") then
    return shell_args(lv, we) and sub(lv, we + 1) ~= "" and i or nil
  end
  if CMD_STRONG[base] and #base > 2 and base ~= "hostname" and base ~= "openssl" then
    -- a line break then "wget http://...": a command that is only a command, with any argument
    if not newline or we == #lv or shell_args(lv, we, true) or find(lv, "^[\t ]+%a[%w+.-]*://", we + 1) or
      find(lv, "^[\t ]+[%w%-]+%.[%w%-]+[%.%w%-]*[%s/:]", we + 1) or find(lv, "^[\t ]+[%w%-]+%.[%w%-]+$", we + 1) then
      return i
    end
  end
  -- short names, and any command after a line break (text has lines too), need shell arguments
  if (CMD_STRONG[base] or CMD_WEAK[base]) and shell_args(lv, we, newline) then return i end
  if base == "net" and find(lv, "^%s+user", we + 1) or find(lv, "^%s+localgroup", we + 1) then return i end
  return nil
end

-- Words of text in s (blank-separated tokens of letters, with an apostrophe or hyphen inside and
-- quotes, brackets or punctuation around: "I", "ran:", "`cat", "don't"), counted up to max.
local TEXT_WORD = "%f[%S][\"'`(%[]?%a[%a'%-]*[%p]*%f[%s%z]"
local function text_words(s, max)
  local n = 0
  for _ in gmatch(" " .. s, TEXT_WORD) do
    n = n + 1
    if n >= max then break end
  end
  return n
end
D.text_words = text_words

-- Text: a value of at least three words once its `code spans` are set aside. Shell commands
-- quoted in text ("try `cat /etc/hosts` to check") are not commands in a shell.
local function is_text(lv)
  if find(lv, "`", 1, true) then lv = gsub(lv, "`[^`]*`", " ") end
  return text_words(lv, 3) >= 3
end
D.is_text = is_text

-- A separator breaks out into a shell when the value before it could be the argument the
-- application put there (nothing, one token, a host, a file name: "127.0.0.1; id"), or when it
-- closes a quote the application opened ("x'; id"). After three words of text the value is a
-- sentence ("I ran ls -la and it showed nothing; then ..."): its separators are punctuation.
-- Command substitution ($(...), <(...), `...`) runs inside words and double quotes, so it counts
-- anywhere, except Markdown code spans (`ls -la`) in text.
function D.cmdi(v)
  if not find(v, "[;|&`$\n\r%(%)]") then return nil end
  local lv = lower(v)
  local p = find(lv, "${ifs", 1, true) or find(lv, "$ifs$", 1, true) or find(lv, "/dev/tcp/", 1, true) or
    find(lv, "$'\\", 1, true) or
    find(lv, "/dev/udp/", 1, true) or find(lv, "^%s*%(%)%s*{%s*[:%w_]*%s*;%s*}") -- Shellshock
  if p then return p end
  -- the words of text before the current position, counted once (up to 3) as the scan goes on,
  -- and the quotes before it (an odd number: the value is inside a string)
  local words, counted, squotes, dquotes = 0, 1, 0, 0
  local text = nil -- is_text(lv), computed at the first backtick
  local function prefix_is_text(s)
    if counted < s then
      local chunk = sub(lv, counted, s - 1)
      if words < 3 then words = words + text_words(chunk, 3 - words) end
      -- (an apostrophe inside a word, "it's", is not a quote)
      local _, sq = gsub(chunk, "'", "")
      local _, ap = gsub(chunk, "%a'%a", "")
      sq = sq - ap
      local _, dq = gsub(chunk, '"', "")
      squotes, dquotes = squotes + sq, dquotes + dq
      counted = s
    end
    if words < 3 then return false end
    -- a quote closed just before the separator, with an odd number of them: a breakout
    local q = match(sub(lv, s > 8 and s - 8 or 1, s - 1), "(['\"])%s*$")
    if q == "'" and squotes % 2 == 1 or q == '"' and dquotes % 2 == 1 then return false end
    return true
  end
  -- separators: ; | || & && newline, command substitution `...` and $(...)
  local i = 1
  while true do
    local s = find(lv, "[;|&`\n\r$<>]", i)
    if not s then break end
    local c = sub(lv, s, s)
    local from = s + 1
    local substitution = false
    if c == "$" or c == "<" or c == ">" then
      -- $(cmd), and the process substitutions <(cmd) and >(cmd)
      if sub(lv, s + 1, s + 1) == "(" then from = s + 2; substitution = true else from = nil end
    elseif c == "`" then
      if sub(lv, s + 1, s + 1) == "`" or sub(lv, s - 1, s - 1) == "`" then
        from = nil -- ``` and `` are Markdown code, not a substitution
      else
        substitution = true
        if text == nil then text = is_text(lv) end
        local close = find(lv, "`", s + 1, true)
        if text and close then
          -- a code span in text: `ls -la`, and whatever it holds
          from = nil
          i = close + 1
        end
      end
    elseif c == "|" or c == "&" then
      if sub(lv, s + 1, s + 1) == c then from = s + 2 end
      -- "&" is also a parameter separator or an entity: &amp; &x=
      if c == "&" and find(lv, "^[%w_%-]*[=;]", from) and not find(lv, "^%s", from) then from = nil end
    elseif c == ";" and find(lv, "^base64,", from) then
      from = nil -- data:image/png;base64,...
    end
    if from and not substitution and prefix_is_text(s) then from = nil end
    if from then
      local at = command_at(lv, from, c == "\n" or c == "\r", (c == "&" or c == "|") and sub(lv, s + 1, s + 1) ~= c, s)
      if at then return s end
      if skipped_to > i then i = skipped_to end
    end
    if i <= s then i = s + 1 end
  end
  return nil
end

---------------------------------------------------------------------------------------------------
-- Path traversal and file inclusion.
---------------------------------------------------------------------------------------------------

local SENSITIVE = { "/etc/passwd", "/etc/shadow", "/etc/group", "/etc/hosts", "/etc/issue", "/proc/self/",
  "/proc/version", "win.ini", "boot.ini", "system32/", "web-inf/", "meta-inf/", ".htaccess", ".htpasswd",
  "/.git/", "/.svn/", "/.hg/", "/.env", "id_rsa", "wp-config.php", "/etc/mysql/", "/var/log/",
  "/.ssh/", ".bash_history", ".aws/", "web.config", ".svn/", "wwwroot/", "/etc/nginx/", "/etc/apache2/", "/usr/local/etc/" }
local INCLUDE_SCHEMES = { "php://", "file://", "zip://", "phar://", "expect://", "data://", "glob://",
  "compress.zlib://", "compress.bzip2://", "jar:file:", "ogg://", "rar://", "ssh2.", "data:text/plain;base64,",
  "data:;base64,", "data:text/plain," }
local sensitive_file, include_scheme = marker_finder(SENSITIVE), marker_finder(INCLUDE_SCHEMES)

-- In text, a path that is one of its words ("I ran ls -la /var/log/ and...", "edit your .htaccess",
-- "the file '/etc/passwd'") is named, not opened: the character before it is a blank or a
-- backtick, or a quote after a blank.
local function word_of_text(s, p)
  if p <= 1 then return false end
  local b = byte(s, p - 1)
  if b == 32 or b == 9 or b == 10 or b == 13 or b == 96 then return true end
  if (b == 39 or b == 34) and (p == 2 or find(sub(s, p - 2, p - 2), "^[%s`(]")) then return true end
  return false
end

-- The first sensitive file of s; in text, the first that is not a word of the text.
local function sensitive_path(s, text)
  local p = sensitive_file(s)
  if not p or not text then return p end
  if not word_of_text(s, p) then return p end
  for _, m in ipairs(SENSITIVE) do
    local q, tries = find(s, m, 1, true), 0
    while q do
      if not word_of_text(s, q) then return q end
      tries = tries + 1
      if tries >= 16 then return q end -- enough of one marker: no longer read as text
      q = find(s, m, q + #m, true)
    end
  end
  return nil
end

-- text: the value is text (D.is_text); never for the request path.
local function traversal_common(lv, text)
  local s = gsub(lv, "\\", "/")
  if find(s, "//", 1, true) or find(s, "/./", 1, true) then s = gsub(gsub(s, "/%./", "/"), "//+", "/") end
  if find(s, "[\226\239]") then
    -- fullwidth and other look-alike dots and slashes that some decoders fold to ASCII
    s = gsub(gsub(gsub(gsub(s, "\239\188\142", "."), "\239\188\143", "/"), "\226\136\149", "/"), "\239\188\188", "/")
  end
  local p = find(s, "../", 1, true) or find(s, "..;/", 1, true)
  -- in text (and code), a relative reference ("see ../README.md", from '../../utils') is not a
  -- traversal; four levels up are, and so is a sensitive file after any number (below)
  if p and text and not find(s, "%.%.;?/%.%.;?/%.%.;?/%.%.;?/") then p = nil end
  if p then return p end
  p = find(s, "%z[%.%w]*%.%w+$") -- ../../etc/passwd%00.png
  if p then return p end
  p = sensitive_path(s, text)
  if p then return p end
  p = find(s, "/proc/%d+/")
  if p then return p end
  return nil
end

function D.traversal(v)
  if not find(v, "[/\\:%.%z\226\239]") then return nil end
  local lv = lower(v)
  local p = traversal_common(lv, is_text(lv))
  if p then return p end
  p = include_scheme(lv)
  if p then return p end
  -- a value that is a file name alone: .env, .git/config, .htaccess
  if find(lv, "^%s*%.env%s*$") or find(lv, "^%s*%.git/") then return 1 end
  return nil
end

-- The request path (already decoded and normalised): dot-dot segments and sensitive files.
function D.path_traversal(lv)
  local p = traversal_common(lv)
  if p then return p end
  p = find(lv, "/%.git$") or find(lv, "/%.svn$") or find(lv, "/%.env%.") or find(lv, "/%.ds_store")
  return p
end

---------------------------------------------------------------------------------------------------
-- Server-side request forgery: URLs aimed at the server's own network.
---------------------------------------------------------------------------------------------------

local SSRF_SCHEMES = { "gopher://", "dict://", "ldap://", "ldaps://", "tftp://", "sftp://", "netdoc://",
  "jar:http", "rmi://", "iiop://", "ftp://127.", "ftp://localhost", "file://", "smb://", "telnet://" }
local ssrf_scheme = marker_finder(SSRF_SCHEMES)

local function internal_host(h)
  h = gsub(h, "%.$", "")
  if h == "localhost" or find(h, "%.localhost$") or h == "0" or h == "0.0.0.0" or h == "[::]" or h == "[::1]" or
    find(h, "^%[0*:") or find(h, "^%[::ffff:") or h == "metadata.google.internal" or h == "metadata" or
    h == "instance-data" or find(h, "^169%.254%.") or h == "100.100.100.200" or h == "localtest.me" or
    h == "192.0.0.192" or h == "lvh.me" or find(h, "%.lvh%.me$") or h == "vcap.me" or find(h, "%.vcap%.me$") or
    find(h, "%.localtest%.me$") or find(h, "^127%.") or h == "127.1" or find(h, "^10%.") or find(h, "^192%.168%.") or
    find(h, "^%[f[cd]%x*:") or find(h, "^%[fe80:") or not find(h, ".", 1, true) or find(h, "%.internal$") or
    find(h, "%.local$") or find(h, "%.svc$") or find(h, "%.svc%.cluster%.local$") or find(h, "%.consul$") or
    find(h, "%.corp$") or find(h, "%.lan$") or find(h, "%.intranet$") or find(h, "%.home%.arpa$") then
    return true
  end
  local a, b = match(h, "^172%.(%d+)%.")
  if a and tonumber(a) >= 16 and tonumber(a) <= 31 then return true end
  -- integer, hexadecimal and octal forms of addresses: 2130706433, 0x7f000001, 0177.0.0.1
  if find(h, "^%d+$") and #h >= 8 then return true end
  if find(h, "^0x%x+") or find(h, "^0%d+%.") or find(h, "%.0x%x") then return true end
  if find(h, "%.nip%.io$") or find(h, "%.xip%.io$") or find(h, "%.sslip%.io$") then
    local dotted = match(h, "(%d+[%.%-]%d+[%.%-]%d+[%.%-]%d+)%.[%a]+%.io$")
    if dotted then return internal_host(gsub(dotted, "%-", ".")) end
    local hex = match(h, "^(%x%x%x%x%x%x%x%x)%.[%a]+%.io$") or match(h, "%.(%x%x%x%x%x%x%x%x)%.[%a]+%.io$")
    if hex then return internal_host("0x" .. hex) end
    return false
  end
  return false
end

function D.ssrf(v)
  if not find(v, "[:\\]") then return nil end
  local lv = lower(v)
  -- Apache's proxy to a unix socket (unix:AAAA...|http://...)
  if find(lv, "^unix:[^|]*|%a+://") then return 1 end
  local p0 = ssrf_scheme(lv)
  if p0 then return p0 end
  -- http(s) URLs anywhere in the value
  local i = 1
  while true do
    -- "http:" (browsers and URL parsers also take "http:/x", "http:\\x" and "http:x"), or any
    -- scheme before "://"; the scheme is read back from the ':' (at most 32 bytes)
    local colon = find(lv, ":", i, true)
    if not colon then break end
    local scheme = match(sub(lv, colon > 32 and colon - 32 or 1, colon - 1), "([%a][%w+%-.]*)$")
    local _, e = find(lv, "^:[/\\]*", colon)
    local slashes = e - colon
    if not scheme or (slashes < 2 and scheme ~= "http" and scheme ~= "https" and scheme ~= "ws" and scheme ~= "wss") then
      i = colon + 1
      goto continue
    end
    do
    local p = colon - #scheme
    local authority = match(lv, "^[^/\\?#%s\"'<>]*", e + 1) or ""
    local host = gsub(authority, "^.*@", "")
    -- "https://android-app://..." names an app, not a host
    if find(host, ":$") or host == "" or (scheme ~= "http" and scheme ~= "https" and scheme ~= "ftp" and scheme ~= "ws" and scheme ~= "wss") then host = "example.com" end
    if sub(host, 1, 1) == "[" then host = match(host, "^%[[^%]]*%]") or host
    else host = gsub(host, ":%d*$", "") end
    if internal_host(host) then return p end
    i = e + 1
    end
    ::continue::
  end
  -- a UNC path (\\host\share) makes Windows connect out
  if find(lv, "^%s*\\\\[%w%-%.]+\\") then return 1 end
  return nil
end

---------------------------------------------------------------------------------------------------
-- XML external entities.
---------------------------------------------------------------------------------------------------

function D.xxe(v)
  if not find(v, "<!", 1, true) and not find(v, "include", 1, true) then return nil end
  local lv = lower(v)
  local p = find(lv, "<!entity", 1, true)
  if p and (find(lv, "system", p, true) or find(lv, "public", p, true) or find(lv, "%", p, true)) then return p end
  p = find(lv, "<!doctype", 1, true)
  if p then
    local decl = sub(lv, p, p + 400)
    local kw = match(decl, "^<!doctype%s+[%w:_%-%.]+%s+(%a+)")
    if kw == "system" then return p end
    if kw == "public" then
      -- PUBLIC "<public id>" "<system URL>": fetched unless it is the W3C's own DTD
      local url = match(decl, '^<!doctype%s+[%w:_%-%.]+%s+public%s+["\'][^"\']*["\']%s+["\']([^"\']*)')
      if url and not find(url, "^https?://www%.w3%.org/") then return p end
    end
    if find(decl, "<!entity", 1, true) then return p end
  end
  p = find(lv, "xi:include", 1, true) or find(lv, "www.w3.org/2001/xinclude", 1, true)
  return p
end

---------------------------------------------------------------------------------------------------
-- Code, template and expression injection, and serialized objects.
---------------------------------------------------------------------------------------------------

-- Removes /* ... */ comments (an unterminated one runs to the end), in one pass.
local function strip_block_comments(s)
  local out, i = {}, 1
  while true do
    local a = find(s, "/*", i, true)
    if not a then out[#out + 1] = sub(s, i) break end
    out[#out + 1] = sub(s, i, a - 1)
    local b = find(s, "*/", a + 2, true)
    if not b then break end
    i = b + 2
  end
  return concat(out)
end

-- Log4j lookups hidden by nested lookups (${${lower:j}ndi:...}, ${${::-j}ndi:...}).
-- Returns true when resolving them yields a JNDI lookup.
local function jndi(s)
  for _ = 1, 8 do
    if find(s, "${jndi:", 1, true) then return true end
    local t = gsub(s, "%${[^${}]*:%-([^${}]*)}", "%1")
    t = gsub(t, "%${[%w]+:['\"]?([^${}'\"]*)['\"]?}", "%1")
    if t == s then break end
    s = t
  end
  return find(s, "${jndi:", 1, true) ~= nil
end

local CODE_CALLS = {}
for w in gmatch([[system passthru shell_exec popen proc_open pcntl_exec phpinfo assert
  call_user_func call_user_func_array create_function base64_decode file_put_contents
  file_get_contents fputs fwrite preg_replace include_once require_once str_rot13 gzinflate
  __import__ getruntime processbuilder exec_command exec]], "%S+") do
  CODE_CALLS[w] = true
end

local CODE_MARKERS = { "java.lang.runtime", "java.lang.processbuilder", "java.lang.system", "java.lang.class)", "java.lang.class.",
  "javax.script", "scriptenginemanager", "getruntime()", ".getruntime", "processbuilder(", "#_memberaccess",
  "#context[", "@java.lang.", "@ognl", "ognl.ognlcontext", "xwork2.", "freemarker.template.utility",
  "?new()", "child_process", "process.mainmodule", "process.binding", "__globals__", "__builtins__",
  "__subclasses__", "__class__", "__mro__", "os.system(", "os.popen(", "subprocess.popen", "subprocess.call(",
  "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput", "import subprocess",
  "$_get[", "$_post[", "$_request[", "$_cookie[", "$_server[", "<?php", "<?=", "com.sun.rowset.",
  "jdbcrowsetimpl", "com.mchange.v2.c3p0", "org.apache.commons.collections", "org.apache.xalan",
  "templatesimpl", "bsh.interpreter", "groovy.lang.", "java.net.url", "java.io.file", "getclass(",
  "module.classloader", "class.classloader", "getclassloader", "classloader.resources", "urlclassloader(", ".forname(", "$class.inspect", "#set(", "#foreach", "<#assign", "${class", "<%=", "<%@",
  "java.beans.xmldecoder", "org.springframework.context.support", "javax.naming", "jndi:", "@type\":\"com.",
  "@type\":\"java.", "@type\":\"org.", "\"@type\":\"", "\"$type\":\"system.", "objectdataprovider",
  "system.diagnostics.process,", "system.diagnostics.process.start(\"", "system.diagnostics.process.start('",
  "clr-namespace:system.diagnostics", "!!python/", "!ruby/", "kernel.exec", "kernel.system", "io.popen", "{php}",
  "cos\nsystem", "cposix\nsystem", "cbuiltins\n", "c__builtin__\n", "csubprocess\n", "_$$nd_func$$_",
  "|map(", "|filter(", "|sort(", "|reduce(", "|map (", "|filter (", "\".execute()", "'.execute()" }

D.CODE_MARKERS = CODE_MARKERS

local code_marker = marker_finder(CODE_MARKERS)

function D.injection(v)
  -- ('<' only as in <?php, <%=, <#assign)
  if not find(v, "[%${}%(%.#@:%[!\n]") and not find(v, "<[?%%#]") and not find(v, "rO0AB", 1, true) and not find(v, "^gA[SJNR][VjW]") and
    not find(v, "AAEAAAD", 1, true) and not find(v, "BAhvOk", 1, true) and
    not find(v, "[aA][cC]%s?[eE][dD]%s?00%s?05") then return nil end
  local lv = lower(v)
  local p
  if find(lv, "${", 1, true) then
    if jndi(lv) then return find(lv, "${", 1, true) end
    -- other Log4j lookups (secrets from the environment) and JSP/JSF expression language
    p = find(lv, "%${%s*[%w]+:")
    if p then
      local name = match(lv, "^%${%s*([%w]+):", p)
      if name == "env" or name == "sys" or name == "java" or name == "ctx" or name == "main" or name == "lower" or
        name == "upper" or name == "date" or name == "k8s" or name == "docker" or name == "spring" or
        name == "base64" or name == "bundle" or name == "web" or name == "jvmrunargs" or name == "log4j" then
        return p
      end
    end
    p = find(lv, "${applicationscope", 1, true) or find(lv, "${sessionscope", 1, true) or find(lv, "${pagecontext", 1, true) or
      find(lv, "${requestscope", 1, true) or find(lv, "${initparam", 1, true)
    if p then return p end
    -- ${obj.method(...)}: an expression that calls something (within 200 bytes of its "${")
    p = find(lv, "${", 1, true)
    while p do
      if find(match(sub(lv, p + 2, p + 202), "^[^}]*") or "", "%.[%a_]+%s*%(") then return p end
      p = find(lv, "${", p + 2, true)
    end
  end
  p = code_marker(lv)
  if p then return p end
  -- OGNL and SpEL expressions: %{...#...}, ${#...}, T(java...), #{...}
  p = find(lv, "%%{%s*[%(#@']") or find(lv, "%${%s*#") or find(lv, "t%s*%(%s*java%.") or find(lv, "#{%s*t%s*%(") or
    find(lv, "%(#[%a_]+%s*=")
  if p then return p end
  -- template expressions that compute: {{7*7}}, ${7*7}, #{7*7}, {233*233}, <%= 7*7 %>
  p = find(lv, "[{$#]%s*%d+%s*[%*%+/%-]%s*['\"]?%d+['\"]?%s*}") or find(lv, "{{#with%s+[\"']")
  if p then return p end
  p = find(lv, "{{", 1, true)
  while p do
    local expr = match(sub(lv, p + 2, p + 202), "^([^}]*)}}") or ""
    if find(expr, "[%a_]+%.[%a_]+") and find(expr, "[%(%[]") or find(expr, "config") or find(expr, "self") or
      find(expr, "request") or find(expr, "lipsum") or find(expr, "cycler") or find(expr, "|attr") or find(expr, "constructor") then
      return p
    end
    p = find(lv, "{{", p + 2, true)
  end
  -- fastjson's "@type" and Json.NET's "$type", whatever the blanks around ':'
  p = find(lv, '"[@$]type"%s*:%s*"')
  if p then return p end
  -- calls of functions that run code or commands; comments between name and '(' removed first
  if find(lv, "/*", 1, true) then lv = strip_block_comments(lv) end
  p = each_call(lv, "%(", function(name, at, q)
    -- a method (console.assert(...), regex.exec(...)) is not PHP's function of that name
    if CODE_CALLS[name] and not (at > 1 and find(sub(lv, at > 2 and at - 2 or 1, at - 1), "[%.>:]$")) then
      local arg = sub(lv, q + 1, q + 1)
      if find(arg, "^['\"$%)`]") or find(sub(lv, q + 1, q + 41), "^[%s]*[%a_][%w_]*%s*%(") or name == "phpinfo" then return at end
    end
  end)
  if p then return p end
  -- serialized Java objects (base64 or hex) and PHP objects
  -- and pickles (protocol 2 to 5, base64)
  -- (Java, .NET BinaryFormatter, Ruby Marshal, in base64 or hex)
  p = find(v, "rO0AB", 1, true) or find(lv, "ac%s?ed%s?00%s?05") or find(v, "AAEAAAD/////", 1, true) or find(v, "BAhvOk", 1, true) or find(v, "^[Oa]:%d+:[\"{]") or find(v, "[;{]O:%d+:\"") or
    find(v, "^gA[SJNR][VjW]")
  return p
end

---------------------------------------------------------------------------------------------------
-- Executable uploads: file names whose extension a server would run.
---------------------------------------------------------------------------------------------------

local EXEC_EXT = {}
for w in gmatch([[php php2 php3 php4 php5 php6 php7 php8 phtml pht phtm phar phps pgif shtml shtm
  jsp jspx jsw jsv jspf jhtml asp aspx asa asax ascx ashx asmx asp cer cgi pl war htaccess
  htpasswd cfm cfml stm]], "%S+") do
  EXEC_EXT[w] = true
end

function D.upload(filename)
  local f = lower(D.url_decode(filename, false))
  f = match(f, "^[^%z]*") -- x.php\0.jpg
  f = gsub(f, "::%$data$", "")
  f = gsub(f, "[%s%.]+$", "")
  local base = match(f, "([^/\\]*)$") or f
  if base == ".htaccess" or base == ".user.ini" or base == "web.config" then return 1 end
  local ext = match(base, "%.([%w]+)$")
  if ext and EXEC_EXT[ext] then return 1 end
  -- x.php;.jpg (IIS), x.php%00.jpg
  if find(base, "%.php[%d]?[;%%]") or find(base, "%.asp[x]?;") or find(base, "%.jsp[x]?;") then return 1 end
  return nil
end

-- Server-side script inside an uploaded file (a PHP shell named cmd.png); text files may hold code.
function D.webshell(filename, content)
  local ext = match(lower(filename), "%.(%w+)$")
  if ext == "txt" or ext == "md" or ext == "log" or ext == "csv" then return nil end
  local head = sub(content, 1, 65536)
  return find(head, "<%?[pP][hH][pP]") or find(head, "<%?=") or find(head, "<%%[@=!]") or
    find(head, "<[sS][cC][rR][iI][pP][tT]%s+[lL][aA][nN][gG][uU][aA][gG][eE]%s*=%s*[\"']?[pP][hH][pP]")
end

---------------------------------------------------------------------------------------------------
-- Running the detectors over one value.
---------------------------------------------------------------------------------------------------

D.DETECTORS = { "sqli", "xss", "cmdi", "traversal", "injection", "ssrf", "xxe" }
D.REASONS = { sqli = "sqli_detected", xss = "xss_detected", cmdi = "cmdi_detected",
  traversal = "traversal_detected", ssrf = "ssrf_detected", xxe = "xxe_detected",
  injection = "injection_detected", upload = "upload_blocked" }

-- Values made of letters, digits, blanks (not line breaks) and harmless punctuation: only
-- keyword SQL ("1 union select 2") and serialized objects (base64 or hex) can hide in them.
local function plain(v)
  -- not \192, \193, \224 (overlong forms of ASCII) nor \239 (fullwidth forms): they fold to ASCII
  return not find(v, "[^%w \t,_@:%-\128-\191\194-\223\225-\238\240-\255]")
end

-- Of the plain values, those an attack could still be: keyword SQL after a number or with
-- UNION/SELECT ("1 or true", "1 order by 5", "1 union select 2"), lookups and markers (":", "@"),
-- serialized objects (rO0AB..., aced0005..., pickles).
local function plain_suspect(v)
  return (find(v, "^%s*%-?%.?%d") and find(v, "%a")) or find(v, "[uU][nN][iI][oO][nN]") or
    find(v, "[sS][eE][lL][eE][cC][tT]") or find(v, "[:@]") or find(v, "rO0AB", 1, true) or
    find(v, "^gA[SJNR][VjW]") or find(v, "[aA][cC]%s?[eE][dD]%s?00%s?05") or find(v, "AAEAAAD", 1, true) or
    find(v, "BAhvOk", 1, true)
end

local PLAIN_DETECTORS = { "sqli", "injection" }

-- The first detector of names, not excepted (skip(detector) true), that recognises v.
local function first_detection(names, v, skip)
  for _, name in ipairs(names) do
    if not (skip and skip(name)) then
      local p = D[name](v)
      if p then return name, p, v end
    end
  end
  return nil
end

-- Runs every detector not excepted over v; returns detector, position, the value it read.
function D.check(v, skip, only)
  if #v > D.VALUE_LIMIT then v = sub(v, 1, D.VALUE_LIMIT) end
  if plain(v) then
    if not plain_suspect(v) then return nil end
    return first_detection(PLAIN_DETECTORS, v, skip)
  end
  return first_detection(only or D.DETECTORS, D.canonical(v), skip)
end

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
function D.form_pairs(s, out, limit)
  out = out or {}
  local n = #out
  for pair in gmatch(s, "[^&]+") do
    local eq = find(pair, "=", 1, true)
    local name, value
    if eq then name, value = sub(pair, 1, eq - 1), sub(pair, eq + 1) else name, value = pair, "" end
    n = n + 1
    out[n] = { D.url_decode(name, true), D.url_decode(value, true) }
    if limit and n >= limit then break end
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

---------------------------------------------------------------------------------------------------
-- Structure: operator injection into document databases and prototype pollution. Both live in the
-- keys of a request, never in its text: {"password":{"$ne":null}}, password[$ne]=x,
-- {"__proto__":{...}}, a[constructor][prototype][x]=1. A '$' or "__proto__" in a value is text.
---------------------------------------------------------------------------------------------------

-- MongoDB's query operators (and Mongoose's, which pass them on). Not "$type" (Json.NET's type
-- name, checked by D.injection), "$text" or "$" (XML-to-JSON conventions), nor the update
-- operators ("$set", "$inc") and Extended JSON ("$oid", "$date"), which carry no condition.
local NOSQL_OPS = {}
for w in gmatch([[$ne $eq $gt $gte $lt $lte $in $nin $regex $options $where $exists $expr $or $and
  $nor $not $elemmatch $all $size $mod $jsonschema $function $accumulator $geowithin $near]], "%S+") do
  NOSQL_OPS[w] = true
end
-- Operators that run JavaScript on the database server: refused wherever they are.
local NOSQL_CODE = { ["$where"] = true, ["$function"] = true, ["$accumulator"] = true }
-- Keys under which an application takes a query in the database's own language (Strapi's
-- filters[title][$eq], Parse's where={...}, a search DSL's "query"): operators below them are
-- the application's own, not an injection into a field that expected a string.
local QUERY_CONTAINERS = {}
for w in gmatch([[filter filters where query selector criteria condition conditions match $match
  find search predicate]], "%S+") do
  QUERY_CONTAINERS[w] = true
end
D.NOSQL_OPS, D.QUERY_CONTAINERS = NOSQL_OPS, QUERY_CONTAINERS

-- What a key (a JSON key, or one segment of a bracketed or dotted parameter name) does, given the
-- key it sits under (owner) and whether a query container is among its ancestors: "operator",
-- "prototype" or nil.
local function key_kind(key, owner, contained)
  local lk = lower(key)
  if lk == "__proto__" then return "prototype" end
  if lk == "prototype" and owner and lower(owner) == "constructor" then return "prototype" end
  if byte(lk, 1) == 36 and NOSQL_OPS[lk] then -- '$'
    if NOSQL_CODE[lk] or not contained then return "operator" end
  end
  return nil
end
D.key_kind = key_kind

-- The segments of a parameter name as qs (Express), PHP and Rack read it: a[b][c], a.b.c;
-- calls fn(segment, previous segment, whether a query container came before); stops at the
-- first truthy result. At most DEPTH_LIMIT segments.
local function each_segment(name, fn)
  local prev, contained, n = nil, false, 0
  for seg in gmatch(name, "[^%[%]%.]+") do
    n = n + 1
    if n > D.DEPTH_LIMIT then return nil end
    local r = fn(seg, prev, contained)
    if r then return r end
    if QUERY_CONTAINERS[lower(seg)] then contained = true end
    prev = seg
  end
  return nil
end

-- A parameter name that pollutes a prototype or turns its field into a database operator.
-- Returns the position of the offending segment, or nil.
function D.name_structure(name)
  if not (find(name, "__proto__", 1, true) or find(name, "[%[%.]%s*[%$cCpP]") or byte(name, 1) == 36) then return nil end
  return each_segment(name, function(seg, prev, contained)
    if key_kind(seg, prev, contained) then return find(name, seg, 1, true) end
  end)
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
-- against their ancestors. Returns the list of {name, string[, true for a key]} and the first
-- structure finding as {position, name}.
function D.json_walk(s, out, owner0, cut)
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
  while i <= len do
    local p = find(s, '["{}%[%]]', i)
    if not p then break end
    local c = byte(s, p)
    if c == 34 then
      local j = p + 1
      local escaped = false
      while true do
        local k = find(s, '["\\]', j)
        if not k then j = len + 1 break end
        if byte(s, k) == 34 then j = k break end
        j = k + 2
        escaped = true
      end
      -- a body cut short (cut) ends in the middle of its last string: it is read up to the token
      -- the cut went through
      local raw = sub(s, p + 1, j - 1)
      if escaped then
        raw = gsub(raw, "\\(.)", function(e)
          if e == "n" then return "\n" elseif e == "t" then return "\t" elseif e == "r" then return "\r"
          elseif e == "b" then return "\b" elseif e == "f" then return "\f" elseif e == "u" then return "\\u" end
          return e
        end)
        raw = gsub(raw, "\\u(%x%x%x%x)", function(h) return D.utf8(tonumber(h, 16)) end)
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

-- The path as the origin will see it: decoded (twice), backslashes as slashes, ';' parameters
-- and empty or '.' segments removed. '..' segments are kept: they are what traversal looks for.
function D.normalize_path(p)
  local d = D.url_decode(p, false)
  if find(d, "%%%x%x") then d = D.url_decode(d, false) end
  d = overlong(d)
  d = gsub(d, "\\", "/")
  d = gsub(d, ";[^/]*", "")
  d = gsub(d, "//+", "/")
  d = gsub(d, "/%./", "/")
  d = gsub(d, "/%./", "/")
  d = gsub(d, "/%.$", "/")
  return d
end

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

local function inspect_value(ctx, loc, v, only)
  if v == nil or v == "" then return nil end
  local count = ctx.count + 1
  ctx.count = count
  if count > D.VALUES_LIMIT then over_budget(ctx, loc, v) return nil end
  if plain(v) and not plain_suspect(v) then return nil end -- cheaper than the cache
  -- short values found clean are remembered (per thread): a browser sends the same cookies and
  -- headers with every request; with exceptions the answer also depends on path and location
  -- (not a body's values: they seldom come again, and thousands of them would push the
  -- headers' and cookies' entries out of the cache)
  local key
  if #v <= 512 and not ctx.exceptions and not ctx.in_body then
    key = (only and concat(only, ",") or "") .. "\0" .. v
    if cached_clean(key) then return nil end
  end
  local skip = exception_filter(ctx.exceptions, ctx.path, loc)
  if skip and skip("*all*") == true and skip("sqli") and skip("xss") and skip("cmdi") and skip("traversal") and
    skip("ssrf") and skip("xxe") and skip("injection") then return nil end
  local det, p, c = D.check(v, skip, only)
  if det then return { detector = det, reason = D.REASONS[det], location = loc, matched = excerpt(c, p) } end
  if key then remember_clean(key) end
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
  local ctx = { exceptions = exceptions, path = req.path or "/", count = 0 }
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
    local length = tonumber(header_value(h, "content-length") or "")
    local cut = #body > D.BODY_LIMIT or (length ~= nil and length > #body)
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
      local strings, sf = D.json_walk(body, nil, nil, cut)
      if sf then
        f = structure_finding(ctx, "body:" .. sf[2], body, sf[1])
        if f then return f end
      end
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
      return inspect_pairs(ctx, "body:", D.form_pairs(cut and before_cut(body) or body))
    else
      -- text/plain or no type: the whole body, and as form data when it looks like it (cut
      -- short, up to its last blank, line break or '&')
      if cut then body = before_cut(body) end
      -- form data starts with a name (no blank, quote or brace before its '='); event lines such
      -- as c{"type":...}\np{...} with URLs inside are not read a second time as pairs
      if find(body, "^[^=&%s{}\"'<]*=") then
        f = inspect_pairs(ctx, "body:", D.form_pairs(body))
        if f then return f end
      end
      return inspect_value(ctx, "body", body)
    end
  end
  return nil
end

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
    local ok, finding = pcall(D.inspect, req, d.exceptions)
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
    if not block then return end
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
