-- Structure (D.name_structure, D.key_kind): operator injection into document databases and
-- prototype pollution, in the keys of a request; owns NOSQL_OPS and QUERY_CONTAINERS.

local D = require("rampart_detect_base")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat

---------------------------------------------------------------------------------------------------
-- Structure: operator injection into document databases and prototype pollution. Both live in the
-- keys of a request, never in its text: {"password":{"$ne":null}}, password[$ne]=x,
-- {"__proto__":{...}}, a[constructor][prototype][x]=1. A '$' or "__proto__" in a value is text.
---------------------------------------------------------------------------------------------------

-- MongoDB's query operators (and Mongoose's, which pass them on). Not "$type" (Json.NET's type
-- name, checked by D.injection), "$text" or "$" (XML-to-JSON conventions), nor the update
-- operators ("$set", "$inc") and Extended JSON ("$oid", "$date"), which carry no condition.
local NOSQL_OPS = {}
for w in gmatch([[$ne $eq $gt $gte $lt $lte $in $nin $regex $options $where $exists $expr $or $and
  $nor $not $elemmatch $all $size $mod $jsonschema $function $accumulator $geowithin $near]], "%S+") do
  NOSQL_OPS[w] = true
end
-- Operators that run JavaScript on the database server: refused wherever they are.
local NOSQL_CODE = { ["$where"] = true, ["$function"] = true, ["$accumulator"] = true }
-- Keys under which an application takes a query in the database's own language (Strapi's
-- filters[title][$eq], Parse's where={...}, a search DSL's "query"): operators below them are
-- the application's own, not an injection into a field that expected a string.
local QUERY_CONTAINERS = {}
for w in gmatch([[filter filters where query selector criteria condition conditions match $match
  find search predicate]], "%S+") do
  QUERY_CONTAINERS[w] = true
end
D.NOSQL_OPS, D.QUERY_CONTAINERS = NOSQL_OPS, QUERY_CONTAINERS

-- What a key (a JSON key, or one segment of a bracketed or dotted parameter name) does, given the
-- key it sits under (owner) and whether a query container is among its ancestors: "operator",
-- "prototype" or nil.
local function key_kind(key, owner, contained)
  local lk = lower(key)
  if lk == "__proto__" then return "prototype" end
  if lk == "prototype" and owner and lower(owner) == "constructor" then return "prototype" end
  if byte(lk, 1) == 36 and NOSQL_OPS[lk] then -- '$'
    if NOSQL_CODE[lk] or not contained then return "operator" end
  end
  return nil
end
D.key_kind = key_kind

-- The segments of a parameter name as qs (Express), PHP and Rack read it: a[b][c], a.b.c;
-- calls fn(segment, previous segment, whether a query container came before); stops at the
-- first truthy result. At most DEPTH_LIMIT segments.
local function each_segment(name, fn)
  local prev, contained, n = nil, false, 0
  for seg in gmatch(name, "[^%[%]%.]+") do
    n = n + 1
    if n > D.DEPTH_LIMIT then return nil end
    local r = fn(seg, prev, contained)
    if r then return r end
    if QUERY_CONTAINERS[lower(seg)] then contained = true end
    prev = seg
  end
  return nil
end

-- A parameter name that pollutes a prototype or turns its field into a database operator.
-- Returns the position of the offending segment, or nil.
function D.name_structure(name)
  if not (find(name, "__proto__", 1, true) or find(name, "[%[%.]%s*[%$cCpP]") or byte(name, 1) == 36) then return nil end
  return each_segment(name, function(seg, prev, contained)
    if key_kind(seg, prev, contained) then return find(name, seg, 1, true) end
  end)
end

return D
