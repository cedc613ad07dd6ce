-- mqlease.lab.scenario: a lab scenario file, checked and completed.
--
-- A scenario is a Lua file returning a table; every time in it is in scenario
-- seconds, and the lab runs at time_scale real seconds per scenario second
-- (0.1: ten scenario seconds pass in one). Fields, defaults in brackets:
--
--   name         [the file's base name]     description  [""]
--   time_scale   [1]  real seconds per scenario second, 0.001 to 10
--   seed         [1]  the workload's random draws (handler times, poison) follow it
--   workload = {
--     rate         messages per second (required)    duration  seconds of sending (required)
--     body_bytes   [1024]
--     handler      [{ fixed = 1 }] or { mean =, p99 =, p999 =, max = } (mqlease.lab.workload)
--     failure_rate [0]  share of runs that fail (the message is nacked and comes back)
--     poison_rate  [0]  share of messages whose every run fails
--     drain        [60] seconds after the sending to wait for every message to finish
--   }
--   fleet = {
--     workers      [2]    concurrency [16]
--     consumer     [{}]   mqlease.consumer options but endpoints, group, topic
--                         (invisible, renew_every, max_lease, release_delay and
--                         auto_invisible's min, max, start are scenario seconds)
--     policy       ["plain"] or "exactly_once" or { exactly_once = { options } }
--                         (lock_ttl, defer_delay, fail_delay are scenario seconds)
--     run          [{}]   mqlease.run options: max_attempts, grace, mode, nack_delay
--                         (consumer, policy and run are data: the workers get them as JSON)
--     shutdown     ["drain"]  what a worker does on SIGTERM: "drain" (mqlease.run's
--                         graceful drain), "exit" (dies at once, leases left to
--                         expire), "push4x" (the 4.x PushConsumer: sends a retry
--                         copy of every running message, then dies without acking)
--     handler      [nil]  a handler file (as `mqlease run` takes; a relative name is
--                         beside the scenario file) run instead of the built-in
--                         one that sleeps the drawn time
--   }
--   faults = { { at = seconds, <one action> [, restart = seconds] }, ... }   (a list; at one
--     time, in the file's order)
--     kill = N | "busiest"     SIGKILL worker N (or the one running the most handlers)
--     term = N | "busiest"     SIGTERM it
--       restart = s            start it again s seconds after it exited
--     redis = "down" | "up"    stop the lab's redis-server (SIGKILL) / start it again
--     broker = { setting = value, ... }   the dev broker's `set` (fail_change,
--                              fail_ack, delay_change_ms, paused, max_renewals; ms scaled)
--     proxy = "freeze" | "thaw"   SIGSTOP / SIGCONT the dev broker's process: a proxy that
--                              hangs without closing its connections (thawed at the end
--                              in any case)
--
-- check(t, name) raises naming the bad field ("scenario.workload.rate must be
-- ..."); it returns a new table with every default filled in.

local config = require "mqlease.config"

local type, pairs, ipairs, tostring, error, pcall, next = type, pairs, ipairs, tostring, error, pcall, next
local floor, huge = math.floor, math.huge
local concat, sort = table.concat, table.sort

local _M = {}

local function describe(v)
  if type(v) == "string" then return ("%q"):format(v) end
  return tostring(v)
end

local function bad(path, want, v)
  error(("%s must be %s (got %s)"):format(path, want, describe(v)), 0)
end

local function keys_of(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = tostring(k) end
  sort(out)
  return concat(out, ", ")
end

-- Raises for a field of t not in known (a table of names).
local function only(path, t, known)
  for k in pairs(t) do
    if known[k] == nil then
      error(("%s.%s is not a scenario field (known: %s)"):format(path, tostring(k), keys_of(known)), 0)
    end
  end
end

local function number(path, v, lo, hi, default, integer)
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v < lo or v > hi or (integer and v ~= floor(v)) then
    bad(path, ("%s from %s to %s"):format(integer and "an integer" or "a number", lo, hi), v)
  end
  return integer and floor(v) or v
end

local function table_of(path, v, default)
  if v == nil then return default end
  if type(v) ~= "table" then bad(path, "a table", v) end
  return v
end

local function check_handler(path, h)
  if h == nil then return { fixed = 1 } end
  if type(h) ~= "table" then bad(path, "a table { fixed = s } or { mean =, p99 =, p999 =, max = }", h) end
  if h.fixed ~= nil then
    only(path, h, { fixed = true })
    return { fixed = number(path .. ".fixed", h.fixed, 0, 86400) }
  end
  only(path, h, { mean = true, p99 = true, p999 = true, max = true })
  local d = {
    mean = number(path .. ".mean", h.mean, 0.001, 86400, 1),
    p99 = number(path .. ".p99", h.p99, 0.001, 86400, 6),
  }
  d.p999 = number(path .. ".p999", h.p999, d.p99 * 1.001, 86400 * 7, d.p99 * 10)
  -- the draws are cut at max: under a p999 the scenario asks for, that p999 is never drawn
  d.max = number(path .. ".max", h.max, h.p999 ~= nil and d.p999 or d.p99, 86400 * 7, d.p999 * 1.2)
  -- a defaulted p999 past a given max is where the cut puts it
  if d.p999 > d.max then d.p999 = d.max end
  return d
end

local WORKLOAD = { rate = true, duration = true, body_bytes = true, handler = true, failure_rate = true,
  poison_rate = true, drain = true }

local function check_workload(w)
  w = table_of("scenario.workload", w)
  if w == nil then error("scenario.workload is required (a table with rate and duration)", 0) end
  only("scenario.workload", w, WORKLOAD)
  if w.rate == nil then error("scenario.workload.rate is required (messages per second)", 0) end
  if w.duration == nil then error("scenario.workload.duration is required (seconds of sending)", 0) end
  return {
    rate = number("scenario.workload.rate", w.rate, 0.001, 100000),
    duration = number("scenario.workload.duration", w.duration, 0.001, 86400),
    body_bytes = number("scenario.workload.body_bytes", w.body_bytes, 16, 4 * 1024 * 1024, 1024, true),
    handler = check_handler("scenario.workload.handler", w.handler),
    failure_rate = number("scenario.workload.failure_rate", w.failure_rate, 0, 1, 0),
    poison_rate = number("scenario.workload.poison_rate", w.poison_rate, 0, 1, 0),
    drain = number("scenario.workload.drain", w.drain, 0, 86400, 60),
  }
end

-- Library options are checked by the library's own validator, with the lab's
-- path in front of its message.
local function library_check(path, fn, opts)
  local ok, err = pcall(fn, opts)
  if not ok then
    err = tostring(err):gsub("^[^:]*:%d+: ", ""):gsub("^mqlease%.[%w_.]+: ", "")
    error(path .. ": " .. err, 0)
  end
end

-- The fleet's options reach the workers as JSON (mqlease.lab.worker): a
-- function (mqlease.run's nack_delay = fn(attempt)) or a number JSON cannot
-- carry would pass the library's checks and fail the run once the servers are up.
local function plain(path, v)
  local t = type(v)
  if t == "table" then
    for k, x in pairs(v) do plain(path .. "." .. tostring(k), x) end
  elseif t == "number" then
    if v ~= v or v == huge or v == -huge then bad(path, "plain data (a finite number: the workers get it as JSON)", v) end
  elseif t ~= "string" and t ~= "boolean" then
    bad(path, "plain data (a number, string, boolean or table: the workers get it as JSON)", v)
  end
end

-- ------------------------------------------------------------- time scaling

local CONSUMER_SECONDS = { invisible = true, renew_every = true, max_lease = true, release_delay = true,
  corrupt_delay = true }
local AUTO_SECONDS = { min = true, max = true, start = true }

-- The fleet's consumer options at time scale k (seconds kept at least 1, the
-- library's minimum for a lease).
function _M.scaled_consumer(consumer, k)
  local out = {}
  for key, v in pairs(consumer) do
    if CONSUMER_SECONDS[key] and type(v) == "number" then
      out[key] = v * k
    elseif key == "auto_invisible" then
      out[key] = {}
      for ak, av in pairs(v) do out[key][ak] = AUTO_SECONDS[ak] and av * k or av end
    else
      out[key] = v
    end
  end
  return out
end

local OWNED = { endpoints = true, group = true, topic = true }
local RUN_FIELDS = { max_attempts = true, grace = true, mode = true, nack_delay = true }
local EO_FIELDS = { lock_ttl = true, defer_delay = true, fail_delay = true, done_ttl = true, on_locked = true,
  fail = true, max_hold = true }

local function check_policy(p)
  if p == nil or p == "plain" then return { kind = "plain" } end
  if p == "exactly_once" then return { kind = "exactly_once", options = {} } end
  if type(p) ~= "table" then bad("scenario.fleet.policy", '"plain", "exactly_once" or { exactly_once = { ... } }', p) end
  only("scenario.fleet.policy", p, { exactly_once = true })
  local o = table_of("scenario.fleet.policy.exactly_once", p.exactly_once, {})
  only("scenario.fleet.policy.exactly_once", o, EO_FIELDS)
  -- redis and prefix are the lab's; the rest goes through the policy's own checks
  local probe = { redis = "127.0.0.1:6379" }
  for k, v in pairs(o) do probe[k] = v end
  library_check("scenario.fleet.policy.exactly_once", require("mqlease.policy").exactly_once, probe)
  plain("scenario.fleet.policy.exactly_once", o)
  return { kind = "exactly_once", options = o }
end

local FLEET = { workers = true, concurrency = true, consumer = true, policy = true, run = true, shutdown = true,
  handler = true }

local function check_fleet(f, k)
  f = table_of("scenario.fleet", f, {})
  only("scenario.fleet", f, FLEET)
  local consumer = table_of("scenario.fleet.consumer", f.consumer, {})
  for k in pairs(consumer) do
    if OWNED[k] then error(("scenario.fleet.consumer.%s is set by the lab, not the scenario"):format(k), 0) end
  end
  local probe = { endpoints = "127.0.0.1:1", group = "g", topic = "t" }
  for k, v in pairs(consumer) do probe[k] = v end
  library_check("scenario.fleet.consumer", config.consumer_options, probe)
  if k ~= 1 then
    probe = _M.scaled_consumer(probe, k)
    library_check(("scenario.fleet.consumer (scaled by time_scale %s)"):format(k), config.consumer_options, probe)
  end
  local run = table_of("scenario.fleet.run", f.run, {})
  only("scenario.fleet.run", run, RUN_FIELDS)
  library_check("scenario.fleet.run", config.run_options, run)
  plain("scenario.fleet.consumer", consumer)
  plain("scenario.fleet.run", run)
  local shutdown = f.shutdown or "drain"
  if shutdown ~= "drain" and shutdown ~= "exit" and shutdown ~= "push4x" then
    bad("scenario.fleet.shutdown", '"drain", "exit" or "push4x"', shutdown)
  end
  if f.handler ~= nil and (type(f.handler) ~= "string" or f.handler == "") then
    bad("scenario.fleet.handler", "a handler file name", f.handler)
  end
  return {
    workers = number("scenario.fleet.workers", f.workers, 1, 64, 2, true),
    concurrency = number("scenario.fleet.concurrency", f.concurrency, 1, 100000, 16, true),
    consumer = consumer, policy = check_policy(f.policy), run = run, shutdown = shutdown, handler = f.handler,
  }
end

-- The dev broker settings a fault may change: { lowest, highest, milliseconds (scaled),
-- integer }. The broker refuses a paused of 0.5 and a max_renewals of 1.5
-- (src/devbroker/dv_command.c), so those are refused here, before anything runs.
_M.BROKER_SETTINGS = {
  fail_change = { 0, 1 }, fail_ack = { 0, 1 }, paused = { 0, 1, false, true },
  max_renewals = { -1, 1000000, false, true }, delay_change_ms = { 0, 86400000, true },
}

local function check_target(path, v, workers)
  if v == "busiest" then return v end
  return number(path, v, 1, workers, nil, true) or bad(path, ("a worker from 1 to %d or \"busiest\""):format(workers), v)
end

local function check_faults(faults, fleet, horizon)
  faults = table_of("scenario.faults", faults, {})
  -- ipairs below skips any other key: a fault written without its braces
  -- ({ at = 30, kill = 1 }) or a hole in the list would run no fault at all
  local n = 0
  while faults[n + 1] ~= nil do n = n + 1 end
  local stray = {}
  for key in pairs(faults) do
    if type(key) ~= "number" or key < 1 or key > n or key ~= floor(key) then
      stray[#stray + 1] = type(key) == "string" and key:match("^[%a_][%w_]*$") and "scenario.faults." .. key
        or ("scenario.faults[%s]"):format(describe(key))
    end
  end
  if #stray > 0 then
    sort(stray)   -- the same key named every time
    error(("%s is not a fault position (faults is a list: { { at = s, kill = N }, ... }, %d in a row from 1)")
      :format(stray[1], n), 0)
  end
  local out, order = {}, {}
  for i, f in ipairs(faults) do
    local path = ("scenario.faults[%d]"):format(i)
    if type(f) ~= "table" then bad(path, "a table { at = seconds, kill|term|redis|broker|proxy = ... }", f) end
    only(path, f, { at = true, kill = true, term = true, redis = true, broker = true, proxy = true, restart = true })
    if f.at == nil then error(path .. ".at is required (seconds from the start)", 0) end
    local c = { at = number(path .. ".at", f.at, 0, horizon) }
    local actions = 0
    for _, k in ipairs({ "kill", "term", "redis", "broker", "proxy" }) do
      if f[k] ~= nil then actions = actions + 1; c.action = k end
    end
    if actions ~= 1 then error(path .. " must have exactly one of kill, term, redis, broker, proxy", 0) end
    if c.action == "kill" or c.action == "term" then
      c.target = check_target(path .. "." .. c.action, f[c.action], fleet.workers)
      c.restart = number(path .. ".restart", f.restart, 0, 86400)
    elseif f.restart ~= nil then
      error(path .. ".restart goes only with kill or term", 0)
    elseif c.action == "redis" then
      if f.redis ~= "down" and f.redis ~= "up" then bad(path .. ".redis", '"down" or "up"', f.redis) end
      if fleet.policy.kind ~= "exactly_once" then
        error(path .. ".redis needs fleet.policy exactly_once (no Redis otherwise)", 0)
      end
      c.target = f.redis
    elseif c.action == "proxy" then
      if f.proxy ~= "freeze" and f.proxy ~= "thaw" then bad(path .. ".proxy", '"freeze" or "thaw"', f.proxy) end
      c.target = f.proxy
    else
      local b = table_of(path .. ".broker", f.broker)
      if next(b) == nil then error(path .. ".broker must set at least one setting", 0) end
      c.settings = {}
      for k, v in pairs(b) do
        local kpath = path .. ".broker." .. tostring(k)
        if _M.BROKER_SETTINGS[k] == nil then
          error(("%s is not a dev broker setting (known: %s)"):format(kpath, keys_of(_M.BROKER_SETTINGS)), 0)
        end
        if type(v) == "boolean" then v = v and 1 or 0 end
        local range = _M.BROKER_SETTINGS[k]
        c.settings[k] = number(kpath, v, range[1], range[2], nil, range[4])
      end
    end
    out[i] = c
    order[c] = i
  end
  -- table.sort is not stable: faults at the same time keep the file's order
  sort(out, function(a, b)
    if a.at ~= b.at then return a.at < b.at end
    return order[a] < order[b]
  end)
  return out
end

local TOP = { name = true, description = true, time_scale = true, seed = true, workload = true, fleet = true,
  faults = true }

function _M.check(t, name)
  if type(t) ~= "table" then bad("scenario", "a table", t) end
  only("scenario", t, TOP)
  if t.name ~= nil and (type(t.name) ~= "string" or not t.name:match("^[%w_%-]+$")) then
    bad("scenario.name", "a name of letters, digits, '_' or '-'", t.name)
  end
  if t.description ~= nil and type(t.description) ~= "string" then bad("scenario.description", "a string", t.description) end
  local s = {
    name = t.name or name or "scenario",
    description = t.description or "",
    time_scale = number("scenario.time_scale", t.time_scale, 0.001, 10, 1),
    seed = number("scenario.seed", t.seed, 0, 2 ^ 31, 1, true),
    workload = check_workload(t.workload),
  }
  s.fleet = check_fleet(t.fleet, s.time_scale)
  s.faults = check_faults(t.faults, s.fleet, s.workload.duration + s.workload.drain)
  return s
end

-- Loads and checks a scenario file; raises naming the file and the bad field.
function _M.load(path)
  local chunk, err = loadfile(path, "t", {})
  if not chunk then error(err, 0) end
  local ok, t = pcall(chunk)
  if not ok then error(("%s: %s"):format(path, tostring(t)), 0) end
  local base = path:match("([^/]+)%.lua$") or path:match("([^/]+)$")
  local checked
  ok, checked = pcall(_M.check, t, base and base:gsub("[^%w_%-]", "_"))
  if not ok then error(("%s: %s"):format(path, tostring(checked)), 0) end
  checked.file = path
  -- a handler file is found beside the scenario
  local h = checked.fleet.handler
  local dir = path:match("^(.*)/[^/]*$")
  if h and dir and h:sub(1, 1) ~= "/" then checked.fleet.handler = dir .. "/" .. h end
  return checked
end

return _M
