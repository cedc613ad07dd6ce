-- mqlease.producer: sends messages to a RocketMQ 5 proxy (SendMessage).
--
-- Many sends may be in flight at once: each send is one SendMessage call the
-- core starts without blocking (its own deadline, request_timeout), so
-- several coroutines sending at once, or one send_many, keep up to
-- max_inflight calls open together instead of one round trip per message.
--
-- A send in flight is a *slot*: { topic, started, ev }, kept in _flight by its
-- op id until the router pumps its result event, which the producer takes
-- (router.on_op) and stores in the slot; the waiter (send, send_many) then
-- finds it there. So a result never waits in the router for a coroutine that
-- is gone, and close() can fail every slot still open: no send is left
-- without a result.

local core = require "mqlease.core"
local config = require "mqlease.config"
local loop = require "mqlease.loop"
local router_mod = require "mqlease.router"
local metrics = require "mqlease.metrics"
local transaction = require "mqlease.transaction"

local setmetatable, rawget, type, pairs, ipairs = setmetatable, rawget, type, pairs, ipairs
local floor, max = math.floor, math.max
local now = core.now

local _M = {}
local methods = {}
local mt = { __name = "mqlease.producer", __index = methods }

local NO_OPTIONS = {}
local CLOSED_MSG = "the producer was closed before the proxy answered (the message may or may not be stored)"
-- a send_many message the producer's close found still waiting for a slot: never
-- handed to the core, so surely not stored (a caller may send it again as it is)
local UNSENT_MSG = "the producer was closed before the message was sent (it was not sent)"

-- Takes the result event of a send in flight; false for any other op.
local function take_result(self, ev)
  local slot = self._flight[ev.op]
  if not slot then return false end
  self._flight[ev.op] = nil
  self._flying = self._flying - 1
  slot.ev = ev
  -- the official clients' rocketmq_send_cost_time (milliseconds)
  metrics.sent(self, slot.topic, (now() - slot.started) * 1000, ev.ok)
  return true
end

function _M.new(opts)
  local o = config.producer_options(opts)
  local args = config.client_core("mqlease.producer", o)
  args.topics = o.topics
  local client, start_op = core.producer(args)
  local router, err, code = router_mod.start(client, start_op, o.start_timeout, "mqlease.producer")
  if not router then return nil, err, code end
  local self = setmetatable({ options = config.kept(o), _router = router, _closed = false, _routes = {},
    _flight = {}, _flying = 0, _max = o.max_inflight }, mt)
  router.on_op = function(ev) return take_result(self, ev) end
  transaction.attach(self, o)
  return self
end

local function closed_result()
  return { ok = false, err = CLOSED_MSG, code = "CLOSED" }
end

-- Learns the route of topic once, as the official clients do, so that an
-- unknown topic fails as TOPIC_NOT_FOUND (the proxy's send would blame the
-- message type). Returns true, or nil, message, code.
local function learn_route(self, topic)
  if self._routes[topic] then return true end
  local router = self._router
  local ok, err, code = router:call(router.client:route(topic))
  if not ok then return nil, err, code end
  self._routes[topic] = true
  return true
end

-- Waits until fewer than max_inflight sends are in flight; false when the
-- producer closed meanwhile. Every send in flight ends (each call has a
-- deadline), so the descriptor turns readable while we wait.
local function await_slot(self)
  local router = self._router
  while self._flying >= self._max do
    router:pump()
    if self._flying < self._max then break end
    if rawget(self, "_closed") then return false end
    loop.wait(router.client:fd(), now() + 1)
  end
  return not rawget(self, "_closed")
end

-- Starts one SendMessage call (a free slot is there) and returns its slot;
-- recovery (seconds) is given for a half message (begin), nil otherwise.
local function start_send(self, topic, body, opts, recovery)
  local keys = opts.keys
  if type(keys) == "string" then keys = { keys } end
  -- a deliver_at (config.lua: > 0) of at least 1 ms: the core sends a DELAY message only
  -- for a delivery time > 0 (protobuf's default), and one under half a millisecond rounded
  -- to 0 went out NORMAL; a time in the past is "deliver now" to RocketMQ, 1 ms is one
  local deliver_at = opts.deliver_at and max(1, floor(opts.deliver_at * 1000 + 0.5)) or nil
  local delay = opts.delay and floor(opts.delay * 1000 + 0.5) or nil
  local slot = { topic = topic, started = now(), ev = nil }
  local op = self._router.client:send(topic, body, opts.tag, keys, opts.properties,
    opts.message_group, deliver_at, delay, opts.trace_context, opts.priority, recovery ~= nil,
    recovery and floor(recovery * 1000) or nil, opts.lite_topic)
  self._flight[op] = slot
  self._flying = self._flying + 1
  return slot
end

-- Waits for slot's result event.
local function await_result(self, slot)
  local router = self._router
  while not slot.ev do
    router:pump()
    if slot.ev then break end
    -- close() fails every open slot; this is only a guard
    if router.client:closed() then return closed_result() end
    loop.wait(router.client:fd(), now() + 1)
  end
  return slot.ev
end

-- Sends one message. opts: tag, keys (string or array), properties (string -> string),
-- and at most one of message_group (a FIFO message: the topic's message.type must be
-- FIFO), delay (seconds from now) or deliver_at (epoch seconds) (a DELAY message: the
-- topic's message.type must be DELAY); trace_context, a W3C traceparent (see
-- mqlease.trace); priority, an integer >= 0 (a PRIORITY topic, RocketMQ 5.4+: higher
-- is received first); lite_topic, a lite topic under topic (a LITE topic, RocketMQ 5.5).
-- Returns the message id, the queue offset and the recall handle
-- (a delay message on a 5.3.2+ proxy; nil else), or nil, message, code. Waits for a free slot first when max_inflight
-- sends are in flight (from other coroutines).
function methods:send(topic, body, opts)
  opts = config.check_send(topic, body, opts)
  if rawget(self, "_closed") then return nil, "the producer is closed", "CLOSED" end
  local ok, err, code = learn_route(self, topic)
  if not ok then return nil, err, code end
  if not await_slot(self) then return nil, "the producer is closed", "CLOSED" end
  local ev = await_result(self, start_send(self, topic, body, opts))
  if not ev.ok then return nil, ev.err, ev.code end
  return ev.message_id, ev.offset, ev.recall_handle
end

-- The proxy answers every refusal of the broker's RecallMessageProcessor (5.3.2 - 5.5.0)
-- as INTERNAL_SERVER_ERROR; its remark says which one it was. A proxy without the method
-- (5.2.0) ends the call UNIMPLEMENTED.
local RECALL_CODES = {
  { "timestamp invalid", "RECALL_TOO_LATE" },             -- delivered already (or past the timer's reach)
  { "recall handle is invalid", "INVALID_RECALL_HANDLE" },
  { "operation is forbidden", "RECALL_DISABLED" },         -- the broker's recallMessageEnable is false
}

local function recall_code(err, code)
  if code == "UNIMPLEMENTED" then return "UNSUPPORTED" end
  if code == "INTERNAL_SERVER_ERROR" and type(err) == "string" then
    for _, c in ipairs(RECALL_CODES) do
      if err:find(c[1], 1, true) then return c[2] end
    end
  end
  return code
end

-- Takes back a delay message not delivered yet (RecallMessage, RocketMQ 5.3.2+), by
-- the recall handle its send returned. Returns the message id, or nil, message, code
-- (RECALL_TOO_LATE, INVALID_RECALL_HANDLE, RECALL_DISABLED, UNSUPPORTED: docs/api.md).
function methods:recall(topic, handle)
  config.check_recall(topic, handle)
  if rawget(self, "_closed") then return nil, "the producer is closed", "CLOSED" end
  local router = self._router
  local ev, err, code = router:call(router.client:recall(topic, handle))
  if not ev then return nil, err, recall_code(err, code) end
  return ev.message_id
end

-- Begins a transaction: sends body to topic as a half message (TRANSACTION
-- type), which the broker keeps invisible until tx:commit() (or the checker)
-- commits it; tx:rollback() drops it. opts: send's tag, keys, properties,
-- trace_context, and recovery (seconds before the broker may ask the checker
-- about it; the broker's transactionTimeOut when absent). topic must be one of
-- the producer's option 'topics', and the producer needs a checker: both
-- raise otherwise. Returns tx, or nil, message, code.
function methods:begin(topic, body, opts)
  opts = config.check_begin(topic, body, opts)
  transaction.check_can_begin(self, topic)
  if rawget(self, "_closed") then return nil, "the producer is closed", "CLOSED" end
  local ok, err, code = learn_route(self, topic)
  if not ok then return nil, err, code end
  if not await_slot(self) then return nil, "the producer is closed", "CLOSED" end
  -- before the send: the half message's born time is no earlier than this
  local sent_at = now()
  local ev = await_result(self, start_send(self, topic, body, opts, opts.recovery or 0))
  if not ev.ok then return nil, ev.err, ev.code end
  return transaction.begun(self, topic, ev, opts.trace_context, sent_at, opts.recovery)
end

-- Runs the checker for every check the proxy sent (RecoverOrphanedTransactionCommand),
-- waiting up to timeout seconds (default 0) for the first; in the caller's
-- coroutine, so the checker may wait (Redis) in the caller's loop. Returns how
-- many checks it handled, and the last error a checker raised, if one did.
function methods:poll(timeout)
  return transaction.poll(self, timeout)
end

-- The result table of send_many for one event.
local function result_of(ev)
  if ev.ok then
    return { ok = true, message_id = ev.message_id, offset = ev.offset, recall_handle = ev.recall_handle }
  end
  return { ok = false, err = ev.err, code = ev.code }
end

-- Every entry of list gets the same failure (the route, or a closed producer).
local function fail_all(n, err, code)
  local results = {}
  for i = 1, n do results[i] = { ok = false, err = err, code = code } end
  return results, n
end

-- Fails the slots still open once the client is closed (close() does it
-- for the slots it knows; this covers a client closed under us).
local function fail_open(slots, n)
  for i = 1, n do
    if not slots[i].ev then slots[i].ev = closed_result() end
  end
end

-- Sends every message of list to topic with up to max_inflight in flight at
-- once. list[i] is a body string or a table { body =, tag =, keys =, ... }
-- (send's options). Returns results, failed: results[i] is
-- { ok = true, message_id =, offset = } or { ok = false, err =, code = } for
-- list[i], in order, and failed counts the failures. Raises on a bad
-- argument before anything is sent.
function methods:send_many(topic, list)
  config.check_send_many(topic, list)
  local n = #list
  if rawget(self, "_closed") then return fail_all(n, "the producer is closed", "CLOSED") end
  if n == 0 then return {}, 0 end
  local ok, err, code = learn_route(self, topic)
  if not ok then return fail_all(n, err, code) end
  local router = self._router
  local slots, started, done = {}, 0, 0
  while done < n do
    while started < n and self._flying < self._max and not rawget(self, "_closed") do
      local m = list[started + 1]
      if type(m) == "string" then slots[started + 1] = start_send(self, topic, m, NO_OPTIONS)
      else slots[started + 1] = start_send(self, topic, m.body, m) end
      started = started + 1
    end
    local flying = self._flying
    router:pump()
    if rawget(self, "_closed") then
      -- the ones never started fail CLOSED as the open ones do (close() failed
      -- those), saying they were not sent: the open ones may be stored
      for i = started + 1, n do slots[i] = { ev = { ok = false, err = UNSENT_MSG, code = "CLOSED" } } end
      started = n
      if router.client:closed() then fail_open(slots, n) end
    end
    while done < started and slots[done + 1].ev do done = done + 1 end
    -- no answer came: wait for one rather than spin (when closing, the
    -- coroutine in close() must get to run)
    if done < n and self._flying >= flying then
      loop.wait(router.client:fd(), now() + 1)
    end
  end
  local results, failed = {}, 0
  for i = 1, n do
    local r = result_of(slots[i].ev)
    if not r.ok then failed = failed + 1 end
    results[i] = r
  end
  return results, failed
end

-- Sends in flight now (started, not yet answered).
function methods:inflight()
  return self._flying
end

-- The client id the proxy knows this producer by (as consumer:id()).
function methods:id()
  return self._router.client:id()
end

function methods:metrics()
  if rawget(self, "_closed") then
    -- the counters as the close left them (a copy: the caller may change it),
    -- as a consumer's: counters that fell back to 0 would read as a reset
    local m = {}
    for k, v in pairs(rawget(self, "_last_metrics") or {}) do m[k] = v end
    return transaction.metrics(self, m)
  end
  return transaction.metrics(self, self._router.client:metrics())
end

-- Ends the session. Sends still in flight may finish while the proxy is told;
-- the core cancels the rest, and each of them reports CLOSED to its waiter.
function methods:close()
  if rawget(self, "_closed") then return true end
  self._closed = true
  local router = self._router
  router:result(router.client:terminate())
  self._last_metrics = router.client:metrics()
  router:close()
  for op, slot in pairs(self._flight) do
    slot.ev = closed_result()
    self._flight[op] = nil
  end
  self._flying = 0
  return true
end

mt.__close = function(self) self:close() end

return _M
