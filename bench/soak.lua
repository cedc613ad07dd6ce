-- bench/soak.lua [N] -- `make soak`: N small messages (default 1,000,000; SOAK_N) through
-- mqlease.run on the dev broker with a handler that does nothing, to show that
-- nothing grows with the number of messages: the RSS curve (a line every ~10 %),
-- then the core's lease table (metrics().inflight), the Lua lease objects and the
-- pending operation results, all back to zero.
--
-- A second process (this file with "produce") sends the messages while this one
-- consumes, so the consumer's memory is measured alone; the broker's RSS is printed
-- beside it (it keeps every message, so it grows). Not part of `make test`.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

local kb = require("bench.common").status_kb

local function fds()
  local p = assert(io.popen("ls /proc/" .. (io.open("/proc/self/stat"):read("l"):match("^%d+")) .. "/fd | wc -l"))
  local n = tonumber(p:read("l"))
  p:close()
  return n
end

if arg[1] == "produce" then
  -- produce ENDPOINTS TOPIC N: sends N 16-byte bodies, retrying a failed send
  local endpoints, topic, n = arg[2], arg[3], tonumber(arg[4])
  local p = assert(mqlease.producer { endpoints = endpoints })
  for i = 1, n do
    local body = ("soak %011d"):format(i)
    while not p:send(topic, body) do mqlease.sleep(0.1) end
  end
  p:close()
  return
end

local n = tonumber(arg[1] or os.getenv("SOAK_N") or "1000000")
-- the optimised dev broker ($MQLEASE_DEVBROKER from make soak, else build/'s;
-- the sanitizer one is for specs)
local dv = assert(require("mqlease.launch").devbroker { root = ".", topics = { "soak" } })
local producer_pid
local ok, err = pcall(function()
  local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "soak", topic = "soak",
    await = 5, batch = 32, invisible = 30 })
  local p = assert(io.popen(("%s bench/soak.lua produce %s soak %d >/tmp/mqlease-soak-producer.log 2>&1 & echo $!")
    :format(arg[-1] or "lua5.4", dv.endpoints, n)))
  producer_pid = tonumber(p:read("l"))
  p:close()

  local t0 = mqlease.now()
  local handled, next_report, step = 0, 0, math.max(1, n // 10)
  local fds0 = fds()
  print(("soak: %d messages through mqlease.run on the dev broker (%s), no-op handler"):format(n, dv.endpoints))
  print(("%10s %9s %9s %8s %8s %9s %11s"):format("handled", "seconds", "msg/s", "RSS MiB", "Lua MiB", "inflight",
    "broker MiB"))
  local function report()
    local t = mqlease.now() - t0
    print(("%10d %9.1f %9.0f %8.1f %8.2f %9d %11.1f"):format(handled, t, handled / math.max(t, 1e-9),
      kb("VmRSS") / 1024, collectgarbage("count") / 1024, c:metrics().inflight, kb("VmRSS", dv.pid) / 1024))
    io.stdout:flush()
  end
  local final
  local summary = mqlease.run(c, function() handled = handled + 1; return true end, {
    signals = false, concurrency = 64, nack_delay = 0,
    stop = function()
      if handled >= next_report then
        report()
        next_report = next_report + step
      end
      if handled < n then return false end
      -- every handler ran: wait for the last acks
      local m = c:metrics()
      if m.acks_ok < n then return false end
      final = m
      return true
    end,
  })
  local after = c:metrics()
  collectgarbage()
  collectgarbage()
  local leases, results = 0, 0
  for _ in pairs(c._router.leases) do leases = leases + 1 end
  for _ in pairs(c._router.results) do results = results + 1 end
  local t = mqlease.now() - t0
  print(("soak: %d handled in %.1f s (%.0f msg/s); acked %d, nacked %d, failed %d; RSS peak %.1f MiB, now %.1f MiB")
    :format(handled, t, handled / t, summary.acked, summary.nacked, summary.failed, kb("VmHWM") / 1024, kb("VmRSS") / 1024))
  print(("soak: at the last ack the core held %d leases; after close: core leases %d, Lua messages still mapped to a lease %d, " ..
    "pending op results %d, open fds %d (at start %d)")
    :format(final.inflight, after.inflight or 0, leases, results, fds(), fds0))
  assert(final.inflight == 0 and leases == 0 and results == 0, "something was left behind")
  assert(summary.acked == n, "not every message was acked")
end)
if producer_pid then os.execute(("kill %d 2>/dev/null"):format(producer_pid)) end
dv.stop()
if not ok then
  io.stderr:write("soak: " .. tostring(err) .. "\n")
  os.exit(1)
end
