-- examples/demo/demo_worker.lua [NAME [ENDPOINTS [GROUP [TOPIC [REDIS]]]]] -- one worker of `make demo`.
-- (defaults: A 127.0.0.1:8081 demo_demo demo 127.0.0.1:6379, as demo.lua's defaults start it)
--
-- A production-shaped worker: mqlease.run with the exactly-once policy. The
-- handler "works" for the seconds written in the task, then records its
-- business effect (INCR runs:<message id> in Redis). Prints one line per event.
local mqlease = require "mqlease"

local name, endpoints = arg[1] or "A", arg[2] or "127.0.0.1:8081"
local group, topic, redis = arg[3] or "demo_demo", arg[4] or "demo", arg[5] or "127.0.0.1:6379"
io.stdout:setvbuf("line")
local consumer = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic,
  invisible = 10, await = 2, batch = 4 })
local business = mqlease.redis(redis)

local summary = mqlease.run(consumer, function(m, lease)
  local seconds = tonumber(m.body:match("(%d+%.?%d*) s"))
  print(("%s  starts %s (attempt %d, fence %d)"):format(name, m.body, m.delivery_attempt, lease.fence))
  mqlease.sleep(seconds)
  assert(business:call("INCR", "runs:" .. m.id))
  print(("%s  done   %s after %.1f s, %d lease renewals"):format(name, m.body, seconds, lease.renewals))
  return true
end, {
  concurrency = 6, grace = 5, signals = true,   -- drains on demo.lua's SIGTERM
  policy = mqlease.policy.exactly_once { redis = redis, lock_ttl = 10, defer_delay = 2, prefix = "demo:" },
})
local m = consumer:metrics()
print(("%s  stopped: received %d, renewals %d, handoffs %d, duplicates skipped %d, acked %d"):format(
  name, m.received, m.renew_success, m.handoff or 0, m.duplicate_skipped or 0, summary.acked))
business:close()
