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
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local scheduler = require "mqlease.scheduler"
local policy = require "mqlease.policy"
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

local policies = {
  { "plain", policy.plain },
  { "exactly_once", policy.exactly_once { redis = address } },
}
for _, p in ipairs(policies) do
  local v = {}
  for n = 1, PASSES do v[n] = pass(p[1], p[2], n) * 1e6 end
  local median = common.median(v)   -- sorts v
  print("eopolicy " .. common.json({ _order = { "policy", "passes", "cpu_us_per_msg", "min", "max" },
    policy = p[1], passes = PASSES, cpu_us_per_msg = median, min = v[1], max = v[#v] }))
end
