-- spec/support/eo_sim.lua: the exactly-once policy's unit specs run it
-- without a server, against the fault model's Redis (spec/support/model/
-- redis.lua) in simulated time, made to fail where a spec says.
local lease_mod = require "mqlease.lease"
local policy = require "mqlease.policy"
local core = require "mqlease.core"
local scheduler = require "mqlease.scheduler"
local clock_mod = require "spec.support.model.clock"
local redis_model = require "spec.support.model.redis"

local _M = {}

-- No fault of any kind; a spec copies it and sets what it wants to fail.
_M.NO_FAULTS = { eval_fail = 0, applied = 0, lock_break = 0, lock_break_within = 1, death = 0, death_within = 1,
  ack_fail = 0, nack_fail = 0, dead_letter_fail = 0, receive_fail = 0 }

-- Runs fn(clock, redis, sched) as a task of a scheduler in simulated time;
-- faults: the model Redis's (NO_FAULTS if nil; the table is used as given,
-- so a spec may change it while the task runs).
function _M.simulate(fn, faults)
  clock_mod.simulate(3600, function(clock)
    local redis = redis_model.new({ rng = clock_mod.rng(1), clock = clock, faults = faults or _M.NO_FAULTS })
    local sched = scheduler.new(function(_, err) error(err, 0) end)
    sched:spawn(fn, clock, redis, sched)
    sched:loop()
  end)
end

-- A message of the model's kind: a lease whose state the spec sets, and a
-- consumer that counts what the policy counts (m.counts).
function _M.message(id)
  local counts = {}
  -- a plain table: the policy gives it the index that issues lease.fence on read
  local l = { state = "held" }
  function l.alive(self) return lease_mod.lock_kept(self) and (self.state == "held" or self.state == "expiring") end
  function l._lock_lost(self) rawset(self, "_lock_is_lost", true) end
  return { id = id, lease = l, counts = counts,
    consumer = { id = function() return "c@1" end, count = function(_, n) counts[n] = (counts[n] or 0) + 1 end } }
end

-- Records the name of every script redis is sent, in order (the names of
-- mqlease.policy.scripts); before(i), if given, runs before the i-th call.
function _M.record(redis, before)
  local names = {}
  for name, script in pairs(policy.scripts) do names[script] = name end
  local calls, eval = {}, redis.eval
  redis.eval = function(self, script, keys, args)
    calls[#calls + 1] = names[script] or "?"
    if before then before(#calls) end
    return eval(self, script, keys, args)
  end
  return calls
end

-- The value of key in the model Redis now, or nil (gone, or lapsed).
function _M.value(redis, key)
  local e = redis.keys[key]
  if e and e.expires > core.now() then return e.value end
  return nil
end

-- A shallow copy of t (a spec's own faults, from NO_FAULTS).
function _M.copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

return _M
