-- bench/eo_parts.lua REDIS REDIS_PID [ROUNDS]: what the exactly-once policy's
-- scripts cost the Redis server, part by part, per message. Prints one JSON
-- line a part ("eoparts {...}"), the median of five passes of ROUNDS (1000)
-- batches of 32 fresh messages each (min and max beside).
--
-- The scripts are the policy's own (mqlease.policy.scripts), sent as the
-- policy sends them inside mqlease.run: one ACQUIRE_MANY and one FINISH_MANY
-- per batch of 32. The parts:
--   call     the same two calls with the same keys and arguments, to a
--            script that does nothing: what a call costs whatever it does
--   acquire  ACQUIRE_MANY, then the no-op in place of FINISH_MANY
--   both     ACQUIRE_MANY then FINISH_MANY: what a message costs Redis, with
--            the fencing token issued on read (the default) and not read
--   on_grant both, with the token issued at each grant (fence = "on_grant":
--            the fence's INCR and PEXPIRE, and its key kept for done_ttl)
--   onekey   the two calls of bench/eo_onekey.lua, a probe of a leaner layout
--            (one key a message, fences from one counter; no worker runs it)
--   onevalue the two calls of bench/eo_onevalue.lua, the same with a Cluster
--            form: one key a message, whose value holds the lock, the fence
--            and then the done mark (no counter; no worker runs it)
-- CPU is the server's utime + stime from /proc over each pass; the calls go
-- one after another from this process, so the figures hold Redis's own work,
-- not this client's.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local policy = require "mqlease.policy"
local redis_mod = require "mqlease.redis"
local common = require "bench.common"
local onekey = require "bench.eo_onekey"
local onevalue = require "bench.eo_onevalue"

local address, pid, rounds = arg[1], arg[2], tonumber(arg[3]) or 1000
if not (address and pid) then
  io.stderr:write("usage: lua5.4 bench/eo_parts.lua REDIS REDIS_PID [ROUNDS]\n")
  os.exit(2)
end
local r = assert(redis_mod.new(address))
local BATCH, PASSES = 32, 5
local NOOP = "return {}"
local ACQUIRE, FINISH = policy.scripts.acquire_many, policy.scripts.finish_many
-- the acquire's fence TTL in ms: '0' issues no token at the grant (on_read)
local ON_READ, ON_GRANT = "0", "60000"

local parts = {
  { name = "call", acquire = NOOP, finish = NOOP, fence_ttl = ON_READ },
  { name = "acquire", acquire = ACQUIRE, finish = NOOP, fence_ttl = ON_READ },
  { name = "both", acquire = ACQUIRE, finish = FINISH, fence_ttl = ON_READ },
  { name = "on_grant", acquire = ACQUIRE, finish = FINISH, fence_ttl = ON_GRANT },
  { name = "onekey", probe = onekey },
  { name = "onevalue", probe = onevalue },
}

local run_tag = ("%x%x"):format(os.time(), math.random(0, 0xffffff))

-- one batch: its two calls, each checked (a failed call would make the
-- figure a lie)
local function batch(part, pass, round)
  local ids, owners = {}, {}
  for i = 1, BATCH do
    ids[i] = ("%s-%s-%d-%d-%d"):format(run_tag, part.name, pass, round, i)
    owners[i] = "bench-owner-" .. i
  end
  local acquire, finish
  if part.probe then acquire, finish = part.probe.calls("mqlease:bench:", ids, owners, "30000", "60")
  else acquire, finish = common.eo_calls(part.acquire, part.finish, "mqlease:bench:", ids, owners, "30000", part.fence_ttl, "60") end
  local got, err = r:_eval_cmd(acquire)
  assert(type(got) == "table", "acquire: " .. tostring(err))
  if part.acquire ~= NOOP then assert(got[1] == 1, "acquire: the first lock was not taken") end
  got, err = r:_eval_cmd(finish)
  assert(type(got) == "table", "finish: " .. tostring(err))
  if part.probe then assert(got[1] == 1, part.name .. " finish: the first lock was not ours") end
end

-- The parts take turns, pass after pass: the keyspace grows as the done
-- markers and fences pile up, and each part must meet it as large as the others.
local per_msg = {}
for pass = 1, PASSES do
  for _, part in ipairs(parts) do
    local c0 = common.cpu_s(pid)
    for round = 1, rounds do batch(part, pass, round) end
    per_msg[part.name] = per_msg[part.name] or {}
    per_msg[part.name][pass] = (common.cpu_s(pid) - c0) * 1e6 / (rounds * BATCH)
  end
end
for _, part in ipairs(parts) do
  local v = per_msg[part.name]
  local median = common.median(v)   -- sorts v
  print("eoparts " .. common.json({ _order = { "part", "passes", "redis_cpu_us_per_msg", "min", "max" },
    part = part.name, passes = PASSES, redis_cpu_us_per_msg = median, min = v[1], max = v[#v] }))
end
r:close()
