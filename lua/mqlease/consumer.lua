-- mqlease.consumer: a RocketMQ 5 SimpleConsumer whose messages are leases.
--
-- receive() returns messages; each carries a lease that the C core renews on
-- its own thread until the message is acked, nacked, let go, or its budget is
-- spent. This file is the thin Lua side: options, waiting, and the objects a
-- handler touches (message, lease). The lease itself lives in src/lease/mql_lease.c.

local core = require "mqlease.core"
local config = require "mqlease.config"
local session_mod = require "mqlease.session"

local setmetatable, getmetatable, rawget, type, error, ipairs, pairs, next =
  setmetatable, getmetatable, rawget, type, error, ipairs, pairs, next
local floor = math.floor

local _M = {}

-- ---------------------------------------------------------------- lease

local FINAL = { acked = true, nacked = true, lost = true, dead_lettered = true }
local ALIVE = { held = true, renewing = true, expiring = true }

local lease_methods = {}

local function lease_index(self, k)
  if k == "state" then
    return (self:_info())
  elseif k == "renewals" then
    local _, _, renewals = self:_info()
    return renewals
  elseif k == "uncertain" then
    -- true once a renewal went unanswered: the message may come back once more
    local _, _, _, uncertain = self:_info()
    return uncertain
  end
  return lease_methods[k]
end

local function lease_tostring(self)
  return ("mqlease.lease(%d, %s)"):format(rawget(self, "id"), self.state)
end

-- A lease is held by the thousand, so every slot counts: it starts with its id
-- alone (_renewals, _final and the rest appear once known) and finds its
-- session and consumer in the metatable all leases of its consumer share.
local function session_of(lease)
  return getmetatable(lease).session
end

-- A lease whose message nobody references any more can never be acked: a
-- handler dropped it. Without this its core lease would be renewed until
-- max_lease (an hour by default). It is nacked instead (visible again after
-- release_delay) and counted as leases_dropped.
local function collect_lease(lease)
  -- let expire on purpose: the handler chose the deadline, not release_delay
  if rawget(lease, "_final") or rawget(lease, "_let_go") then return end
  local session = session_of(lease)
  local client = session.client
  if client:closed() or not client:lease(rawget(lease, "id")) then return end
  local consumer = getmetatable(lease).consumer
  session:forget(client:nack(rawget(lease, "id"), floor(consumer.options.release_delay * 1000)))
  consumer:count("leases_dropped")
end

local newproxy = newproxy   -- Lua 5.1/LuaJIT: tables have no __gc, a proxy userdata does

local function new_lease(session, consumer, id)
  local mt = session.lease_mt
  if not mt then
    mt = { __name = "mqlease.lease", __index = lease_index, __tostring = lease_tostring,
      __gc = collect_lease, session = session, consumer = consumer }
    session.lease_mt = mt
  end
  local lease = setmetatable({ id = id }, mt)
  if newproxy then
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = function() collect_lease(lease) end
    lease._proxy = proxy
  end
  session.leases[id] = lease
  return lease
end

-- state, remaining seconds, renewals: from the core while it holds the lease,
-- else the final state the core reported when it let go.
function lease_methods:_info()
  local final = rawget(self, "_final")
  if final then return final, 0, (rawget(self, "_renewals") or 0), rawget(self, "_uncertain") == true end
  local session = session_of(self)
  local client = session.client
  if not client:closed() then
    local state, remaining, renewals, _, uncertain = client:lease(rawget(self, "id"))
    if state then
      self._renewals = renewals
      if uncertain then self._uncertain = true end
      return state, remaining, renewals, uncertain
    end
    session:pump()   -- the event that ended it is waiting
    final = rawget(self, "_final")
    if final then return final, 0, (rawget(self, "_renewals") or 0), rawget(self, "_uncertain") == true end
  end
  return "lost", 0, (rawget(self, "_renewals") or 0), rawget(self, "_uncertain") == true
end

function lease_methods:_set_state(state, renewals)
  if renewals then self._renewals = renewals end
  if FINAL[state] and not rawget(self, "_final") then self._final = state end
end

-- true while the broker still hides the message for us (and, under the
-- exactly-once policy, while its Redis lock is still ours)
function lease_methods:alive()
  if rawget(self, "_lock_lost") then return false end
  return ALIVE[(self:_info())] == true
end

-- The Redis lock that guarded this lease could not be renewed.
function lease_methods:_lock_lost()
  self._lock_lost = true
end

-- seconds until the broker would hand the message to someone else (0 when gone)
function lease_methods:remaining()
  local _, remaining = self:_info()
  return remaining > 0 and remaining or 0
end

-- ---------------------------------------------------------------- message

local message_methods = {}
-- the metatable of a shape (see shape_mt): its fields, then the methods
local message_mt = { __index = message_methods }

-- A release failed because the core no longer holds the lease: say why.
local function gone_reason(lease, err, code)
  if code ~= "NO_LEASE" then return err, code end
  local final = rawget(lease, "_final")
  if final == "acked" then return "the message was already acked", "ALREADY_ACKED" end
  if final == "nacked" then return "the message was already nacked", "ALREADY_NACKED" end
  if final == "dead_lettered" then return "the message was already dead-lettered", "ALREADY_DEAD_LETTERED" end
  return "the lease was lost: the broker may have redelivered the message", "LEASE_LOST"
end

local function finish_release(lease, ev, final)
  if ev.ok then
    -- the core ends a dead-lettered lease as acked (the proxy acks it); say what happened
    if final == "dead_lettered" then lease._final = final end
    lease:_set_state(final)
    return true
  end
  local err, code = gone_reason(lease, ev.err, ev.code)
  return nil, err, code
end

-- Acknowledges the message: the broker forgets it. true, or nil, message, code.
function message_methods:ack()
  local lease = self.lease
  local session = session_of(lease)
  if session.client:closed() then return nil, "the consumer is closed", "CLOSED" end
  local ev = session:await(session.client:ack({ rawget(lease, "id") }))
  return finish_release(lease, ev, "acked")
end

-- Gives the message back: visible again after delay seconds (default 0).
function message_methods:nack(delay)
  if delay == nil then delay = 0 end
  if type(delay) ~= "number" or delay < 0 or delay > 43200 then
    error(("bad argument #1 to 'nack' (delay: seconds between 0 and 43200 expected, got %s)"):format(tostring(delay)), 2)
  end
  local lease = self.lease
  local session = session_of(lease)
  if session.client:closed() then return nil, "the consumer is closed", "CLOSED" end
  local ev = session:await(session.client:nack(rawget(lease, "id"), floor(delay * 1000 + 0.5)))
  return finish_release(lease, ev, "nacked")
end

-- Forwards the message to the group's dead-letter queue (%DLQ%<group>) with
-- ForwardMessageToDeadLetterQueue; the proxy acks the original. reason is a
-- short word counted in metrics (mqlease_messages_dead_lettered_total).
-- true, or nil, message, code.
function message_methods:dead_letter(reason)
  if reason ~= nil and (type(reason) ~= "string" or not reason:match("^[%w_%-]+$") or #reason > 31) then
    error(("bad argument #1 to 'dead_letter' (reason: a word of at most 31 letters, digits, '_' or '-' expected, got %s)"):format(tostring(reason)), 2)
  end
  local lease = self.lease
  local session = session_of(lease)
  if session.client:closed() then return nil, "the consumer is closed", "CLOSED" end
  local ev = session:await(session.client:dead_letter(rawget(lease, "id"), reason or "handler"))
  return finish_release(lease, ev, "dead_lettered")
end

-- Stops renewing on purpose: the message comes back when its lease ends.
function message_methods:let_expire()
  local lease = self.lease
  local session = session_of(lease)
  if session.client:closed() then return nil, "the consumer is closed", "CLOSED" end
  if session.client:let_expire(rawget(lease, "id")) then
    lease._let_go = true
    return true
  end
  local err, code = gone_reason(lease, "no lease", "NO_LEASE")
  return nil, err, code
end

-- ---------------------------------------------------------------- consumer

local consumer_methods = {}
local consumer_mt = {
  __name = "mqlease.consumer",
  __index = consumer_methods,
  __tostring = function(self) return ("mqlease.consumer(%s, %s)"):format(self.group, self.topic) end,
}

local function closed_guard(self)
  return rawget(self, "_closed")
end

function _M.new(opts)
  local o = config.consumer_options(opts)
  local args = config.client_core("mqlease.consumer", o)
  args.group, args.topic, args.filter = o.group, o.topic, o.filter
  args.filter_sql = o.filter_type == "sql"
  if o.invisible == "auto" then
    local a = o.auto_invisible
    args.invisible_auto = true
    args.invisible_ms = floor(a.start * 1000)   -- the core clamps it to the bounds
    args.auto_min_ms, args.auto_max_ms = floor(a.min * 1000), floor(a.max * 1000)
    args.auto_margin_pct = floor(a.margin * 100 + 0.5)
  else
    args.invisible_ms = floor(o.invisible * 1000)
  end
  args.renew = o.renew
  args.renew_every_ms = o.renew_every and floor(o.renew_every * 1000) or 0
  args.max_renewals = o.max_renewals or -1
  args.max_lease_ms = floor(o.max_lease * 1000)
  args.on_budget = o.on_budget
  args.budget_nack_delay_ms = floor(o.release_delay * 1000)
  args.on_corrupt = o.on_corrupt
  args.corrupt_nack_delay_ms = floor(o.corrupt_delay * 1000)
  args.max_body = o.max_body
  local client, start_op = core.consumer(args)
  local session, err, code = session_mod.start(client, start_op, o.start_timeout, "mqlease.consumer")
  if not session then return nil, err, code end
  return setmetatable({
    group = o.group, topic = o.topic, options = o,
    _session = session, _closed = false, _counters = {},
    _shapes = setmetatable({}, { __mode = "v" }),   -- shape key -> message metatable
  }, consumer_mt)
end

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

-- A message's table holds only its own fields (id, body, offset, times, lease,
-- and keys/properties when it has some); the fields most messages of a
-- consumer share (topic, tag, hosts, type, queue, delivery attempt) come from
-- a shape the core hands beside it (src/lua/lmql_push.c). Each shape becomes the
-- __index of one metatable, shared by every message of that shape; a weak
-- cache finds it again, and lets it go with its last message.
local function shape_mt(consumer, shape)
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

local function wrap_message(session, consumer, m, mt)
  m.lease = new_lease(session, consumer, m.lease)   -- the core's lease id until now
  return setmetatable(m, mt)
end

-- Receives up to n messages (default: the batch option), long-polling up to
-- opts.await seconds. An array (empty when nothing came), or nil, message, code.
--
-- Order. From a FIFO topic (m.message_group set; c:metrics().fifo when the
-- group is orderly) the messages of one message group arrive in order, and
-- the broker keeps an orderly group's queue blocked while any message it
-- delivered from it is neither acked nor past its deadline. A caller who
-- acks by hand keeps the order only by finishing each message of a group
-- (ack, or dead_letter) before running the next one of that group, and by
-- retrying a failure in place (the lease stays renewed) instead of nacking
-- it: a nack lets the deadline pass, and the broker then delivers it again
-- together with the messages after it. mqlease.run does all of this.
function consumer_methods:receive(n, opts)
  if closed_guard(self) then return nil, "the consumer is closed", "CLOSED" end
  local o = self.options
  n = n or o.batch
  if type(n) ~= "number" or n < 1 or n > 32 or n ~= floor(n) then
    error(("bad argument #1 to 'receive' (n: an integer from 1 to 32 expected, got %s)"):format(tostring(n)), 2)
  end
  local await = o.await
  if opts ~= nil then
    if type(opts) ~= "table" then error("bad argument #2 to 'receive' (options table expected)", 2) end
    for k, v in pairs(opts) do
      if k ~= "await" then error(("receive: unknown option '%s' (known: await)"):format(tostring(k)), 2) end
      if type(v) ~= "number" or v < 0 or v > 20 then
        error(("receive: option 'await' must be a number between 0 and 20 (got %s)"):format(tostring(v)), 2)
      end
      await = v
    end
  end
  local session = self._session
  local ev = session:await(session.client:receive(n, floor(await * 1000)))
  if not ev.ok then return nil, ev.err, ev.code end
  local msgs, shapes, mts = ev.messages or {}, ev.shapes, {}
  for i, m in ipairs(msgs) do
    local shape = shapes[i]
    local mt = mts[shape]
    if not mt then mt = shape_mt(self, shape); mts[shape] = mt end
    msgs[i] = wrap_message(session, self, m, mt)
  end
  return msgs
end

-- Acks several messages in one request. true, or nil, message, code, results
-- where results[i] is true or { err = ..., code = ... } for msgs[i].
function consumer_methods:ack(msgs)
  if closed_guard(self) then return nil, "the consumer is closed", "CLOSED" end
  if type(msgs) ~= "table" or #msgs == 0 or #msgs > 256 then
    error("bad argument #1 to 'ack' (an array of 1 to 256 messages expected)", 2)
  end
  local ids = {}
  for i, m in ipairs(msgs) do ids[i] = rawget(m.lease, "id") end
  local session = self._session
  local ev = session:await(session.client:ack(ids))
  local results, first_err, first_code = {}, nil, nil
  for i, m in ipairs(msgs) do
    local entry = ev.entries and ev.entries[i] or ev
    local ok, err, code = finish_release(m.lease, entry, "acked")
    results[i] = ok or { err = err, code = code }
    if not ok and not first_err then first_err, first_code = err, code end
  end
  if first_err then return nil, first_err, first_code, results end
  return true
end

-- Leases the core still holds for this consumer (live lease objects only).
function consumer_methods:held()
  local out = {}
  for _, lease in pairs(self._session.leases) do
    if not rawget(lease, "_final") and lease:alive() then out[#out + 1] = lease end
  end
  return out
end

-- Policy-level counters (handoff, duplicate_skipped, ...) live here, beside the core's.
function consumer_methods:count(name, n)
  local counters = self._counters
  counters[name] = (counters[name] or 0) + (n or 1)
end

function consumer_methods:metrics()
  local m = closed_guard(self) and (rawget(self, "_last_metrics") or {}) or self._session.client:metrics()
  for k, v in pairs(self._counters) do m[k] = v end
  return m
end

function consumer_methods:id()
  return self._session.client:id()
end

-- The cqueues "pollable" convention, for other event loops.
function consumer_methods:pollfd()
  return self._session.client:fd()
end

function consumer_methods:events()
  return "r"
end

function consumer_methods:timeout()
  return nil
end

-- Closes the consumer: every lease the core still holds is nacked (visible
-- again after release_delay seconds), including those of messages Lua no
-- longer references, so another instance takes over quickly; then the proxy
-- is told and the session ends. Safe to call twice.
function consumer_methods:close()
  if closed_guard(self) then return true end
  self._closed = true
  local session = self._session
  local client = session.client
  -- no receive may bring a message after the nacks (the core also gives back
  -- at once whatever still arrives once nack_all ran)
  client:cancel_receives()
  session:await(client:nack_all(floor(self.options.release_delay * 1000)))
  session:pump()
  session:await(client:terminate())
  self._last_metrics = client:metrics()
  session:close()
  return true
end

consumer_mt.__close = function(self) self:close() end
consumer_mt.__gc = function(self)
  -- a consumer dropped without close: leases are left to expire, the thread is joined
  local session = rawget(self, "_session")
  if session then session:close() end
end

return _M
