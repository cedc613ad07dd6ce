-- bench/replay.lua scenario ENDPOINT CONTROL_PORT NAME PRODUCE_S RATE DIR
-- bench/replay.lua worker ENDPOINT TOPIC NAME LOG STOPFILE PREFIX
--
-- The incident replay of issue 11: the workload that motivated mqlease, on the
-- dev broker, time scaled by SCALE (0.1: ten incident seconds are one second
-- here). RATE messages per second of 2.4 KiB bodies; each body carries its
-- handler time, drawn once per message (a slow job stays slow when it comes
-- back) from
--
--   99 %    exponential, mean 1 s, cut at 6 s        -> p99   = 6 s
--   1 %     Pareto from 6 s, P(T > t) = 1 % (6/t)^a,  -> p99.9 = 42 x p99 = 252 s
--           a = ln 10 / ln 42, cut at 300 s
--
-- (incident seconds). Three worker processes consume it; the one running the
-- most handlers is killed with SIGKILL halfway through the sending. Scenarios (incident seconds):
--
--   a  a fixed 10 s window, no renewal          (shorter than the tail)
--   b  a fixed 100 s window, no renewal         (10 x a)
--   c  mqlease: 30 s window renewed + exactly-once (Redis lock and done marker)
--   d  mqlease: invisible = "auto" (10 s - 600 s, 2 x p99) + exactly-once
--
-- `scenario` runs one and prints one JSON line:
--   sent, past_window  messages whose handler ran past the window it started with
--   runs, duplicates   business runs completed, and those beyond one per message that
--                      overlapped or followed a live run (a lease lost while its handler worked)
--   duplicates_after_crash  second runs of a message the killed worker had completed but
--                      not yet marked done and acked (SIGKILL between the effect and the marker)
--   caught             redeliveries the policy did not run (done marker, or held
--                      by a live owner)
--   lost               messages never completed by the end, and not running then either
--   unfinished         messages whose handler was still running when the scenario ended
--   orphans            messages the killed worker was running; recovery_max_s /
--                      recovery_p50_s: from the kill to their next start
--                      elsewhere (incident seconds)
--   renewals           ChangeInvisibleDuration calls of the surviving workers and
--                      of the killed one up to its last metrics line (every 0.5 s)
--   invisible_s        the window of new receives at the end (incident seconds; after the
--                      sending only the long handlers still finish, so "auto" ends high)
--   invisible_sending_s  its median while the producer sent
--   expired_renewed    leases lost although renewed (c, d: late renewals on a loaded box)
--   eo_trouble         done markers not written + Redis locks lost or unreachable
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

local SCALE = tonumber(os.getenv("REPLAY_SCALE") or "0.1")
local BODY_BYTES = 2458                     -- 2.4 KiB
local WORKERS = 3
local REDIS = os.getenv("REPLAY_REDIS") or "127.0.0.1:16379"

-- Per scenario, in incident seconds (scaled below).
local SCENARIOS = {
  a = { invisible = 10, renew = false },
  b = { invisible = 100, renew = false },
  c = { invisible = 30, eo = true },
  d = { invisible = "auto", auto = { min = 10, max = 600, margin = 2, start = 30 }, eo = true },
}

local now = mqlease.now

-- the incident's distribution (mqlease.lab.workload, which `mqlease lab` scenarios share)
local INCIDENT = { mean = 1, p99 = 6, p999 = 252, max = 300 }
local lab_seconds = require("mqlease.lab.workload").handler_seconds
local function handler_seconds(u) return lab_seconds(u, INCIDENT) end

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

-- ---------------------------------------------------------------- worker

local function worker(endpoint, topic, name, logfile, stopfile, prefix)
  local s = assert(SCENARIOS[name], "unknown scenario " .. tostring(name))
  local opts = { endpoints = endpoint, group = topic .. "_g", topic = topic, await = 2, batch = 32 }
  if s.invisible == "auto" then
    opts.invisible = "auto"
    opts.auto_invisible = {}
    for k, v in pairs(s.auto) do opts.auto_invisible[k] = k == "margin" and v or v * SCALE end
  else
    opts.invisible = s.invisible * SCALE
  end
  opts.renew = s.renew ~= false
  local c = assert(mqlease.consumer(opts))
  local log = assert(io.open(logfile, "a"))
  log:setvbuf("line")
  local policy
  if s.eo then
    -- the lock lives as long as the shortest window: a dead owner's lock must
    -- not outlast the lease it guarded, or it, not the lease, sets the recovery
    policy = mqlease.policy.exactly_once { redis = REDIS, prefix = prefix, lock_ttl = math.max(1, 10 * SCALE),
      defer_delay = 0.5, fail_delay = 0.5, done_ttl = 600 }   -- the shared Redis forgets the replay
  end
  local function snapshot()
    local m = c:metrics()
    log:write(("metrics %d %d %d %d %.3f %d %d %d\n"):format(math.floor(now() * 1000), (m.renew_success or 0) + (m.renew_fail or 0) + (m.renew_uncertain or 0),
      m.duplicate_skipped or 0, m.handoff or 0, m.invisible_seconds or 0, m.expire_while_alive or 0,
      m.done_marker_failed or 0, (m.lock_lost or 0) + (m.redis_unavailable or 0)))
  end
  log:write("ready\n")
  local last_snap, last_check = 0, 0
  mqlease.run(c, function(m, lease)
    local t0, r0 = now(), lease:remaining()
    log:write(("start %s %d %d %d\n"):format(m.id, math.floor(t0 * 1000), math.floor(r0 * 1000), m.delivery_attempt))
    local ms = tonumber(m.body:match("^%d+ (%d+) "))
    mqlease.sleep(ms / 1000)
    local t1 = now()
    log:write(("effect %s %d %d %d\n"):format(m.id, math.floor(t1 * 1000), math.floor((t1 - t0) * 1000), math.floor(r0 * 1000)))
    return true
  end, {
    concurrency = 256, max_inflight = 256, signals = false, grace = 0, mode = "nack",
    nack_delay = 0, on_error = function() end, policy = policy,
    stop = function()
      local t = now()
      if t - last_snap >= 0.5 then last_snap = t; snapshot() end
      if t - last_check < 0.2 then return false end
      last_check = t
      local f = io.open(stopfile)
      if f then f:close(); return true end
      return false
    end,
  })
  snapshot()
  c:close()
  log:close()
end

-- ---------------------------------------------------------------- scenario

local function control(port, line)
  return sh(("timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; printf \"%%s\\n\" \"$0\" >&3; head -n1 <&3' %q"):format(port, line))
end

local function spawn(args, out)
  return tonumber(sh(("lua5.4 bench/replay.lua %s >%s 2>&1 & echo $!"):format(args, out)))
end

local function alive(pid)
  local r = os.execute(("kill -0 %d 2>/dev/null"):format(pid))
  return r == true or r == 0
end

-- Reads the new lines of a worker log; calls fn(fields) for each.
local function tail(state, path, fn)
  local f = io.open(path)
  if not f then return end
  f:seek("set", state[path] or 0)
  while true do
    local pos = f:seek()
    local line = f:read("L")
    if not line then break end
    if line:sub(-1) ~= "\n" then f:seek("set", pos); break end   -- half a line: next time
    local fields = {}
    for w in line:gmatch("%S+") do fields[#fields + 1] = w end
    fn(fields)
  end
  state[path] = f:seek()
  f:close()
end

-- The worker running the most handlers right now: the one whose death strands
-- the most messages (the dev broker does not share messages evenly among
-- long polls, so a fixed choice may pick an idle one).
local function busiest(logs)
  local best, most = 1, -1
  for i, path in ipairs(logs) do
    local open, n = {}, 0
    tail({}, path, function(f)
      if f[1] == "start" then open[f[2]] = true elseif f[1] == "effect" then open[f[2]] = nil end
    end)
    for _ in pairs(open) do n = n + 1 end
    if n > most then best, most = i, n end
  end
  return best
end

local common_median = require("bench.common").median
local function median(v) return common_median(v) or -1 end   -- -1: not measured

local function scenario(endpoint, cport, name, produce_s, rate, dir)
  local drain_s = tonumber(os.getenv("REPLAY_DRAIN") or "40")
  local topic = ("replay_%s_%d_%d"):format(name, os.time(), math.random(1e6))
  assert(control(cport, "topic " .. topic):match("^ok"), "cannot create the topic")
  local prefix = ("mqlease-replay:%s:"):format(topic)
  local stopfile = dir .. "/stop"
  os.remove(stopfile)
  local logs, pids = {}, {}
  for i = 1, WORKERS do
    logs[i] = ("%s/worker%d.log"):format(dir, i)
    os.remove(logs[i])
    pids[i] = spawn(("worker %s %s %s %s %s %s"):format(endpoint, topic, name, logs[i], stopfile, prefix),
      ("%s/worker%d.err"):format(dir, i))
  end
  -- every worker has its consumer before the first message
  local deadline = now() + 20
  for i = 1, WORKERS do
    repeat
      mqlease.sleep(0.05)
      local f = io.open(logs[i])
      local ready = f and f:read("l") == "ready"
      if f then f:close() end
    until ready or now() > deadline
  end

  local p = assert(mqlease.producer { endpoints = endpoint })
  local pad = ("x"):rep(BODY_BYTES)
  local sent, nsent = {}, 0
  local t_start = now()
  local t_kill, victim, t_stop
  local rng = math.random
  while true do
    local t = now() - t_start
    if t >= produce_s then t_stop = now(); break end
    if not t_kill and t >= produce_s / 2 then
      victim = busiest(logs)
      os.execute(("kill -9 %d"):format(pids[victim]))
      t_kill = now()
    end
    local due = math.floor(t * rate) + 1
    while nsent < due do
      nsent = nsent + 1
      local ms = math.floor(handler_seconds(rng()) * SCALE * 1000 + 0.5)
      local head = ("%d %d "):format(nsent, ms)
      local id = assert(p:send(topic, head .. pad:sub(1, BODY_BYTES - #head)))
      sent[id] = ms
    end
    mqlease.sleep(0.005)
  end
  p:close()

  -- wait until every message has run to completion somewhere, or the drain ends
  local state, done, ndone = {}, {}, 0
  local function scan()
    for i = 1, WORKERS do
      tail(state, logs[i], function(f)
        if f[1] == "effect" and sent[f[2]] and not done[f[2]] then done[f[2]] = true; ndone = ndone + 1 end
      end)
    end
  end
  deadline = now() + drain_s
  repeat mqlease.sleep(0.5); scan() until ndone >= nsent or now() > deadline
  local io_ = io.open(stopfile, "w"); io_:close()
  for i = 1, WORKERS do
    local until_ = now() + 10
    while alive(pids[i]) and now() < until_ do mqlease.sleep(0.1) end
    if i ~= victim and alive(pids[i]) then os.execute(("kill -9 %d"):format(pids[i])) end
  end

  -- the whole logs, from the start
  local effects, starts_after_kill, killed_open = {}, {}, {}
  local past, runs, renewals, caught, invisible = {}, 0, 0, 0, 0
  local expired, eo_trouble = 0, 0   -- leases lost while renewed; done markers not written, locks lost
  local s = SCENARIOS[name]
  local kill_ms = math.floor(t_kill * 1000)
  local start_ms, stop_ms = math.floor(t_start * 1000), math.floor(t_stop * 1000)
  local done_by, windows, running = {}, {}, {}
  for i = 1, WORKERS do
    local last
    tail({}, logs[i], function(f)
      local id = f[2]
      if f[1] == "start" then
        if i == victim then killed_open[id] = true else running[id] = (running[id] or 0) + 1 end
        if i ~= victim and tonumber(f[3]) >= kill_ms then
          local t = tonumber(f[3])
          if not starts_after_kill[id] or t < starts_after_kill[id] then starts_after_kill[id] = t end
        end
      elseif f[1] == "effect" then
        runs = runs + 1
        effects[id] = (effects[id] or 0) + 1
        local list = done_by[id] or {}
        done_by[id] = list
        list[#list + 1] = { worker = i, t = tonumber(f[3]), start = tonumber(f[3]) - tonumber(f[4]) }
        if i == victim then killed_open[id] = nil else running[id] = running[id] - 1 end
        if tonumber(f[4]) > tonumber(f[5]) then past[id] = true end
      elseif f[1] == "metrics" then
        last = f
        local t = tonumber(f[2])
        if i ~= victim and t >= start_ms and t <= stop_ms then windows[#windows + 1] = tonumber(f[6]) / SCALE end
      end
    end)
    if last then
      renewals = renewals + tonumber(last[3])
      caught = caught + tonumber(last[4]) + tonumber(last[5])
      if i ~= victim then invisible = math.max(invisible, tonumber(last[6])) end
      if s.renew ~= false then expired = expired + tonumber(last[7]) end
      eo_trouble = eo_trouble + tonumber(last[8]) + tonumber(last[9])
    end
  end
  -- A second run is "after a crash" when the run before it completed on the
  -- killed worker before the kill and this one started after it: the effect
  -- was done, its done marker and ack were not yet (a SIGKILL between the two).
  -- Any other second run overlapped or followed a live one: a lease lost while
  -- its handler still worked, the incident itself.
  local dup, dup_crash, lost, unfinished, npast = 0, 0, 0, 0, 0
  for id in pairs(sent) do
    local n = effects[id] or 0
    if n == 0 and (running[id] or 0) > 0 then unfinished = unfinished + 1
    elseif n == 0 then lost = lost + 1 end
    local list = done_by[id]
    if list and #list > 1 then
      table.sort(list, function(x, y) return x.start < y.start end)
      for k = 2, #list do
        local prev = list[k - 1]
        if prev.worker == victim and prev.t <= kill_ms and list[k].start >= kill_ms then
          dup_crash = dup_crash + 1
        else
          dup = dup + 1
        end
      end
    end
    if past[id] then npast = npast + 1 end
  end
  local rec, norphan, never = {}, 0, 0
  for id in pairs(killed_open) do
    if sent[id] then
      norphan = norphan + 1
      if starts_after_kill[id] then rec[#rec + 1] = (starts_after_kill[id] - kill_ms) / 1000 / SCALE
      else never = never + 1 end
    end
  end
  local rmax = -1
  for _, v in ipairs(rec) do rmax = math.max(rmax, v) end
  print(('{"scenario":"%s","scale":%s,"rate":%s,"produce_s":%s,"sent":%d,"past_window":%d,"runs":%d,"duplicates":%d,"duplicates_after_crash":%d,"caught":%d,"lost":%d,"unfinished":%d,"orphans":%d,"orphans_never_rerun":%d,"recovery_max_s":%.1f,"recovery_p50_s":%.1f,"renewals":%d,"invisible_s":%.1f,"invisible_sending_s":%.1f,"expired_renewed":%d,"eo_trouble":%d}'):format(
    name, SCALE, rate, produce_s, nsent, npast, runs, dup, dup_crash, caught, lost, unfinished, norphan, never, rmax, median(rec),
    renewals, invisible / SCALE, median(windows), expired, eo_trouble))
end

math.randomseed(os.time(), tonumber(tostring({}):match("0x(%x+)"), 16) or 0)
local mode = arg[1]
if mode == "worker" then
  worker(arg[2], arg[3], arg[4], arg[5], arg[6], arg[7])
elseif mode == "scenario" then
  scenario(arg[2], tonumber(arg[3]), arg[4], tonumber(arg[5]), tonumber(arg[6]), arg[7])
else
  io.stderr:write("usage: bench/replay.lua scenario ENDPOINT CONTROL_PORT a|b|c|d PRODUCE_S RATE DIR\n")
  os.exit(2)
end
