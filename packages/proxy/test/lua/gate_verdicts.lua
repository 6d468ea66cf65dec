-- Test helper of test/gate.test.ts: what the attack detectors say about each request the test's
-- HAProxy recorded (test/lua/gate_dump.lua), in plain Lua 5.3 as HAProxy embeds it.
-- Usage: lua5.3 gate_verdicts.lua <rampart_detect.lua> <dump file> [<part> <parts>]
-- Prints one line per record (with part and parts, only the records whose index modulo parts is
-- part: several processes share the work): "<id> <gate|clean> <finding>", the finding being "-"
-- or "<reason>:<location>" (percent-escaped, no blanks); the last line is "done <records>".

-- With "--tables" instead of a dump file it prints the engine's lists the gate copies, one
-- "structured <header>" or "marker <percent-escaped marker>" a line.

core = nil
-- the engine's modules (rampart_detect_*.lua) are found next to it, as HAProxy finds them
-- through the lua-prepend-path of the configuration
local ENGINE = assert(arg[1], "usage: lua5.3 gate_verdicts.lua <rampart_detect.lua> <dump file>")
package.path = (ENGINE:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local D = dofile(ENGINE)
if arg[2] == "--tables" then
  for name in pairs(D.STRUCTURED_HEADERS) do print("structured " .. name) end
  for _, m in ipairs(D.CODE_MARKERS) do print("marker " .. D.log_escape(m)) end
  print("done tables")
  os.exit(0)
end
local f = assert(io.open(assert(arg[2], "usage: lua5.3 gate_verdicts.lua <rampart_detect.lua> <dump file>"), "rb"))
local data = f:read("a")
f:close()

local part, parts = tonumber(arg[3] or "0"), tonumber(arg[4] or "1")
local find, sub = string.find, string.sub
local pos, records, index = 1, 0, -1
local lines = {}

while pos <= #data do
  local s, e, id = find(data, "^@([^\n]*)\n", pos)
  assert(s, "malformed record at byte " .. pos)
  pos = e + 1
  local req = { headers = {} }
  local verdict, name
  while true do
    local _, fe, tag, len = find(data, "^(%u)(%d+):", pos)
    assert(fe, "malformed field at byte " .. pos)
    len = tonumber(len)
    local v = sub(data, fe + 1, fe + len)
    pos = fe + len + 1
    if tag == "E" then break
    elseif tag == "G" then verdict = v
    elseif tag == "M" then req.method = v
    elseif tag == "P" then req.path = v
    elseif tag == "Q" then req.query = v
    elseif tag == "N" then name = v
    elseif tag == "V" then
      -- as HAProxy's req_get_headers: name -> { [0] = first value, [1] = second, ... }
      local list = req.headers[name]
      if list == nil then req.headers[name] = { [0] = v } else list[#list + 1] = v end
    elseif tag == "B" then req.body = v
    end
  end
  assert(sub(data, pos, pos) == "\n", "record not terminated at byte " .. pos)
  pos = pos + 1
  index = index + 1
  if index % parts == part then
    local ok, finding = pcall(D.inspect, req)
    local what
    if not ok then
      what = "error:" .. D.log_escape(tostring(finding), 120)
    elseif finding then
      what = finding.reason .. ":" .. D.log_escape(finding.location, 80)
    else
      what = "-"
    end
    records = records + 1
    lines[#lines + 1] = id .. " " .. verdict .. " " .. what
    if #lines >= 1000 then io.write(table.concat(lines, "\n"), "\n") lines = {} end
  end
end
if #lines > 0 then io.write(table.concat(lines, "\n"), "\n") end
print("done " .. records)
