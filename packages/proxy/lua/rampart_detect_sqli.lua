-- SQL injection (D.sqli): a tokenizer and the structures an injection leaves behind.

local D = require("rampart_detect_base")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local each_call = T.each_call

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

-- The bytes the tokenizer skips as blanks: Lua's %s, \v, \f, the other controls below 32, and
-- A0 (a blank to MySQL in latin1); looked up a byte at a time.
local BLANK = {}
for b = 0, 255 do
  local c = string.char(b)
  BLANK[b] = find(c, "^[%s\v\f]") ~= nil or b < 32 or b == 160
end

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
    local b = byte(s, i)
    local c = sub(s, i, i)
    if BLANK[b] then
      i = i + 1
      -- (the rest of a run of blanks)
      while BLANK[byte(s, i)] do i = i + 1 end
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

-- The tokens sql_structure acts on: keywords (union, select, the statements, into outfile, waitfor),
-- dangerous calls, and names of system tables and variables. A structure word inside a longer word
-- ("settings", "charset", "created_at", "copyright") is no token of them: sql_structure cannot find
-- anything there, and the value need not be tokenised for it.
local STRUCTURE_TOKENS = { "select", "union", "insert", "delete", "update", "drop", "exec", "execute", "declare",
  "create", "alter", "truncate", "shutdown", "waitfor", "replace", "copy", "set", "outfile", "dumpfile" }
for name in pairs(SQL_DANGER_ALONE) do
  if not find(name, ".", 1, true) then STRUCTURE_TOKENS[#STRUCTURE_TOKENS + 1] = name end
end
-- parts of names the tokenizer reads as one word with what surrounds them: searched as they are
local STRUCTURE_MARKS = { "@@", "information_schema", "master.", "sys.", "mysql.", "pg_", "all_tables",
  "dbms_", "utl_", "ctxsys." }

-- A byte the tokenizer reads as part of a word (A0, a blank to MySQL in latin1, is not).
local function word_byte(b)
  return b and ((b >= 97 and b <= 122) or (b >= 65 and b <= 90) or (b >= 48 and b <= 57) or b == 95 or b == 36 or
    (b >= 128 and b ~= 160))
end

-- Whether the tokenizer can start a word at p: after anything but a word byte, or after a number
-- (1union, 1e0union, 0x1Funion: a run of word bytes that starts with a digit); a run longer than
-- 64 bytes is taken as one that could.
local function token_start(lv, p)
  local j = p - 1
  while j >= 1 and j > p - 65 and word_byte(byte(lv, j)) do j = j - 1 end
  if j == p - 1 or j == p - 65 then return true end
  local first = byte(lv, j + 1)
  return first >= 48 and first <= 57
end

-- Whether lv (lowercased) can hold a token sql_structure acts on: a mark, or a word of
-- STRUCTURE_TOKENS standing as a word of its own (where the tokenizer would read it whole).
local function structure_tokens(lv)
  for _, m in ipairs(STRUCTURE_MARKS) do
    if find(lv, m, 1, true) then return true end
  end
  for _, w in ipairs(STRUCTURE_TOKENS) do
    local p = find(lv, w, 1, true)
    while p do
      local e = p + #w
      if not word_byte(byte(lv, e)) and token_start(lv, p) then return true end
      p = find(lv, w, e, true)
    end
  end
  return false
end

function D.sqli(v, lv)
  lv = lv or lower(v)
  -- Gates, each a necessary condition of one way in: structure words or a dangerous call (as
  -- it stands), a leading number (numeric context), a quote (string context).
  local structure = false
  if find(lv, "[%a@]") then
    for _, w in ipairs(SQL_STRUCTURE_WORDS) do
      if find(lv, w, 1, true) then structure = true break end
    end
  end
  if not structure and find(lv, "(", 1, true) then
    structure = each_call(lv, "(", sql_danger_call) ~= nil or (find(lv, "*/", 1, true) and find(lv, "%*/%s*%(")) ~= nil
  end
  -- (leading blanks skipped once: "^%s*[%-%(]?%s*" backtracks quadratically over a long run)
  local _, w0 = find(lv, "^%s*")
  local numeric = find(sub(lv, w0 + 1, w0 + 64), "^[%-%(]?%s*%.?%d") and not find(lv, "^%-?[%d%.]*%s*$", w0 + 1)
  local quoted = find(v, "'", 1, true) or find(v, '"', 1, true)
  if not (structure or numeric or quoted) then return nil end
  -- (a structure word only inside longer words: nothing for sql_structure to find)
  local tokens = structure and structure_tokens(lv)
  local toks = (tokens or numeric) and sql_tokens(v, nil, 4096) or {}
  local p = tokens and sql_structure(toks, false)
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
        p = sql_tail(qt, 2, true) or (tokens and sql_structure(qt, true))
        if p then return p end
      end
    end
  end
  return nil
end

return D
