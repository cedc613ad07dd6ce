-- bench/workers.lua ENDPOINT GROUP TOPIC GO_FILE IDLE_S
-- One worker of the "workers" row of `make bench` (bench/all.sh part workers): several
-- processes run mqlease.run with a no-op handler, in one group, over one pre-loaded backlog
-- on one dev broker. Each builds its consumer, then waits for GO_FILE to exist, so that
-- they all start together; it stops once it has handled nothing for IDLE_S seconds
-- (the backlog is drained, or the others took the rest). Prints one JSON line: what it
-- handled, and when it started and handled its last message on CLOCK_MONOTONIC
-- (mqlease.now(), one clock for every process of the machine), so the script can
-- divide all the workers' messages by the time from the start to the last message of any.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"
local common = require "bench.common"

local endpoint, group, topic, go_file, idle_s = arg[1], arg[2], arg[3], arg[4], tonumber(arg[5])

local c = assert(mqlease.consumer { endpoints = endpoint, group = group, topic = topic,
  invisible = 30, batch = 32, await = 1 })
local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end
while not exists(go_file) do mqlease.sleep(0.005) end

local cpu0, t0 = common.cpu_s(), mqlease.now()
local handled, last = 0, t0
local summary = mqlease.run(c, function()
  handled = handled + 1
  last = mqlease.now()
  return true
end, {
  concurrency = 256, signals = false,
  stop = function() return mqlease.now() - last > idle_s or mqlease.now() - t0 > 300 end,
})
print(common.json {
  _order = { "acked", "start", "last", "cpu_s", "rss_kb" },
  acked = summary.acked, start = t0, last = last,
  -- CPU up to the stop, idle tail included (a worker that waits costs little)
  cpu_s = common.cpu_s() - cpu0, rss_kb = common.status_kb("VmHWM"),
})
