-- Path traversal and file inclusion (D.traversal for values, D.path_traversal for the request
-- path): dot-dot segments, sensitive files, inclusion schemes.

local D = require("rampart_detect_base")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local marker_finder, is_text, has_any, gsub_at = T.marker_finder, T.is_text, T.has_any, T.gsub_at

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

-- The first sensitive file of s; in text (is_txt(), asked only when there is one), the first that
-- is not a word of the text.
local function sensitive_path(s, is_txt)
  local p = sensitive_file(s)
  if not p or not is_txt() then return p end
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

-- textual: a function answering whether the value is text (D.is_text), asked only when a
-- finding depends on it (it reads the whole value); nil for the request path, never text.
local function traversal_common(lv, textual)
  local text = nil
  local function is_txt()
    if text == nil then text = textual ~= nil and textual() or false end
    return text
  end
  -- (by plain searches, as gsub would: T.gsub_at)
  local s = find(lv, "\\", 1, true) and gsub_at(lv, "\\", "%\\", "/", 64) or lv
  -- (each only where a plain search finds what it replaces: removing "/./" never makes a "//")
  if find(s, "/./", 1, true) then s = gsub(s, "/%./", "/") end
  if find(s, "//", 1, true) then s = gsub_at(s, "//", "//+", "/", 64) end
  if find(s, "\226", 1, true) or find(s, "\239", 1, true) then
    -- fullwidth and other look-alike dots and slashes that some decoders fold to ASCII
    s = gsub(gsub(gsub(gsub(s, "\239\188\142", "."), "\239\188\143", "/"), "\226\136\149", "/"), "\239\188\188", "/")
  end
  local p = find(s, "../", 1, true) or find(s, "..;/", 1, true)
  -- in text (and code), a relative reference ("see ../README.md", from '../../utils') is not a
  -- traversal; four levels up are, and so is a sensitive file after any number (below)
  if p and is_txt() and not find(s, "%.%.;?/%.%.;?/%.%.;?/%.%.;?/") then p = nil end
  if p then return p end
  p = find(s, "\0", 1, true) and find(s, "%z[%.%w]*%.%w+$") -- ../../etc/passwd%00.png
  if p then return p end
  p = sensitive_path(s, is_txt)
  if p then return p end
  p = find(s, "/proc/", 1, true) and find(s, "/proc/%d+/")
  if p then return p end
  return nil
end

function D.traversal(v, lv)
  if not has_any(v, "/\\:.\0\226\239") then return nil end
  lv = lv or lower(v)
  local p = traversal_common(lv, function() return is_text(lv) end)
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

return D
