-- mqlease.lab.experiment: runs one checked scenario (mqlease.lab.scenario) as
-- an experiment and returns what happened, for mqlease.lab.analyze.
--
-- The lab starts what the scenario needs and stops only what it started: the
-- dev broker (unless endpoints are given), a redis-server on a free loopback
-- port when the policy is exactly-once (unless a Redis address is given), and
-- the worker processes (mqlease.lab.worker); the servers through mqlease.launch. This process is the producer: it
-- sends the workload at its rate, applies each fault at its time, waits for
-- the messages to finish (or the drain to run out), then stops the workers.
--
--   experiment.run(scenario, { endpoints =, topic =, group =, redis =, root =, dir =, lua =, log = })
--   -> raw = { scenario =, t0 =, t_sent =, t_end =, sent = { [seq] = { t =, poison = } },
--              incarnations = { { slot =, log =, started =, died = }, ... }, faults = { ... } }
--   or nil, message

local mqlease = require "mqlease"
local scenario_mod = require "mqlease.lab.scenario"
local workload = require "mqlease.lab.workload"
local logs = require "mqlease.lab.logs"
local launch = require "mqlease.launch"
local cjson = require "cjson"

local floor, max, random = math.floor, math.max, math.random
local pairs, ipairs, tostring, pcall, type, rawget = pairs, ipairs, tostring, pcall, type, rawget
local now, sleep = mqlease.now, mqlease.sleep

local _M = {}

local shell_quote, alive, spawn, stop_pid = launch.shell_quote, launch.alive, launch.spawn, launch.stop_pid
_M.alive = alive

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local read_file = launch.read_file

-- The interpreter running this process (the lowest negative index of arg).
local function interpreter()
  local a = rawget(_G, "arg")
  if type(a) ~= "table" then return "lua5.4" end
  local i, exe = -1, nil
  while a[i] do exe = a[i]; i = i - 1 end
  if exe and (exe:match("lua") or exe:match("luajit")) then return exe end
  return "lua5.4"
end

local control = launch.control

-- ------------------------------------------------------------- the run

local BOOT = [[
package.path = %q
package.cpath = %q
require("mqlease.lab.worker").main(%q)
]]

function _M.run(s, opts)
  opts = opts or {}
  local k = s.time_scale
  local say = opts.log or function() end
  local dir = opts.dir
  if not dir then
    dir = os.tmpname()
    os.remove(dir)
  end
  os.execute("mkdir -p " .. shell_quote(dir))
  local started = {}   -- what to stop at the end
  local function cleanup()
    for _, w in ipairs(started.workers or {}) do stop_pid(w.pid, 1) end
    if started.redis then stop_pid(started.redis.pid, 2) end
    if started.broker then
      -- a frozen broker would ignore the SIGTERM
      if started.broker.frozen then os.execute("kill -CONT " .. started.broker.pid) end
      stop_pid(started.broker.pid, 5)
    end
  end
  local ok, raw_or_err, err2 = pcall(function()
    -- the broker and the topic
    local endpoints, topic, group, broker = opts.endpoints, opts.topic, opts.group, nil
    local stamp = ("%s_%d_%d"):format(s.name, os.time(), random(1e6)):gsub("[^%w_%-]", "_")
    if not endpoints then
      local err
      -- leases down to 1 s: scenarios run at a fraction of their time
      broker, err = launch.devbroker { root = opts.root, flags = { "--min-invisible-ms", "1000" },
        out = dir .. "/devbroker.out" }
      if not broker then return nil, err end
      started.broker = broker
      endpoints = broker.endpoints
      topic = "lab_" .. stamp
      local answer = control(broker.control_port, "topic " .. topic)
      if not (answer and answer:match("^ok")) then
        return nil, "the dev broker refused the topic: " .. tostring(answer)
      end
      say(("dev broker on %s"):format(endpoints))
    else
      for _, f in ipairs(s.faults) do
        if f.action == "broker" or f.action == "proxy" then
          return nil, ("scenario %s: %s faults need the dev broker (drop --endpoints)"):format(s.name, f.action)
        end
      end
      if not topic then return nil, "--endpoints needs --topic (an existing topic of that RocketMQ)" end
    end
    group = group or ("lab_" .. stamp)

    local redis_address = opts.redis
    if s.fleet.policy.kind == "exactly_once" and not redis_address then
      local r, err = launch.redis { dir = dir }
      if not r then return nil, err end
      started.redis = r
      redis_address = r.address
      say(("redis-server on %s"):format(r.address))
    end
    for _, f in ipairs(s.faults) do
      if f.action == "redis" and not started.redis then
        return nil, ("scenario %s: redis faults need the lab's own redis-server (drop --redis)"):format(s.name)
      end
    end

    -- the workers
    local lua = opts.lua or interpreter()
    local stopfile = dir .. "/stop"
    -- a kept directory (--keep) may hold the last run's stop file: the new
    -- workers would stop at their first look
    os.remove(stopfile)
    local incarnations, slots = {}, {}
    started.workers = incarnations
    local run_opts = {}
    for key, v in pairs(s.fleet.run) do run_opts[key] = v end
    if run_opts.grace then run_opts.grace = run_opts.grace * k end
    if type(run_opts.nack_delay) == "number" then run_opts.nack_delay = run_opts.nack_delay * k end
    local eo = {}
    for key, v in pairs(s.fleet.policy.options or {}) do
      eo[key] = (key == "lock_ttl" and max(1, v * k)) or ((key == "defer_delay" or key == "fail_delay") and v * k) or v
    end
    local consumer = scenario_mod.scaled_consumer(s.fleet.consumer, k)
    if consumer.await == nil then consumer.await = 2 end
    -- the library's default, in scenario seconds like every other time
    if consumer.release_delay == nil then consumer.release_delay = 1 * k end
    local function start_worker(slot)
      local n = #incarnations + 1
      local base = ("%s/worker%d-%d"):format(dir, slot, n)
      local cfg = {
        endpoints = endpoints, topic = topic, group = group, consumer = consumer, time_scale = k,
        policy = { kind = s.fleet.policy.kind, options = eo }, redis = redis_address,
        prefix = ("mqlease-lab:%s:"):format(stamp), run = run_opts, concurrency = s.fleet.concurrency,
        shutdown = s.fleet.shutdown, handler = s.fleet.handler, failure_rate = s.workload.failure_rate,
        seed = s.seed * 1000 + n, log = base .. ".log", stopfile = stopfile,
      }
      -- the worker appends to its log: one left in a kept directory by the last
      -- run would pass for this one's (its "ready", its runs)
      os.remove(cfg.log)
      write_file(base .. ".json", cjson.encode(cfg))
      write_file(base .. ".boot.lua", BOOT:format(package.path, package.cpath, base .. ".json"))
      local w = { slot = slot, log = cfg.log, err = base .. ".err", started = now(),
        pid = spawn(("%s %s"):format(shell_quote(lua), shell_quote(base .. ".boot.lua")), base .. ".err") }
      incarnations[n] = w
      slots[slot] = w
      return w
    end
    local function wait_ready(list)
      local deadline = now() + 20
      for _, w in ipairs(list) do
        repeat
          sleep(0.05)
          local text = read_file(w.log) or ""
          if text:find("^ready") then break end
        until now() > deadline or not alive(w.pid)
        if not (read_file(w.log) or ""):find("^ready") then
          return nil, ("worker %d did not start: %s"):format(w.slot, read_file(w.err) or "")
        end
      end
      return true
    end
    local first = {}
    for slot = 1, s.fleet.workers do first[slot] = start_worker(slot) end
    local ready, err = wait_ready(first)
    if not ready then return nil, err end
    say(("%d workers on %s, topic %s"):format(s.fleet.workers, endpoints, topic))

    -- follows every log: which messages run where, which finished
    local follow = logs.follower()
    local function scan()
      for _, w in ipairs(incarnations) do follow:read(w.log, w) end
    end

    local function busiest()
      scan()
      local best, most
      for slot = 1, s.fleet.workers do
        local w = slots[slot]
        if w and not w.died then
          local n = follow:open_count(w)
          if not most or n > most then best, most = slot, n end
        end
      end
      return best
    end

    local faults, pending_restarts = {}, {}
    local t0   -- the first send
    local redis_port = started.redis and started.redis.port
    local function apply(f, t)
      local record = { action = f.action, t = t }
      if f.action == "kill" or f.action == "term" then
        local slot = f.target == "busiest" and busiest() or f.target
        local w = slot and slots[slot]
        if not w or w.died or not alive(w.pid) then
          record.label = ("%s worker %s: not running"):format(f.action, tostring(slot))
        else
          scan()
          record.open = follow:open_seqs(w)
          record.worker = w
          record.label = ("%s worker %d"):format(f.action == "kill" and "SIGKILL" or "SIGTERM", slot)
          os.execute(("kill -%s %d"):format(f.action == "kill" and "KILL" or "TERM", w.pid))
          if f.action == "kill" then w.died = t end
          w.signalled = f.action
          if f.restart then pending_restarts[#pending_restarts + 1] = { w = w, after = f.restart * k } end
        end
      elseif f.action == "proxy" then
        -- SIGSTOP: the process keeps its sockets open and answers nothing, as a
        -- proxy stuck in a long GC pause or a frozen VM does
        local sig = f.target == "freeze" and "STOP" or "CONT"
        os.execute(("kill -%s %d"):format(sig, broker.pid))
        broker.frozen = f.target == "freeze"
        record.label = f.target == "freeze" and "proxy frozen (SIGSTOP)" or "proxy thawed (SIGCONT)"
      elseif f.action == "redis" then
        if f.target == "down" then
          record.label = "Redis down"
          if started.redis then os.execute("kill -9 " .. started.redis.pid); started.redis.down = true end
        else
          record.label = "Redis up"
          if started.redis and started.redis.down then
            local r = launch.redis { dir = dir, port = redis_port }
            if r then started.redis = r else record.label = "Redis up failed" end
          end
        end
      else
        local parts = {}
        for key, v in pairs(f.settings) do
          if scenario_mod.BROKER_SETTINGS[key][3] then v = floor(v * k + 0.5) end
          local answer = control(broker.control_port, ("set %s %s"):format(key, tostring(v)))
          parts[#parts + 1] = ("%s=%s%s"):format(key, tostring(f.settings[key]), (answer or ""):match("^ok") and "" or " (refused)")
        end
        table.sort(parts)
        record.label = "broker " .. table.concat(parts, " ")
      end
      faults[#faults + 1] = record
      say(("fault at %.1f s: %s"):format((t - t0) / k, record.label))
    end

    -- restarts: a signalled worker that has exited is started again after its delay
    local function tend()
      for _, w in ipairs(incarnations) do
        if not w.died and w.signalled and not alive(w.pid) then w.died = now() end
      end
      for i = #pending_restarts, 1, -1 do
        local p = pending_restarts[i]
        if p.w.died and now() >= p.w.died + p.after then
          table.remove(pending_restarts, i)
          start_worker(p.w.slot)
        end
      end
    end

    -- sending, with the faults at their times
    local p, perr = mqlease.producer { endpoints = endpoints }
    if not p then return nil, "cannot start the producer: " .. tostring(perr) end
    local w = s.workload
    math.randomseed(s.seed)
    local sent, nsent, send_failed, npoison = {}, 0, 0, 0
    t0 = now()
    local next_fault = 1
    local function faults_due(t)
      while s.faults[next_fault] and s.faults[next_fault].at * k <= t - t0 do
        local f = s.faults[next_fault]
        next_fault = next_fault + 1
        local ok_apply, aerr = pcall(apply, f, now())
        if not ok_apply then say("fault failed: " .. tostring(aerr)) end
      end
    end
    local send_s = w.duration * k
    local total = floor(w.duration * w.rate + 0.5)
    while nsent < total do
      local t = now()
      faults_due(t)
      tend()
      -- past the sending time (a slow fault), the rest goes at once
      local due = t - t0 >= send_s and total or math.min(floor((t - t0) * w.rate / k) + 1, total)
      while nsent < due do
        nsent = nsent + 1
        local poison = w.poison_rate > 0 and random() < w.poison_rate
        local secs = workload.handler_seconds(random(), w.handler)
        local id = p:send(topic, workload.body(nsent, secs * k * 1000, poison, w.body_bytes))
        if id then
          sent[nsent] = { t = now(), poison = poison }
          if poison then npoison = npoison + 1 end
        else
          send_failed = send_failed + 1
        end
      end
      sleep(0.005)
    end
    local t_sent = now()
    p:close()

    -- the drain: until every message finished (poison ones dead-lettered), or it runs out
    local deadline = t_sent + w.drain * k
    while now() < deadline do
      faults_due(now())
      tend()
      scan()
      local done = next_fault > #s.faults and #pending_restarts == 0
      if done then
        for seq in pairs(sent) do
          if not follow:effects(seq) and not follow:dead_lettered(seq) then done = false; break end
        end
      end
      if done then break end
      sleep(0.1)
    end
    local t_end = now()
    -- one more metrics reading from every worker (an idle one writes about
    -- once a second): what they hold now is what they hold at the end
    sleep(1.5)
    local t_held = now()

    -- stop the workers: what runs now is "unfinished"
    write_file(stopfile, "")
    local grace = max(3, (run_opts.grace or 0) + 3)
    local until_ = now() + grace
    for _, wk in ipairs(incarnations) do
      while alive(wk.pid) and now() < until_ do sleep(0.05) end
      if alive(wk.pid) then os.execute("kill -9 " .. wk.pid .. " 2>/dev/null") end
      wk.died = wk.died or now()
    end
    scan()   -- every line, now that no one writes
    for _, wk in ipairs(incarnations) do wk.events = follow:events(wk) end
    return {
      scenario = s, t0 = t0, t_sent = t_sent, t_end = t_end, t_held = t_held, sent = sent, nsent = nsent,
      send_failed = send_failed, incarnations = incarnations, faults = faults,
      endpoints = endpoints, topic = topic, broker = broker and "dev broker" or endpoints,
    }
  end)
  cleanup()
  if not opts.keep then os.execute("rm -rf " .. shell_quote(dir)) end
  if not ok then return nil, tostring(raw_or_err) end
  if not raw_or_err then return nil, err2 end
  return raw_or_err
end

return _M
