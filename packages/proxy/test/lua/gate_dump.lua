-- Test helper of test/gate.test.ts, loaded into the test's HAProxy (lua-load): for every request
-- it appends to the file named by RAMPART_GATE_DUMP what HAProxy hands rampart_detect.lua's action
-- (the same sample fetches: path, query, req_get_headers, req_body) with the gate's verdict, and
-- answers "gate" or "clean". test/lua/gate_verdicts.lua then runs D.inspect over the records.
--
-- Record: "@" id "\n", then fields <tag><length>:<bytes> (G verdict, M method, P path, Q query when
-- there is one, N/V a header's name and value, B body; with RAMPART_GATE_DUMP_FULL=1 also U url
-- and R req.hdrs as the gate's ACLs read them), then "E0:" and "\n". The answer carries the
-- verdict in its body and in an x-gate header.

local out = assert(io.open(assert(os.getenv("RAMPART_GATE_DUMP"), "RAMPART_GATE_DUMP not set"), "ab"))
out:setvbuf("no")
local full = os.getenv("RAMPART_GATE_DUMP_FULL") == "1"

local function field(parts, tag, s)
  parts[#parts + 1] = tag .. #s .. ":" .. s
end

core.register_action("gate_dump", { "http-req" }, function(txn)
  local verdict = txn:get_var("txn.rp_gate_test") and "gate" or "clean"
  local id = txn.f:req_fhdr("x-gate-id") or "-"
  local parts = { "@" .. id .. "\n" }
  field(parts, "G", verdict)
  field(parts, "M", txn.f:method() or "")
  field(parts, "P", txn.f:path() or "/")
  local q = txn.f:query()
  if q ~= nil then field(parts, "Q", q) end
  for name, vals in pairs(txn.http:req_get_headers()) do
    local i = 0
    while vals[i] ~= nil do
      field(parts, "N", name)
      field(parts, "V", vals[i])
      i = i + 1
    end
  end
  field(parts, "B", txn.f:req_body() or "")
  if full then
    -- what the gate's ACLs read besides (RAMPART_GATE_DUMP_FULL=1, for looking into a failure)
    field(parts, "U", txn.f:url() or "")
    field(parts, "R", txn.f:req_hdrs() or "")
  end
  parts[#parts + 1] = "E0:\n"
  out:write(table.concat(parts))
  txn:done(txn:reply({ status = 200, headers = { ["content-type"] = { "text/plain" }, ["x-gate"] = { verdict } }, body = verdict }))
end)
