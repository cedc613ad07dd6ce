-- bench/table.lua RESULTS COUNT SIZE HOLD HOLD_S HOLD_BIG [LEASE_RESULTS]: the Markdown
-- tables of a bench run: mqlease vs the Java client (when RESULTS has rows), then the
-- lease-scale table (when LEASE_RESULTS has rows). Every figure is the median of the runs
-- in the files, with min-max beside it when there are several.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cjson = require "cjson"
local file, count, size, hold, hold_s, hold_big = arg[1], arg[2], arg[3], tonumber(arg[4]), arg[5], tonumber(arg[6])
local lease_file = arg[7]
local rows = { lua = {}, java = {}, luarun = {}, javarun = {} }
local nrows = 0
for line in io.lines(file) do
  local who, json = line:match("^(%a+) (.*)$")
  if not who then goto next_line end   -- a blank line (raw files appended by hand)
  local r = cjson.decode(json)
  r.rss_mb = r.rss_kb and r.rss_kb / 1024
  local key = r.mode
  if r.mode == "run" and r.policy == "exactly_once" then key = "run_eo" end
  if r.mode == "hold" then key = r.count == hold and "hold" or "hold_big" end
  rows[who][key] = rows[who][key] or {}
  table.insert(rows[who][key], r)
  if who == "lua" or who == "java" then nrows = nrows + 1 end
  ::next_line::
end
local stat = require("bench.common").stat
local function nruns(...)
  local n = 0
  for _, runs in ipairs({ ... }) do n = math.max(n, #runs) end
  return n
end
local function sh(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  local out = p and p:read("l")
  if p then p:close() end
  return out or "?"
end
local L, J = rows.lua, rows.java
local uname = sh("uname -srm")
local cpu = sh("nproc")
print(("mqlease %s (%s, grpc %s, protobuf-c %s), %s, %s cores shared with other work, load average %s at %s UTC"):format(
  require("mqlease")._VERSION or "?", sh("lua5.4 -v"):match("Lua [%d.]+") or "Lua 5.4", sh("pkg-config --modversion grpc"),
  sh("pkg-config --modversion libprotobuf-c"), uname, cpu, sh("cut -d' ' -f1-3 /proc/loadavg"), os.date("!%Y-%m-%d %H:%M")))
print("")

local function lease_table()
  local by_row, order = {}, {}
  local runs_dev, workers = {}, {}
  local java = { leases = {}, workers = {} }   -- the Java client's rows (part jcost)
  for line in io.lines(lease_file) do
    local what, json = line:match("^(%a+) (.*)$")
    local r = cjson.decode(json)
    r.rss_mb = r.rss_kb / 1024
    -- rows of a lease.lua before rss_bytes_per_lease: the same figure, their bodies (100 bytes) added back
    if r.bytes_per_lease and not r.rss_bytes_per_lease then r.rss_bytes_per_lease = r.bytes_per_lease + 100 end
    if r.broker_rss_kb and r.broker_rss_kb >= 0 then r.broker_rss_mb = r.broker_rss_kb / 1024 end
    if what == "run" then
      runs_dev[#runs_dev + 1] = r
    elseif what == "workers" then
      workers[#workers + 1] = r
    elseif what == "jworkers" then
      java.workers[#java.workers + 1] = r
    elseif what == "jlease" then
      local rows = java.leases[r.count] or {}
      java.leases[r.count] = rows
      rows[#rows + 1] = r
    else
      if not by_row[r.row] then by_row[r.row] = {}; order[#order + 1] = r.row end
      table.insert(by_row[r.row], r)
    end
  end
  if #order == 0 then return workers, nil, nil, java end
  local function thousands(n) return ("%d"):format(n):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "") end
  print(("Lease scale: one consumer on the dev broker (loopback, same machine), 100-byte bodies, up to %d runs per row;"):format(#by_row[order[1]]))
  print("median (min–max); a value without a range is one run. Memory and CPU are the client process's only.")
  print("")
  print("| leases (invisible, window) | expired while alive | uncertain | renewals/s | renewal lateness p99 (ms): whole run / window | renewal latency p99 (ms) | client RSS per lease, body included; Lua's part | client CPU µs per renewal | peak RSS |")
  print("|---|---|---|---|---|---|---|---|---|")
  for _, key in ipairs(order) do
    local runs = by_row[key]
    local r1 = runs[1]
    local label = ("%s (%d s, %d s)"):format(thousands(r1.count), r1.invisible_s, math.floor(r1.hold_s + 0.5))
    if r1.spin_s > 0 then label = ("%s, Lua VM spinning %d s (%d s, %d s)"):format(thousands(r1.count), r1.spin_s, r1.invisible_s, math.floor(r1.hold_s + 0.5)) end
    if r1.wait_s then   -- rows with a steady-state window: say how many periods
      local periods = math.floor(r1.hold_s / (r1.invisible_s / 3) + 0.5)
      label = label:gsub(" s%)$", (" s = %d period%s)"):format(periods, periods == 1 and "" or "s"))
    end
    print(("| %s | %s | %s | %s | %s / %s | %s | %s; Lua %s | %s | %s MB |"):format(label,
      stat(runs, "expired"), stat(runs, "uncertain"), stat(runs, "renewals_per_s"),
      stat(runs, "lateness_p99_ms", "%.1f"), stat(runs, "lateness_window_p99_ms", "%.1f"), stat(runs, "renew_p99_ms", "%.1f"),
      stat(runs, "rss_bytes_per_lease"), stat(runs, "lua_bytes_per_lease"),
      r1.spin_s > 0 and "-" or stat(runs, "cpu_us_per_renewal"), stat(runs, "rss_mb")))
  end
  print("")
  print("The dev broker beside it (same machine, same cores): its CPU per renewal in the same window and")
  print("its RSS once every lease is held (it keeps every message it stored, earlier rows' too):")
  print("")
  print("| leases | dev broker CPU µs per renewal | dev broker RSS |")
  print("|---|---|---|")
  for _, key in ipairs(order) do
    local runs = by_row[key]
    if runs[1].spin_s == 0 then
      print(("| %s | %s | %s MB |"):format(thousands(runs[1].count), stat(runs, "broker_cpu_us_per_renewal"),
        stat(runs, "broker_rss_mb")))
    end
  end
  print("")
  print("Bytes per lease: growth of VmRSS from before the first receive to all leases held, minus the")
  print("bodies; the Lua part is the growth of the Lua heap. CPU: user+system time of the client process")
  print("(/proc/self/stat) in the window over the renewals answered in it; the broker's is in its own table.")
  print("The window opens a renewal period after the fill, when every lease renews once a period at its")
  print("own phase (two periods when the fill took longer than one: its backlog drains first): rate and")
  print("CPU are the steady state's; expired and uncertain count the whole run, receive to close.")
  print("Percentiles are interpolated in the core's histogram buckets (1, 2.5, 5, 10, 25, 50 ms, ...).")
  print("")
  if #runs_dev > 0 then
    print(("mqlease.run, no-op handler, %d pre-loaded messages on the dev broker: %s msg/s, %s s client CPU per 10,000 messages, peak RSS %s MB."):format(
      runs_dev[1].count, stat(runs_dev, "msgs_per_s"), stat(runs_dev, "cpu_s_per_10k", "%.2f"), stat(runs_dev, "rss_mb")))
    print("")
  end
  return workers, by_row, order, java
end

-- One row per (workers, run) from the workers' lines: all their messages over the time
-- from the start to the last message any of them handled.
local function workers_runs(lines)
  local by, order = {}, {}
  for _, r in ipairs(lines) do
    local key = r.workers .. "/" .. r.run
    local g = by[key]
    if not g then
      g = { workers = r.workers, backlog = r.backlog, acked = 0, start = r.start, last = r.last,
        cpu_s = 0, broker_s = r.broker_ticks / 100 }
      by[key] = g
      order[#order + 1] = key
    end
    g.acked = g.acked + r.acked
    g.start, g.last = math.min(g.start, r.start), math.max(g.last, r.last)
    g.cpu_s = g.cpu_s + r.cpu_s
  end
  local rows, worder = {}, {}
  for _, key in ipairs(order) do
    local g = by[key]
    g.msgs_per_s = g.acked / math.max(g.last - g.start, 1e-3)
    g.cpu_us_per_msg = g.cpu_s * 1e6 / math.max(g.acked, 1)
    g.broker_us_per_msg = g.broker_s * 1e6 / math.max(g.acked, 1)
    if not rows[g.workers] then rows[g.workers] = {}; worder[#worder + 1] = g.workers end
    table.insert(rows[g.workers], g)
  end
  table.sort(worder)
  return rows, worder
end

-- "Cost as work grows": the lease rows and the workers rows in one table, the Java
-- client's figures beside mqlease's where part jcost measured them.
local function cost_table(lines, by_row, order, java)
  local wrows, worder = workers_runs(lines or {})
  java = java or { leases = {}, workers = {} }
  local jwrows = workers_runs(java.workers)
  if #worder == 0 and not order then return end
  local function thousands(n) return ("%d"):format(n):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "") end
  local function or_dash(runs, key, fmt) return runs and stat(runs, key, fmt) or "-" end
  print(("Cost as work grows: the dev broker and the clients on the same %s cores, shared with other work;"):format(sh("nproc")))
  print("median (min–max) of the runs. A lease row is one process holding that many leases (CPU per")
  print("renewal); a workers row is that many processes draining one backlog of 100-byte messages in one")
  print("group (CPU per message, all workers summed): mqlease.run (no-op handler, concurrency 256), or")
  print("the Java client's SimpleConsumer (rocketmq-client-java 5.0.7: receive 32, ackAsync each, as its")
  print("users write it; renewals by changeInvisibleDurationAsync, 512 in flight as mqlease keeps).")
  print("\"broker\" is the dev broker's CPU in the same window: beside mqlease / beside Java.")
  print("")
  print("| work | RSS per lease, body included: mqlease / Java | client CPU µs per renewal or message: mqlease / Java | broker CPU µs per renewal or message: mqlease's / Java's | renewals/s or msg/s: mqlease / Java |")
  print("|---|---|---|---|---|")
  for _, key in ipairs(order or {}) do
    local runs = by_row[key]
    if runs[1].spin_s == 0 then
      local j = java.leases[runs[1].count]
      print(("| %s leases | %s / %s | %s / %s | %s / %s | %s / %s |"):format(thousands(runs[1].count),
        stat(runs, "rss_bytes_per_lease"), or_dash(j, "bytes_per_lease"),
        stat(runs, "cpu_us_per_renewal"), or_dash(j, "cpu_us_per_renewal"),
        stat(runs, "broker_cpu_us_per_renewal"), or_dash(j, "broker_cpu_us_per_renewal"),
        stat(runs, "renewals_per_s"), or_dash(j, "renewals_per_s")))
    end
  end
  for _, w in ipairs(worder) do
    local runs, j = wrows[w], jwrows[w]
    print(("| %d worker%s, %s messages | - | %s / %s | %s / %s | %s / %s msg/s |"):format(w, w == 1 and "" or "s",
      thousands(runs[1].backlog), stat(runs, "cpu_us_per_msg", "%.1f"), or_dash(j, "cpu_us_per_msg", "%.1f"),
      stat(runs, "broker_us_per_msg", "%.1f"), or_dash(j, "broker_us_per_msg", "%.1f"),
      stat(runs, "msgs_per_s"), or_dash(j, "msgs_per_s")))
  end
  print("")
  local failed = 0
  for _, rows in pairs(java.leases) do
    for _, r in ipairs(rows) do failed = failed + (r.renew_fail or 0) + (r.ack_failed or 0) end
  end
  if next(java.leases) then
    print(("The Java rows' failed renewals and final acks, all runs: %d (a failed renewal is a lease lost)."):format(failed))
    print("")
  end
end

if nrows > 0 then
  print("mqlease vs rocketmq-client-java 5.0.7 on RocketMQ 5.2.0 (namesrv + proxy local mode, loopback):")
  print("")
  print(("Median of %d runs (min–max):"):format(nruns(L.produce or {}, J.produce or {})))
  print("")
  print("| measure | mqlease (Lua 5.4) | Java client 5.0.7 |")
  print("|---|---|---|")
  print(("| produce %s x %s B, one at a time (msg/s) | %s | %s |"):format(count, size, stat(L.produce, "msgs_per_s"), stat(J.produce, "msgs_per_s")))
  print(("| consume + ack a backlog of %s (msg/s) | %s | %s |"):format(count, stat(L.consume, "msgs_per_s"), stat(J.consume, "msgs_per_s")))
  print(("| peak RSS (MB), producer | %s | %s |"):format(stat(L.produce, "rss_mb"), stat(J.produce, "rss_mb")))
  print(("| peak RSS (MB), consumer | %s | %s |"):format(stat(L.consume, "rss_mb"), stat(J.consume, "rss_mb")))
  local lh, jh = L.hold, J.hold
  print(("| hold %d leases %s s (invisible 10 s): renewals / failed | %s / %s | %s / %s |"):format(hold, hold_s,
    stat(lh, "renewals"), stat(lh, "renew_fail"), stat(jh, "renewals"), stat(jh, "renew_fail")))
  print(("| renewal latency p50 / p99 (ms) | %s / %s | %s / %s |"):format(stat(lh, "renew_p50_ms", "%.1f"), stat(lh, "renew_p99_ms", "%.1f"),
    stat(jh, "renew_p50_ms", "%.1f"), stat(jh, "renew_p99_ms", "%.1f")))
  print(("| renewal lateness p99 (ms) | %s | %s |"):format(stat(lh, "lateness_p99_ms", "%.1f"), stat(jh, "lateness_p99_ms", "%.1f")))
  print(("| peak RSS (MB), holding %d leases | %s | %s |"):format(hold, stat(lh, "rss_mb"), stat(jh, "rss_mb")))
  local lb = L.hold_big
  print(("| hold %d leases %s s: renewals / failed, lateness p99 / max (ms) | %s / %s, %s / ≤ %s | (not run) |"):format(
    hold_big, hold_s, stat(lb, "renewals"), stat(lb, "renew_fail"), stat(lb, "lateness_p99_ms", "%.1f"), stat(lb, "lateness_max_ms", "%.1f")))
  print("")
  print("mqlease acks a received batch in one AckMessage (c:ack(msgs)); the Java client has no batch ack,")
  print("so Bench.java acks with ackAsync for the whole batch and waits. mqlease renews from its C thread;")
  print("the Java SimpleConsumer has no renewal, so Bench.java renews by hand from one thread, as its users must.")
  print("mqlease latency percentiles are interpolated from its histogram buckets (1, 2.5, 5, 10 ms, ...).")
  print("")
end
local LR, JR = rows.luarun, rows.javarun
if LR.run or JR.push or JR.consume then
  print(("Throughput on RocketMQ 5.2.0 (loopback), mqlease.run vs rocketmq-client-java 5.0.7, median of %d runs (min–max):"):format(
    nruns(LR.run or {}, JR.push or {}, JR.consume or {})))
  print("")
  print("| a pre-loaded backlog, no-op handler | msg/s | client CPU s per 10,000 msgs | peak RSS (MB) |")
  print("|---|---|---|---|")
  local function tp(label, runs)
    print(("| %s | %s | %s | %s |"):format(label, stat(runs, "msgs_per_s"), stat(runs, "cpu_s_per_10k", "%.2f"), stat(runs, "rss_mb")))
  end
  local function count(runs) return runs and ("%d"):format(runs[1].count) or "-" end
  tp(("mqlease.run (concurrency 256), %s msgs"):format(count(LR.run)), LR.run)
  if LR.run_eo then
    tp(("mqlease.run + exactly-once (Redis on this host), %s msgs"):format(count(LR.run_eo)), LR.run_eo)
  end
  tp(("Java PushConsumer (client defaults), %s msgs"):format(count(JR.push)), JR.push)
  tp(("Java SimpleConsumer (receive 32 + ackAsync each), %s msgs"):format(count(JR.consume)), JR.consume)
  print("")
  print("Each client consumes its own pre-loaded backlog of " .. size .. "-byte messages with a fresh group; CPU is")
  print("the client process's user+system time from before the consumer is built to the last message.")
  if LR.run and LR.run_eo then
    -- each run's exactly-once rate over the plain rate of the same run
    local ratios = {}
    for i = 1, math.min(#LR.run, #LR.run_eo) do
      ratios[i] = { ratio = 100 * LR.run_eo[i].msgs_per_s / LR.run[i].msgs_per_s }
    end
    print(("On this broker exactly-once runs at %s %% of the plain rate (run by run; the eo part below"):format(
      stat(ratios, "ratio")))
    print("measures it on the dev broker, where the client, not the broker, is the bound).")
  end
  print("")
end
if lease_file then cost_table(lease_table()) end
-- the incident replay (bench/all.sh part replay) has its own table
if os.getenv("BENCH_REPLAY") then assert(loadfile("bench/replay_table.lua"))(os.getenv("BENCH_REPLAY")) end
-- exactly-once against plain (bench/all.sh part eo)
if os.getenv("BENCH_EO") then assert(loadfile("bench/table_eo.lua"))(os.getenv("BENCH_EO")) end
-- sends in flight (bench/all.sh part send)
if os.getenv("BENCH_SEND") then assert(loadfile("bench/table_send.lua"))(os.getenv("BENCH_SEND")) end
-- workers over two brokers (bench/all.sh part brokers)
if os.getenv("BENCH_BROKERS") then assert(loadfile("bench/table_brokers.lua"))(os.getenv("BENCH_BROKERS")) end
