-- bench/table_send.lua FILE: the sends-in-flight table from the "send {json}" lines of
-- bench/all.sh's part send (bench/bench.lua send, Bench.java sendasync): medians of the
-- runs, min-max beside. Also run by bench/table.lua when BENCH_SEND is set.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
local cjson = require "cjson"
local stat = require("bench.common").stat

local file = ...
local by = {}   -- row key -> runs
local f = io.open(file)
if not f then return end
local broker
for line in f:lines() do
  local json = line:match("^send (%b{})")
  if json then
    local r = cjson.decode(json)
    local key = r.mode == "sendasync" and "java" or r.how
    by[key] = by[key] or {}
    table.insert(by[key], r)
    broker = line:match("^send %b{} (.*)$") or broker
  end
end
f:close()
if not next(by) then return end

local ROWS = {
  { "one", "mqlease `p:send`, one at a time" },
  { "coroutines", "mqlease `p:send` from %d coroutines (scheduler)" },
  { "many", "mqlease `p:send_many` of all of them" },
  { "java", "rocketmq-client-java 5.0.7 `sendAsync`, %d outstanding" },
}
local nrun = 0
for _, runs in pairs(by) do nrun = math.max(nrun, #runs) end
print(("Sends in flight on %s (loopback, same machine); %d run(s) per row, median (min–max)."):format(
  broker or "the broker", nrun))
print("CPU is the sending process's user+system time over the timed window (after a warm-up), per message.")
print("")
print("| client | messages | msg/s | CPU µs per message | failed |")
print("|---|---|---|---|---|")
for _, row in ipairs(ROWS) do
  local runs = by[row[1]]
  if runs then
    print(("| %s | %s | %s | %s | %s |"):format(row[2]:format(runs[1].inflight or 0), stat(runs, "count"),
      stat(runs, "msgs_per_s"), stat(runs, "cpu_us_per_msg"), stat(runs, "failed")))
  end
end
print("")
