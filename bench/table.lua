-- bench/table.lua RESULTS COUNT SIZE HOLD HOLD_S HOLD_BIG [LEASE_RESULTS]: the Markdown
-- tables of a bench run: mqlease vs the Java client (when RESULTS has rows), then the
-- lease-scale table (when LEASE_RESULTS has rows; medians of the runs, min-max beside).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cjson = require "cjson"
local file, count, size, hold, hold_s, hold_big = arg[1], arg[2], arg[3], tonumber(arg[4]), arg[5], tonumber(arg[6])
local lease_file = arg[7]
local rows = { lua = {}, java = {}, luarun = {}, javarun = {} }
local nrows = 0
for line in io.lines(file) do
  local who, json = line:match("^(%a+) (.*)$")
  local r = cjson.decode(json)
  local key = r.mode
  if r.mode == "hold" then key = r.count == hold and "hold" or "hold_big" end
  rows[who][key] = r
  if who == "lua" or who == "java" then nrows = nrows + 1 end
end
local function f(v, fmt) return v and (fmt or "%.0f"):format(v) or "-" end
local function mb(kb) return kb and ("%.0f MB"):format(kb / 1024) or "-" end
local function sh(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  local out = p and p:read("l")
  if p then p:close() end
  return out or "?"
end
local L, J = rows.lua, rows.java
local uname = sh("uname -srm")
local cpu = sh("nproc")
print(("mqlease %s (Lua 5.4, grpc %s, protobuf-c %s), %s, %s cores shared with other work, %s UTC"):format(
  require("mqlease")._VERSION or "?", sh("pkg-config --modversion grpc"), sh("pkg-config --modversion libprotobuf-c"),
  uname, cpu, os.date("!%Y-%m-%d %H:%M")))
print("")

local function lease_table()
  local by_row, order = {}, {}
  local runs_dev = {}
  for line in io.lines(lease_file) do
    local what, json = line:match("^(%a+) (.*)$")
    local r = cjson.decode(json)
    r.rss_mb = r.rss_kb / 1024
    if what == "run" then
      runs_dev[#runs_dev + 1] = r
    else
      if not by_row[r.row] then by_row[r.row] = {}; order[#order + 1] = r.row end
      table.insert(by_row[r.row], r)
    end
  end
  if #order == 0 then return end
  -- median of the runs, and min-max when there are several
  local function stat(runs, key, fmt)
    local v = {}
    for _, r in ipairs(runs) do
      if r[key] and r[key] >= 0 then v[#v + 1] = r[key] end
    end
    if #v == 0 then return "-" end
    table.sort(v)
    local med = #v % 2 == 1 and v[(#v + 1) // 2] or (v[#v // 2] + v[#v // 2 + 1]) / 2
    local s = (fmt or "%.0f"):format(med)
    if #v > 1 then s = s .. (" (" .. (fmt or "%.0f") .. "–" .. (fmt or "%.0f") .. ")"):format(v[1], v[#v]) end
    return s
  end
  local function thousands(n) return ("%d"):format(n):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "") end
  print(("Lease scale: one consumer on the dev broker (loopback, same machine), 100-byte bodies, up to %d runs per row;"):format(#by_row[order[1]]))
  print("median (min–max); a value without a range is one run. Memory and CPU are the client process's only.")
  print("")
  print("| leases (invisible, hold) | expired while alive | uncertain | renewals/s | renewal lateness p99 (ms) | renewal latency p99 (ms) | client bytes per lease; Lua's part | client CPU µs per renewal | peak RSS |")
  print("|---|---|---|---|---|---|---|---|---|")
  for _, key in ipairs(order) do
    local runs = by_row[key]
    local r1 = runs[1]
    local label = ("%s (%d s, %d s)"):format(thousands(r1.count), r1.invisible_s, math.floor(r1.hold_s + 0.5))
    if r1.spin_s > 0 then label = ("%s, Lua VM spinning %d s (%d s, %d s)"):format(thousands(r1.count), r1.spin_s, r1.invisible_s, math.floor(r1.hold_s + 0.5)) end
    print(("| %s | %s | %s | %s | %s | %s | %s; Lua %s | %s | %s MB |"):format(label,
      stat(runs, "expired"), stat(runs, "uncertain"), stat(runs, "renewals_per_s"),
      stat(runs, "lateness_p99_ms", "%.1f"), stat(runs, "renew_p99_ms", "%.1f"),
      stat(runs, "bytes_per_lease"), stat(runs, "lua_bytes_per_lease"),
      r1.spin_s > 0 and "-" or stat(runs, "cpu_us_per_renewal"), stat(runs, "rss_mb")))
  end
  print("")
  print("Bytes per lease: growth of VmRSS from before the first receive to all leases held, minus the")
  print("bodies; the Lua part is the growth of the Lua heap. CPU: user+system time of the client process")
  print("(/proc/self/stat) during the hold over the renewals sent in it; the broker's CPU is not counted.")
  print("Percentiles are interpolated in the core's histogram buckets (1, 2.5, 5, 10, 25, 50 ms, ...).")
  print("")
  if #runs_dev > 0 then
    print(("mqlease.run, no-op handler, %d pre-loaded messages on the dev broker: %s msg/s, %s s client CPU per 10,000 messages, peak RSS %s MB."):format(
      runs_dev[1].count, stat(runs_dev, "msgs_per_s"), stat(runs_dev, "cpu_s_per_10k", "%.2f"), stat(runs_dev, "rss_mb")))
    print("")
  end
end

if nrows > 0 then
  print("mqlease vs rocketmq-client-java 5.0.7 on RocketMQ 5.2.0 (namesrv + proxy local mode, loopback):")
  print("")
  print("| measure | mqlease (Lua 5.4) | Java client 5.0.7 |")
  print("|---|---|---|")
  print(("| produce %s x %s B, one at a time (msg/s) | %s | %s |"):format(count, size, f(L.produce and L.produce.msgs_per_s), f(J.produce and J.produce.msgs_per_s)))
  print(("| consume + ack a backlog of %s (msg/s) | %s | %s |"):format(count, f(L.consume and L.consume.msgs_per_s), f(J.consume and J.consume.msgs_per_s)))
  print(("| peak RSS, producer | %s | %s |"):format(mb(L.produce and L.produce.rss_kb), mb(J.produce and J.produce.rss_kb)))
  print(("| peak RSS, consumer | %s | %s |"):format(mb(L.consume and L.consume.rss_kb), mb(J.consume and J.consume.rss_kb)))
  local lh, jh = L.hold or {}, J.hold or {}
  print(("| hold %d leases %s s (invisible 10 s): renewals / failed | %s / %s | %s / %s |"):format(hold, hold_s,
    f(lh.renewals), f(lh.renew_fail), f(jh.renewals), f(jh.renew_fail)))
  print(("| renewal latency p50 / p99 (ms) | %s / %s | %s / %s |"):format(f(lh.renew_p50_ms, "%.1f"), f(lh.renew_p99_ms, "%.1f"),
    f(jh.renew_p50_ms, "%.1f"), f(jh.renew_p99_ms, "%.1f")))
  print(("| renewal lateness p99 (ms) | %s | %s |"):format(f(lh.lateness_p99_ms, "%.1f"), f(jh.lateness_p99_ms, "%.1f")))
  print(("| peak RSS, holding %d leases | %s | %s |"):format(hold, mb(lh.rss_kb), mb(jh.rss_kb)))
  local lb = L.hold_big or {}
  print(("| hold %d leases %s s: renewals / failed, lateness p99 / max (ms) | %s / %s, %s / ≤ %s | (not run) |"):format(
    hold_big, hold_s, f(lb.renewals), f(lb.renew_fail), f(lb.lateness_p99_ms, "%.1f"), f(lb.lateness_max_ms, "%.1f")))
  print("")
  print("mqlease acks a received batch in one AckMessage (c:ack(msgs)); the Java client has no batch ack,")
  print("so Bench.java acks with ackAsync for the whole batch and waits. mqlease renews from its C thread;")
  print("the Java SimpleConsumer has no renewal, so Bench.java renews by hand from one thread, as its users must.")
  print("mqlease latency percentiles are interpolated from its histogram buckets (1, 2.5, 5, 10 ms, ...).")
  print("")
end
local LR, JR = rows.luarun, rows.javarun
if LR.run or JR.push or JR.consume then
  print("Throughput on RocketMQ 5.2.0 (loopback), mqlease.run vs rocketmq-client-java 5.0.7:")
  print("")
  print("| a pre-loaded backlog, no-op handler | msg/s | client CPU s per 10,000 msgs | peak RSS |")
  print("|---|---|---|---|")
  local function tp(label, r)
    r = r or {}
    print(("| %s | %s | %s | %s |"):format(label, f(r.msgs_per_s), f(r.cpu_s_per_10k, "%.2f"), mb(r.rss_kb)))
  end
  tp(("mqlease.run (concurrency 256), %s msgs"):format(f(LR.run and LR.run.count)), LR.run)
  tp(("Java PushConsumer (client defaults), %s msgs"):format(f(JR.push and JR.push.count)), JR.push)
  tp(("Java SimpleConsumer (receive 32 + ackAsync each), %s msgs"):format(f(JR.consume and JR.consume.count)), JR.consume)
  print("")
  print("Each client consumes its own pre-loaded backlog of " .. size .. "-byte messages with a fresh group; CPU is")
  print("the client process's user+system time from before the consumer is built to the last message.")
  print("")
end
if lease_file then lease_table() end
-- the incident replay (bench/run.sh part replay) has its own table
if os.getenv("BENCH_REPLAY") then assert(loadfile("bench/replay_table.lua"))(os.getenv("BENCH_REPLAY")) end
