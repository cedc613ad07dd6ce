-- eo_worker.lua ENDPOINTS GROUP TOPIC REDIS_PORT LOGFILE
-- A worker under mqlease.run with the exactly-once policy, for
-- spec/integration/exactly_once_spec.lua. Its handler is the "business effect": it works,
-- then INCRs biz:<message id> in Redis. Environment:
--   EO_WORK          seconds each handler works (default 0.05)
--   EO_SLOW_SHARE    share of messages whose handler works EO_SLOW seconds instead
--   EO_SLOW_EVERY    N: the messages whose body ends in a multiple of N are slow too
--                    (every run of them), so a spec knows how many slow ones there are
--   EO_SLOW          (default 12: longer than the 10 s lease)
--   EO_MAX_RENEWALS  lease renewals allowed (default unlimited; 0 = the lease runs out)
--   EO_FAIL          "1": the handler fails after working, without its effect
--   EO_ON_LOCKED     "defer" (default) or "ack"
--   EO_CONCURRENCY   handlers at once, and messages held at once (default 64)
--   EO_RUN_FOR       seconds to run (default 30); EO_GRACE: grace at the end (default 15)
--   EO_STOP_FILE     stop (and drain) as soon as this file exists, even before EO_RUN_FOR
--   EO_SENTINELS     "h:p,h:p,...": the policy's Redis is Sentinel-managed (with EO_MASTER)
--   EO_CLUSTER       "h:p,h:p,...": the policy's Redis is a Cluster
--   EO_FENCED        "1": the effect is a fence-checked write: the business store keeps the
--                    highest fence seen per message and rejects a write with an older one
-- The business store is always the single Redis on REDIS_PORT.
-- Log lines: "ready", "run <id> <attempt> <fence>", "slow <id>" (this run works EO_SLOW
-- seconds), "effect <id>", "stale <id> <fence>"
-- (a write the fence check rejected), and at the end
-- "metrics handoff=N duplicate_skipped=N acks=N expire_while_alive=N acked=N lock_lost=N redis_unavailable=N
-- done_marker_failed=N".
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

local endpoints, group, topic, redis_port, logfile = arg[1], arg[2], arg[3], arg[4], arg[5]
local env = function(k, d) local v = os.getenv(k); return v ~= nil and v ~= "" and v or d end

-- run's stop is asked at every turn of its loop: look at the file twice a second
local stop_file, stop_checked = env("EO_STOP_FILE", nil), 0
local function stop_file_seen()
  if not stop_file or mqlease.now() - stop_checked < 0.5 then return false end
  stop_checked = mqlease.now()
  local f = io.open(stop_file, "r")
  if f then f:close() end
  return f ~= nil
end
local work = tonumber(env("EO_WORK", "0.05"))
local slow_share = tonumber(env("EO_SLOW_SHARE", "0"))
local slow = tonumber(env("EO_SLOW", "12"))
local slow_every = tonumber(env("EO_SLOW_EVERY", ""))
local function is_slow(m)
  if math.random() < slow_share then return true end
  local n = slow_every and tonumber(m.body:match("(%d+)$"))
  return n ~= nil and n % slow_every == 0
end
local max_renewals = tonumber(env("EO_MAX_RENEWALS", ""))
local fail = env("EO_FAIL", "0") == "1"
local log = assert(io.open(logfile, "a"))
log:setvbuf("line")
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16) % 100000)

local consumer = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic,
  invisible = 10, await = 2, max_renewals = max_renewals, batch = 32 })
local address = "127.0.0.1:" .. redis_port
local business = mqlease.redis(address)
local function list(s)
  local out = {}
  for a in s:gmatch("[^,]+") do out[#out + 1] = a end
  return out
end
local lock_redis = address
if env("EO_SENTINELS", nil) then
  lock_redis = { sentinels = list(env("EO_SENTINELS")), master = env("EO_MASTER", "mymaster"), timeout = 0.5 }
elseif env("EO_CLUSTER", nil) then
  lock_redis = { cluster = list(env("EO_CLUSTER")), timeout = 0.5 }
end
local fenced = env("EO_FENCED", "0") == "1"
-- the fence-checking writer: applies the effect only with a fence newer than any seen
local FENCED_WRITE = [[
local seen = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= seen then return 0 end
redis.call('set', KEYS[2], ARGV[1])
redis.call('incr', KEYS[1])
return 1
]]
log:write("ready\n")

local summary = mqlease.run(consumer, function(m, lease)
  log:write(("run %s %d %s\n"):format(m.id, m.delivery_attempt, tostring(lease.fence)))
  if is_slow(m) then
    log:write(("slow %s\n"):format(m.id))
    mqlease.sleep(slow)
  else
    mqlease.sleep(work)
  end
  if fail then return false, "failing on purpose" end
  if fenced then
    local applied = assert(business:eval(FENCED_WRITE, { "biz:" .. m.id, "bizfence:" .. m.id },
      { lease.fence }))
    if applied ~= 1 then
      log:write(("stale %s %s\n"):format(m.id, tostring(lease.fence)))
      return false, "stale fence"
    end
  else
    assert(business:call("INCR", "biz:" .. m.id))
  end
  log:write(("effect %s\n"):format(m.id))
  return true
end, {
  concurrency = tonumber(env("EO_CONCURRENCY", "64")), max_inflight = tonumber(env("EO_CONCURRENCY", "64")),
  signals = false, run_for = tonumber(env("EO_RUN_FOR", "30")), stop = stop_file_seen,
  grace = tonumber(env("EO_GRACE", "15")),
  nack_delay = 0, on_error = function() end,
  policy = mqlease.policy.exactly_once { redis = lock_redis, on_locked = env("EO_ON_LOCKED", "defer"),
    defer_delay = 2, fail_delay = 1, lock_ttl = 15 },
})
local m = consumer:metrics()
log:write(("metrics handoff=%d duplicate_skipped=%d acks=%d expire_while_alive=%d acked=%d lock_lost=%d redis_unavailable=%d done_marker_failed=%d\n"):format(
  m.handoff or 0, m.duplicate_skipped or 0, m.acks_ok or 0, m.expire_while_alive or 0, summary.acked,
  m.lock_lost or 0, m.redis_unavailable or 0, m.done_marker_failed or 0))
business:close()
log:close()
