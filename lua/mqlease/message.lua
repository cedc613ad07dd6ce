-- mqlease.message: a received message as a handler sees it -- its fields, its
-- lease (m.lease) and the four ways it can leave: ack, nack, dead_letter,
-- let_expire. Each waits for the broker's answer in the caller's loop and
-- returns true, or nil, message, code.
--
-- A message is held by the million, so its table is small. The fields every
-- message has (id, body, offset, born_at, store_at, lease) sit in its array
-- part, by slot (SLOTS below, in the order src/lua/lmql_push.c sets them): 16
-- bytes a slot where a hash node costs 24 and the hash part rounds up to a
-- power of two. The fields most messages of a consumer share (topic, tag,
-- hosts, type, queue, delivery attempt) come from a shape the core hands
-- beside it. Each shape gets one metatable, shared by every message of that
-- shape, whose __index finds a slot by its name, else the shape's field (a
-- weak cache in the consumer finds the metatable again, and lets it go with
-- its last message). The fields few messages have (keys, properties,
-- message_group, trace_context, delivery_timestamp) and whatever a user sets
-- on a message live in its hash part under their names and are read raw; so
-- does the lease object once made (the lease slot keeps the core's lease id,
-- see mqlease.lease). A read through __index calls a function (about 40 ns on
-- Lua 5.4, where a raw read is about 10): code of ours that reads a field
-- more than once a message reads it into a local.
-- pairs(m) lists the own fields by name where __pairs is honoured (Lua 5.4):
-- m:totable() gives them all.

local lease_mod = require "mqlease.lease"

local setmetatable, rawget, rawset, type, error, tostring, pairs, ipairs, next =
  setmetatable, rawget, rawset, type, error, tostring, pairs, ipairs, next
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

-- The slots of a message's own fields, by name (see the top of this file).
local NAMES = { "id", "body", "offset", "born_at", "store_at", "lease" }
local SLOTS = {}
for i, k in ipairs(NAMES) do SLOTS[k] = i end
_M.SLOTS = SLOTS
local LEASE = SLOTS.lease
local NSLOTS = #NAMES

-- pairs(m) as when every own field had its name: the slots by name, then the
-- hash part (keys, properties, a user's fields) without the slots' numbers.
local function next_field(m, k)
  local i = k == nil and 0 or (type(k) == "string" and rawget(SLOTS, k))
  if i then
    while i < NSLOTS do
      i = i + 1
      local name = NAMES[i]
      local v = m[name]
      if v ~= nil then return name, v end
    end
    k = nil
  end
  repeat
    k = next(m, k)
  until k == nil or not ((type(k) == "number" and k >= 1 and k <= NSLOTS and k % 1 == 0)
    or (type(k) == "string" and SLOTS[k]))
  if k == nil then return nil end
  return k, rawget(m, k)
end

local function message_pairs(m)
  return next_field, m, nil
end

-- The lease object of m, made from the core's lease id in its lease slot the
-- first time it is asked for (see the top of mqlease.lease). It goes into the
-- hash part under its name, so every later m.lease (mqlease.run and the
-- methods below read it a few times a message) is a plain read, not a call
-- of __index; the slot keeps the id.
local function lease_of(m, consumer)
  local lease = lease_mod.new(rawget(consumer, "_router"), consumer, rawget(m, LEASE), m)
  rawset(m, "lease", lease)
  return lease
end

-- The core's lease id of message m, without making its lease object (a
-- stand-in message may carry its lease by name).
function _M.lease_id(m)
  local id = rawget(m, LEASE)
  if id == nil then
    local lease = m.lease
    id = lease and rawget(lease, "id")
  end
  return id
end

-- A message nobody references any more: its lease is given back (the
-- finalizer of its table on Lua 5.4, of its proxy on LuaJIT).
local function give_back(consumer, m)
  lease_mod.collect(consumer, rawget(m, LEASE), rawget(m, "lease"))
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
    setmetatable(shape, message_mt)
    mt = { __name = "mqlease.message", __tostring = message_tostring, __pairs = message_pairs,
      __index = function(m, k)
        local i = SLOTS[k]
        if i == nil then return shape[k] end
        if i == LEASE then return lease_of(m, consumer) end
        -- not rawget: a function call costs more than the plain read (a slot left
        -- nil, store_at's, comes back here once as a number and finds nothing)
        return m[i]
      end,
      __gc = function(m) give_back(consumer, m) end }
    cache[key] = mt
  end
  return mt
end

local newproxy = newproxy   -- Lua 5.1/LuaJIT: tables have no __gc, a proxy userdata does

-- A message from the core's table m (its lease slot: the core's lease id),
-- registered with router so that the core's lease events reach its lease.
function _M.wrap(router, consumer, m, mt)
  router.leases[rawget(m, LEASE)] = m
  if newproxy then
    -- in the slot after the lease (src/lua/lmql_push.c makes it on LuaJIT)
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = function() give_back(consumer, m) end
    rawset(m, LEASE + 1, proxy)
  end
  return setmetatable(m, mt)
end

-- Every field a handler may read, in a plain table of its own: strings,
-- numbers, and fresh keys and properties tables. The lease and the consumer
-- are left out, so the table is plain data (cjson.encode takes it as it is).
local FIELDS = {
  -- the message's own
  "id", "body", "offset", "born_at", "store_at", "delivery_timestamp", "trace_context", "message_group",
  "priority", "lite_topic",
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
