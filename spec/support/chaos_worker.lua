-- chaos_worker.lua ENDPOINTS GROUP TOPIC LOCK_REDIS BIZ_REDIS LOGFILE
-- A worker under mqlease.run with the exactly-once policy (locks and done
-- markers in LOCK_REDIS, "host:port"), for spec/integration/chaos_spec.lua. It runs until
-- SIGTERM (the drain, signals = true) or SIGKILL. Environment:
--   CW_WORK        seconds each handler works (default 0.2)
--   CW_TAIL        "1": heavy-tailed work -- CW_WORK x a Pareto draw (alpha 1.2), capped at
--                  CW_MAX_WORK (default 25), so some handlers outlive the 10 s lease
--   CW_SLOW_SHARE  share of handlers that work CW_SLOW seconds instead (default 0; CW_SLOW 15)
--   CW_EFFECT      "incr" (default): the business effect is INCR <prefix>biz:<id> in BIZ_REDIS
--                  "fenced": one script in LOCK_REDIS does INCR <prefix>biz:<id> and sets the
--                  done marker, only while the lease's fence is still the newest one (the
--                  fenced write README recommends; an older fence is refused)
--   CW_PREFIX      prefix of the business keys (default "chaos:")
--   CW_LOCK_TTL    the policy's lock_ttl (default 15); CW_GRACE: drain grace (default 3)
--   CW_CONCURRENCY handlers at once (default 16)
--   CW_POLICY      "exactly_once" (default) or "plain" (no Redis; "ack <id>" / "ackfail <id> <code>"
--                  lines say what each ack did)
-- Log lines: "ready <pid>", "run <id> <attempt> <fence>", "effect <id>", "stale <id>",
-- and after a drain "metrics acked=N handoff=N duplicate_skipped=N redis_unavailable=N ...".
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

local endpoints, group, topic, lock_redis, biz_redis, logfile = arg[1], arg[2], arg[3], arg[4], arg[5], arg[6]
local env = function(k, d) local v = os.getenv(k); return v ~= nil and v ~= "" and v or d end
local work = tonumber(env("CW_WORK", "0.2"))
local tail = env("CW_TAIL", "0") == "1"
local max_work = tonumber(env("CW_MAX_WORK", "25"))
local effect = env("CW_EFFECT", "incr")
local prefix = env("CW_PREFIX", "chaos:")
local log = assert(io.open(logfile, "a"))
log:setvbuf("line")
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16) % 100000)

-- INCR the effect and set the done marker in one step, only for the newest fence.
local FENCED = [[
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('incr', KEYS[2])
redis.call('set', KEYS[3], '1', 'EX', ARGV[2])
return 1
]]

local slow_share, slow = tonumber(env("CW_SLOW_SHARE", "0")), tonumber(env("CW_SLOW", "15"))

local function duration()
  if math.random() < slow_share then return slow end
  if not tail then return work end
  -- Pareto(alpha = 1.2, x_min = work): most short, a few many times longer
  return math.min(work / (1 - math.random()) ^ (1 / 1.2), max_work)
end

local consumer = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic,
  invisible = 10, await = 5, batch = 16, release_delay = 1 })
local business = env("CW_POLICY", "") ~= "plain" and mqlease.redis(effect == "fenced" and lock_redis or biz_redis)
local stat = assert(io.open("/proc/self/stat"))
log:write(("ready %s\n"):format(stat:read("l"):match("^(%d+)")))
stat:close()

local concurrency = tonumber(env("CW_CONCURRENCY", "16"))
-- CW_POLICY=plain: no Redis (LOCK_REDIS is ignored); acks are logged as they happen,
-- so a duplicate delivery shows as a second "run" and a second "ack".
local function plain_logged(m, lease, handler)
  local action, delay, err = mqlease.policy.plain(m, lease, handler)
  if action ~= "ack" then return action, delay, err end
  local ok, aerr, code = m:ack()
  if ok then log:write(("ack %s\n"):format(m.id))
  else log:write(("ackfail %s %s %s\n"):format(m.id, tostring(code), tostring(aerr))) end
  return "skip"
end
local plain = env("CW_POLICY", "exactly_once") == "plain"

local summary = mqlease.run(consumer, function(m, lease)
  log:write(("run %s %d %s\n"):format(m.id, m.delivery_attempt, tostring(lease.fence)))
  mqlease.sleep(duration())
  if plain then
    log:write(("effect %s\n"):format(m.id))
    return true
  elseif effect == "fenced" then
    local keys = mqlease.policy.keys(m.id)   -- the policy's own fence and done marker
    local applied, err = business:eval(FENCED,
      { keys.fence, prefix .. "biz:" .. m.id, keys.done },
      { lease.fence, 7 * 86400 })
    if applied == nil then return false, err end
    if applied == 0 then
      log:write(("stale %s\n"):format(m.id))
      return false, "a newer fence exists"
    end
  else
    local ok, err = business:call("INCR", prefix .. "biz:" .. m.id)
    if not ok then return false, err end
  end
  log:write(("effect %s\n"):format(m.id))
  return true
end, {
  concurrency = concurrency, max_inflight = concurrency, grace = tonumber(env("CW_GRACE", "3")),
  nack_delay = 1, on_error = function() end, signals = true,
  policy = plain and plain_logged or mqlease.policy.exactly_once { redis = { address = lock_redis, timeout = 0.5 },
    defer_delay = 1, fail_delay = 1, lock_ttl = tonumber(env("CW_LOCK_TTL", "15")) },
})
local m = consumer:metrics()
local errors = {}
for _, e in ipairs(m.errors or {}) do errors[#errors + 1] = ("%s/%s:%d"):format(e.op, e.code, e.n) end
log:write(("metrics acked=%d handoff=%d duplicate_skipped=%d redis_unavailable=%d done_marker_failed=%d " ..
  "expire_while_alive=%d renew_fail=%d renew_uncertain=%d lost_expired=%d lost_rejected=%d reconnects=%d " ..
  "acks_fail=%d received=%d inflight=%d errors=%s\n"):format(summary.acked, m.handoff or 0,
  m.duplicate_skipped or 0, m.redis_unavailable or 0, m.done_marker_failed or 0, m.expire_while_alive or 0,
  m.renew_fail or 0, m.renew_uncertain or 0, m.lost_expired or 0, m.lost_rejected or 0, m.reconnects or 0,
  m.acks_fail or 0, m.received or 0, m.inflight or 0, table.concat(errors, ",")))
if business then business:close() end
log:close()
