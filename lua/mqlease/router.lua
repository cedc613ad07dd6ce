-- mqlease.router: one core client seen from Lua. Every core operation
-- (receive, ack, send, a Redis call...) returns an op id at once and finishes
-- later as an event; the router moves the events out of the core and routes
-- each one: an op's result to the coroutine that asked for it
-- (router:result), a lease's change of state to its lease object, a lost
-- Redis lock to its keepalive, a transaction check to its producer. The
-- consumer, the producer and the Redis client each own one router. (The
-- *session* is the core's RocketMQ session: the Telemetry stream,
-- heartbeats and reconnects, in src/rocketmq/mql_session.c.)
--
-- Every core operation finishes (each RPC has a deadline in the core), so a
-- caller never needs to abandon one: it waits for its own op id while storing
-- results that belong to other coroutines.

local core = require "mqlease.core"
local loop = require "mqlease.loop"
local scheduler_adapter = require "mqlease.loop.scheduler"

local setmetatable, pairs, ipairs = setmetatable, pairs, ipairs
local coroutine = coroutine

local _M = {}
local methods = {}
local mt = { __index = methods }

function _M.new(client)
  return setmetatable({
    client = client,
    results = {},                          -- op id -> event, until its waiter takes it
    forgotten = {},                        -- op ids nobody will wait for
    leases = setmetatable({}, { __mode = "v" }), -- lease id -> its message (weak)
    on_lock_lost = nil,                    -- fn(keepalive id), for Redis clients
    on_op = nil,                           -- fn(event) -> true when it took the event (the producer's sends)
    on_orphan = nil,                       -- fn(event), for producers: the proxy asks about a half message
    waiters = {},                          -- op id -> coroutine parked for it in mqlease's scheduler
    waiter_sched = {},                     -- op id -> that coroutine's scheduler
    watched = nil,                         -- the scheduler that pumps this router when its fd is readable
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

-- Moves every event out of the core; lease events update their messages' leases.
function methods:pump()
  local client = self.client
  if client:closed() then return end
  for _, ev in ipairs(client:events()) do
    if ev.kind == "op" then
      local on_op = self.on_op
      if on_op and on_op(ev) then
        -- taken by its owner (a send in flight): nobody waits in result() for it
      elseif self.forgotten[ev.op] then self.forgotten[ev.op] = nil
      else
        self.results[ev.op] = ev
        local co = self.waiters[ev.op]
        if co then self.waiter_sched[ev.op]:wake(co) end
      end
    elseif ev.kind == "lock_lost" then
      if self.on_lock_lost then self.on_lock_lost(ev.keepalive) end
    elseif ev.kind == "orphan" then
      -- queued by the producer; its checker runs in producer:poll, not here.
      -- One that came with the session's start, before the producer gave
      -- its handler, waits for it (take_early_orphans): the broker would
      -- ask again, but each ask spends one of its transactionCheckMax
      if self.on_orphan then self.on_orphan(ev)
      else
        local early = self.early_orphans or {}
        early[#early + 1] = ev
        self.early_orphans = early
      end
    else
      -- the message of that lease (its lease object is made if it was not yet)
      local m = self.leases[ev.lease_id]
      if m then m.lease:_set_state(ev.state, ev.renewals) end
    end
  end
end

-- The checks that came before on_orphan was given (with the session's
-- start), oldest first; they are the caller's from now on.
function methods:take_early_orphans()
  local early = self.early_orphans or {}
  self.early_orphans = nil
  return early
end

-- Under mqlease's own scheduler the router's descriptor is watched once, by
-- the scheduler, which pumps the router when it is readable; a coroutine
-- waiting for an op parks, and the pump wakes exactly the one whose result
-- came. Waiting on the descriptor itself woke every waiter of the client on
-- every batch of events (a 256-task mqlease.run resumed 256 coroutines for
-- each ack), and most went straight back to sleep.
local function watch(self, sched)
  local prior = self.watched
  if prior == sched then return end
  local fd = self.client:fd()
  if prior then prior:unwatch(fd) end
  self.watched = sched
  sched:watch(fd, function()
    if self.client:closed() then
      sched:unwatch(fd)
      if self.watched == sched then self.watched = nil end
      return
    end
    self:pump()
  end)
end

-- The scheduler of mqlease that runs the caller, when the caller's loop is it.
local function own_scheduler()
  if loop.adapter() ~= scheduler_adapter then return nil end
  return scheduler_adapter.current()
end

-- co, a task of sched, is woken by the pump that brings op's result.
local function register(self, op, co, sched)
  watch(self, sched)
  self.waiters[op], self.waiter_sched[op] = co, sched
end

-- op's event when it came, taken from the router with the waiter that
-- expect() may have registered for it; else nil.
local function take(self, op)
  local ev = self.results[op]
  if ev then
    self.results[op] = nil
    self.waiters[op], self.waiter_sched[op] = nil, nil
  end
  return ev
end

-- The result (event) of op, waiting for it in the caller's loop; deadline
-- (core.now() seconds) only bounds waiting for the session start, whose op
-- cannot time out in the core on its own (then nil when it passes).
function methods:result(op, deadline)
  while true do
    local ev = take(self, op)
    if ev then return ev end
    self:pump()
    ev = take(self, op)
    if ev then return ev end
    if deadline and core.now() >= deadline then return nil end
    -- closed by another coroutine meanwhile: no result will come
    if self.client:closed() then return { ok = false, err = "the client is closed", code = "CLOSED" } end
    local sched = own_scheduler()
    if sched then
      -- woken by the pump that stores the result; the deadline (a second at
      -- most) only keeps a wake-up that never came from hanging the wait
      register(self, op, coroutine.running(), sched)
      sched:park(deadline or core.now() + 1)
      self.waiters[op], self.waiter_sched[op] = nil, nil
    else
      loop.wait(self.client:fd(), deadline or core.now() + 1)
    end
  end
end

-- Wakes co, a task of sched parked elsewhere, when op's result comes, as
-- result() wakes its own waiters; co then takes the result with result(op),
-- which forgets the registration. For a task that learns op while parked (a
-- Redis command waiting for its batch to be sent): it sleeps once, until the
-- reply, instead of once for op and once more for the reply. false (nothing
-- registered) when sched is not the loop that runs the caller.
function methods:expect(op, co, sched)
  if own_scheduler() ~= sched then return false end
  register(self, op, co, sched)
  return true
end

-- expect() for a batch of ops at once: op first + i - 1 wakes waiters[i]. The
-- loop is asked once for the whole batch (a pipeline of hundreds of Redis
-- commands asked it once per command). false, registering none, when sched
-- is not the loop that runs the caller.
function methods:expect_all(first, waiters, sched)
  if own_scheduler() ~= sched then return false end
  for i = 1, #waiters do register(self, first + i - 1, waiters[i], sched) end
  return true
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
  if self.watched then
    self.watched:unwatch(client:fd())
    self.watched = nil
  end
  loop.forget(client:fd())
  client:close()
  -- a coroutine parked for an op of this client learns it is closed at once
  for op, co in pairs(self.waiters) do self.waiter_sched[op]:wake(co) end
end

return _M
