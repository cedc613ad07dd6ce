-- bench/redis_call_cost.lua REDIS [CALLS]: what one Redis call of mqlease.redis
-- costs the client, alone, in CPU (user and system apart) and in wall time.
-- Prints one JSON line a kind ("rediscall {...}"), the median of three passes
-- of CALLS (2000) calls, made one after another outside any scheduler (each
-- waits for its reply in the core's wait primitive):
--   noop       EVALSHA of a script that returns 1, no keys, no arguments: the
--              round trip itself (the Lua table, the core's copy, the command
--              thread's wake-up, the write and the read, the reply's event and
--              the host's wake-up)
--   noop_130   the same script with the 130 arguments of the exactly-once
--              policy's acquire of 32 messages (96 keys, 2 TTLs, 32 owners)
--   acquire    the policy's ACQUIRE_MANY of 32 fresh ids, as the policy sends
--              it (eval_ids: the core writes the keys from the ids)
-- What a message pays is a kind's figure over 32, twice (its acquire and its
-- done marker). bench/README "Where a batched call goes" reads the figures.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local redis_mod = require "mqlease.redis"
local core = require "mqlease.core"
local policy = require "mqlease.policy"
local common = require "bench.common"

local address, calls = arg[1], tonumber(arg[2]) or 2000
common.need(address, "lua5.4 bench/redis_call_cost.lua REDIS [CALLS]")
local BATCH, PASSES = 32, 3
local NOOP = "return 1"
local r = assert(redis_mod.new(address))
local run_tag = ("%x%x"):format(os.time(), math.random(0, 0xffffff))

-- the 32 ids and owners of call i of a pass
local function batch_of(pass, i)
  local ids, owners = {}, {}
  for j = 1, BATCH do
    ids[j] = ("%s-%d-%d-%d"):format(run_tag, pass, i, j)
    owners[j] = "bench-owner-" .. j
  end
  return ids, owners
end

local kinds = {
  noop = function() return { "eval", NOOP, 0 } end,
  noop_130 = function(pass, i)
    local cmd = { "eval", NOOP, 96 }
    local ids, owners = batch_of(pass, i)
    for j = 1, BATCH do
      local base = policy.key_base(ids[j], "mqlease:bench:")
      cmd[#cmd + 1], cmd[#cmd + 2], cmd[#cmd + 3] = base .. "lock", base .. "fence", base .. "done"
    end
    cmd[#cmd + 1], cmd[#cmd + 2] = "30000", "60000"
    table.move(owners, 1, BATCH, #cmd + 1, cmd)
    return cmd
  end,
  acquire = function(pass, i)
    local ids, owners = batch_of(pass, i)
    return (common.eo_calls(policy.scripts.acquire_many, NOOP, "mqlease:bench:", ids, owners, "30000", "60000", "60"))
  end,
}

for _, kind in ipairs({ "noop", "noop_130", "acquire" }) do
  local users, systems, walls = {}, {}, {}
  for pass = 1, PASSES do
    -- the commands are made before the clock starts: what is timed is the call
    local cmds = {}
    for i = 1, calls do cmds[i] = kinds[kind](pass, i) end
    local _, u0, s0 = common.cpu_s()
    local t0 = core.now()
    for i = 1, calls do
      local reply, err = r:_eval_cmd(cmds[i])
      -- a failed call would make the figure a lie
      if reply == nil then error(("bench/redis_call_cost.lua: %s failed: %s"):format(kind, tostring(err))) end
    end
    local t1 = core.now()
    local _, u1, s1 = common.cpu_s()
    users[pass] = (u1 - u0) / calls * 1e6
    systems[pass] = (s1 - s0) / calls * 1e6
    walls[pass] = (t1 - t0) / calls * 1e6
  end
  local total = {}
  for i = 1, PASSES do total[i] = users[i] + systems[i] end
  print("rediscall " .. common.json({ kind = kind, calls = calls, passes = PASSES,
    cpu_us_per_call = common.median(total), user_us = common.median(users), sys_us = common.median(systems),
    wall_us_per_call = common.median(walls) }, { "kind", "calls", "passes", "cpu_us_per_call", "user_us", "sys_us",
    "wall_us_per_call" }))
end
r:close()
