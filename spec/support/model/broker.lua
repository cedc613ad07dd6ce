-- spec/support/model/broker.lua: a consumer for mqlease.run over a
-- simulated broker that fails on purpose -- the broker half of the fault model
-- (spec/unit/run_model_spec.lua).
--
-- It keeps what a RocketMQ broker keeps for one consumer group: each
-- message's state (ready at a time, in flight under a lease, acked,
-- dead-lettered) and its delivery count; and, for a FIFO group, RocketMQ's
-- rule that a message group's queue is blocked while any of its messages is
-- in flight, and redelivered from its first unacknowledged message. Each
-- delivery gets a lease of its own that the simulated core renews until the
-- schedule kills it (a renewal that fails, a budget that ends) or it is
-- released. Releases fail as the schedule says, some after the broker
-- applied them (a reply lost on the way back), and a failed release leaves
-- the lease to expire at its deadline, as the C core does.
--
-- The broker records what the invariants need: every release it applied
-- (per lease and per message), every handler start with the state of the
-- lease and the group at that moment, and what was left held at close.

local wait = require "mqlease.loop"
local lease_mod = require "mqlease.lease"

local _M = {}

local HUGE = math.huge
local ALIVE = { held = true, expiring = true }

-- cfg: rng, clock, fifo, groups ({ {name, n} }, or nil), count (unordered
-- messages), batch, invisible, faults = { death, death_within, ack_fail,
-- applied, nack_fail, dead_letter_fail, receive_fail }, eo (a model redis,
-- to check done markers), release_delay.
function _M.new(cfg)
  local rng, clock, faults = cfg.rng, cfg.clock, cfg.faults
  local b = { msgs = {}, leases = {}, violations = {}, closed = false, counts = {}, started = {} }
  local function violation(fmt, ...) b.violations[#b.violations + 1] = fmt:format(...) end
  b.violation = violation

  -- the messages, in the order a producer sent them
  if cfg.groups then
    for _, g in ipairs(cfg.groups) do
      for i = 1, g[2] do
        b.msgs[#b.msgs + 1] = { id = g[1] .. ":" .. i, group = g[1], idx = i, visible_at = 0, deliveries = 0 }
      end
    end
  else
    for i = 1, cfg.count do
      b.msgs[#b.msgs + 1] = { id = "u:" .. i, visible_at = 0, deliveries = 0 }
    end
  end
  local by_group = {}
  for _, msg in ipairs(b.msgs) do
    if msg.group then
      by_group[msg.group] = by_group[msg.group] or {}
      by_group[msg.group][msg.idx] = msg
    end
  end
  b.by_group = by_group

  -- A lease's state now: a held or expiring lease past its deadline is lost,
  -- and its message is ready again at that deadline.
  local function tick(l)
    if ALIVE[l.st] and clock.t >= l.dies_at then
      l.st = "lost"
      local msg = l.msg
      if msg.inflight == l then
        msg.inflight = nil
        msg.visible_at = l.dies_at
      end
    end
    return l.st
  end
  b.tick = tick

  -- A delivery's lease, as mqlease.lease shows one: its state (computed, as
  -- the core reports it), alive() with the exactly-once lock as the real
  -- one reads it, and _lock_lost() for the policy.
  local lease_methods = {
    alive = function(self)
      if not lease_mod.lock_kept(self) then return false end
      return ALIVE[tick(self)] == true
    end,
    _lock_lost = function(self) rawset(self, "_lock_is_lost", true) end,
  }
  local lease_mt = {
    __index = function(l, k)
      if k == "state" then return tick(l) end
      if k == "fence" then return lease_mod.fence_of(l) end
      return lease_methods[k]
    end,
  }

  local function done(msg) return msg.acked or msg.dead end

  -- Messages the broker may hand out now.
  local function deliverable()
    local out = {}
    for _, l in ipairs(b.leases) do tick(l) end
    if cfg.groups and cfg.fifo then
      for _, g in ipairs(cfg.groups) do
        local list, blocked = by_group[g[1]], false
        for i = 1, g[2] do
          if list[i].inflight then blocked = true break end
        end
        if not blocked then
          for i = 1, g[2] do
            local msg = list[i]
            if not done(msg) then
              if msg.visible_at > clock.t then break end
              out[#out + 1] = msg
            end
          end
        end
      end
    else
      for _, msg in ipairs(b.msgs) do
        if not done(msg) and not msg.inflight and msg.visible_at <= clock.t then out[#out + 1] = msg end
      end
    end
    return out
  end

  local c = {
    topic = "t", group = "g",
    options = { release_delay = cfg.release_delay, batch = cfg.batch, request_timeout = 3 },
  }
  b.consumer = c
  c._router = { client = {
    cancel_receives = function() end,
    closed = function() return b.closed end,
  } }
  function c.metrics() return { fifo = cfg.fifo == true } end
  function c.count(_, name) b.counts[name] = (b.counts[name] or 0) + 1 end
  function c.id() return "model@1" end

  -- What the broker applies, once per lease.
  local function apply(l, how, delay)
    local msg = l.msg
    l.applied = l.applied + 1
    if l.applied > 1 then violation("lease %d of %s released twice", l.n, msg.id) end
    if how == "ack" or how == "dead" then
      if done(msg) then violation("%s acked or dead-lettered twice", msg.id) end
      if how == "ack" then
        msg.acked = true
        if cfg.eo and not cfg.eo.done_of(msg.id) then violation("%s acked without its done marker", msg.id) end
      else
        msg.dead = true
        -- only a message past its last attempt (it arrived with none left)
        -- goes to the dead-letter queue without having run
        if not l.started and (not cfg.max_attempts or msg.deliveries <= cfg.max_attempts) then
          violation("%s dead-lettered on delivery %d without having run", msg.id, msg.deliveries)
        end
      end
      l.st = how == "ack" and "acked" or "dead_lettered"
    else
      l.st = "nacked"
      msg.visible_at = clock.t + delay
    end
    if msg.inflight == l then msg.inflight = nil end
  end

  -- A release that failed: the core renews the lease no more, it ends at its deadline.
  local function failed(l)
    if l.st == "held" then
      l.st = "expiring"
      local deadline = clock.t + cfg.invisible
      if deadline < l.dies_at then l.dies_at = deadline end
    end
  end

  -- One release of lease l: true, or nil, message, code.
  local function release(l, how, delay, p_fail)
    if b.closed then return nil, "the consumer is closed", "CLOSED" end
    local st = tick(l)
    if st == "acked" then return nil, "the message was already acked", "ALREADY_ACKED" end
    if st == "nacked" then return nil, "the message was already nacked", "ALREADY_NACKED" end
    if st == "dead_lettered" then return nil, "the message was already dead-lettered", "ALREADY_DEAD_LETTERED" end
    if st == "lost" then return nil, "the lease was lost", "LEASE_LOST" end
    if rng.chance(p_fail) then
      -- the reply was lost: the broker may have applied it all the same
      if rng.chance(faults.applied) and l.applied == 0 then apply(l, how, delay) end
      failed(l)
      return nil, "no reply within the request timeout", "TIMEOUT"
    end
    if l.applied > 0 then
      -- applied before, its reply lost: the broker answers as it did
      l.st = how == "ack" and "acked" or how == "dead" and "dead_lettered" or "nacked"
      return true
    end
    apply(l, how, delay)
    return true
  end

  local function message(msg)
    msg.deliveries = msg.deliveries + 1
    local dies_at = HUGE
    if rng.chance(faults.death) then dies_at = clock.t + rng.range(0, faults.death_within) end
    local l = setmetatable({ msg = msg, st = "held", dies_at = dies_at, applied = 0, n = #b.leases + 1 },
      lease_mt)
    b.leases[#b.leases + 1] = l
    msg.inflight = l
    local m = { id = msg.id, body = msg.id, topic = "t", delivery_attempt = msg.deliveries,
      message_group = cfg.fifo and msg.group or nil, consumer = c, lease = l, _model = msg }
    l._message = m   -- as mqlease.lease keeps its message
    function m.nack(self, delay)
      -- mqlease.run always says when a message it gives back is due again
      -- (release_delay, a retry delay): a nack without one is visible at once
      if type(delay) ~= "number" then violation("%s nacked without a delay", msg.id) end
      wait.sleep(rng.range(0.001, 0.05))
      return release(l, "nack", delay or 0, faults.nack_fail)
    end
    function m.dead_letter(self)
      wait.sleep(rng.range(0.001, 0.05))
      return release(l, "dead", 0, faults.dead_letter_fail)
    end
    return m
  end

  function c.receive(_, want)
    if b.closed then return nil, "the consumer is closed", "CLOSED" end
    if rng.chance(faults.receive_fail) then
      wait.sleep(0.5)
      return nil, "the proxy is unavailable", "UNAVAILABLE"
    end
    local ready = deliverable()
    if #ready == 0 then
      wait.sleep(rng.range(0.1, 1))   -- a long poll that ends empty
      if b.closed then return nil, "the consumer is closed", "CLOSED" end
      ready = deliverable()
    end
    local msgs = {}
    for i = 1, math.min(want, #ready) do msgs[i] = message(ready[i]) end
    return msgs
  end

  function c.ack(_, msgs)
    wait.sleep(rng.range(0.001, 0.05))
    local results, all, err, code = {}, true, nil, nil
    for i, m in ipairs(msgs) do
      local ok, e, k = release(m.lease, "ack", 0, faults.ack_fail)
      if ok then results[i] = true
      else
        results[i] = { err = e, code = k }
        all, err, code = false, e, k
      end
    end
    if all then return true end
    return nil, err, code, results
  end

  -- The core's close: what it still holds is nacked. A lease held (not
  -- expiring after a failed release) whose handler never started was
  -- stranded by the run: the drain should have given it back.
  function c.close()
    if b.closed then return true end
    for _, l in ipairs(b.leases) do
      if tick(l) == "held" and not l.started then
        violation("%s (lease %d) was left held at close without having run", l.msg.id, l.n)
      end
      if ALIVE[tick(l)] then
        l.st = "nacked"
        if l.msg.inflight == l then
          l.msg.inflight = nil
          l.msg.visible_at = clock.t + cfg.release_delay
        end
      end
    end
    b.closed = true
    return true
  end

  -- The model's handler calls it when a handler starts on m.
  function b.handler_starts(m)
    local l, msg = m.lease, m._model
    l.started = true
    if not ALIVE[tick(l)] then
      violation("%s started on a dead lease (lease %d, %s)", msg.id, l.n, l.st)
    end
    if cfg.fifo and msg.group then
      for j = 1, msg.idx - 1 do
        local before = by_group[msg.group][j]
        if not done(before) then
          violation("%s started while %s may still come back", msg.id, before.id)
          break
        end
      end
    end
  end

  return b
end

return _M
