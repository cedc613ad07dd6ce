-- storm_worker.lua ENDPOINTS GROUP TOPIC LOGFILE MODE [GRACE [INVISIBLE]]
-- A worker process for spec/integration/shutdown_spec.lua, run under mqlease.run with
-- SIGTERM/SIGINT handling (signals = true). It appends to LOGFILE one line per event:
--   "deliver <id> <attempt>" when a handler starts, "ack <id>" after an ack.
-- MODE: fail  -- the handler works 3 s, then fails (nack)
--       ok    -- the handler works 0.2 s and succeeds
--       sleep -- the handler works 60 s (killed before it ends)
--       busy  -- the handler spins in a busy loop and never yields
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

local endpoints, group, topic, logfile, mode = arg[1], arg[2], arg[3], arg[4], arg[5]
local grace = tonumber(arg[6] or "1")
local invisible = tonumber(arg[7] or "10")
local log = assert(io.open(logfile, "a"))
log:setvbuf("line")

local consumer = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic,
  invisible = invisible, await = 5, release_delay = 1 })
log:write("ready\n")

local summary = mqlease.run(consumer, function(m)
  log:write(("deliver %s %d\n"):format(m.id, m.delivery_attempt))
  if mode == "fail" then
    mqlease.sleep(3)
    return false, "failing on purpose"
  elseif mode == "ok" then
    mqlease.sleep(0.2)
    return true
  elseif mode == "sleep" then
    mqlease.sleep(60)
    return true
  elseif mode == "busy" then
    local x = 0
    while true do x = x + 1; if x < 0 then break end end
    return true
  end
end, { concurrency = 16, grace = grace, nack_delay = 1, on_error = function() end, signals = true,
  -- the plain policy, acking itself so that only acks that really happened are logged
  policy = function(m, lease, handler)
    local action, delay, err = mqlease.policy.plain(m, lease, handler)
    if action ~= "ack" then return action, delay, err end
    if m:ack() then log:write(("ack %s\n"):format(m.id)) end
    return "skip"
  end })
log:write(("exit %s acked=%d drained=%d nacked=%d\n"):format(summary.reason, summary.acked, summary.drained, summary.nacked))
log:close()
