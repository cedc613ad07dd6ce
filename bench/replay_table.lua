-- bench/replay_table.lua FILE: the incident replay's Markdown table from the
-- "replay {json}" lines of bench/replay.lua scenario runs (medians of the
-- runs, min-max beside). Also run by bench/table.lua when BENCH_REPLAY is set.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
local cjson = require "cjson"

local file = ...
local by, order = {}, {}
local f = io.open(file)
if not f then return end
for line in f:lines() do
  local json = line:match("^replay (%b{})")
  if json then
    local r = cjson.decode(json)
    if not by[r.scenario] then by[r.scenario] = {}; order[#order + 1] = r.scenario end
    table.insert(by[r.scenario], r)
  end
end
f:close()
if #order == 0 then return end
table.sort(order)

local stat = require("bench.common").stat

local LABEL = {
  a = "a. fixed 10 s window, no renewal",
  b = "b. fixed 100 s window, no renewal",
  c = "c. mqlease: 30 s renewed + exactly-once",
  d = "d. mqlease: invisible = \"auto\" + exactly-once",
}
local r1 = by[order[1]][1]
print(("Incident replay on the dev broker, time x %s (incident seconds below; the run is %g times as fast): %d msg/s of 2.4 KiB for %d s, handler times p99 6 s, p99.9 252 s; 3 workers, the busiest killed (SIGKILL) halfway; %d run(s) per row, median (min–max)."):format(
  r1.scale, 1 / r1.scale, r1.rate, r1.produce_s, #by[order[1]]))
print("")
print("| scenario | messages | past the window | duplicate business runs (lease lost while working) | re-runs after the kill (effect done, not yet marked) | duplicates caught by the policy | lost | still running at the end | killed worker's messages | their recovery, max / median (s) | renewal calls | window while sending (s) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for _, k in ipairs(order) do
  local runs = by[k]
  print(("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s |"):format(LABEL[k] or k,
    stat(runs, "sent"), stat(runs, "past_window"), stat(runs, "duplicates"), stat(runs, "duplicates_after_crash"),
    stat(runs, "caught"), stat(runs, "lost"), stat(runs, "unfinished"), stat(runs, "orphans"), stat(runs, "recovery_max_s"),
    stat(runs, "recovery_p50_s"), stat(runs, "renewals"), stat(runs, "invisible_sending_s", "%.0f")))
end
print("")
