-- mqlease.consumer: a RocketMQ 5 SimpleConsumer whose messages are leases.
--
-- receive() long-polls the proxy (ReceiveMessage) and returns messages
-- (mqlease.message); each carries a lease (mqlease.lease) that the C core
-- renews on its own thread until the message is acked, nacked, let go, or its
-- budget is spent. This file holds the consumer itself: its options, receive,
-- batched ack, its counters, the pollable convention for other loops, and
-- close, which gives back every lease still held.

local core = require "mqlease.core"
local config = require "mqlease.config"
local router_mod = require "mqlease.router"
local lease_mod = require "mqlease.lease"
local message = require "mqlease.message"

local setmetatable, rawget, type, error, ipairs, pairs, tostring =
  setmetatable, rawget, type, error, ipairs, pairs, tostring
local floor = math.floor

local LITE_SET = 2   -- LiteSubscriptionAction.COMPLETE_ADD: the whole set, at start
local MAX_BYTES = 2 ^ 53   -- receive's max_bytes: beyond it a float is no exact integer

local _M = {}

local consumer_methods = {}
local consumer_mt = {
  __name = "mqlease.consumer",
  __index = consumer_methods,
  __tostring = function(self) return ("mqlease.consumer(%s, %s)"):format(self.group, self.topic) end,
}

local function closed_guard(self)
  return rawget(self, "_closed")
end

-- Options keep their Lua names across the boundary; the core's fields add
-- the unit (_ms, _pct): release_delay is the core's release_delay_ms (the
-- delay of a nack when the budget runs out, and of every nack on close or
-- stop), corrupt_delay its corrupt_delay_ms.
function _M.new(opts)
  local o = config.consumer_options(opts)
  local args = config.client_core("mqlease.consumer", o)
  args.group, args.topic, args.filter = o.group, o.topic, o.filter
  args.filter_sql = o.filter_type == "sql"
  args.lite = o.lite_topics ~= nil
  args.lite_sync_every_ms = math.floor(o.lite_sync_every * 1000)
  for _, name in ipairs(o.lite_topics or {}) do
    local problem = config.send_problem("lite_topic", name)
    if problem then error("mqlease.consumer: option 'lite_topics': " .. problem, 2) end
  end
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
  args.release_delay_ms = floor(o.release_delay * 1000)
  args.on_corrupt = o.on_corrupt
  args.corrupt_delay_ms = floor(o.corrupt_delay * 1000)
  args.max_body = o.max_body
  local client, start_op = core.consumer(args)
  local router, err, code = router_mod.start(client, start_op, o.start_timeout, "mqlease.consumer")
  if not router then return nil, err, code end
  if o.lite_topics and #o.lite_topics > 0 then
    local ev = router:result(client:sync_lite(LITE_SET, o.lite_topics))
    if not ev.ok then
      router:result(client:terminate())
      router:close()
      return nil, ev.err, ev.code
    end
  end
  return setmetatable({
    group = o.group, topic = o.topic, options = config.kept(o),
    _router = router, _closed = false, _counters = {},
    _shapes = setmetatable({}, { __mode = "v" }),   -- shape key -> message metatable
  }, consumer_mt)
end

-- apache.rocketmq.v2.LiteSubscriptionAction
local LITE_ADD, LITE_REMOVE = 0, 1

local function sync_lite(self, fn, action, names)
  if type(names) == "string" then names = { names } end
  if type(names) ~= "table" or #names == 0 then
    error(("bad argument #1 to '%s' (a lite topic or an array of them expected)"):format(fn), 3)
  end
  for _, name in ipairs(names) do
    local problem = config.send_problem("lite_topic", name)
    if problem then error(("bad argument #1 to '%s' (%s)"):format(fn, problem), 3) end
  end
  if not self.options.lite_topics then
    error(("%s: the consumer is not a lite consumer (option 'lite_topics')"):format(fn), 3)
  end
  if closed_guard(self) then return nil, "the consumer is closed", "CLOSED" end
  local router = self._router
  local ev = router:result(router.client:sync_lite(action, names))
  if not ev.ok then return nil, ev.err, ev.code end
  return true
end

-- Lite consumers (option lite_topics, RocketMQ 5.5+): adds lite topics (a name or an
-- array) to what the consumer receives from (SyncLiteSubscription PARTIAL_ADD).
-- true, or nil, message, code (LITE_SUBSCRIPTION_QUOTA_EXCEEDED, ILLEGAL_LITE_TOPIC, ...).
function consumer_methods:subscribe_lite(names)
  return sync_lite(self, "subscribe_lite", LITE_ADD, names)
end

-- Removes lite topics from the subscription (PARTIAL_REMOVE): their messages are no longer
-- delivered to this consumer; leases already held stay held.
function consumer_methods:unsubscribe_lite(names)
  return sync_lite(self, "unsubscribe_lite", LITE_REMOVE, names)
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
  local await, max_bytes = o.await, nil
  if opts ~= nil then
    if type(opts) ~= "table" then error("bad argument #2 to 'receive' (options table expected)", 2) end
    for k, v in pairs(opts) do
      if k == "max_bytes" then
        -- body bytes this receive may take (the first message always): the rest go back
        -- at most 2^53: a float past 2^63 (math.huge among them) is its own
        -- floor, yet has no integer for the core to take
        if type(v) ~= "number" or v < 1 or v ~= floor(v) or v > MAX_BYTES then
          error(("receive: option 'max_bytes' must be a positive integer of at most 2^53 (got %s)"):format(tostring(v)), 2)
        end
        max_bytes = v
      elseif k ~= "await" then
        error(("receive: unknown option '%s' (known: await, max_bytes)"):format(tostring(k)), 2)
      elseif type(v) ~= "number" or v ~= v or v < 0 or v > 20 then   -- (a NaN passes both bounds)
        error(("receive: option 'await' must be a number between 0 and 20 (got %s)"):format(tostring(v)), 2)
      else
        await = v
      end
    end
  end
  local router = self._router
  local ev = router:result(router.client:receive(n, floor(await * 1000), max_bytes))
  -- Closed while this receive waited (another coroutine's close): close
  -- nacked every lease the core held, those of this answer's messages among
  -- them (and the core gives back at once whatever came after), so none may
  -- reach a handler: the broker may be handing them to another consumer.
  if closed_guard(self) then return nil, "the consumer is closed", "CLOSED" end
  if not ev.ok then return nil, ev.err, ev.code end
  local msgs, shapes, mts = ev.messages or {}, ev.shapes, {}
  for i, m in ipairs(msgs) do
    local shape = shapes[i]
    local mt = mts[shape]
    if not mt then mt = message.shape_mt(self, shape); mts[shape] = mt end
    msgs[i] = message.wrap(router, self, m, mt)
  end
  return msgs
end

-- Acks several messages in one request. true, or nil, message, code, results
-- where results[i] is true or { err = ..., code = ... } for msgs[i]. A
-- message listed more than once is acked once, and each of its entries
-- reports that ack.
function consumer_methods:ack(msgs)
  if closed_guard(self) then return nil, "the consumer is closed", "CLOSED" end
  if type(msgs) ~= "table" or #msgs == 0 or #msgs > 256 then
    error("bad argument #1 to 'ack' (an array of 1 to 256 messages expected)", 2)
  end
  -- Its entries counted, not only its border: {m1, nil, m3} acked m1 alone and
  -- answered true (ipairs stops at the hole; LuaJIT's # is 1 there, Lua 5.4's
  -- 3), and m3, reported acked, came back to be handled again.
  if not config.is_array(msgs) then
    error("bad argument #1 to 'ack' (an array of messages without holes or named fields expected)", 2)
  end
  -- ids: each lease once, as the core takes them; slot[i]: msgs[i]'s place in ids.
  -- The core refuses a release of a lease while another is pending (BUSY),
  -- and the first entry of a message listed twice would be that release.
  local ids, slot, at = {}, {}, {}
  for i, m in ipairs(msgs) do
    local id = message.lease_id(m)
    if id == nil then
      error(("bad argument #1 to 'ack' (msgs[%d] is not a message of this consumer)"):format(i), 2)
    end
    -- A lease id names a lease of one core client only (each counts from 1):
    -- another consumer's message would ack whichever message of ours holds
    -- that id, one its handler may never have finished, and leave its own
    -- lease renewed while its lease object said acked. (Compared by core
    -- client: a wrapper of this consumer acks this consumer's messages.)
    local owner = m.consumer
    if owner ~= nil and owner ~= self and owner._router ~= self._router then
      error(("bad argument #1 to 'ack' (msgs[%d] is a message of another consumer: ack it there)"):format(i), 2)
    end
    local k = at[id]
    if not k then
      k = #ids + 1
      ids[k], at[id] = id, k
    end
    slot[i] = k
  end
  local router = self._router
  local ev = router:result(router.client:ack(ids))
  local results, first_err, first_code = {}, nil, nil
  for i, m in ipairs(msgs) do
    local entry = ev.entries and ev.entries[slot[i]] or ev
    local ok, err, code = lease_mod.released(m.lease, entry, "acked")
    results[i] = ok or { err = err, code = code }
    if not ok and not first_err then first_err, first_code = err, code end
  end
  if first_err then return nil, first_err, first_code, results end
  return true
end

-- The leases this consumer holds at the broker: every one of a message the
-- core still hides for us (held, renewing, expiring), in no order. A lease
-- whose Redis lock (the exactly-once policy's) was lost is held all the
-- same -- the broker hides its message until a release or its deadline --
-- and shows the loss itself: lease:alive() is false. (Reading m.lease makes
-- the lease object of a message that had none yet.)
function consumer_methods:held()
  local out = {}
  for _, m in pairs(self._router.leases) do
    local lease = m.lease
    if lease_mod.held(lease) then out[#out + 1] = lease end
  end
  return out
end

-- Policy-level counters (handoff, duplicate_skipped, ...) live here, beside the core's.
function consumer_methods:count(name, n)
  local counters = self._counters
  counters[name] = (counters[name] or 0) + (n or 1)
end

function consumer_methods:metrics()
  local m = closed_guard(self) and (rawget(self, "_last_metrics") or {}) or self._router.client:metrics()
  for k, v in pairs(self._counters) do m[k] = v end
  return m
end

function consumer_methods:id()
  return self._router.client:id()
end

-- The cqueues "pollable" convention, for other event loops.
function consumer_methods:pollfd()
  return self._router.client:fd()
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
  local router = self._router
  local client = router.client
  -- no receive may bring a message after the nacks (the core also gives back
  -- at once whatever still arrives once nack_all ran)
  client:cancel_receives()
  router:result(client:nack_all(floor(self.options.release_delay * 1000)))
  router:pump()
  router:result(client:terminate())
  self._last_metrics = client:metrics()
  router:close()
  return true
end

consumer_mt.__close = function(self) self:close() end
consumer_mt.__gc = function(self)
  -- a consumer dropped without close: leases are left to expire, the thread is joined
  local router = rawget(self, "_router")
  if router then router:close() end
end

return _M
