-- examples/exactly-once/custom_policy.lua -- writing your own handling policy.
--
--   lua5.4 custom_policy.lua [ENDPOINTS [GROUP [TOPIC [REDIS_ADDRESS]]]]
--   (defaults: 127.0.0.1:8081 worker tasks 127.0.0.1:6379)
--
-- A policy is a plain function (see lua/mqlease/policy.lua):
--   policy(m, lease, handler) -> "ack" | "nack" | "defer" | "skip" [, delay [, err [, after]]]
-- This one is "at most once per day per message id, best effort": it skips a
-- message whose id it saw in the last 24 h (a SET NX marker, no lock), and
-- sends poison messages (attempt 5 and later) to a Redis list instead of
-- retrying them forever. Idempotency is keyed by the broker's message id,
-- never by business fields.
local mqlease = require "mqlease"

local endpoints, group, topic = arg[1] or "127.0.0.1:8081", arg[2] or "worker", arg[3] or "tasks"
local address = arg[4] or "127.0.0.1:6379"
local redis = mqlease.redis(address)

local function seen_today(m, lease, handler)
  if m.delivery_attempt >= 5 then
    -- park it for a human; ack only once it is safely stored
    local stored = redis:call("RPUSH", "poison:" .. topic, m.id .. " " .. m.body)
    if not stored then return "nack", 30 end
    return "ack"
  end
  local fresh, err = redis:call("SET", "seen:" .. m.id, "1", "NX", "EX", 86400)
  if fresh == nil then return "nack", 5, "redis: " .. tostring(err) end   -- unknown: retry later
  if fresh == mqlease.null then return "ack" end                         -- seen: skip it
  local ok, res, herr = pcall(handler, m, lease)
  if ok and res then return "ack" end
  -- forget the marker, so the retry runs
  return "nack", nil, ok and (herr or "handler returned false") or res,
    function() redis:call("DEL", "seen:" .. m.id) end
end

local consumer = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic })
mqlease.run(consumer, function(m)
  print("handling", m.id, m.body)
  return true
end, { policy = seen_today, concurrency = 16, signals = true })
redis:close()
