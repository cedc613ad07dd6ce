-- bench/bench.lua MODE ARGS... -- the mqlease side of `make bench`, mirroring
-- bench/java/Bench.java mode for mode; prints one JSON line.
--   produce ENDPOINT TOPIC COUNT SIZE
--   consume ENDPOINT GROUP TOPIC COUNT INVISIBLE_S BATCH
--   hold    ENDPOINT GROUP TOPIC COUNT INVISIBLE_S HOLD_S
--   run     ENDPOINT GROUP TOPIC COUNT [REDIS REDIS_PID]: mqlease.run with a no-op handler over
--           a pre-loaded backlog (bench/lease.lua load); msgs/s and the process's CPU seconds per
--           10,000. With REDIS ("host:port") the run uses mqlease.policy.exactly_once there, and
--           REDIS_PID's CPU (utime + stime from /proc) is reported per message too; with
--           BENCH_BROKER_PID set, that process's (the dev broker's) as well; BENCH_EO_PREFETCH=1
--           runs the policy with prefetch = true (a received batch's locks taken as it arrives),
--           BENCH_EO_FENCE=on_grant with the fencing token issued at each grant
--   send    ENDPOINT TOPIC COUNT SIZE HOW INFLIGHT: COUNT sends of SIZE bytes, HOW = one (one
--           at a time), coroutines (INFLIGHT coroutines sending one at a time each, under
--           mqlease's scheduler) or many (one send_many of all COUNT); max_inflight INFLIGHT.
--           WARMUP (1000) sends the same way first, outside the window; msgs/s and the
--           process's CPU µs per message over the window (as Bench.java sendasync)
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"
local common = require "bench.common"

local mode = arg[1]

local json, percentile, cpu_s = common.json, common.percentile, common.cpu_s
local function rss_kb() return common.status_kb("VmHWM") end

if mode == "run" then
  local endpoint, group, topic, count = arg[2], arg[3], arg[4], tonumber(arg[5])
  local redis, redis_pid = arg[6], arg[7]
  local policy = redis and mqlease.policy.exactly_once {
    redis = redis, prefetch = os.getenv("BENCH_EO_PREFETCH") == "1",
    fence = os.getenv("BENCH_EO_FENCE") or "on_read" } or nil
  local rcpu0 = redis_pid and cpu_s(redis_pid)
  local broker_pid = os.getenv("BENCH_BROKER_PID")
  local bcpu0 = broker_pid and cpu_s(broker_pid)
  -- the main thread alone (its Lua, and the core's calls from it): the
  -- process's task whose id is its pid
  local main = "self/task/" .. common.self_pid()
  local cpu0, mcpu0, t0 = cpu_s(), cpu_s(main), mqlease.now()   -- like the Java side: from before the consumer is built
  local c = assert(mqlease.consumer { endpoints = endpoint, group = group, topic = topic,
    invisible = 30, batch = 32, await = 5 })
  local handled = 0
  local summary = mqlease.run(c, function() handled = handled + 1; return true end, {
    concurrency = 256, signals = false, policy = policy,
    stop = function() return handled >= count or mqlease.now() - t0 > 300 end })
  local s, cpu, mcpu = mqlease.now() - t0, cpu_s() - cpu0, cpu_s(main) - mcpu0
  local n = math.max(summary.acked, 1)
  local order = { "mode", "policy", "count", "seconds", "msgs_per_s", "cpu_s_per_10k", "cpu_us_per_msg", "main_cpu_us_per_msg", "rss_kb" }
  if rcpu0 then order[#order + 1] = "redis_cpu_us_per_msg" end
  if bcpu0 then order[#order + 1] = "broker_cpu_us_per_msg" end
  print(json { _order = order,
    mode = "run", policy = redis and "exactly_once" or "plain", count = summary.acked, seconds = s,
    msgs_per_s = summary.acked / s, cpu_s_per_10k = cpu * 10000 / n, cpu_us_per_msg = cpu * 1e6 / n,
    main_cpu_us_per_msg = mcpu * 1e6 / n,
    redis_cpu_us_per_msg = rcpu0 and (cpu_s(redis_pid) - rcpu0) * 1e6 / n or nil,
    broker_cpu_us_per_msg = bcpu0 and (cpu_s(broker_pid) - bcpu0) * 1e6 / n or nil, rss_kb = rss_kb() })
elseif mode == "produce" then
  local endpoint, topic, count, size = arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5])
  local p = assert(mqlease.producer { endpoints = endpoint })
  local body = ("x"):rep(size)
  assert(p:send(topic, body, { tag = "bench" }))   -- the route lookup, outside the timing
  local t0 = mqlease.now()
  for _ = 2, count do assert(p:send(topic, body, { tag = "bench" })) end
  local s = mqlease.now() - t0
  p:close()
  print(json { _order = { "mode", "count", "seconds", "msgs_per_s", "rss_kb" },
    mode = "produce", count = count, seconds = s, msgs_per_s = (count - 1) / s, rss_kb = rss_kb() })
elseif mode == "consume" then
  local endpoint, group, topic, count, invisible, batch = arg[2], arg[3], arg[4], tonumber(arg[5]), tonumber(arg[6]), tonumber(arg[7])
  local c = assert(mqlease.consumer { endpoints = endpoint, group = group, topic = topic,
    invisible = invisible, batch = math.min(batch, 32), await = 5 })
  local got, t0, cpu0 = 0, mqlease.now(), cpu_s()
  while got < count and mqlease.now() - t0 < 120 do
    local msgs = assert(c:receive())
    if #msgs > 0 then
      assert(c:ack(msgs))   -- one AckMessage for the whole batch
      got = got + #msgs
    end
  end
  local s = mqlease.now() - t0
  c:close()
  local cpu = cpu_s() - cpu0
  print(json { _order = { "mode", "count", "seconds", "msgs_per_s", "cpu_s_per_10k", "rss_kb" },
    mode = "consume", count = got, seconds = s, msgs_per_s = got / s,
    cpu_s_per_10k = cpu * 10000 / math.max(got, 1), rss_kb = rss_kb() })
elseif mode == "hold" then
  local endpoint, group, topic, count, invisible, hold = arg[2], arg[3], arg[4], tonumber(arg[5]), tonumber(arg[6]), tonumber(arg[7])
  local c = assert(mqlease.consumer { endpoints = endpoint, group = group, topic = topic,
    invisible = invisible, batch = 32, await = 5 })
  local held, t0 = {}, mqlease.now()
  while #held < count and mqlease.now() - t0 < 120 do
    for _, m in ipairs(assert(c:receive())) do held[#held + 1] = m end
  end
  -- nothing to do by hand: the core renews all of them while Lua just sleeps
  mqlease.sleep(hold)
  local acked = common.ack_all(c, held, 32)
  local m = c:metrics()
  c:close()
  print(json { _order = { "mode", "count", "acked", "renewals", "renew_fail", "renew_p50_ms", "renew_p99_ms",
      "lateness_p99_ms", "lateness_max_ms", "rss_kb" },
    mode = "hold", count = #held, acked = acked, renewals = m.renew_success, renew_fail = m.renew_fail + m.renew_uncertain,
    renew_p50_ms = percentile(m.renew_latency, 0.5), renew_p99_ms = percentile(m.renew_latency, 0.99),
    lateness_p99_ms = percentile(m.renew_lateness, 0.99), lateness_max_ms = percentile(m.renew_lateness, 1.0),
    rss_kb = rss_kb() })
elseif mode == "send" then
  local endpoint, topic, count, size, how, inflight =
    arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5]), arg[6], tonumber(arg[7])
  local p = assert(mqlease.producer { endpoints = endpoint, max_inflight = inflight })
  local body = ("x"):rep(size)
  local opts = { tag = "bench" }
  -- n sends the chosen way; returns how many failed
  local function round(n)
    local failed = 0
    if how == "one" then
      for _ = 1, n do
        if not p:send(topic, body, opts) then failed = failed + 1 end
      end
    elseif how == "coroutines" then
      local s = require("mqlease.scheduler").new()
      local left = n
      for _ = 1, inflight do
        s:spawn(function()
          while left > 0 do
            left = left - 1
            if not p:send(topic, body, opts) then failed = failed + 1 end
          end
        end)
      end
      s:loop()
    elseif how == "many" then
      local list = {}
      for i = 1, n do list[i] = { body = body, tag = "bench" } end
      local _
      _, failed = p:send_many(topic, list)
    else
      error("bench.lua send: HOW must be one, coroutines or many")
    end
    return failed
  end
  round(tonumber(os.getenv("WARMUP") or 1000))
  local cpu0, t0 = cpu_s(), mqlease.now()
  local failed = round(count)
  local s, cpu = mqlease.now() - t0, cpu_s() - cpu0
  p:close()
  print(json { _order = { "mode", "how", "count", "failed", "seconds", "msgs_per_s", "cpu_us_per_msg", "inflight", "rss_kb" },
    mode = "send", how = how, count = count - failed, failed = failed, seconds = s, msgs_per_s = (count - failed) / s,
    cpu_us_per_msg = cpu * 1e6 / count, inflight = inflight, rss_kb = rss_kb() })
  if failed > 0 then os.exit(3) end
else
  io.stderr:write("usage: bench.lua produce|consume|hold|run|send ...\n")
  os.exit(2)
end
