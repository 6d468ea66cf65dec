-- A tiny test harness shared by the Lua unit tests (plain Lua 5.3, the version HAProxy embeds).
local H = {}
local passed, failed = 0, 0

function H.show(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) ~= "table" then return tostring(v) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local val = v[k]
    if val == nil then val = v[tonumber(k)] end
    parts[#parts + 1] = k .. "=" .. H.show(val)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

function H.fail(msg)
  error(msg, 3)
end

function H.eq(actual, expected, what)
  if actual ~= expected then
    H.fail(string.format("%s: expected %s, got %s", what or "value", H.show(expected), H.show(actual)))
  end
end

function H.truthy(v, what)
  if not v then H.fail((what or "condition") .. ": expected true, got " .. H.show(v)) end
end

function H.falsy(v, what)
  if v then H.fail((what or "condition") .. ": expected false/nil, got " .. H.show(v)) end
end

function H.test(name, fn)
  local ok, err = pcall(fn)
  if ok then
    passed = passed + 1
    print("ok     " .. name)
  else
    failed = failed + 1
    print("FAILED " .. name .. "\n       " .. tostring(err))
  end
end

-- CPU seconds of one call of fn, averaged over at least 50 ms of calls.
function H.cpu_per_call(fn)
  local t0, rounds = os.clock(), 0
  repeat
    fn()
    rounds = rounds + 1
  until os.clock() - t0 > 0.05
  return (os.clock() - t0) / rounds
end

-- The least of three cpu_per_call measurements: what a ratio of two costs compares, so that a
-- moment of contention on a shared machine (caches, frequency) does not read as growth.
function H.least_cpu_per_call(fn)
  local best = math.huge
  for _ = 1, 3 do best = math.min(best, H.cpu_per_call(fn)) end
  return best
end

-- The last line the Node wrapper checks.
function H.finish()
  print(string.format("%d passed, %d failed", passed, failed))
  if failed > 0 then os.exit(1) end
end

return H
