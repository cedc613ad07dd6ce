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
local by = { plain = {}, exactly_once = {}, bound = {}, bound_onekey = {} }
local parts, part_order, policies, client = {}, {}, {}, {}
for line in f:lines() do
  local kind, json = line:match("^(eo%a*) (%b{})")
  local r = json and cjson.decode(json)
  if kind == "eo" then
    table.insert(by[r.policy], r)
  elseif kind == "eopolicy" then
    policies[r.policy] = r   -- the last invocation's
  elseif kind == "eoclient" then
    client[r.part] = r   -- the last invocation's
  elseif kind == "eoparts" then
    if not parts[r.part] then part_order[#part_order + 1] = r.part end
    parts[r.part] = r   -- the last invocation's
  end
end
f:close()
local plain, eo, bound, bound1 = by.plain, by.exactly_once, by.bound, by.bound_onekey
if #plain == 0 and #eo == 0 then return end

-- the ratio of each run's exactly-once rate to the plain rate of the same run
local ratios = {}
for i = 1, math.min(#plain, #eo) do ratios[i] = { ratio = 100 * eo[i].msgs_per_s / plain[i].msgs_per_s } end

-- all the CPU a message costs on this host: the client's, Redis's and the
-- dev broker's (rows from before the broker's was measured have none)
local function add_all(runs)
  for _, r in ipairs(runs) do
    if r.broker_cpu_us_per_msg then
      r.all_cpu_us_per_msg = r.cpu_us_per_msg + (r.redis_cpu_us_per_msg or 0) + r.broker_cpu_us_per_msg
    end
  end
end
add_all(plain)
add_all(eo)
add_all(bound)
add_all(bound1)

local n = math.max(#plain, #eo)
print(("Exactly-once on the dev broker (loopback), mqlease.run with a no-op handler, one worker, a local Redis, median of %d runs (min–max):"):format(n))
print("")
print("| a pre-loaded backlog, concurrency 256 | msg/s | client CPU µs/msg | Redis CPU µs/msg | dev broker CPU µs/msg | all three µs/msg |")
print("|---|---|---|---|---|---|")
local function count(runs) return runs[1] and ("%d"):format(runs[1].count) or "-" end
print(("| plain (mqlease.policy.plain), %s msgs | %s | %s | - | %s | %s |"):format(count(plain), stat(plain, "msgs_per_s"),
  stat(plain, "cpu_us_per_msg"), stat(plain, "broker_cpu_us_per_msg"), stat(plain, "all_cpu_us_per_msg")))
print(("| exactly-once (mqlease.policy.exactly_once), %s msgs | %s | %s | %s | %s | %s |"):format(count(eo),
  stat(eo, "msgs_per_s"), stat(eo, "cpu_us_per_msg"), stat(eo, "redis_cpu_us_per_msg"),
  stat(eo, "broker_cpu_us_per_msg"), stat(eo, "all_cpu_us_per_msg")))
if #bound > 0 then
  print(("| bound: plain beside the policy's scripts sent by another process at ¾ of the plain rate, %s msgs | %s | %s | (not measured) | %s | - |"):format(
    count(bound), stat(bound, "msgs_per_s"), stat(bound, "cpu_us_per_msg"), stat(bound, "broker_cpu_us_per_msg")))
end
if #bound1 > 0 then
  print(("| bound, one-key layout: the same beside bench/eo_onekey.lua's scripts (a probe), %s msgs | %s | %s | (not measured) | %s | - |"):format(
    count(bound1), stat(bound1, "msgs_per_s"), stat(bound1, "cpu_us_per_msg"), stat(bound1, "broker_cpu_us_per_msg")))
end
print("")
-- the worker's main thread alone (its Lua and the core's calls from it)
if plain[1] and plain[1].main_cpu_us_per_msg and eo[1] and eo[1].main_cpu_us_per_msg then
  print(("The worker's main thread (its Lua and the core's calls from it): plain %s µs a message, exactly-once %s."):format(
    stat(plain, "main_cpu_us_per_msg"), stat(eo, "main_cpu_us_per_msg")))
  print("")
end
local function rates(runs)
  local v = {}
  for i, r in ipairs(runs) do v[i] = r.msgs_per_s end
  return v
end
local mp, me = median(rates(plain)), median(rates(eo))
print(("Exactly-once runs at %s %% of the plain rate (ratio of the medians %.0f %%; goal ≥ 75 %%). Each run"):format(
  stat(ratios, "ratio"), mp and me and 100 * me / mp or 0))
print("consumes its own backlog with a fresh group; client CPU is the process's user+system time from")
print("before the consumer is built, Redis CPU the redis-server's and dev broker CPU the dev broker's over")
print("the same span (their /proc stat). Client, Redis and dev broker share this host's cores, so when")
print("they keep them busy the rate follows all three's CPU per message, not the client's alone.")
print("")
if #bound > 0 then
  local bratios = {}
  for i = 1, math.min(#plain, #bound) do bratios[i] = { ratio = 100 * bound[i].msgs_per_s / plain[i].msgs_per_s } end
  print(("The bound row runs plain again while bench/eo_load.lua sends the policy's two scripts for fresh ids"))
  print(("at ¾ of that run's plain rate: Redis's share of exactly-once, and a client's calls, with none of the"))
  print(("policy's Lua. It ran at %s %% of the plain rate: about the most exactly-once could reach on this host"):format(
    stat(bratios, "ratio")))
  print("if its policy cost the worker nothing (below 75 % the goal needs less Redis work a message too).")
  print("")
end
if #bound1 > 0 then
  local r1 = {}
  for i = 1, math.min(#plain, #bound1) do r1[i] = { ratio = 100 * bound1[i].msgs_per_s / plain[i].msgs_per_s } end
  print(("With the one-key probe's scripts in their place (three commands and one key a message, where the"))
  print(("policy runs seven and keeps three keys) the same run reached %s %% of the plain rate."):format(stat(r1, "ratio")))
  print("")
end

-- the policy alone (bench/eo_policy.lua)
local plain_alone, eo_alone = policies.plain, policies.exactly_once
if plain_alone and eo_alone then
  print(("The policy alone, on stand-in messages against the same Redis (bench/eo_policy.lua; median of %d"):format(
    eo_alone.passes))
  print(("passes, min–max): plain %.2f (%.2f–%.2f) µs a message, exactly-once %.2f (%.2f–%.2f)."):format(
    plain_alone.cpu_us_per_msg, plain_alone.min, plain_alone.max, eo_alone.cpu_us_per_msg, eo_alone.min, eo_alone.max))
  print("")
end

-- the policy's work on the worker, by part (bench/eo_policy.lua's eoclient lines)
local frame = client.plain
if frame and eo_alone and client.calls and client.park and client.keepalive then
  local function net(r) return r.cpu_us_per_msg - frame.cpu_us_per_msg end
  print("Its work on the worker, part by part, each alone in the same frame (bench/eo_policy.lua; median of")
  print(("%d passes, the frame's own %.2f µs a message taken off each):"):format(frame.passes, frame.cpu_us_per_msg))
  print("")
  print("| part | worker CPU µs/msg |")
  print("|---|---|")
  print(("| the policy's two batched calls (ACQUIRE_MANY, FINISH_MANY) and their waits | %.1f |"):format(net(client.calls)))
  print(("| of which a park and a wake a call (the scheduler alone) | %.1f |"):format(2 * net(client.park)))
  print(("| the lock keepalive registered and stopped | %.1f |"):format(net(client.keepalive)))
  print(("| the rest: the policy's own Lua (owner, lease fields, checks) | %.1f |"):format(
    eo_alone.cpu_us_per_msg - plain_alone.cpu_us_per_msg - net(client.calls) - net(client.keepalive)))
  print(("| the whole policy, beyond plain | %.1f |"):format(eo_alone.cpu_us_per_msg - plain_alone.cpu_us_per_msg))
  print("")
  local trip = client.round_trip
  if trip then
    print(("One round trip to Redis, a no-op script sent alone, costs this process %.0f (%.0f–%.0f) µs of CPU"):format(
      trip.cpu_us_per_call, trip.min, trip.max))
    print("(its Lua thread and the Redis client's I/O thread): a batch of 32 pays it once a call, twice a message.")
    print("")
  end
end

-- the Redis side by part (bench/eo_parts.lua)
if #part_order > 0 then
  local what = {
    call = "the two calls of a batch, to a script that does nothing",
    acquire = "ACQUIRE_MANY (and the no-op call)",
    both = "ACQUIRE_MANY and FINISH_MANY: what a message costs Redis (the token issued on read, not read)",
    on_grant = "both with the token issued at each grant (fence = \"on_grant\": INCR, PEXPIRE, a key kept)",
    onekey = "a probe of a leaner layout, one key a message (bench/eo_onekey.lua; no worker runs it)",
    onevalue = "the same with a Cluster form: one key a message holding lock, fence and done mark (bench/eo_onevalue.lua)",
  }
  print("What the policy's scripts cost redis-server, per message, batches of 32 sent one after another")
  print(("(bench/eo_parts.lua; median of %d passes, min–max):"):format(parts[part_order[1]].passes))
  print("")
  print("| part | Redis CPU µs/msg |")
  print("|---|---|")
  for _, name in ipairs(part_order) do
    local r = parts[name]
    print(("| %s | %.1f (%.1f–%.1f) |"):format(what[name] or name, r.redis_cpu_us_per_msg, r.min, r.max))
  end
  print("")
end
