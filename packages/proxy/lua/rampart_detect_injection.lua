-- Code, template and expression injection, and serialized objects (D.injection); owns
-- CODE_MARKERS (read by the native gate, packages/proxy/src/gate.ts).

local D = require("rampart_detect_base")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local each_call, marker_finder, has, has_any, places, find_at = T.each_call, T.marker_finder, T.has, T.has_any, T.places, T.find_at

---------------------------------------------------------------------------------------------------
-- Code, template and expression injection, and serialized objects.
---------------------------------------------------------------------------------------------------

-- Removes /* ... */ comments (an unterminated one runs to the end), in one pass.
local function strip_block_comments(s)
  local out, i = {}, 1
  while true do
    local a = find(s, "/*", i, true)
    if not a then out[#out + 1] = sub(s, i) break end
    out[#out + 1] = sub(s, i, a - 1)
    local b = find(s, "*/", a + 2, true)
    if not b then break end
    i = b + 2
  end
  return concat(out)
end

-- Log4j lookups hidden by nested lookups (${${lower:j}ndi:...}, ${${::-j}ndi:...}).
-- Returns true when resolving them yields a JNDI lookup.
local function jndi(s)
  for _ = 1, 8 do
    if find(s, "${jndi:", 1, true) then return true end
    local t = gsub(s, "%${[^${}]*:%-([^${}]*)}", "%1")
    t = gsub(t, "%${[%w]+:['\"]?([^${}'\"]*)['\"]?}", "%1")
    if t == s then break end
    s = t
  end
  return find(s, "${jndi:", 1, true) ~= nil
end

local CODE_CALLS = {}
for w in gmatch([[system passthru shell_exec popen proc_open pcntl_exec phpinfo assert
  call_user_func call_user_func_array create_function base64_decode file_put_contents
  file_get_contents fputs fwrite preg_replace include_once require_once str_rot13 gzinflate
  __import__ getruntime processbuilder exec_command exec]], "%S+") do
  CODE_CALLS[w] = true
end

local CODE_MARKERS = { "java.lang.runtime", "java.lang.processbuilder", "java.lang.system", "java.lang.class)", "java.lang.class.",
  "javax.script", "scriptenginemanager", "getruntime()", ".getruntime", "processbuilder(", "#_memberaccess",
  "#context[", "@java.lang.", "@ognl", "ognl.ognlcontext", "xwork2.", "freemarker.template.utility",
  "?new()", "child_process", "process.mainmodule", "process.binding", "__globals__", "__builtins__",
  "__subclasses__", "__class__", "__mro__", "os.system(", "os.popen(", "subprocess.popen", "subprocess.call(",
  "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput", "import subprocess",
  "$_get[", "$_post[", "$_request[", "$_cookie[", "$_server[", "<?php", "<?=", "com.sun.rowset.",
  "jdbcrowsetimpl", "com.mchange.v2.c3p0", "org.apache.commons.collections", "org.apache.xalan",
  "templatesimpl", "bsh.interpreter", "groovy.lang.", "java.net.url", "java.io.file", "getclass(",
  "module.classloader", "class.classloader", "getclassloader", "classloader.resources", "urlclassloader(", ".forname(", "$class.inspect", "#set(", "#foreach", "<#assign", "${class", "<%=", "<%@",
  "java.beans.xmldecoder", "org.springframework.context.support", "javax.naming", "jndi:", "@type\":\"com.",
  "@type\":\"java.", "@type\":\"org.", "\"@type\":\"", "\"$type\":\"system.", "objectdataprovider",
  "system.diagnostics.process,", "system.diagnostics.process.start(\"", "system.diagnostics.process.start('",
  "clr-namespace:system.diagnostics", "!!python/", "!ruby/", "kernel.exec", "kernel.system", "io.popen", "{php}",
  "cos\nsystem", "cposix\nsystem", "cbuiltins\n", "c__builtin__\n", "csubprocess\n", "_$$nd_func$$_",
  "|map(", "|filter(", "|sort(", "|reduce(", "|map (", "|filter (", "\".execute()", "'.execute()" }

D.CODE_MARKERS = CODE_MARKERS

local code_marker = marker_finder(CODE_MARKERS)

function D.injection(v, lv)
  -- ('<' only as in <?php, <%=, <#assign)
  if not has_any(v, "${}(.#@:[!\n") and not find(v, "<[?%%#]") and not find(v, "rO0AB", 1, true) and not find(v, "^gA[SJNR][VjW]") and
    not find(v, "AAEAAAD", 1, true) and not find(v, "BAhvOk", 1, true) and
    not find(v, "[aA][cC]%s?[eE][dD]%s?00%s?05") then return nil end
  lv = lv or lower(v)
  local p
  if find(lv, "${", 1, true) then
    if jndi(lv) then return find(lv, "${", 1, true) end
    -- other Log4j lookups (secrets from the environment) and JSP/JSF expression language
    p = find(lv, "%${%s*[%w]+:")
    if p then
      local name = match(lv, "^%${%s*([%w]+):", p)
      if name == "env" or name == "sys" or name == "java" or name == "ctx" or name == "main" or name == "lower" or
        name == "upper" or name == "date" or name == "k8s" or name == "docker" or name == "spring" or
        name == "base64" or name == "bundle" or name == "web" or name == "jvmrunargs" or name == "log4j" then
        return p
      end
    end
    p = find(lv, "${applicationscope", 1, true) or find(lv, "${sessionscope", 1, true) or find(lv, "${pagecontext", 1, true) or
      find(lv, "${requestscope", 1, true) or find(lv, "${initparam", 1, true)
    if p then return p end
    -- ${obj.method(...)}: an expression that calls something (within 200 bytes of its "${")
    p = find(lv, "${", 1, true)
    while p do
      if find(match(sub(lv, p + 2, p + 202), "^[^}]*") or "", "%.[%a_]+%s*%(") then return p end
      p = find(lv, "${", p + 2, true)
    end
  end
  p = code_marker(lv)
  if p then return p end
  -- OGNL and SpEL expressions: %{...#...}, ${#...}, T(java...), #{...}
  -- (each pattern searched only when the text it needs is there: a pattern search tries every
  -- position of the value, a plain one skips to the text)
  p = has(lv, "%{") and find(lv, "%%{%s*[%(#@']") or has(lv, "${") and find(lv, "%${%s*#") or
    has(lv, "java.") and find(lv, "t%s*%(%s*java%.") or has(lv, "#{") and find(lv, "#{%s*t%s*%(") or
    has(lv, "(#") and find(lv, "%(#[%a_]+%s*=")
  if p then return p end
  -- template expressions that compute: {{7*7}}, ${7*7}, #{7*7}, {233*233}, <%= 7*7 %>
  -- (tried where one of its first characters is, found by plain searches)
  if has(lv, "}") then
    local next_lead = places(lv, "{$#")
    local q = next_lead(1)
    while q do
      if find(lv, "^[{$#]%s*%d+%s*[%*%+/%-]%s*['\"]?%d+['\"]?%s*}", q) then return q end
      q = next_lead(q + 1)
    end
  end
  p = has(lv, "{{#with") and find(lv, "{{#with%s+[\"']")
  if p then return p end
  p = find(lv, "{{", 1, true)
  while p do
    local expr = match(sub(lv, p + 2, p + 202), "^([^}]*)}}") or ""
    if find(expr, "[%a_]+%.[%a_]+") and find(expr, "[%(%[]") or find(expr, "config") or find(expr, "self") or
      find(expr, "request") or find(expr, "lipsum") or find(expr, "cycler") or find(expr, "|attr") or find(expr, "constructor") then
      return p
    end
    p = find(lv, "{{", p + 2, true)
  end
  -- fastjson's "@type" and Json.NET's "$type", whatever the blanks around ':'
  p = has(lv, 'type"') and find(lv, '"[@$]type"%s*:%s*"')
  if p then return p end
  -- calls of functions that run code or commands; comments between name and '(' removed first
  if find(lv, "/*", 1, true) then lv = strip_block_comments(lv) end
  p = each_call(lv, "(", function(name, at, q)
    -- a method (console.assert(...), regex.exec(...)) is not PHP's function of that name
    if CODE_CALLS[name] and not (at > 1 and find(sub(lv, at > 2 and at - 2 or 1, at - 1), "[%.>:]$")) then
      local arg = sub(lv, q + 1, q + 1)
      if find(arg, "^['\"$%)`]") or find(sub(lv, q + 1, q + 41), "^[%s]*[%a_][%w_]*%s*%(") or name == "phpinfo" then return at end
    end
  end)
  if p then return p end
  -- serialized Java objects (base64 or hex) and PHP objects
  -- and pickles (protocol 2 to 5, base64)
  -- (Java, .NET BinaryFormatter, Ruby Marshal, in base64 or hex)
  -- (a PHP object after ';' or '{': its "O:" found by plain searches)
  p = find(v, "rO0AB", 1, true) or find_at(lv, "ac", "^ac%s?ed%s?00%s?05") or find(v, "AAEAAAD/////", 1, true) or find(v, "BAhvOk", 1, true) or
    find(v, "^[Oa]:%d+:[\"{]") or find_at(v, "O:", '^[;{]O:%d+:"', 1, 1) or find(v, "^gA[SJNR][VjW]")
  return p
end

return D
