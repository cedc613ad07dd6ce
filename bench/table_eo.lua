-- bench/table_eo.lua FILE: the exactly-once table from the "eo {json}" lines of
-- bench/all.sh part eo (bench/bench.lua run, plain and with the exactly-once
-- policy, over backlogs of one size): medians of the runs, min-max beside.
-- Also run by bench/table.lua when BENCH_EO is set.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
local cjson = require "cjson"
local common = require "bench.common"
local stat, median = common.stat, common.median

local file = ...
local f = file and io.open(file)
if not f then return end
local by = { plain = {}, exactly_once = {} }
for line in f:lines() do
  local json = line:match("^eo (%b{})")
  if json then
    local r = cjson.decode(json)
    table.insert(by[r.policy], r)
  end
end
f:close()
local plain, eo = by.plain, by.exactly_once
if #plain == 0 and #eo == 0 then return end

-- the ratio of each run's exactly-once rate to the plain rate of the same run
local ratios = {}
for i = 1, math.min(#plain, #eo) do ratios[i] = { ratio = 100 * eo[i].msgs_per_s / plain[i].msgs_per_s } end

local n = math.max(#plain, #eo)
print(("Exactly-once on the dev broker (loopback), mqlease.run with a no-op handler, one worker, a local Redis, median of %d runs (min–max):"):format(n))
print("")
print("| a pre-loaded backlog, concurrency 256 | msg/s | client CPU µs/msg | Redis CPU µs/msg |")
print("|---|---|---|---|")
local function count(runs) return runs[1] and ("%d"):format(runs[1].count) or "-" end
print(("| plain (mqlease.policy.plain), %s msgs | %s | %s | - |"):format(count(plain), stat(plain, "msgs_per_s"),
  stat(plain, "cpu_us_per_msg")))
print(("| exactly-once (mqlease.policy.exactly_once), %s msgs | %s | %s | %s |"):format(count(eo),
  stat(eo, "msgs_per_s"), stat(eo, "cpu_us_per_msg"), stat(eo, "redis_cpu_us_per_msg")))
print("")
local function rates(runs)
  local v = {}
  for i, r in ipairs(runs) do v[i] = r.msgs_per_s end
  return v
end
local mp, me = median(rates(plain)), median(rates(eo))
print(("Exactly-once runs at %s %% of the plain rate (ratio of the medians %.0f %%; goal ≥ 75 %%). Each run"):format(
  stat(ratios, "ratio"), mp and me and 100 * me / mp or 0))
print("consumes its own backlog with a fresh group; client CPU is the process's user+system time from")
print("before the consumer is built, Redis CPU the redis-server's over the same span (its /proc stat).")
print("")
