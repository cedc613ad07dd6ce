-- bench/lease.lua load ENDPOINT TOPIC COUNT [SIZE]
-- bench/lease.lua hold ENDPOINT TOPIC COUNT INVISIBLE_S HOLD_S [SPIN_S]
-- One row of the lease-scale table of `make bench`. `load` pre-loads COUNT messages of 100
-- bytes into the broker (the dev broker) from its own process, so the holder's memory
-- figures start clean; `hold` receives and holds them, as a user holds them (Lua message objects
-- alive), while the core renews them: from the receive for one renewal period (see
-- below), then for a window of HOLD_S seconds
-- in which rate and CPU are measured (steady state: two renewal periods are
-- 2 x INVISIBLE_S / 3); prints one JSON line.
-- SPIN_S > 0 spins the Lua VM in a busy loop for that long at the start of the window (a
-- handler that never yields): the renewals must not care.
--
-- What it reports, from the client process only:
--   expired     leases that expired while held (metrics.expire_while_alive), whole run
--   uncertain   renewals whose reply never came (metrics.renew_uncertain), whole run
--   renewals/s  renewals answered in the window over its length
--   lateness / renew latency p99, interpolated in the core's histogram buckets
--   bytes per lease: RSS growth (VmRSS) from before the first receive to all held, over
--     the leases: rss_bytes_per_lease, what the user's process pays (message objects and
--     bodies included); bytes_per_lease, the same minus the bodies; lua_bytes_per_lease,
--     the Lua heap's share (collectgarbage "count", bodies included)
--   CPU µs per renewal: user+system time of the whole process (/proc/self/stat: the core's
--     thread and grpc's) during the window, over the renewals in it; Lua sleeps in C
--     meanwhile (not with SPIN_S, whose row reports no CPU figure)
-- With BENCH_BROKER_PID (the dev broker's process id) it reports the broker beside it:
-- its CPU µs per renewal in the same window, and its VmRSS once every lease is held
-- (the broker keeps every message it ever stored, so that includes the earlier rows').
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"
local common = require "bench.common"

local mode, endpoint, topic = arg[1], arg[2], arg[3]
local count, invisible, hold = tonumber(arg[4]), tonumber(arg[5]), tonumber(arg[6])
local spin = tonumber(arg[7] or "0")
local BODY = ("x"):rep(mode == "load" and tonumber(arg[5] or "100") or 100)
local group = topic .. "_g"

local status_kb, cpu_s, percentile, json = common.status_kb, common.cpu_s, common.percentile, common.json
local broker = tonumber(os.getenv("BENCH_BROKER_PID") or "")
local function broker_cpu_s() return broker and cpu_s(broker) or 0 end

-- Pre-load: many sends in flight at once through the core (the Lua producer API sends
-- one at a time; this is only the bench's setup, not what it measures).
local function preload()
  local p = assert(mqlease.producer { endpoints = endpoint })
  assert(p:send(topic, BODY, { tag = "bench" }))
  local router = p._router
  local client = router.client
  local window, sent, pending = 256, 1, {}
  local npending = 0
  while sent < count or npending > 0 do
    while sent < count and npending < window do
      pending[client:send(topic, BODY, "bench", nil, nil)] = true
      sent = sent + 1
      npending = npending + 1
    end
    for op in pairs(pending) do
      local ev = router:result(op)
      assert(ev.ok, ev.err)
      pending[op] = nil
      npending = npending - 1
      break
    end
  end
  p:close()
end

if mode == "load" then
  local t = mqlease.now()
  preload()
  print(('{"count":%d,"load_s":%.3f}'):format(count, mqlease.now() - t))
  return
end
assert(mode == "hold", "usage: lease.lua load|hold ...")

local c = assert(mqlease.consumer { endpoints = endpoint, group = group, topic = topic,
  invisible = invisible, batch = 32, await = 1 })
collectgarbage("collect")
local rss0, lua0 = status_kb("VmRSS"), collectgarbage("count")

-- RECEIVERS receives in flight at once (coroutines of mqlease's scheduler): with a million
-- leases the first ones renew (25,000 a second at 120 s) while the rest are still being
-- received, and one receive at a time could not keep up with that on a shared machine.
-- Each receive asks only for what no other receive has asked for yet: a receive that
-- asked for messages the others took long-polls (5 s at least, the proxy's floor) for
-- messages that do not exist, which kept the fill open 5 s past its end while the first
-- renewals ran (20,000 leases: 5.4 s to receive instead of 0.6).
local RECEIVERS = 4
-- BENCH_FILL_S: stop receiving after that many seconds (900). A consumer that holds more
-- leases than it can renew on time holds its receives (renewals first): its fill stops
-- where the renewals keep up, and this bounds how long the row waits for the rest.
local fill_s = tonumber(os.getenv("BENCH_FILL_S") or "900")
local held, t0 = {}, mqlease.now()
local asked = 0   -- messages asked for by the receives in flight
local tasks = require("mqlease.scheduler").new(function(_, err) error(err) end)
for _ = 1, RECEIVERS do
  tasks:spawn(function()
    while mqlease.now() - t0 < fill_s do
      -- nothing left to ask for: the receives in flight cover the rest (one that
      -- comes back short asks again in its own loop)
      local want = math.min(32, count - #held - asked)
      if want <= 0 then break end
      asked = asked + want
      local got = assert(c:receive(want))
      asked = asked - want
      for _, m in ipairs(got) do held[#held + 1] = m end
    end
  end)
end
tasks:loop()
local t_receive = mqlease.now() - t0
collectgarbage("collect")
local rss1, lua1 = status_kb("VmRSS"), collectgarbage("count")
local broker_rss_kb = broker and status_kb("VmRSS", broker) or -1

-- The window starts once every lease renews once a period. A lease's first renewal comes
-- between 0.9 and 1.9 periods after its receive, at its own phase of the period
-- (src/lease/mql_pace.h); from 0.9 period after the last receive on, each lease renews at
-- each of its phases. Before that, leases still waiting for their first renewal would
-- make the rate look low. Waiting a whole period after the fill covers it. A fill longer
-- than a period (a million leases take about 100 s on two shared cores) also leaves a backlog:
-- renewals fell due while the receives took the CPU; it drains at what the pair carries above
-- the steady rate, so such a row waits a second period before its window.
local function renewed(mt) return mt.renew_success + mt.renew_fail + mt.renew_uncertain end
-- BENCH_TRACE=1: sleeps in steps of 5 s and prints each step's renewals a second and renewal
-- lateness p99 to stderr, to see a backlog form and drain.
local trace, filled = os.getenv("BENCH_TRACE") == "1", mqlease.now()
local function sleep_for(s, label)
  if not trace then return mqlease.sleep(s) end
  local stop = mqlease.now() + s
  while mqlease.now() < stop do
    local m0, t0 = c:metrics(), mqlease.now()
    mqlease.sleep(math.min(5, stop - t0))
    local m1, t1 = c:metrics(), mqlease.now()
    io.stderr:write(("%s t=%.0f s renewals/s=%.0f lateness_p99_ms=%.1f\n"):format(label,
      t1 - filled, (renewed(m1) - renewed(m0)) / (t1 - t0),
      percentile(common.hist_since(m1.renew_lateness, m0.renew_lateness), 0.99)))
  end
end
local period = invisible / 3
local w0 = mqlease.now()
-- BENCH_WAIT_S: wait that long instead (a row for the memory figures only, which are
-- taken at the end of the fill: no steady state needed)
local wait_for = tonumber(os.getenv("BENCH_WAIT_S") or "") or (t_receive > period and 2 * period or period)
sleep_for(wait_for, "wait")
local wait_s = mqlease.now() - w0

local m0, cpu0, bcpu0, h0 = c:metrics(), cpu_s(), broker_cpu_s(), mqlease.now()
if spin > 0 then
  local deadline, x = mqlease.now() + spin, 0
  while mqlease.now() < deadline do x = x + 1 end
end
local rest = hold - (mqlease.now() - h0)
if rest > 0 then sleep_for(rest, "window") end
local m1, cpu1, bcpu1, h1 = c:metrics(), cpu_s(), broker_cpu_s(), mqlease.now()

local acked = common.ack_all(c, held, 256)
local m = c:metrics()
c:close()

local n = #held
local renewals = renewed(m1) - renewed(m0)
print(json({
  count = n, acked = acked, invisible_s = invisible, hold_s = h1 - h0, spin_s = spin,
  receive_s = t_receive, wait_s = wait_s,
  renewals = m.renew_success, renewals_hold = renewals, renewals_per_s = renewals / (h1 - h0),
  renew_fail = m.renew_fail, uncertain = m.renew_uncertain, expired = m.expire_while_alive,
  lateness_p50_ms = percentile(m.renew_lateness, 0.5), lateness_p99_ms = percentile(m.renew_lateness, 0.99),
  lateness_max_ms = percentile(m.renew_lateness, 1.0),
  -- the window's own: a fill that fell behind weighs in the whole run's above
  lateness_window_p99_ms = percentile(common.hist_since(m1.renew_lateness, m0.renew_lateness), 0.99),
  renew_p50_ms = percentile(m.renew_latency, 0.5), renew_p99_ms = percentile(m.renew_latency, 0.99),
  rss_bytes_per_lease = (rss1 - rss0) * 1024 / math.max(n, 1),
  bytes_per_lease = (rss1 - rss0) * 1024 / math.max(n, 1) - #BODY,
  lua_bytes_per_lease = (lua1 - lua0) * 1024 / math.max(n, 1),
  cpu_us_per_renewal = (spin > 0 or renewals == 0) and -1 or (cpu1 - cpu0) * 1e6 / renewals,
  rss_kb = status_kb("VmHWM"),
  broker_cpu_us_per_renewal = (not broker or spin > 0 or renewals == 0) and -1 or (bcpu1 - bcpu0) * 1e6 / renewals,
  broker_rss_kb = broker_rss_kb,
  receives_held = m.receives_held or 0, receives_held_empty = m.receives_held_empty or 0,
  queue_age_max_ms = (m.renew_queue_age_max_seconds or 0) * 1000,
}, { "count", "acked", "invisible_s", "hold_s", "spin_s", "receive_s", "wait_s", "renewals",
  "renewals_hold", "renewals_per_s", "renew_fail", "uncertain", "expired", "lateness_p50_ms",
  "lateness_p99_ms", "lateness_max_ms", "lateness_window_p99_ms", "renew_p50_ms", "renew_p99_ms", "rss_bytes_per_lease", "bytes_per_lease",
  "lua_bytes_per_lease", "cpu_us_per_renewal", "rss_kb", "broker_cpu_us_per_renewal",
  "broker_rss_kb", "receives_held", "receives_held_empty", "queue_age_max_ms" }))
