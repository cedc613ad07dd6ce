-- bench/table_brokers.lua FILE: the "brokers" table of `make bench` from bench/brokers.sh's
-- JSON lines (one per worker process). Loaded by bench/table.lua when BENCH_BROKERS names
-- the file; runs standalone too (lua5.4 bench/table_brokers.lua FILE).
local file = ...
local lines = {}
for l in io.lines(file) do
  local r = {}
  for k, v in l:gmatch('"([%w_]+)":(%-?[%d%.e+]+)') do r[k] = tonumber(v) end
  if r.workers then lines[#lines + 1] = r end
end
if #lines == 0 then return end

-- one row per (workers, run): every worker's messages over the time from the first start
-- to the last message any of them handled
local by, order = {}, {}
for _, r in ipairs(lines) do
  local key = r.workers .. "/" .. r.run
  local g = by[key]
  if not g then
    g = { workers = r.workers, backlog = r.backlog, acked = 0, start = r.start, last = r.last, cpu_s = 0,
      server_s = r.server_ticks / 100 }   -- USER_HZ: 100 on Linux
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
  g.server_us_per_msg = g.server_s * 1e6 / math.max(g.acked, 1)
  if not rows[g.workers] then rows[g.workers] = {}; worder[#worder + 1] = g.workers end
  table.insert(rows[g.workers], g)
end
table.sort(worder)

-- median (min-max) of field over the runs
local function stat(runs, field, fmt)
  local v = {}
  for i, r in ipairs(runs) do v[i] = r[field] end
  table.sort(v)
  fmt = fmt or "%.0f"
  local med = #v % 2 == 1 and v[(#v + 1) // 2] or (v[#v // 2] + v[#v // 2 + 1]) / 2
  if #v == 1 then return fmt:format(med) end
  return (fmt .. " (" .. fmt .. "–" .. fmt .. ")"):format(med, v[1], v[#v])
end

print("## Several brokers: workers over two brokers (real RocketMQ cluster)")
print("")
print("| worker processes | msg/s (all workers) | client CPU µs/msg (all workers) | server CPU µs/msg (2 brokers + 2 proxies) | acked / backlog | runs |")
print("|---|---|---|---|---|---|")
for _, w in ipairs(worder) do
  local runs = rows[w]
  local acked = runs[1].acked
  for _, r in ipairs(runs) do acked = math.min(acked, r.acked) end
  print(("| %d | %s | %s | %s | %d / %d (fewest of the runs) | %d |"):format(w, stat(runs, "msgs_per_s"),
    stat(runs, "cpu_us_per_msg", "%.0f"), stat(runs, "server_us_per_msg", "%.0f"), acked, runs[1].backlog, #runs))
end
print("")
print("mqlease.run with a no-op handler (concurrency 256, batch 32, invisible 30 s) in each process, one group,")
print("both proxies as endpoints, draining one pre-loaded backlog of 100-byte messages on a topic with 4 queues")
print("on each of broker-a and broker-b (bench/brokers.sh); medians (min–max) over the runs. Five JVMs and the")
print("workers share the machine's cores: the brokers' and proxies' CPU per message is the bound here.")
print("")
