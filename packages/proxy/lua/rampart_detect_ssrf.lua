-- Server-side request forgery (D.ssrf): URLs aimed at the server's own network.

local D = require("rampart_detect_base")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local marker_finder = T.marker_finder

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

function D.ssrf(v, lv)
  if not (find(v, ":", 1, true) or find(v, "\\", 1, true)) then return nil end
  lv = lv or lower(v)
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
    local _, e = find(lv, "^:[/\\]*", colon)
    local slashes = e - colon
    -- (without "//" only http, https, ws and wss count: a scheme ending in p or s; the others,
    -- "12:30" and "key:value", are passed without reading a scheme back)
    local last = byte(lv, colon - 1)
    if slashes < 2 and last ~= 112 and last ~= 115 then
      i = colon + 1
      goto continue
    end
    local scheme = match(sub(lv, colon > 32 and colon - 32 or 1, colon - 1), "([%a][%w+%-.]*)$")
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

return D
