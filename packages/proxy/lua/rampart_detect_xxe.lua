-- XML external entities (D.xxe): external DTDs and entities, XInclude.

local D = require("rampart_detect_base")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat

---------------------------------------------------------------------------------------------------
-- XML external entities.
---------------------------------------------------------------------------------------------------

function D.xxe(v, lv)
  if not find(v, "<!", 1, true) and not find(v, "include", 1, true) then return nil end
  lv = lv or lower(v)
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

return D
