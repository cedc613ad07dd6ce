-- examples/exactly-once/worker.lua -- each message's business effect at most
-- once, even when a lease is lost and another worker receives the message.
--
--   lua5.4 worker.lua [ENDPOINTS [GROUP [TOPIC [REDIS_ADDRESS]]]]
--   (defaults: 127.0.0.1:8081 worker tasks 127.0.0.1:6379; RUN_FOR=S stops it after S seconds)
--
-- The exactly_once policy takes a Redis lock per message id before the
-- handler runs (renewed with the lease), hands the handler a fencing token
-- (lease.fence: pass it to what you write to, which refuses one not greater
-- than the last it applied for that message), and writes a done marker before
-- the ack, so a redelivery is acked without running again.
local mqlease = require "mqlease"

local endpoints, group, topic = arg[1] or "127.0.0.1:8081", arg[2] or "worker", arg[3] or "tasks"
local redis = arg[4] or "127.0.0.1:6379"

local consumer = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic, invisible = 10 })
local business = mqlease.redis(redis)

local summary = mqlease.run(consumer, function(m, lease)
  -- the effect, fenced. Tokens count per message id (example:{<id>}:fence), so
  -- the store keeps the last one it applied per message id, as long as the
  -- done marker lives (done_ttl, 7 days), and refuses a token not greater:
  -- equal too, since a Redis failover can hand one token to two owners
  local applied, err, code = business:eval([[
    if tonumber(redis.call('GET', KEYS[2]) or '0') >= tonumber(ARGV[1]) then return 0 end
    redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[3])
    redis.call('INCRBY', KEYS[1], ARGV[2])
    return 1]], { "balance:example", "fence:example:" .. m.id }, { lease.fence, tonumber(m.body) or 1, 7 * 86400 })
  if not applied then return nil, ("business write: %s (%s)"):format(err, code) end
  -- refused: a newer owner of this message wrote; its done marker settles the redelivery
  if applied == 0 then return nil, "fenced out: a newer owner of this message wrote" end
  return true
end, {
  concurrency = 16, signals = true,   -- this script is the process: drain on SIGTERM/SIGINT
  policy = mqlease.policy.exactly_once { redis = redis, prefix = "example:" },
  run_for = tonumber(os.getenv("RUN_FOR") or ""),
})
print(("received %d, acked %d, duplicates skipped %d"):format(summary.received, summary.acked,
  consumer:metrics().duplicate_skipped or 0))
business:close()
consumer:close()
