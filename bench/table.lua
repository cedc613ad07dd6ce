-- bench/table.lua RESULTS COUNT SIZE HOLD HOLD_S HOLD_BIG: the Markdown table of a bench run.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cjson = require "cjson"
local file, count, size, hold, hold_s, hold_big = arg[1], arg[2], arg[3], tonumber(arg[4]), arg[5], tonumber(arg[6])
local rows = { lua = {}, java = {} }
for line in io.lines(file) do
  local who, json = line:match("^(%a+) (.*)$")
  local r = cjson.decode(json)
  local key = r.mode
  if r.mode == "hold" then key = r.count == hold and "hold" or "hold_big" end
  rows[who][key] = r
end
local function f(v, fmt) return v and (fmt or "%.0f"):format(v) or "-" end
local function mb(kb) return kb and ("%.0f MB"):format(kb / 1024) or "-" end
local L, J = rows.lua, rows.java
local uname = io.popen("uname -srm"):read("l")
local cpu = io.popen("nproc"):read("l")
print(("mqlease %s vs rocketmq-client-java 5.0.7, RocketMQ 5.2.0 on loopback, %s, %s cores, %s"):format(
  require("mqlease")._VERSION or "?", uname, cpu, os.date("!%Y-%m-%d")))
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
