-- mqlease.trace: the trace context a message carries, a W3C Trace Context
-- `traceparent` (https://www.w3.org/TR/trace-context/, version 00):
--
--   00-<trace-id: 32 hex>-<parent-id: 16 hex>-<trace-flags: 2 hex>
--
-- It travels in SystemProperties.trace_context (apache/rocketmq-apis
-- definition.proto); the proxy keeps it as the message property TRACE_CONTEXT
-- (MessageConst.PROPERTY_TRACE_CONTEXT). The official C++ and Go clients read
-- and write it in this format (opencensus' ToTraceParentHeader /
-- FromTraceParentHeader). A handler continues the trace from m.trace_context:
--
--   local child = trace.child(m.trace_context)   -- same trace-id, a new span id
--   producer:send(topic, body, { trace_context = child })

local type, tostring = type, tostring
local random = math.random
local byte, format = string.byte, string.format

local _M = {}

local ZERO_TRACE = ("0"):rep(32)
local ZERO_SPAN = ("0"):rep(16)

-- The parts of a traceparent: { version =, trace_id =, parent_id =, flags = },
-- or nil, what is wrong with it.
function _M.parse(tp)
  if type(tp) ~= "string" then return nil, "a string is expected" end
  local version, trace_id, parent_id, flags = tp:match("^(%x%x)%-(%x+)%-(%x+)%-(%x%x)$")
  if not version then return nil, "it is not four '-'-separated hex fields" end
  if version ~= "00" then return nil, "the version must be 00" end
  if #trace_id ~= 32 then return nil, "the trace-id must be 32 hex digits" end
  if #parent_id ~= 16 then return nil, "the parent-id must be 16 hex digits" end
  if tp:find("%u") then return nil, "hex digits must be lowercase" end
  if trace_id == ZERO_TRACE then return nil, "the trace-id must not be all zeros" end
  if parent_id == ZERO_SPAN then return nil, "the parent-id must not be all zeros" end
  return { version = version, trace_id = trace_id, parent_id = parent_id, flags = flags }
end

-- An unbuffered /dev/urandom (so that processes forked after the first read,
-- nginx workers, do not share buffered bytes), or false where there is none.
local urandom
local function random_hex16()
  if urandom == nil then
    urandom = io.open("/dev/urandom", "rb") or false
    if urandom then urandom:setvbuf("no") end
  end
  local bytes = urandom and urandom:read(8)
  if bytes and #bytes == 8 then
    return format("%02x%02x%02x%02x%02x%02x%02x%02x", byte(bytes, 1, 8))
  end
  return format("%08x%08x", random(0, 0x7fffffff) * 2 + random(0, 1), random(0, 0x7fffffff) * 2 + random(0, 1))
end

-- A span id: 16 lowercase hex digits, never all zeros.
function _M.span_id()
  local id = random_hex16()
  while id == ZERO_SPAN do id = random_hex16() end
  return id
end

-- The traceparent of a child span of tp: tp's trace-id and trace-flags, a new
-- parent-id (span_id, or a random one). Raises if tp is not a traceparent.
function _M.child(tp, span_id)
  local t, why = _M.parse(tp)
  if not t then error(("mqlease.trace.child: not a traceparent (%s): %s"):format(why, tostring(tp)), 2) end
  if span_id == nil then span_id = _M.span_id()
  elseif type(span_id) ~= "string" or not span_id:match("^[0-9a-f]+$") or #span_id ~= 16 or span_id == ZERO_SPAN then
    error("mqlease.trace.child: span_id must be 16 lowercase hex digits, not all zeros", 2)
  end
  return format("00-%s-%s-%s", t.trace_id, span_id, t.flags)
end

-- A traceparent that starts a new trace (random trace-id and parent-id);
-- sampled (flags 01) unless sampled is false.
function _M.new(sampled)
  return format("00-%s%s-%s-%s", _M.span_id(), _M.span_id(), _M.span_id(), sampled == false and "00" or "01")
end

return _M
