-- Executable uploads (D.upload: file names a server would run; D.webshell: server-side script
-- inside an uploaded file).

local D = require("rampart_detect_base")
require("rampart_detect_decode")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat

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
  -- most files hold no opener's first two characters ('<' then '?', '%' or 's'): one search
  -- answers for them, where each opener's own search tries every position of the file
  if not find(head, "<[%?%%sS]") then return nil end
  return find(head, "<%?[pP][hH][pP]") or find(head, "<%?=") or find(head, "<%%[@=!]") or
    find(head, "<[sS][cC][rR][iI][pP][tT]%s+[lL][aA][nN][gG][uU][aA][gG][eE]%s*=%s*[\"']?[pP][hH][pP]")
end

return D
