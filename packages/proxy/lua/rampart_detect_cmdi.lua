-- Shell command injection (D.cmdi): a separator followed by a command.

local D = require("rampart_detect_base")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local text_words, is_text, has_any, places = T.text_words, T.is_text, T.has_any, T.places

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

local function letter(b) return b and ((b >= 97 and b <= 122) or (b >= 65 and b <= 90)) end

-- The quotes of lv[from..to], single and double, by plain searches: the single ones less the
-- apostrophes inside a word ("it's": the matches of "%a'%a", left to right, not overlapping,
-- within the range).
local function quote_counts(lv, from, to)
  local sq, last = 0, from - 1
  local q = find(lv, "'", from, true)
  while q and q <= to do
    if q - 1 > last and q + 1 <= to and letter(byte(lv, q - 1)) and letter(byte(lv, q + 1)) then
      last = q + 1
    else
      sq = sq + 1
    end
    q = find(lv, "'", q + 1, true)
  end
  local dq = 0
  q = find(lv, '"', from, true)
  while q and q <= to do
    dq = dq + 1
    q = find(lv, '"', q + 1, true)
  end
  return sq, dq
end

-- A separator breaks out into a shell when the value before it could be the argument the
-- application put there (nothing, one token, a host, a file name: "127.0.0.1; id"), or when it
-- closes a quote the application opened ("x'; id"). After three words of text the value is a
-- sentence ("I ran ls -la and it showed nothing; then ..."): its separators are punctuation.
-- Command substitution ($(...), <(...), `...`) runs inside words and double quotes, so it counts
-- anywhere, except Markdown code spans (`ls -la`) in text.
function D.cmdi(v, lv)
  if not has_any(v, ";|&`$\n\r()") then return nil end
  lv = lv or lower(v)
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
      if words < 3 then words = words + text_words(sub(lv, counted, s - 1), 3 - words) end
      local sq, dq = quote_counts(lv, counted, s - 1)
      squotes, dquotes = squotes + sq, dquotes + dq
      counted = s
    end
    if words < 3 then return false end
    -- a quote closed just before the separator, with an odd number of them: a breakout
    local q = match(sub(lv, s > 8 and s - 8 or 1, s - 1), "(['\"])%s*$")
    if q == "'" and squotes % 2 == 1 or q == '"' and dquotes % 2 == 1 then return false end
    return true
  end
  -- separators: ; | || & && newline, command substitution `...` and $(...) (i only grows)
  local next_separator = places(lv, ";|&`\n\r$<>")
  local i = 1
  while true do
    local s = next_separator(i)
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

return D
