-- The attack detectors' shared table D: every module of the engine (rampart_detect_*.lua, loaded
-- by rampart_detect.lua with `require`) adds its functions to it and calls the others' through it,
-- as when they were one file. Owns the budget of one request (the limits below, docs/detection.md).

local D = {}

D.BODY_LIMIT = 65536      -- bytes of a request body that are inspected
D.VALUE_LIMIT = 65536     -- bytes of one value given to the detectors (a whole inspected body)
D.MATCH_LEN = 48          -- bytes of the excerpt an event shows
D.DEPTH_LIMIT = 64        -- levels of JSON nesting (and parameter-name segments) followed for key paths
D.NESTING_LIMIT = 512     -- levels of JSON nesting a body may have: deeper is refused (body_too_complex)
D.FIELDS_LIMIT = 1000     -- fields of a form body (pieces between '&'): more are refused (body_too_complex)
D.VALUES_LIMIT = 6000     -- values of one request inspected one by one; the rest together, as one text
D.DECODE_ROUNDS = 3       -- rounds of decoding one value (percent, entities, escapes, ...)
D.JOIN_LIMIT = 8192       -- bytes of the values of a repeated name joined (as ASP.NET joins them)

return D
