-- mqlease.router: one core client seen from Lua. Every core operation
-- (receive, ack, send, a Redis call...) returns an op id at once and finishes
-- later as an event; the router moves the events out of the core and routes
-- each one: an op's result to the coroutine that asked for it
-- (router:result), a lease's change of state to its lease object, a lost
-- Redis lock to its keepalive. The consumer, the producer and the Redis client
-- each own one router. (The *session* is the core's RocketMQ session: the
-- Telemetry stream, heartbeats and reconnects, in src/rocketmq/mql_session.c.)
--
-- Every core operation finishes (each RPC has a deadline in the core), so a
-- caller never needs to abandon one: it waits for its own op id while storing
-- results that belong to other coroutines.

local core = require "mqlease.core"
local loop = require "mqlease.loop"

local setmetatable = setmetatable

local _M = {}
local methods = {}
local mt = { __index = methods }

function _M.new(client)
  return setmetatable({
    client = client,
    results = {},                          -- op id -> event, until its waiter takes it
    forgotten = {},                        -- op ids nobody will wait for
    leases = setmetatable({}, { __mode = "v" }), -- lease id -> lease object (weak)
    on_lock_lost = nil,                    -- fn(keepalive id), for Redis clients
    on_op = nil,                           -- fn(event) -> true when it took the event (the producer's sends)
  }, mt)
end

-- Waits up to timeout seconds for the session start (op start_op) of a new
-- core client; returns its router, or closes the client and returns
-- nil, message, code. what names the constructor in the timeout message.
function _M.start(client, start_op, timeout, what)
  local router = _M.new(client)
  local ev = router:result(start_op, core.now() + timeout)
  if ev and ev.ok then return router end
  router:close()
  if not ev then return nil, what .. ": the session did not start within start_timeout", "TIMEOUT" end
  return nil, ev.err, ev.code
end

-- Moves every event out of the core; lease events update their lease objects.
function methods:pump()
  local client = self.client
  if client:closed() then return end
  for _, ev in ipairs(client:events()) do
    if ev.kind == "op" then
      local on_op = self.on_op
      if on_op and on_op(ev) then
        -- taken by its owner (a send in flight): nobody waits in result() for it
      elseif self.forgotten[ev.op] then self.forgotten[ev.op] = nil else self.results[ev.op] = ev end
    elseif ev.kind == "lock_lost" then
      if self.on_lock_lost then self.on_lock_lost(ev.keepalive) end
    else
      local lease = self.leases[ev.lease_id]
      if lease then lease:_set_state(ev.state, ev.renewals) end
    end
  end
end

-- The result (event) of op, waiting for it in the caller's loop; deadline
-- (core.now() seconds) only bounds waiting for the session start, whose op
-- cannot time out in the core on its own (then nil when it passes).
function methods:result(op, deadline)
  local results = self.results
  while true do
    local ev = results[op]
    if ev then
      results[op] = nil
      return ev
    end
    self:pump()
    ev = results[op]
    if ev then
      results[op] = nil
      return ev
    end
    if deadline and core.now() >= deadline then return nil end
    -- closed by another coroutine meanwhile: no result will come
    if self.client:closed() then return { ok = false, err = "the client is closed", code = "CLOSED" } end
    loop.wait(self.client:fd(), deadline or core.now() + 1)
  end
end

-- Nobody will wait for op (started from a finalizer): drop its event.
function methods:forget(op)
  self.forgotten[op] = true
end

-- Runs op and returns ok, or nil, message, code.
function methods:call(op)
  local ev = self:result(op)
  if ev.ok then return ev end
  return nil, ev.err, ev.code
end

function methods:close()
  local client = self.client
  if client:closed() then return end
  -- every event loop must forget the descriptor before it is closed
  loop.forget(client:fd())
  client:close()
end

return _M
