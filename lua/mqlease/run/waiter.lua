-- mqlease.run.waiter: keeps a message for a while before it is tried again
-- (an ordered message's retry in place, a policy's "defer"). Its lease stays
-- with the core, which renews it; the waiter only sleeps, and wakes early when
-- the lease ends or a stop comes, so nothing waits on a message that is gone.

local core = require "mqlease.core"
local lease_mod = require "mqlease.lease"

local setmetatable, pairs = setmetatable, pairs
local min = math.min

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.run.waiter" }

-- How often a waiting message looks at its lease: a lease that ends is
-- noticed within this, not at the end of a long retry delay.
local LOOK_EVERY = 1

-- stopping() -> true once the run stops.
function _M.new(sched, stopping)
  return setmetatable({ sched = sched, stopping = stopping, tasks = {} }, mt)
end

-- Waits delay seconds in the calling task. -> "again" (try it now), "ended"
-- (its lease ended meanwhile) or "stopping" (the run stops: the caller gives
-- it back).
function methods:hold(m, delay)
  local deadline = core.now() + delay
  local sched, lease = self.sched, m.lease
  self.tasks[m] = coroutine.running()
  local why
  -- a delay of 0 or less still yields once: asked again at once, a policy
  -- that does not yield itself would keep every other task, and the stop,
  -- from running
  local parked = false
  while true do
    if self.stopping() then why = "stopping" break end
    -- the broker's lease, not a Redis lock: none is held while it waits
    if not lease_mod.held(lease) then why = "ended" break end
    local now = core.now()
    if now >= deadline and parked then why = "again" break end
    parked = true
    sched:park(min(deadline, now + LOOK_EVERY))
  end
  self.tasks[m] = nil
  return why
end

-- Wakes every waiting message (a stop: each gives itself back).
function methods:wake_all()
  for _, co in pairs(self.tasks) do self.sched:wake(co) end
end

return _M
