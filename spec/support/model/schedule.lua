-- spec/support/model/schedule.lua: one seeded random schedule of the fault
-- model -- a topic (FIFO groups or unordered), a policy (plain or
-- exactly-once), handlers that take their time and fail, and faults in the
-- broker and in Redis -- run through the real mqlease.run in simulated time,
-- then checked against the invariants of a message's life:
--
--   order       a handler of an ordered message starts only once every
--               earlier message of its group is gone from the broker
--   once        the broker applies at most one release per delivery, and
--               acks or dead-letters a message at most once
--   live        no handler starts on a lease that has ended
--   marker      under exactly-once, no ack without the message's done marker,
--               and no effect twice unless its lock was lost or its marker
--               could never be written
--   locks       no lock keepalive runs once mqlease.run has returned
--   alone       under exactly-once, no handler of a message starts while
--               another of it runs, unless its lock was lost
--   slots       no more handlers run at once than concurrency allows (a
--               message waiting to be tried again holds no slot, and takes
--               one again before its handler runs)
--   after stop  no handler starts once the stop is asked for: a delivery
--               that waits to be tried again, a task that had not run yet,
--               or an exactly-once attempt whose lock call was out gives
--               itself back
--   stranded    nothing is left held at close that never ran (the drain
--               gives back what it does not run)
--   clean       the run returns, no task of it fails, no message makes an
--               illegal move (mqlease.run.life raises on one)
--
-- run(seed) -> violations (a list of strings), description of the schedule.

local clock_mod = require "spec.support.model.clock"
local broker_mod = require "spec.support.model.broker"
local redis_mod = require "spec.support.model.redis"
local run = require "mqlease.run"
local policy = require "mqlease.policy"
local wait = require "mqlease.loop"

local _M = {}

local function pick(rng, list) return list[rng.int(1, #list)] end

-- The schedule's parameters from its seed.
function _M.plan(seed)
  local rng = clock_mod.rng(seed)
  -- drawn from the seed, not the generator, so the other draws (and the
  -- pinned seeds, none of which is a multiple of 3) stay as they were: the
  -- token issued at each grant on a third of the seeds, on read elsewhere,
  -- and read by the handler (a Redis call that may fail) on the last third
  local p = { seed = seed, rng = rng, prefetch = seed % 2 == 0,
    fence = seed % 3 == 1 and "on_grant" or "on_read", read_fence = seed % 3 == 0 }
  p.fifo = rng.chance(0.5)
  p.eo = rng.chance(0.5)
  if p.fifo then
    p.groups = {}
    for g = 1, rng.int(1, 3) do p.groups[g] = { "g" .. g, rng.int(2, 6) } end
  else
    p.count = rng.int(3, 14)
  end
  p.concurrency = rng.int(1, 4)
  p.batch = rng.int(1, 4)
  p.max_attempts = rng.chance(0.3) and rng.int(2, 4) or nil
  p.nack_delay = rng.range(0.2, 2)
  p.invisible = rng.range(2, 6)
  p.release_delay = rng.range(0.2, 1.5)
  p.handler = { fail = pick(rng, { 0, 0.1, 0.3, 0.5 }), raise = pick(rng, { 0, 0, 0.05 }),
    long = pick(rng, { 0, 0.1, 0.3 }) }
  p.faults = {
    death = pick(rng, { 0, 0.1, 0.3, 0.5 }), death_within = rng.range(1, 12),
    ack_fail = pick(rng, { 0, 0.1, 0.3, 0.6 }), applied = pick(rng, { 0, 0.5, 1 }),
    nack_fail = pick(rng, { 0, 0.1, 0.3 }), dead_letter_fail = pick(rng, { 0, 0.2, 0.5 }),
    receive_fail = pick(rng, { 0, 0.05 }),
    eval_fail = pick(rng, { 0, 0.05, 0.2, 0.4 }),
    lock_break = pick(rng, { 0, 0.1, 0.3 }), lock_break_within = rng.range(0.5, 8),
  }
  p.lock_ttl = rng.range(2, 8)
  p.max_hold = pick(rng, { 3600, rng.range(1, 10) })
  p.max_defer = pick(rng, { 0, rng.range(0.5, 5), 600 })
  p.defer_delay = rng.range(0.2, 2)
  p.fail_delay = rng.range(0.2, 2)
  p.stop_at = rng.range(2, 60)
  p.grace = pick(rng, { 0, rng.range(0.1, 5), rng.range(5, 20) })
  p.mode = pick(rng, { "wait", "wait", "nack" })
  return p
end

function _M.describe(p)
  local f = p.faults
  local sizes = {}
  for i, g in ipairs(p.groups or {}) do sizes[i] = g[2] end
  return ("seed %d: %s %s, %s%s messages, concurrency %d, batch %d, max_attempts %s, stop at %.1f s, grace %.1f (%s); "
    .. "handler fail %.2f raise %.2f long %.1f; lease death %.1f within %.1f s, ack fail %.1f (applied %.1f), "
    .. "nack fail %.1f, dlq fail %.1f; redis fail %.2f, lock break %.1f, lock_ttl %.1f, max_hold %.1f, max_defer %.1f%s"):format(
    p.seed, p.fifo and "FIFO" or "unordered", p.eo and "exactly-once" or "plain",
    p.groups and (#p.groups .. " groups of ") or tostring(p.count), table.concat(sizes, "+"),
    p.concurrency, p.batch, tostring(p.max_attempts), p.stop_at, p.grace, p.mode,
    p.handler.fail, p.handler.raise, p.handler.long, f.death, f.death_within, f.ack_fail, f.applied,
    f.nack_fail, f.dead_letter_fail, f.eval_fail, f.lock_break, p.lock_ttl, p.max_hold, p.max_defer,
    (p.eo and p.prefetch and ", lock prefetch" or "")
      .. (p.eo and (", fence " .. p.fence .. (p.read_fence and ", read by the handler" or "")) or ""))
end

-- Runs the schedule of seed. -> violations, description, stats
function _M.run(seed)
  local p = _M.plan(seed)
  local rng = p.rng
  local violations
  local stats = {}
  local errors = {}
  local stderr = io.stderr
  -- what mqlease writes on stderr: a failed task is a violation
  io.stderr = { write = function(_, ...)
    local line = table.concat({ ... })
    if line:find("task failed", 1, true) then errors[#errors + 1] = line end
    return io.stderr
  end }
  local ok, err = pcall(clock_mod.simulate, p.stop_at + p.grace + 200, function(clock)
    local redis = p.eo and redis_mod.new({ rng = rng, clock = clock, faults = p.faults }) or nil
    local b = broker_mod.new({ rng = rng, clock = clock, fifo = p.fifo, groups = p.groups, count = p.count,
      batch = p.batch, invisible = p.invisible, faults = p.faults, eo = redis, release_delay = p.release_delay,
      max_attempts = p.max_attempts })
    violations = b.violations
    local effects, excuses = {}, {}
    local last_fence = {}
    local running = {}   -- message id -> handlers of it running now
    local handlers_running = 0   -- handlers of any message running now
    local stopped = false        -- the run's stop was asked for
    local ran_before_stop = setmetatable({}, { __mode = "k" })   -- delivery -> true
    local function body(m)
      local d = rng.chance(p.handler.long) and rng.range(3, 20) or rng.range(0, 2)
      wait.sleep(d)
      if p.eo and p.read_fence then
        -- as a handler passing its token to a fenced write: issued while the
        -- lock is ours, or the read raises (the handler then fails)
        local fence = m.lease.fence
        if math.type(fence) ~= "integer" then
          b.violation("%s: lease.fence read %s", m.id, tostring(fence))
        elseif fence <= (last_fence[m.id] or 0) then
          b.violation("%s: fence %d read after %d (tokens must grow)", m.id, fence, last_fence[m.id])
        else
          last_fence[m.id] = fence
        end
        if m.lease.fence ~= fence then b.violation("%s: a second read of lease.fence changed it", m.id) end
      end
      if rng.chance(p.handler.raise) then error("model: the handler raised") end
      if rng.chance(p.handler.fail) then return nil, "model: the handler failed" end
      effects[m.id] = (effects[m.id] or 0) + 1
      return true
    end
    local function handler(m)
      b.handler_starts(m)
      -- no handler starts once the stop is asked for: a delivery whose
      -- handler ran before it and waits to be tried again gives itself back,
      -- and so does one whose handler had not started yet (an exactly-once
      -- attempt whose lock call was out at the stop, a task not yet run)
      if stopped and ran_before_stop[m] then
        b.violation("%s: a handler started again after the stop (it waited to be tried again)", m.id)
      elseif stopped then
        b.violation("%s: a handler started after the stop", m.id)
      end
      if not stopped then ran_before_stop[m] = true end
      if handlers_running >= p.concurrency then
        b.violation("%s: a handler started beside %d others (concurrency %d)", m.id, handlers_running, p.concurrency)
      end
      if p.eo and (running[m.id] or 0) > 0 and not redis.lock_lost_of[m.id] then
        b.violation("%s: a handler started while another of it ran, no lock lost", m.id)
      end
      running[m.id] = (running[m.id] or 0) + 1
      handlers_running = handlers_running + 1
      local ok, res, err = pcall(body, m)
      handlers_running = handlers_running - 1
      running[m.id] = running[m.id] - 1
      if not ok then error(res, 0) end
      return res, err
    end
    local opts = {
      concurrency = p.concurrency, max_attempts = p.max_attempts, nack_delay = p.nack_delay,
      grace = p.grace, mode = p.mode,
      stop = function()
        if clock.t - 1000 >= p.stop_at then stopped = true end
        return stopped
      end,
      on_error = function(m, e)
        e = tostring(e)
        if e:find("cannot move from", 1, true) then b.violation("illegal move: %s", e) end
        if e:find("done marker not recorded", 1, true) then excuses[m.id] = (excuses[m.id] or 0) + 1 end
      end,
    }
    if p.eo then
      -- the lock prefetch on every other seed (drawn from the seed, not the
      -- generator, so the other draws and the pinned seeds stay as they were)
      opts.policy = policy.exactly_once({ redis = redis, lock_ttl = p.lock_ttl, max_hold = p.max_hold,
        max_defer = p.max_defer, defer_delay = p.defer_delay, fail_delay = p.fail_delay, prefetch = p.prefetch,
        fence = p.fence })
    end
    local summary = run(b.consumer, handler, opts)
    stats.summary = summary
    if redis then
      for _, key in ipairs(redis.running()) do b.violation("the keepalive of %s runs after mqlease.run returned", key) end
      for id, n in pairs(effects) do
        local allowed = 1 + (excuses[id] or 0) + (redis.lock_lost_of[id] or 0)
        if n > allowed then b.violation("%s took effect %d times under exactly-once (allowed %d)", id, n, allowed) end
      end
    end
    stats.counts = b.counts
    local spent = b.counts.defer_budget_spent or 0
    if spent > #b.leases then
      b.violation("defer_budget_spent counted %d times for %d deliveries", spent, #b.leases)
    end
  end)
  io.stderr = stderr
  violations = violations or {}
  if not ok then violations[#violations + 1] = "the run raised: " .. tostring(err) end
  for _, line in ipairs(errors) do violations[#violations + 1] = line end
  return violations, _M.describe(p), stats
end

return _M
