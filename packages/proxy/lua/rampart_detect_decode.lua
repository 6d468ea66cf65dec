-- Decoders: percent (and %uXXXX), HTML entities, string escapes, UTF-7 brackets, overlong UTF-8,
-- D.canonical (all of them, DECODE_ROUNDS rounds) and D.normalize_path (the request path as the
-- origin sees it).

local D = require("rampart_detect_base")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat

---------------------------------------------------------------------------------------------------
-- Compressed request bodies (Content-Encoding gzip or deflate), with Debian's lua-zlib
---------------------------------------------------------------------------------------------------

local zlib_ok, zlib = pcall(require, "zlib")
D.INFLATE_STEP = 64 -- bytes of compressed input inflated at a time (a step yields at most ~66 KB)
-- Bytes of inflated text read: what HAProxy's buffer (16 KiB) holds of a plain body, so a
-- compressed body buys no more detector time than a plain one (64 KiB of JSON would cost 4 times
-- as much).
D.INFLATE_LIMIT = 16384

-- One pass of zlib over body (bits: nil reads gzip and zlib streams, -15 raw deflate): the text,
-- at most INFLATE_LIMIT bytes, and whether the stream stopped short of its end (the buffer or the
-- limit cut it: D.inspect reads it as a body cut short). nil when the bytes are no such stream, or
-- more follows its end (a second gzip member the application would read too).
local function inflate_pass(body, bits)
  local stream = bits and zlib.inflate(bits) or zlib.inflate()
  local parts, size = {}, 0
  for i = 1, #body, D.INFLATE_STEP do
    local ok, out, eof, read = pcall(stream, sub(body, i, i + D.INFLATE_STEP - 1))
    if not ok then return nil end
    parts[#parts + 1] = out
    size = size + #out
    if size > D.INFLATE_LIMIT then return sub(concat(parts), 1, D.INFLATE_LIMIT), true end
    if eof then
      if read < #body then return nil end
      return concat(parts), false
    end
  end
  return concat(parts), true
end

-- Every reading of the body a request's single gzip or deflate coding carries: { {text, short},
-- ... }, each inflated within INFLATE_LIMIT bytes of output however small the input (a 20 KB
-- "bomb" of zeros stops there) and whether it was cut short. Empty when none can be read (corrupt,
-- trailing bytes, or lua-zlib missing): the caller refuses it as compressed_body, or reads only its
-- bytes as sent where the domain allows compressed bodies. "deflate" is a zlib stream or raw
-- deflate (as some clients send it, and some servers read it): the same bytes can be both (a zlib
-- stream cut short whose bytes are also a raw stream), so both readings are returned, and the
-- caller inspects each, never one chosen for the application.
function D.inflations(body, coding)
  local out = {}
  if not zlib_ok then return out end
  local text, short = inflate_pass(body, nil)
  if text ~= nil then out[#out + 1] = { text, short } end
  if coding == "deflate" then
    text, short = inflate_pass(body, -15)
    if text ~= nil then out[#out + 1] = { text, short } end
  end
  return out
end

---------------------------------------------------------------------------------------------------
-- Decoders
---------------------------------------------------------------------------------------------------

-- Two hex digits (either case) -> the byte they name: gsub looks a match up instead of calling a
-- function for it.
local HEX_BYTE = {}
do
  local digits = "0123456789abcdefABCDEF"
  for i = 1, #digits do
    for j = 1, #digits do
      local h = sub(digits, i, i) .. sub(digits, j, j)
      HEX_BYTE[h] = char(tonumber(h, 16))
    end
  end
end

-- Percent-decoding as frameworks do it: a malformed escape stays as it is; '+' is a space in
-- form data (plus = true).
function D.url_decode(s, plus)
  if plus and find(s, "+", 1, true) then s = gsub(s, "+", " ") end
  if not find(s, "%", 1, true) then return s end
  if find(s, "%u", 1, true) or find(s, "%U", 1, true) then
    s = gsub(s, "%%[uU](%x%x%x%x)", function(h) return D.utf8(tonumber(h, 16)) end)
  end
  return (gsub(s, "%%(%x%x)", HEX_BYTE))
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

local function entity(name) return ENTITIES[name] or ENTITIES[lower(name)] end

-- HTML character references as a browser reads them: the ';' is optional, leading zeros allowed.
function D.html_decode(s)
  if not find(s, "&", 1, true) then return s end
  if find(s, "&#", 1, true) then
    s = gsub(s, "&#[xX]0*(%x%x?%x?%x?%x?%x?);?", function(h) return D.utf8(tonumber(h, 16)) end)
    s = gsub(s, "&#0*(%d%d?%d?%d?%d?%d?%d?);?", function(d) return D.utf8(tonumber(d)) end)
  end
  -- named references, tried only at the '&'s (T.gsub_at; gsub past 256 of them)
  return (T.gsub_at(s, "&", "&(%a%a+);?", entity, 256))
end

-- Escapes of JavaScript, JSON, C and PHP strings.
function D.unescape(s)
  if not find(s, "\\", 1, true) then return s end
  -- each step only where what it reads is there (a plain search), in order: a step's output can
  -- make the next one's input (\u005cx41 is \x41, then A)
  if find(s, "\\u", 1, true) or find(s, "\\U", 1, true) then
    s = gsub(s, "\\[uU]{0*(%x%x?%x?%x?%x?%x?)}", function(h) return D.utf8(tonumber(h, 16)) end)
    s = gsub(s, "\\[uU](%x%x%x%x)", function(h) return D.utf8(tonumber(h, 16)) end)
  end
  if find(s, "\\x", 1, true) or find(s, "\\X", 1, true) then s = gsub(s, "\\[xX](%x%x)", HEX_BYTE) end
  if not find(s, "\\[0-7]") then return s end
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
  if not (find(s, "\192", 1, true) or find(s, "\193", 1, true) or find(s, "\224", 1, true)) then return s end
  s = gsub(s, "([\192\193])([\128-\191])", function(a, b) return char(((byte(a) & 1) << 6) | (byte(b) & 0x3F)) end)
  return (gsub(s, "\224\128([\128-\191])", function(b) return char(byte(b) & 0x3F) end))
end

-- The value an application may end up with: percent-decoded again (double encoding), entities,
-- string escapes, UTF-7 brackets, overlong forms, until nothing changes (at most 3 rounds).
function D.canonical(s)
  for _ = 1, D.DECODE_ROUNDS do
    local t = s
    if find(t, "%", 1, true) and (find(t, "%%%x%x") or find(t, "%%[uU]%x%x%x%x")) then t = D.url_decode(t, false) end
    t = D.html_decode(t)
    t = D.unescape(t)
    t = utf7(t)
    t = overlong(t)
    if t == s then break end
    s = t
  end
  return s
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

return D
