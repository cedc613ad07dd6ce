-- spec/support/redis_ha_workload.lua: the workload the Sentinel and Cluster
-- specs share -- N messages under the exactly-once policy with 3 workers
-- (spec/support/eo_worker.lua), a fault injected mid-run, and the outcome
-- counted per message from the business store (the single Redis on
-- env.redis_port), which applies a write only with a fence newer than any it
-- has seen for that message.
local mqlease = require "mqlease"
local env = require "support.env"
local read, wait_for = env.read, env.wait_for

local _M = {}

_M.HA = "bash spec/support/redis-ha.sh "

local function worker(group, topic, vars)
  local logfile = os.tmpname()
  local prefix = {}
  for k, v in pairs(vars) do prefix[#prefix + 1] = ("%s=%s"):format(k, v) end
  env.sh(("(env %s lua5.4 spec/support/eo_worker.lua %s %s %s %d %s >%s.out 2>&1 &)"):format(
    table.concat(prefix, " "), env.endpoints, group, topic, env.redis_port, logfile, logfile))
  wait_for(function() return read(logfile):match("ready") end, 30, "worker start")
  return logfile
end

local function sum(logs, pattern)
  local n = 0
  for _, l in ipairs(logs) do n = n + env.count(read(l), pattern) end
  return n
end

local function metric(logs, name)
  local n = 0
  for _, l in ipairs(logs) do n = n + (tonumber(read(l):match(name .. "=(%d+)")) or 0) end
  return n
end

-- Runs the workload: opts.name, opts.messages, opts.worker_env (the lock
-- Redis), opts.fault_after (effects seen before opts.fault() runs).
-- Returns { ids =, applied = {id -> n}, stale =, lock_lost =, unavailable =, done_marker_failed =,
-- runs = }.
function _M.run(opts)
  local topic, group = env.topic(opts.name), env.name("g_" .. opts.name)
  local c = env.consumer { group = group, topic = topic, await = 5 }
  assert(c:receive(1, { await = 0 }))
  c:close()
  local logs = {}
  -- the workers run until every effect is in (the stop file), at most 120 s: a fixed
  -- run time would cut a slow run short and call its unhandled messages lost
  local stop_file = os.tmpname()
  os.remove(stop_file)
  for i = 1, 3 do
    local vars = { EO_FENCED = 1, EO_WORK = 0.4, EO_CONCURRENCY = 4, EO_RUN_FOR = 120, EO_GRACE = 10,
                   EO_STOP_FILE = stop_file }
    for k, v in pairs(opts.worker_env) do vars[k] = v end
    logs[i] = worker(group, topic, vars)
  end
  local producer = env.producer()
  local ids = {}
  for i = 1, opts.messages do ids[i] = assert(producer:send(topic, opts.name .. " " .. i)) end
  producer:close()
  local ok = pcall(wait_for, function() return sum(logs, "effect ") >= opts.fault_after end, 90, "")
  if not ok then
    local tails = {}
    for _, l in ipairs(logs) do tails[#tails + 1] = l .. ": " .. read(l):sub(-300) .. read(l .. ".out"):sub(-600) end
    error(("only %d effects within 90 s; the workers:\n%s"):format(sum(logs, "effect "), table.concat(tails, "\n")))
  end
  opts.fault()
  local business = mqlease.redis("127.0.0.1:" .. env.redis_port)
  local applied = {}
  local function all_applied()
    local done = 0
    for _, id in ipairs(ids) do
      if not applied[id] then
        local v = business:call("GET", "biz:" .. id)
        if v ~= mqlease.null then applied[id] = tonumber(v) end
      end
      if applied[id] then done = done + 1 end
    end
    return done == #ids
  end
  -- a message never applied is not an error here: the report counts it as "never"
  pcall(wait_for, all_applied, 100, "")
  assert(io.open(stop_file, "w")):close()
  wait_for(function()
    for _, l in ipairs(logs) do if not read(l):match("metrics [^\n]*\n") then return false end end
    return true
  end, 90, "the 3 workers to finish")
  os.remove(stop_file)
  for _, id in ipairs(ids) do applied[id] = tonumber(business:call("GET", "biz:" .. id)) end
  business:close()
  return { ids = ids, applied = applied, stale = sum(logs, "stale "), runs = sum(logs, "run "),
    lock_lost = metric(logs, "lock_lost"), unavailable = metric(logs, "redis_unavailable"),
    done_marker_failed = metric(logs, "done_marker_failed"),
    duplicate_skipped = metric(logs, "duplicate_skipped") }
end

-- Checks every message's effect was applied exactly once; prints the figures.
function _M.report(name, out)
  local once, more, none = 0, 0, 0
  for _, id in ipairs(out.ids) do
    local n = out.applied[id] or 0
    if n == 1 then once = once + 1 elseif n > 1 then more = more + 1 else none = none + 1 end
  end
  io.stderr:write(("\n%s: %d messages, effects once %d, more than once %d, never %d; handler runs %d, " ..
    "stale writes rejected by the fence %d, locks lost %d, redis_unavailable %d, done markers failed %d, " ..
    "duplicates skipped %d\n"):format(name, #out.ids, once, more, none, out.runs, out.stale, out.lock_lost,
    out.unavailable, out.done_marker_failed, out.duplicate_skipped))
  return once, more, none
end

return _M
