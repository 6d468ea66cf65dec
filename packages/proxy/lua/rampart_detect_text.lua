-- Text helpers the detectors share: the identifier before a position (word_before), the calls
-- of a value (each_call), finders of literal markers (marker_finder), words of prose
-- (text_words, is_text). Returns them as a table; D.word_before, D.text_words and D.is_text
-- are the same functions.

local D = require("rampart_detect_base")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat

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

-- The characters of a set (a string such as ";|&"), each a one-byte string, made once per set.
local char_lists = {}
local function chars_of(set)
  local list = char_lists[set]
  if list == nil then
    list = {}
    for k = 1, #set do list[k] = sub(set, k, k) end
    char_lists[set] = list
  end
  return list
end

-- A walker over the places of some characters in s: next(i) is the first position from i holding
-- one of chars (or nil), as find(s, "[" .. chars .. "]", i) answers, each character's next place a
-- plain search remembered until the walk passes it (i only grows from call to call).
local function places(s, chars)
  local next_at = {}
  local list = chars_of(chars)
  local count = #list
  return function(i)
    local p
    for k = 1, count do
      local q = next_at[k]
      if q == nil or (q and q < i) then
        q = find(s, list[k], i, true) or false
        next_at[k] = q
      end
      if q and (p == nil or q < p) then p = q end
    end
    return p
  end
end

-- Calls fn(name, name_pos, punct_pos) for every identifier followed by one of the characters
-- of chars (a string such as "(`"); stops at the first truthy result. The walk is over the whole
-- value: the next such character is found by plain searches (places), not a pattern class.
local function each_call(s, chars, fn)
  local next_place = places(s, chars)
  local i = 1
  while true do
    local p = next_place(i)
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

-- Past this many bytes for each marker word a value's words are not walked one by one: each
-- marker word is searched for instead (a plain search skips to it). Measured over the corpus's
-- values longer than 300 bytes: the sensitive files (21 words) 130 -> 33 ms, the inclusion schemes
-- (12) 82 -> 20 ms; the code markers (62 words) gain nothing at any length, and keep the walk.
local LONG_VALUE_PER_KEY = 16
local KEYS_MAX = 32

local function alnum(b) return b and ((b >= 48 and b <= 57) or (b >= 65 and b <= 90) or (b >= 97 and b <= 122)) end

-- Whether gmatch(lv, "%a%w*") yields a word of n bytes at p (lv at p starts with a letter): its
-- run of letters and digits ends there, and only digits come before it in the run (gmatch skips
-- those, then takes the rest of the run from the first letter).
local function word_at(lv, p, n)
  if alnum(byte(lv, p + n)) then return false end
  local j = p - 1
  while j >= 1 and byte(lv, j) >= 48 and byte(lv, j) <= 57 do j = j - 1 end
  return not (j >= 1 and alnum(byte(lv, j)))
end

-- marker_finder's answer for a long value, as its walk over the words gives it: the words that
-- file markers, in the order of their first place as a word of lv, each trying its markers.
local function by_keys(lv, by_word, keys)
  local firsts = nil
  for _, k in ipairs(keys) do
    local p = find(lv, k, 1, true)
    while p do
      if word_at(lv, p, #k) then
        firsts = firsts or {}
        firsts[#firsts + 1] = { p, k }
        break
      end
      p = find(lv, k, p + 1, true)
    end
  end
  if not firsts then return nil end
  table.sort(firsts, function(a, b) return a[1] < b[1] end)
  for _, f in ipairs(firsts) do
    for _, m in ipairs(by_word[f[2]]) do
      local p = find(lv, m, 1, true)
      if p then return p end
    end
  end
  return nil
end

-- A finder for a list of literal markers: each marker is filed under its first word (letters and
-- digits), and a value's words are looked up in that index, so a value meets only the searches of
-- markers whose word it contains (a handful) instead of every marker's. Markers without a word
-- ("<?=") are searched for always. Returns function(lv) -> position of the first marker found.
local function marker_finder(markers)
  local by_word, always, keys = {}, {}, {}
  for _, m in ipairs(markers) do
    local w = match(m, "%a%w*")
    if w then
      if not by_word[w] then keys[#keys + 1] = w end
      by_word[w] = by_word[w] or {}
      table.insert(by_word[w], m)
    else
      always[#always + 1] = m
    end
  end
  local long = #keys <= KEYS_MAX and LONG_VALUE_PER_KEY * #keys or math.huge
  return function(lv)
    for _, m in ipairs(always) do
      local p = find(lv, m, 1, true)
      if p then return p end
    end
    if #lv > long then return by_keys(lv, by_word, keys) end
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

-- The helpers the detectors take as locals (their own upvalues: no lookup in D on a hot path).
-- Whether s holds text (a plain search: C skips to it, where a pattern is tried at every position).
local function has(s, text) return find(s, text, 1, true) ~= nil end

-- The first position from i where the anchored pattern (starting with "^") matches and s holds
-- lead there, or `back` bytes after it (a plain string the pattern starts with, or holds that far
-- in, such as "O:" in "[;{]O:"): find(s, unanchored, i), with the places of lead found by plain
-- searches. Returns what find returns.
local function find_at(s, lead, anchored, i, back)
  back = back or 0
  local q = find(s, lead, (i or 1) + back, true)
  while q do
    local a, b, c1, c2 = find(s, anchored, q - back)
    if a then return a, b, c1, c2 end
    q = find(s, lead, q + 1, true)
  end
  return nil
end

-- gsub(s, pattern, repl) where every match starts with the plain text lead: the matches are
-- tried only where a plain search finds lead (a few "&" or "//" in a long value), one after
-- another as gsub makes them; past `limit` of them gsub does the rest (where they are dense it
-- costs less). repl: a string without '%', or a table or function of the first capture (or of
-- the match), whose nil or false keeps the match as it is.
local function gsub_at(s, lead, pattern, repl, limit)
  local anchored = "^" .. pattern
  local out, n, i, tries = {}, 0, 1, 0
  local q = find(s, lead, 1, true)
  while q do
    tries = tries + 1
    if tries > limit then
      n = n + 1
      out[n] = sub(s, i, q - 1)
      n = n + 1
      out[n] = (gsub(sub(s, q), pattern, repl))
      return concat(out, "", 1, n)
    end
    local a, e, cap = find(s, anchored, q)
    if a then
      local r = repl
      if type(repl) == "function" then r = repl(cap or sub(s, a, e))
      elseif type(repl) == "table" then r = repl[cap or sub(s, a, e)] end
      if r then
        n = n + 1
        out[n] = sub(s, i, q - 1)
        n = n + 1
        out[n] = r
        i = e + 1
      end
      q = find(s, lead, e + 1, true)
    else
      q = find(s, lead, q + 1, true)
    end
  end
  if n == 0 then return s end
  n = n + 1
  out[n] = sub(s, i)
  return concat(out, "", 1, n)
end

-- Whether s holds any of the characters of chars: a plain search (memchr) for each, which is
-- what a guard such as find(s, "[;|&]") answers, without a pattern's test of every byte.
local function has_any(s, chars)
  local list = chars_of(chars)
  for k = 1, #list do
    if find(s, list[k], 1, true) then return true end
  end
  return false
end

return { word_before = word_before, each_call = each_call, has_any = has_any, places = places, find_at = find_at, gsub_at = gsub_at, marker_finder = marker_finder,
  text_words = text_words, is_text = is_text, has = has }
