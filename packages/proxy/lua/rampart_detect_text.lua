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
return { word_before = word_before, each_call = each_call, marker_finder = marker_finder,
  text_words = text_words, is_text = is_text }
