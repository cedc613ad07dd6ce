-- bench/eo_load.lua REDIS RATE SECONDS: the exactly-once policy's Redis work
-- without its client: ACQUIRE_MANY then FINISH_MANY for batches of 32 fresh
-- message ids, RATE messages a second (paced batch by batch), for SECONDS.
--
-- bench/all.sh part eo runs it beside a plain mqlease.run (the "bound" row):
-- that run pays what exactly-once costs this host on the Redis side (the
-- scripts' CPU in redis-server, the calls' in a client) and nothing of the
-- policy's Lua. Its rate is about the most an exactly-once worker whose
-- policy cost nothing in its own process could reach here, with the worker,
-- Redis and the dev broker sharing the host's cores.
--
-- The scripts and their arguments are the policy's own (mqlease.policy.scripts,
-- keys as the policy builds them), or with LAYOUT=onekey those of
-- bench/eo_onekey.lua, a probe of a leaner layout; each call is checked, so a
-- failed one ends the run with an error rather than a lighter load. Prints to
-- stderr the messages sent and the seconds taken.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local policy = require "mqlease.policy"
local redis_mod = require "mqlease.redis"
local core = require "mqlease.core"
local common = require "bench.common"
local onekey = require "bench.eo_onekey"
local layout = os.getenv("LAYOUT") or "policy"

local address, rate, seconds = arg[1], tonumber(arg[2]), tonumber(arg[3])
if not (address and rate and rate > 0 and seconds) then
  io.stderr:write("usage: lua5.4 bench/eo_load.lua REDIS RATE SECONDS\n")
  os.exit(2)
end
local r = assert(redis_mod.new(address))
local BATCH = 32
local ACQUIRE, FINISH = policy.scripts.acquire_many, policy.scripts.finish_many
-- the policy's defaults: lock_ttl 30 s, done_ttl 7 days, and the fencing
-- token issued on read (fence = "on_read": the acquire's fence TTL is '0';
-- the load's handlers, as the bench's, never read it)
local LOCK_TTL_MS, DONE_TTL, GRANT_FENCE_TTL_MS = "30000", "604800", "0"
local tag = ("%x%x"):format(os.time(), math.random(0, 0xffffff))

local t0, k = core.now(), 0
while core.now() - t0 < seconds do
  k = k + 1
  local left = t0 + k * BATCH / rate - core.now()
  if left > 0 then core.poll({}, left) end
  local ids, owners = {}, {}
  for i = 1, BATCH do
    ids[i] = ("%s-%d-%d"):format(tag, k, i)
    owners[i] = ("eo_load/%s/%d"):format(tag, (k - 1) * BATCH + i)
  end
  local acquire, finish
  if layout == "onekey" then acquire, finish = onekey.calls("mqlease:", ids, owners, LOCK_TTL_MS, DONE_TTL)
  else acquire, finish = common.eo_calls(ACQUIRE, FINISH, "mqlease:", ids, owners, LOCK_TTL_MS, GRANT_FENCE_TTL_MS, DONE_TTL) end
  local got, err = r:_eval_cmd(acquire)
  if type(got) ~= "table" or got[1] ~= 1 then error("bench/eo_load.lua: ACQUIRE_MANY: " .. tostring(err or got[1])) end
  got, err = r:_eval_cmd(finish)
  if type(got) ~= "table" or got[1] ~= 1 then error("bench/eo_load.lua: FINISH_MANY: " .. tostring(err or got[1])) end
end
io.stderr:write(("bench/eo_load.lua: %d messages in %.2f s\n"):format(k * BATCH, core.now() - t0))
r:close()
