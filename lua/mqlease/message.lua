-- mqlease.message: a received message as a handler sees it -- its fields, its
-- lease (m.lease) and the four ways it can leave: ack, nack, dead_letter,
-- let_expire. Each waits for the broker's answer in the caller's loop and
-- returns true, or nil, message, code.
--
-- A message's table holds only its own fields (id, body, offset, times,
-- lease, and keys/properties when it has some); the fields most messages of a
-- consumer share (topic, tag, hosts, type, queue, delivery attempt) come from
-- a shape the core hands beside it (src/lua/lmql_push.c). Each shape becomes
-- the __index of one metatable, shared by every message of that shape; a weak
-- cache in the consumer finds it again, and lets it go with its last message.
-- So pairs(m) shows only the message's own fields: m:totable() gives them all.

local lease_mod = require "mqlease.lease"

local setmetatable, rawget, type, error, tostring, pairs, ipairs =
  setmetatable, rawget, type, error, tostring, pairs, ipairs
local floor = math.floor

local _M = {}

local methods = {}
_M.methods = methods
local message_mt = { __index = methods }

-- Messages without keys or properties share one read-only empty table each
-- instead of holding two of their own (112 bytes a message in Lua 5.4).
local function read_only(what)
  return setmetatable({}, {
    __newindex = function() error("mqlease.message: " .. what .. " is read-only", 2) end,
    __metatable = false,
  })
end
local NO_KEYS, NO_PROPERTIES = read_only("keys"), read_only("properties")

local function message_tostring(self)
  return ("mqlease.message(%s, %s, attempt %d)"):format(self.id, self.topic, self.delivery_attempt)
end

local function shape_part(v)
  if v == nil then return "-" end
  v = tostring(v)
  return #v .. ":" .. v
end

-- The metatable of the messages of one shape, from consumer's weak cache.
function _M.shape_mt(consumer, shape)
  local key = shape_part(shape.topic) .. shape_part(shape.tag) .. shape_part(shape.born_host)
    .. shape_part(shape.store_host) .. shape_part(shape.message_type)
    .. shape_part(shape.queue_id) .. shape_part(shape.delivery_attempt)
  local cache = consumer._shapes
  local mt = cache[key]
  if not mt then
    shape.consumer, shape.keys, shape.properties = consumer, NO_KEYS, NO_PROPERTIES
    mt = { __name = "mqlease.message", __index = setmetatable(shape, message_mt),
      __tostring = message_tostring }
    cache[key] = mt
  end
  return mt
end

-- A message from the core's table m (its lease field: the core's lease id).
function _M.wrap(router, consumer, m, mt)
  m.lease = lease_mod.new(router, consumer, m.lease)
  return setmetatable(m, mt)
end

-- Every field a handler may read, in a plain table of its own: strings,
-- numbers, and fresh keys and properties tables. The lease and the consumer
-- are left out, so the table is plain data (cjson.encode takes it as it is).
local FIELDS = {
  -- the message's own
  "id", "body", "offset", "born_at", "store_at", "delivery_timestamp", "trace_context", "message_group",
  -- its shape's
  "topic", "tag", "born_host", "store_host", "message_type", "queue_id", "delivery_attempt",
}
_M.FIELDS = FIELDS

function methods:totable()
  local t = {}
  for _, k in ipairs(FIELDS) do t[k] = self[k] end
  local keys, properties = {}, {}
  for i, k in ipairs(self.keys) do keys[i] = k end
  for k, v in pairs(self.properties) do properties[k] = v end
  t.keys, t.properties = keys, properties
  return t
end

local function closed(lease)
  return lease_mod.router(lease).client:closed()
end

-- Acknowledges the message: the broker forgets it. true, or nil, message, code.
function methods:ack()
  local lease = self.lease
  if closed(lease) then return nil, "the consumer is closed", "CLOSED" end
  local router = lease_mod.router(lease)
  local ev = router:result(router.client:ack({ rawget(lease, "id") }))
  return lease_mod.released(lease, ev, "acked")
end

-- Gives the message back: visible again after delay seconds (default 0).
function methods:nack(delay)
  if delay == nil then delay = 0 end
  if type(delay) ~= "number" or delay < 0 or delay > 43200 then
    error(("bad argument #1 to 'nack' (delay: seconds between 0 and 43200 expected, got %s)"):format(tostring(delay)), 2)
  end
  local lease = self.lease
  if closed(lease) then return nil, "the consumer is closed", "CLOSED" end
  local router = lease_mod.router(lease)
  local ev = router:result(router.client:nack(rawget(lease, "id"), floor(delay * 1000 + 0.5)))
  return lease_mod.released(lease, ev, "nacked")
end

-- Forwards the message to the group's dead-letter queue (%DLQ%<group>) with
-- ForwardMessageToDeadLetterQueue; the proxy acks the original. reason is a
-- short word counted in metrics (mqlease_messages_dead_lettered_total).
-- true, or nil, message, code.
function methods:dead_letter(reason)
  if reason ~= nil and (type(reason) ~= "string" or not reason:match("^[%w_%-]+$") or #reason > 31) then
    error(("bad argument #1 to 'dead_letter' (reason: a word of at most 31 letters, digits, '_' or '-' expected, got %s)"):format(tostring(reason)), 2)
  end
  local lease = self.lease
  if closed(lease) then return nil, "the consumer is closed", "CLOSED" end
  local router = lease_mod.router(lease)
  local ev = router:result(router.client:dead_letter(rawget(lease, "id"), reason or "handler"))
  return lease_mod.released(lease, ev, "dead_lettered")
end

-- Stops renewing on purpose: the message comes back when its lease ends.
function methods:let_expire()
  local lease = self.lease
  if closed(lease) then return nil, "the consumer is closed", "CLOSED" end
  if lease_mod.router(lease).client:let_expire(rawget(lease, "id")) then
    lease_mod.let_go(lease)
    return true
  end
  local err, code = lease_mod.gone(lease, "no lease", "NO_LEASE")
  return nil, err, code
end

return _M
