-- bench/eo_policy.lua REDIS [ROUNDS]: what the exactly-once policy alone costs
-- the worker, per message, beside the plain policy: 256 tasks of one
-- mqlease.scheduler each call the policy ROUNDS (200) times on a stand-in
-- message (a fresh id each time) and lease, with a handler that returns true
-- at once, against the real Redis at REDIS. Prints one JSON line a policy
-- ("eopolicy {...}"): the process's CPU µs a message (the Lua thread and the
-- Redis client's own thread together), the median of 3 passes.
--
-- No broker and no consumer: the message's lease is a table that says it is
-- held, so what is measured is the policy's own work (keys, owner, the two
-- batched scripts and their waits in the scheduler, the lock keepalive's
-- registration and stop), not the receive and ack around it.
--
-- Then the parts of that work, each alone in the same frame (the same
-- tasks, the same fresh id a message, so "plain" is the frame's own cost),
-- one JSON line a part ("eoclient {...}"):
--   park       a park and a wake in the scheduler, as each batched call waits
--   calls      the policy's two batched calls (mqlease.policy.batch, the keys
--              written by the core from the id): ACQUIRE_MANY, then
--              FINISH_MANY for the lock it took
--   keepalive  the lock keepalive registered and stopped (two calls into the core)
--   round_trip one call to a script that does nothing, sent alone and waited
--              for outside any scheduler: what one round trip to Redis costs
--              this process whatever it carries (µs a call, not a message)
-- What the policy costs beyond the frame, less these, is its own Lua: the
-- owner, the lease's fields, the checks between the steps.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local scheduler = require "mqlease.scheduler"
local policy = require "mqlease.policy"
local batch_mod = require "mqlease.policy.batch"
local redis_mod = require "mqlease.redis"
local sched_adapter = require "mqlease.loop.scheduler"
local common = require "bench.common"

local address, rounds = arg[1], tonumber(arg[2]) or 200
common.need(address, "lua5.4 bench/eo_policy.lua REDIS [ROUNDS]")
local TASKS, PASSES = 256, 3

local consumer = { id = function() return "bench-consumer" end, count = function() end }
local function handler() return true end
local run_tag = ("%x%x"):format(os.time(), math.random(0, 0xffffff))

-- One pass: TASKS tasks, rounds messages each; CPU seconds a message.
local function pass(name, pol, n)
  local s = scheduler.new()
  for t = 1, TASKS do
    s:spawn(function()
      for r = 1, rounds do
        local m = { id = ("%s-%s-%d-%d-%d"):format(run_tag, name, n, t, r), consumer = consumer }
        local action = pol(m, { state = "held" }, handler)
        if action ~= "ack" then error(("bench/eo_policy.lua: %s answered %s"):format(name, tostring(action))) end
      end
    end)
  end
  collectgarbage()
  local c0 = os.clock()
  s:loop()
  return (os.clock() - c0) / (TASKS * rounds)
end

-- Each of list ({ name, policy }) in PASSES passes: one JSON line each,
-- `kind {"<field>": name, ...}`, the median µs a message and min-max.
local function measure(kind, field, list)
  for _, p in ipairs(list) do
    local v = {}
    for n = 1, PASSES do v[n] = pass(p[1], p[2], n) * 1e6 end
    local median = common.median(v)   -- sorts v
    print(kind .. " " .. common.json({ _order = { field, "passes", "cpu_us_per_msg", "min", "max" },
      [field] = p[1], passes = PASSES, cpu_us_per_msg = median, min = v[1], max = v[#v] }))
  end
end

measure("eopolicy", "policy", {
  { "plain", policy.plain },
  { "exactly_once", policy.exactly_once { redis = address } },
})

-- The parts, as "policies" of the same frame: each does one part of the
-- exactly-once policy's work for its message and answers "ack".
local rc = assert(redis_mod.new(address))
local prefix = "mqlease:bench-client:"
local k = function(id, suffix) return policy.key_base(id, prefix) .. suffix end
local acquires = batch_mod.new(rc, policy.scripts.acquire_many, 3, { "30000", "0" }, 2, nil,
  { prefix = prefix, suffixes = { "lock", "fence", "done" }, key_of = k })
local finishes = batch_mod.new(rc, policy.scripts.finish_many, 2, { "60" }, 1, nil,
  { prefix = prefix, suffixes = { "lock", "done" }, key_of = k })
local owner_n, parked = 0, {}
local parts = {
  { "plain", policy.plain },
  { "park", function(m)
    -- one waker a turn for the turn's parked tasks, as a batch's flush
    local sched = sched_adapter.current()
    local n = #parked + 1
    parked[n] = coroutine.running()
    if n == 1 then
      sched:spawn(function()
        local these = parked
        parked = {}
        for i = 1, #these do sched:wake(these[i]) end
      end)
    end
    sched:park()
    return m and "ack"
  end },
  { "calls", function(m)
    local sched = sched_adapter.current()
    owner_n = owner_n + 1
    local owner = "bench-owner/" .. owner_n
    local got = acquires:call(sched, owner, m.id)
    if got ~= 1 then return "nack" end
    return finishes:call(sched, owner, m.id) == 1 and "ack" or "nack"
  end },
  { "keepalive", function(m)
    owner_n = owner_n + 1
    local id = rc:_keep_lock_of(prefix, m.id, "bench-owner/" .. owner_n, 30000, 10000, 3600000, 0)
    rc:keepalive_stop(id)
    return "ack"
  end },
}
measure("eoclient", "part", parts)
-- one round trip alone, ROUNDS * 25 of them, outside any scheduler
local trips = {}
for n = 1, PASSES do
  local calls = rounds * 25
  local c0 = os.clock()
  for _ = 1, calls do
    local one = rc:_eval_cmd({ "eval", "return 1", 0 })
    if one ~= 1 then error("bench/eo_policy.lua: the no-op script answered " .. tostring(one)) end
  end
  trips[n] = (os.clock() - c0) / calls * 1e6
end
local median = common.median(trips)
print("eoclient " .. common.json({ _order = { "part", "passes", "cpu_us_per_call", "min", "max" },
  part = "round_trip", passes = PASSES, cpu_us_per_call = median, min = trips[1], max = trips[#trips] }))
rc:close()
