-- mqlease.message: a received message as a handler sees it -- its fields, its
-- lease (m.lease) and the four ways it can leave: ack, nack, dead_letter,
-- let_expire. Each waits for the broker's answer in the caller's loop and
-- returns true, or nil, message, code.
--
-- A message is held by the million, so it is one userdata of the core
-- (src/lua/lmql_message.c): its own fields (id, body, offset, born_at,
-- store_at and the core's lease id) in its bytes, read through __index, which
-- makes m.id and m.body as strings when read (m.body a copy each time: code of
-- ours that reads a field more than once a message reads it into a local). The
-- fields most messages of a consumer share (topic, tag, hosts, type, queue,
-- delivery attempt) come from a shape the core hands beside it. Each shape gets
-- one metatable, shared by every message of that shape, whose __index (made in
-- C, with the shape as an upvalue) finds the message's own field, else the
-- shape's (a weak cache in the consumer finds the metatable again, and lets it
-- go with its last message). The fields few messages have (keys, properties,
-- message_group, trace_context, delivery_timestamp, priority), the lease
-- object once made (see mqlease.lease) and whatever a user sets on a message
-- live in a table of the message's own, made only for a message that needs
-- one (core.message_extras). pairs(m) lists the own fields by name where
-- __pairs is honoured (Lua 5.4; LuaJIT has no pairs for a userdata):
-- m:totable() gives them all.

local core = require "mqlease.core"
local lease_mod = require "mqlease.lease"

local setmetatable, rawget, type, error, tostring, pairs, ipairs, next =
  setmetatable, rawget, type, error, tostring, pairs, ipairs, next
local floor = math.floor
local core_lease_id, core_extras, core_bind = core.message_lease_id, core.message_extras, core.message_bind
local core_index, core_newindex = core.message_index, core.message_newindex

local _M = {}

local methods = {}
_M.methods = methods
local message_mt = { __index = methods }

-- Messages without keys or properties share one read-only empty table each
-- instead of holding two of their own.
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

-- The slots of a half message's own fields in the table the core hands a
-- transaction check (src/lua/lmql_push.c's push_message, by this order).
local NAMES = { "id", "body", "offset", "born_at", "store_at", "lease" }
local SLOTS = {}
for i, k in ipairs(NAMES) do SLOTS[k] = i end
_M.SLOTS = SLOTS
local LEASE = SLOTS.lease

-- The own fields pairs(m) lists, before those of the message's own table.
local OWN = { "id", "body", "offset", "born_at", "store_at", "lease" }

local function message_pairs(m)
  local t = {}
  for _, k in ipairs(OWN) do t[k] = m[k] end
  local extras = core_extras(m)
  if extras then
    -- (a long body's string sits there under a light userdata of the core's)
    for k, v in pairs(extras) do if type(k) ~= "userdata" then t[k] = v end end
  end
  return next, t, nil
end

-- The lease object of m, made from the core's lease id the first time it is
-- asked for (see the top of mqlease.lease). It goes into the message's own
-- table under its name, so every later m.lease (mqlease.run and the methods
-- below read it a few times a message) finds it there.
local function lease_of(m, consumer)
  local lease = lease_mod.new(rawget(consumer, "_router"), consumer, core_lease_id(m), m)
  core_extras(m, true).lease = lease
  return lease
end

-- The core's lease id of message m, without making its lease object (a
-- stand-in message, a table, may carry it in its lease slot or its lease).
function _M.lease_id(m)
  local id = core_lease_id(m)
  if id == nil and type(m) == "table" then
    id = rawget(m, LEASE)
    if id == nil then
      local lease = m.lease
      id = lease and rawget(lease, "id")
    end
  end
  return id
end

-- The lease object of message m if one was made, else nil (never makes one).
function _M.made_lease(m)
  if type(m) == "table" then return rawget(m, "lease") end
  local extras = core_lease_id(m) and core_extras(m)
  return extras and rawget(extras, "lease")
end
local made_lease = _M.made_lease

-- A message nobody references any more: its lease is given back (its
-- finalizer, on Lua 5.4 and LuaJIT alike).
local function give_back(consumer, m)
  lease_mod.collect(consumer, core_lease_id(m), made_lease(m))
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
      __index = core_index(shape, function(m) return lease_of(m, consumer) end),
      __newindex = core_newindex,
      __gc = function(m) give_back(consumer, m) end }
    cache[key] = mt
  end
  return mt
end

-- A message from the core's userdata m, registered with router so that the
-- core's lease events reach its lease.
function _M.wrap(router, consumer, m, mt)
  core_bind(m, mt)
  router.leases[core_lease_id(m)] = m
  return m
end

-- A message made from a table of its fields (id, body, offset, born_at,
-- store_at, lease: the core's lease id, and any other), as the core would
-- hand it over: for fakes and specs without a broker.
_M.new = core.message_new

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
  -- (a NaN passes both bounds, and the core would refuse it unnamed)
  if type(delay) ~= "number" or delay ~= delay or delay < 0 or delay > 43200 then
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
  local router = lease_mod.router(lease)
  local client, id = router.client, rawget(lease, "id")
  if client:let_expire(id) then
    lease_mod.let_go(lease)
    return true
  end
  -- The core refuses a lease it still holds only while a release of it (an
  -- ack, nack or dead letter from another coroutine) is under way: that
  -- release decides its fate. The lease is not lost.
  if client:lease(id) then
    return nil, "a release of this message is already under way", "BUSY"
  end
  -- The core let go of it: the event that says how (an ack another
  -- coroutine made, say) may not have been read yet.
  router:pump()
  local err, code = lease_mod.gone(lease, "no lease", "NO_LEASE")
  return nil, err, code
end

return _M
