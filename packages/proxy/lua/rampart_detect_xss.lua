-- Cross-site scripting (D.xss, and D.js for script in attribute values and URLs): what a browser
-- would execute.

local D = require("rampart_detect_base")
local T = require("rampart_detect_text")
local find, sub, byte, char, lower, gsub, match, gmatch, format =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.match, string.gmatch, string.format
local concat = table.concat
local each_call, has, has_any, find_at = T.each_call, T.has, T.has_any, T.find_at

---------------------------------------------------------------------------------------------------
-- Cross-site scripting: what a browser would execute.
---------------------------------------------------------------------------------------------------

local EVENT_HANDLERS = {}
for w in gmatch([[abort activate afterprint afterscriptexecute animationcancel animationend
  animationiteration animationstart auxclick beforeactivate beforecopy beforecut beforedeactivate
  beforeinput beforeprint beforescriptexecute beforetoggle beforeunload begin blur bounce canplay
  canplaythrough change click close contextmenu copy cuechange cut dblclick drag dragend dragenter
  dragexit dragleave dragover dragstart drop durationchange end ended error finish focus focusin
  focusout formdata fullscreenchange hashchange input invalid keydown keypress keyup load
  loadeddata loadedmetadata loadend loadstart message mousedown mouseenter mouseleave mousemove
  mouseout mouseover mouseup mousewheel pagehide pageshow paste pause play playing pointercancel
  pointerdown pointerenter pointerleave pointermove pointerout pointerover pointerrawupdate
  pointerup popstate progress ratechange readystatechange repeat reset resize scroll scrollend
  search seeked seeking select selectionchange selectstart show start stalled storage submit
  suspend timeupdate toggle touchend touchmove touchstart transitioncancel transitionend
  transitionrun transitionstart unhandledrejection unload volumechange waiting webkitanimationend
  webkitanimationiteration webkitanimationstart webkittransitionend wheel zoom pagereveal pageswap
  beforematch command scrollsnapchange scrollsnapchanging contentvisibilityautostatechange]], "%S+") do
  EVENT_HANDLERS[w] = true
end

-- Tags that run script or load active content whatever their attributes.
local DANGER_TAGS = {}
for w in gmatch([[script iframe frame frameset embed object applet base xss import isindex portal]], "%S+") do
  DANGER_TAGS[w] = true
end

local URL_ATTRS = { href = true, src = true, action = true, formaction = true, data = true, ["xlink:href"] = true,
  from = true, to = true, values = true, background = true, lowsrc = true, dynsrc = true, poster = true,
  codebase = true, srcdoc = true, code = true, archive = true, by = true, ["attributename"] = false }


-- Removes what a browser ignores inside a URL scheme: tabs, newlines, NULs and other controls.
local CONTROLS = {}
for c = 0, 31 do CONTROLS[#CONTROLS + 1] = string.char(c) end
CONTROLS = table.concat(CONTROLS) .. "\127"
local function squash(s)
  -- (in a long value, a plain search for each control character costs less than a class's test
  -- of every byte)
  if #s > 512 then
    if not has_any(s, CONTROLS) then return s end
  elseif not find(s, "%c") then
    return s
  end
  return (gsub(s, "[%c]", ""))
end

-- A script URL: javascript:/vbscript:/livescript: or data:text/html, followed by code.
local function script_url(lv, from)
  local p = find(lv, "script", from, true)
  while p do
    local scheme = match(sub(lv, p > 4 and p - 4 or 1, p - 1), "([%a]*)$")
    if scheme == "java" or scheme == "vb" or scheme == "live" or scheme == "ecma" then
      local _, e = find(lv, "^script%s*:", p)
      if e then
        local s0 = p - #scheme
        local prev = s0 > 1 and sub(lv, s0 - 1, s0 - 1) or ""
        if prev == "" or not find(prev, "[%w]") then
          -- what follows looks like code: an identifier followed by ( [ . = ` or any punctuation
          local rest = sub(lv, e + 1, e + 40)
          -- javascript:void(0) and javascript:; are the web's placeholders for "no link"
          if find(rest, "^%s*[%w_$%.]*%s*[^%w%s]") and not find(rest, "^%s*void%s*%(?%s*0%s*%)?%s*;?%s*[\"'>]?$") and
            not find(rest, "^%s*void%s*%(?%s*0%s*%)?%s*;?%s*[\"'>]") and not find(rest, "^%s*;?%s*[\"'>]") and rest ~= ";" then
            return s0
          end
        end
      end
    end
    p = find(lv, "script", p + 6, true)
  end
  local d = find(lv, "data:text/html", from, true) or find(lv, "data:image/svg", from, true) or
    find(lv, "data:application/x-javascript", from, true) or find(lv, "data:text/javascript", from, true)
  return d
end

-- JavaScript that calls a sink or reaches one through a global object, the DOM or a constructor.
local JS_SINKS = { alert = true, prompt = true, confirm = true, eval = true, atob = true, import = true,
  execscript = true, msgbox = true }
-- Sinks that ordinary code calls all the time: setTimeout(fn, ms) and fetch('/api/x') are code;
-- setTimeout('alert(1)') evaluates a string, and fetch('https://evil/' + secret) sends one out.
local JS_STRING_SINKS = { settimeout = true, setinterval = true }
local SINK_VALUES = { "alert", "eval", "prompt", "confirm" }
local JS_GLOBALS = { window = true, self = true, top = true, parent = true, frames = true, globalthis = true,
  this = true, document = true, content = true, opener = true }

function D.js(lv)
  -- every construct below needs one of these characters (calls, members, assignments, JSFuck,
  -- __proto__): a value without any is not JavaScript reaching a sink
  if not has_any(lv, "([`.=!+_") then return nil end
  -- sink calls: alert(1), alert`1`, (alert)(1), eval.call
  local p = each_call(lv, "(`", function(name, at, p)
    if JS_SINKS[name] then
      -- "alert(" anywhere; the words that are also prose ("please confirm (yes)") only when
      -- written as code, without a blank before the parenthesis
      if name == "alert" or name == "prompt" or name == "eval" or name == "atob" or name == "execscript" or
        byte(lv, p - 1) ~= 32 then
        -- a frame of a JavaScript stack trace: "at eval (eval at <anonymous> (app.js:1:1))"
        if not (byte(lv, p - 1) == 32 and find(sub(lv, at > 3 and at - 3 or 1, at - 1), "at $")) then return at end
      end
    elseif JS_STRING_SINKS[name] and find(lv, "^%(%s*['\"`]", p) then
      return at
    elseif name == "fetch" and (find(lv, "^%(%s*['\"`][^'\"`]*//[^'\"`]*['\"`]%s*%+", p) or
      find(match(sub(lv, p, p + 200), "^%([^;]*") or "", "cookie", 1, true) or find(match(sub(lv, p, p + 200), "^%([^;]*") or "", "localstorage", 1, true)) then
      return at
    end
  end) or each_call(lv, "[", function(name, at, p)
    if JS_GLOBALS[name] then
      local inner = sub(lv, p + 1, p + 1)
      if find(inner, "^['\"`/%(%[%a%d!+]") then return at end
    end
  end)
  if p then return p end
  -- (alert)(1), (0,eval)('...')
  -- (alert)(1), (0,eval)('...'), [1].find(alert), (x=alert)(1), Reflect.apply(alert, ...): a sink
  -- used as a value. Each name is found first, then a few bytes around it are looked at.
  for _, sink in ipairs(SINK_VALUES) do
    local q = find(lv, sink, 1, true)
    while q do
      local before = sub(lv, q > 12 and q - 12 or 1, q - 1)
      local after = sub(lv, q + #sink, q + #sink + 12)
      if (find(before, "[%(,=%[]%s*$") or find(before, "[%(,]%s*[%d,%s]*$")) and find(after, "^%s*[%),;%]]") then return q end
      q = find(lv, sink, q + #sink, true)
    end
  end
  -- (each pattern searched only when the text it needs is there: a pattern search tries every
  -- position of the value, a plain one skips to the text)
  p = has(lv, "document") and find(lv, "document%s*%.%s*[cdwl]") -- document.cookie/domain/write/location
  if p then
    local w = match(lv, "^document%s*%.%s*([%a]+)", p)
    if w == "cookie" or w == "domain" or w == "write" or w == "writeln" or w == "location" then return p end
  end
  local located = has(lv, "location")
  p = has(lv, "constructor") and find(lv, "constructor%s*[%.%(%[]") or has(lv, "fromcharcode") and find(lv, "fromcharcode%s*%(") or
    has(lv, ".innerhtml") and find(lv, "%.innerhtml%s*=") or has(lv, ".outerhtml") and find(lv, "%.outerhtml%s*=") or
    located and find(lv, "location%s*%.%s*href%s*=") or located and find(lv, "location%s*=%s*['\"`]") or
    find(lv, "__proto__", 1, true) or has(lv, ".source") and find(lv, "%.source%s*%+") or
    has(lv, ".srcdoc") and find(lv, "%.srcdoc%s*=") or find(lv, "insertadjacenthtml", 1, true) or find(lv, "importscripts", 1, true)
  if p then return p end
  -- JSFuck: code written with []()!+ alone; a run of a dozen of them with "[]" and "!" or "+"
  -- (one "+[]" is what compressed or random bytes hold by chance)
  if not has(lv, "[]") then return nil end
  local i = 1
  while true do
    local a, b = find(lv, "[%[%]%(%)!%+]+", i)
    if not a then return nil end
    if b - a >= 11 then
      local run = sub(lv, a, b)
      if find(run, "[]", 1, true) and find(run, "[!+]") then return a end
    end
    i = b + 1
  end
end

-- Attributes of a tag starting at position p (after "<name"), up to the closing '>' or the end.
local function tag_attrs(lv, p)
  local lt, gt = find(lv, "<", p, true), find(lv, ">", p, true)
  local close = lt and gt and (lt < gt and lt or gt) or lt or gt or #lv + 1
  local attrs = sub(lv, p, close - 1)
  return attrs, close
end

function D.xss(v, lv)
  if not has_any(v, "<>:(`[=&\\") and not find(v, "document", 1, true) then return nil end
  lv = lv or lower(v)
  local sq = squash(lv)
  -- tags
  -- (a value without '<' has no tag: the pattern search is not made over all of it)
  local i = has(sq, "<") and 1 or #sq + 1
  while i <= #sq do
    -- the next '<' that can open a tag (a letter after blanks and slashes), found in one search
    local lt = find_at(sq, "<", "^<[%s/]*%a", i)
    if not lt then break end
    -- "<", blanks, an optional '/', blanks, the name (each run of blanks read once: the pattern
    -- "^<%s*/?%s*" backtracks over a long run of them, quadratically)
    local _, b = find(sq, "^%s*", lt + 1)
    if byte(sq, b + 1) == 47 then _, b = find(sq, "^%s*", b + 2) end
    local _, e, name = find(sq, "^([%a][%w:%-]*)", b + 1)
    if e then
      local base = match(name, "([%w%-]+)$")
      local attrs = tag_attrs(sq, e + 1)
      -- a tag the browser would build: closed by '>' or with attributes ("binary<script is" is text)
      local complete = sub(sq, e + 1, e + 1) == ">" or find(attrs, "=", 1, true) or
        (find(sq, "^[%s/][^<]*>", e + 1) ~= nil)
      if (DANGER_TAGS[name] or DANGER_TAGS[base]) and complete then return lt end
      if name == "style" and complete then
        local css = sub(sq, e + 1, e + 2000)
        if find(css, "@import", 1, true) or find(css, "expression%s*%(") or find(css, "url%s*%(%s*['\"]?%s*javascript") then return lt end
      end
      -- event handlers, separated from the name by blanks, '/', quotes or nothing after a quote
      for h, q in gmatch(attrs, "[%s/\"'`]on([%a]+)%s*=%s*()") do
        -- JSX's onChange={handler} is code in a code field, not markup
        if EVENT_HANDLERS[h] and sub(attrs, q, q) ~= "{" then return lt end
      end
      if script_url(attrs, 1) then return lt end
      i = e + 1
    else
      -- "<!--" comments hiding tags, "<!ENTITY" are not scripts; a bare '<' is text
      i = lt + 1
    end
  end
  -- attribute breakouts without a tag: " onfocus=alert(1) autofocus x="
  -- (each "on" found by a plain search, then the match that would start just before it: what
  -- gmatch over the pattern finds, one match after another)
  if has(sq, "on") and has(sq, "=") then
    local from = 1
    local o = find(sq, "on", 2, true)
    while o do
      if o - 1 >= from then
        local _, e, h = find(sq, "^[\"'`/%s]on([%a]+)%s*=", o - 1)
        if e then
          if EVENT_HANDLERS[h] then
            local p = find(sq, "on" .. h, 1, true)
            local after = match(sq, "on" .. h .. "%s*=%s*(.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?.?)", p)
            if after and find(after, "^[\"'`]?[%w_$%.]*%s*[%(`%[=%.]") then return p end
          end
          from = e + 1
        end
      end
      o = find(sq, "on", o + 1, true)
    end
  end
  local p = script_url(sq, 1)
  if p then return p end
  return D.js(sq)
end

return D
