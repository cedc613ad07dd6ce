-- mqlease.lab.worker: one worker process of a lab scenario. The lab starts it
-- as `lua -e "require('mqlease.lab.worker').main(CONFIG)"` with CONFIG a JSON
-- file (mqlease.lab.experiment writes it) and reads what it did from its log, one
-- line per event, times in milliseconds of mqlease.now() (a monotonic clock
-- shared by every process of the machine):
--
--   ready                                     the consumer is up
--   start SEQ ID T ATTEMPT                    a handler run began
--   end SEQ ID T ok|fail ATTEMPT WHY          it ended (ok: the business effect happened;
--                                             WHY of a failure: poison, failure, handler)
--   metrics T INFLIGHT RENEWALS DLQ REDIS SKIPPED HANDOFF EXPIRED   every 0.25 s
--   dlq SEQ ID T ATTEMPT ok|fail              mqlease.run dead-lettered it (max_attempts);
--                                             fail: the broker refused (the dev broker has no DLQ)
--   push4x T N                                SIGTERM under shutdown "push4x": N retry copies sent
--
-- Shutdowns (the scenario's fleet.shutdown): "drain" is mqlease.run's
-- graceful drain on SIGTERM; "exit" leaves SIGTERM's default action (the
-- process dies, its leases expire); "push4x" models the 4.x PushConsumer bug:
-- on SIGTERM every running message is sent again as a retry copy and the
-- process dies without acking, so the original comes back too.

local mqlease = require "mqlease"
local core = require "mqlease.core"
local redis_mod = require "mqlease.redis"
local workload = require "mqlease.lab.workload"
local cjson = require "cjson"

local floor, min, random = math.floor, math.min, math.random
local pairs, ipairs, pcall, type = pairs, ipairs, pcall, type

local _M = {}

local function read_json(path)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  return cjson.decode(text)
end

local function ms(t) return floor(t * 1000) end

-- A Redis client that counts the calls the policy makes through it.
local function counting_redis(address, counter)
  local real = redis_mod.new(address)
  local r = {}
  function r.call(_, ...) counter.n = counter.n + 1; return real:call(...) end
  function r.eval(_, ...) counter.n = counter.n + 1; return real:eval(...) end
  function r.keepalive(_, ...) return real:keepalive(...) end
  function r.keepalive_stop(_, ...) return real:keepalive_stop(...) end
  function r.keepalive_lost(_, ...) return real:keepalive_lost(...) end
  function r.close() return real:close() end
  return r
end

local function sum(t)
  if type(t) ~= "table" then return t or 0 end
  local n = 0
  for _, v in pairs(t) do n = n + v end
  return n
end

local function self_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("n")
  f:close()
  return pid
end

function _M.main(config_path)
  local cfg = read_json(config_path)
  math.randomseed(cfg.seed)
  local log = assert(io.open(cfg.log, "a"))
  log:setvbuf("line")
  local k = cfg.time_scale

  local copts = cfg.consumer
  copts.endpoints, copts.group, copts.topic = cfg.endpoints, cfg.group, cfg.topic
  local c = assert(mqlease.consumer(copts))

  local redis_calls = { n = 0 }
  local policy
  if cfg.policy.kind == "exactly_once" then
    local o = {}
    for key, v in pairs(cfg.policy.options) do o[key] = v end
    o.redis = counting_redis(cfg.redis, redis_calls)
    o.prefix = cfg.prefix
    policy = mqlease.policy.exactly_once(o)
  end

  local user
  if cfg.handler then
    local loaded = assert(require("mqlease.handler").load(cfg.handler))
    user = loaded.handler
    policy = policy or loaded.policy
  end

  local running = {}
  local failure_rate = cfg.failure_rate
  local function handler(m, lease)
    local w = workload.parse(m.body) or { seq = -1, ms = 0, poison = false }
    running[m] = true
    log:write(("start %d %s %d %d\n"):format(w.seq, m.id, ms(mqlease.now()), m.delivery_attempt or 1))
    local ok, res, err
    if user then
      ok, res, err = pcall(user, m, lease)
      ok = ok and res
    else
      if w.ms > 0 then mqlease.sleep(w.ms / 1000) end
      ok = not w.poison and not (failure_rate > 0 and random() < failure_rate)
      err = w.poison and "poison" or "failure"
    end
    running[m] = nil
    log:write(("end %d %s %d %s %d %s\n"):format(w.seq, m.id, ms(mqlease.now()), ok and "ok" or "fail",
      m.delivery_attempt or 1, ok and "-" or (user and "handler" or err)))
    if ok then return true end
    return false, err
  end

  local function snapshot()
    local mt = c:metrics()
    log:write(("metrics %d %d %d %d %d %d %d %d\n"):format(ms(mqlease.now()), mt.inflight or 0,
      (mt.renew_success or 0) + (mt.renew_fail or 0) + (mt.renew_uncertain or 0), sum(mt.dead_lettered),
      redis_calls.n, mt.duplicate_skipped or 0, mt.handoff or 0, mt.expire_while_alive or 0))
  end

  local producer, watcher
  if cfg.shutdown == "push4x" then
    producer = assert(mqlease.producer { endpoints = cfg.endpoints })
    watcher = core.watch_signals({ "TERM" }, {}, 3600, 0)
  end
  local function push4x()
    local n = 0
    for m in pairs(running) do
      if producer:send(cfg.topic, m.body) then n = n + 1 end
    end
    snapshot()
    log:write(("push4x %d %d\n"):format(ms(mqlease.now()), n))
    log:close()
    -- no ack, no nack, no goodbye: the process is gone as the 4.x consumer was
    os.execute("kill -9 " .. self_pid())
  end

  -- every dead-lettering mqlease.run decides (max_attempts) is logged, even
  -- one the broker cannot carry out (the dev broker has no dead-letter queue)
  local receive = c.receive
  c.receive = function(self, ...)
    local msgs, err, code = receive(self, ...)
    for _, m in ipairs(msgs or {}) do
      local dead_letter = m.dead_letter
      m.dead_letter = function(msg, reason)
        local ok, derr, dcode = dead_letter(msg, reason)
        local w = workload.parse(msg.body)
        log:write(("dlq %d %s %d %d %s\n"):format(w and w.seq or -1, msg.id, ms(mqlease.now()),
          msg.delivery_attempt or 1, ok and "ok" or "fail"))
        return ok, derr, dcode
      end
    end
    return msgs, err, code
  end

  local nack_delay = cfg.run.nack_delay or function(attempt) return min(2 ^ ((attempt or 1) - 1), 60) * k end
  log:write("ready\n")
  local last_snap, last_check = 0, 0
  mqlease.run(c, handler, {
    concurrency = cfg.concurrency, policy = policy, on_error = function() end,
    signals = cfg.shutdown == "drain", grace = cfg.run.grace or 25 * k, mode = cfg.run.mode,
    max_attempts = cfg.run.max_attempts, nack_delay = nack_delay,
    stop = function()
      local t = mqlease.now()
      if t - last_snap >= 0.25 then last_snap = t; snapshot() end
      if watcher and watcher:signal() then push4x() end
      if t - last_check < 0.2 then return false end
      last_check = t
      local f = io.open(cfg.stopfile)
      if f then f:close(); return true end
      return false
    end,
  })
  snapshot()
  log:write("exit\n")
  log:close()
  c:close()
  if producer then producer:close() end
end

return _M
