-- The parts of mqlease.run, each alone: the states (life), the sequencer,
-- the verb a policy's answer becomes (task.decide), the waiter, the releaser
-- and the drain. Waits run in simulated time (spec/support/model/clock.lua)
-- inside the real scheduler.
local life_mod = require "mqlease.run.life"
local sequencer = require "mqlease.run.sequencer"
local task = require "mqlease.run.task"
local waiter_mod = require "mqlease.run.waiter"
local releaser_mod = require "mqlease.run.releaser"
local scheduler = require "mqlease.scheduler"
local clock_mod = require "spec.support.model.clock"

-- Runs fn() as a task of a scheduler in simulated time; -> what fn returned.
local unpack = table.unpack or unpack   -- LuaJIT
local function in_task(fn)
  local out
  clock_mod.simulate(3600, function()
    local sched = scheduler.new(function(_, err) error(err, 0) end)
    sched:spawn(function() out = { n = 3, fn(sched) } end)
    sched:loop()
  end)
  return unpack(out, 1, 3)
end

local function now() return require("mqlease.core").now() end

-- A lease whose state the test sets.
local function lease(state)
  return { state = state or "held", alive = function(self) return self.state == "held" or self.state == "expiring" end }
end

describe("mqlease.run.life", function()
  it("moves a message only along the allowed edges, and settles it once", function()
    local settled = {}
    local life = life_mod.new(function(m, outcome) settled[#settled + 1] = m.id .. "=" .. outcome end)
    local m = { id = "a" }
    life:enter(m)
    assert.has_error(function() life:move(m, "waiting") end, "mqlease.run: message a cannot move from queued to waiting")
    life:move(m, "running")
    life:move(m, "waiting")
    life:move(m, "running")
    assert.has_error(function() life:settle(m, "acked") end)
    life:move(m, "releasing")
    assert.same({ queued = 0, running = 0, waiting = 0, releasing = 1 }, life.count)
    life:settle(m, "acked")
    assert.same({ "a=acked" }, settled)
    assert.is_nil(life:state_of(m))
    assert.has_error(function() life:move(m, "running") end)
    assert.has_error(function() life:settle(m, "acked") end)
  end)

  it("tells how an unreleased lease ended from the state it reports", function()
    assert.equal("nacked", life_mod.ended_as({ lease = lease("nacked") }))
    assert.equal("acked", life_mod.ended_as({ lease = lease("acked") }))
    assert.equal("expired", life_mod.ended_as({ lease = lease("lost") }))
    assert.equal("expired", life_mod.ended_as({ lease = lease("held") }))
  end)
end)

describe("mqlease.run.sequencer", function()
  local function msg(id, group) return { id = id, message_group = group } end

  it("starts unordered messages in the order they came", function()
    local s = sequencer.new()
    local a, b = msg("a"), msg("b")
    s:admit(a); s:admit(b)
    assert.equal(a, s:next()); assert.equal(b, s:next()); assert.is_nil(s:next())
  end)

  it("holds a group's later messages until its first is gone for good", function()
    local s = sequencer.new()
    local g1, g2, h1 = msg("g1", "g"), msg("g2", "g"), msg("h1", "h")
    s:admit(g1); s:admit(g2); s:admit(h1)
    assert.equal(g1, s:next()); assert.equal(h1, s:next()); assert.is_nil(s:next())
    assert.is_nil(s:settled(g1, true))
    assert.equal(g2, s:next())
  end)

  it("gives back what waits behind a first message that may come back, and starts the group afresh", function()
    local s = sequencer.new()
    local g1, g2, g3 = msg("g1", "g"), msg("g2", "g"), msg("g3", "g")
    s:admit(g1); s:admit(g2); s:admit(g3)
    assert.equal(g1, s:next())
    assert.same({ g2, g3 }, s:settled(g1, false))
    assert.is_nil(s:next())
    -- the broker's redelivery starts the group again
    local again = msg("g1", "g")
    s:admit(again)
    assert.equal(again, s:next())
  end)

  it("hands the drain everything not started, keeping each group's first", function()
    local s = sequencer.new()
    local g1, g2, u = msg("g1", "g"), msg("g2", "g"), msg("u")
    s:admit(g1); s:admit(g2); s:admit(u)
    assert.equal(g1, s:next())
    assert.same({ u, g2 }, s:take_all())
    assert.same({}, s:settled(g1, false))
  end)
end)

describe("mqlease.run.task.decide", function()
  local ctx = { release_delay = 1, ordered_max_attempts = 3, max_attempts = 4,
    nack_delay = function(attempt) return attempt * 10 end }
  local function m(attempt, group) return { delivery_attempt = attempt, message_group = group } end

  it("acks, holds a deferral, and leaves a skip to the policy", function()
    assert.same({ "ack" }, { task.decide(ctx, m(1), "ack") })
    assert.same({ "hold", 7 }, { task.decide(ctx, m(1), "defer", 7) })
    assert.same({ "hold", 1 }, { task.decide(ctx, m(1), "defer") })
    assert.same({ "skip" }, { task.decide(ctx, m(1), "skip") })
  end)

  it("nacks a failed unordered message with the retry delay, and dead-letters it on its last attempt", function()
    assert.same({ "nack", 20 }, { task.decide(ctx, m(2), "nack", nil, "boom") })
    assert.same({ "dead_letter" }, { task.decide(ctx, m(4), "nack", nil, "boom") })
  end)

  it("never dead-letters a message given back without a failure, even on its last attempt", function()
    assert.same({ "nack", 5 }, { task.decide(ctx, m(4), "nack", 5, nil) })
    assert.same({ "nack", 5 }, { task.decide(ctx, m(9, "g"), "nack", 5, nil) })
  end)

  it("retries a failed ordered message in place until its attempts run out", function()
    assert.same({ "retry", 10 }, { task.decide(ctx, m(1, "g"), "nack", nil, "boom") })
    assert.same({ "dead_letter" }, { task.decide(ctx, m(3, "g"), "nack", nil, "boom") })
  end)

  it("dead-letters a message that had no attempt left", function()
    assert.same({ "dead_letter" }, { task.decide(ctx, m(5), "nack", nil, "no attempts left", true) })
  end)

  it("raises on an answer that is no action", function()
    assert.has_error(function() task.decide(ctx, m(1), "acknowledge") end,
      'mqlease.run: the policy answered acknowledge (want "ack", "nack", "defer" or "skip")')
  end)

  it("prints a producer's message id with its control bytes escaped", function()
    assert.equal("a\\nb\\x1b[2J", task.printable("a\nb\27[2J"))
  end)
end)

describe("mqlease.run.waiter", function()
  it("keeps a message for its delay, then says try again", function()
    local why, took = in_task(function(sched)
      local w = waiter_mod.new(sched, function() return false end)
      local t0 = now()
      return w:hold({ lease = lease() }, 7), now() - t0
    end)
    assert.equal("again", why)
    assert.near(7, took, 1e-6)
  end)

  it("lets go of a message whose lease ends within a second, not at the end of its delay", function()
    local why, took = in_task(function(sched)
      local w = waiter_mod.new(sched, function() return false end)
      local l = lease()
      local t0 = now()
      sched:spawn(function() sched:park(t0 + 2.5); l.state = "lost" end)
      return w:hold({ lease = l }, 60), now() - t0
    end)
    assert.equal("ended", why)
    assert.is_true(took >= 2.5 and took <= 3.5, "took " .. took)
  end)

  it("wakes every waiting message at a stop", function()
    local whys = in_task(function(sched)
      local stopping = false
      local w = waiter_mod.new(sched, function() return stopping end)
      local out = {}
      for i = 1, 3 do sched:spawn(function() out[i] = w:hold({ lease = lease() }, 600) end) end
      sched:park(now() + 5)
      stopping = true
      w:wake_all()
      sched:park(now() + 0.1)
      return out
    end)
    assert.same({ "stopping", "stopping", "stopping" }, whys)
  end)
end)

describe("mqlease.run.releaser", function()
  -- a consumer whose acks fail `fails` times, then succeed
  local function consumer(fails, code)
    local c = { acks = 0, counts = {} }
    function c.ack(_, msgs)
      c.acks = c.acks + 1
      if c.acks <= fails then return nil, "no reply", code or "TIMEOUT" end
      return true
    end
    function c.count(_, name) c.counts[name] = (c.counts[name] or 0) + 1 end
    return c
  end

  it("acks again, with backoff, while the lease lives", function()
    local c = consumer(3)
    local ok, took = in_task(function(sched)
      local r = releaser_mod.new(c, sched)
      local t0 = now()
      return r:release({ lease = lease("expiring") }, "ack"), now() - t0
    end)
    assert.is_true(ok)
    assert.equal(4, c.acks)
    assert.equal(3, c.counts.release_retries)
    assert.near(0.2 + 0.4 + 0.8, took, 1e-6)
  end)

  it("stops once the lease has ended", function()
    local c = consumer(100)
    local ok, err, code = in_task(function(sched)
      local r = releaser_mod.new(c, sched)
      local l = lease("expiring")
      sched:spawn(function() sched:park(now() + 1); l.state = "lost" end)
      return r:release({ lease = l }, "ack")
    end)
    assert.is_nil(ok)
    assert.equal("no reply", err)
    assert.equal("TIMEOUT", code)
    assert.is_true(c.acks >= 2 and c.acks <= 4, "acks " .. c.acks)
  end)

  it("never retries a failure that no retry can mend", function()
    local c = consumer(100, "ALREADY_NACKED")
    local ok = in_task(function(sched)
      return releaser_mod.new(c, sched):release({ lease = lease() }, "ack")
    end)
    assert.is_nil(ok)
    assert.equal(1, c.acks)
  end)

  it("makes a nack once: a message whose nack failed comes back at its deadline", function()
    local nacks = 0
    local m = { lease = lease(), nack = function() nacks = nacks + 1; return nil, "no reply", "TIMEOUT" end }
    local ok = in_task(function(sched) return releaser_mod.new(consumer(0), sched):release(m, "nack", 1) end)
    assert.is_nil(ok)
    assert.equal(1, nacks)
  end)

  it("coalesces the acks of one turn into one request", function()
    local c = consumer(0)
    in_task(function(sched)
      local r = releaser_mod.new(c, sched)
      local done = 0
      for _ = 1, 10 do sched:spawn(function() r:release({ lease = lease() }, "ack"); done = done + 1 end) end
      repeat sched:park(now() + 0.01) until done == 10
    end)
    assert.equal(1, c.acks)
  end)
end)

describe("mqlease.run.receiver", function()
  local receiver = require "mqlease.run.receiver"
  local function wiring(sched, batches)
    local w = { admitted = {}, refused = {}, st = { inflight = 0, bytes = 0, received = 0 },
      o = { max_inflight = 4, max_inflight_bytes = 1000 }, sched = sched, client = {}, asks = {} }
    local stopping = false
    w.consumer = { options = { batch = 8 } }
    function w.consumer.receive(_, n)
      w.asks[#w.asks + 1] = n
      sched:park(now() + 0.1)
      local batch = table.remove(batches, 1)
      if batch == "closed" then return nil, "the consumer is closed", "CLOSED" end
      return batch or {}
    end
    w.stopping = function() return stopping end
    w.stop = function(reason) stopping = true; w.reason = reason end
    -- the run's side (mqlease.run.worker): counts each message in, and
    -- notes which batches came after the stop (the run gives those back)
    w.arrived = function(batch)
      for _, m in ipairs(batch) do
        if stopping then w.refused[#w.refused + 1] = m.id
        else w.admitted[#w.admitted + 1] = m.id; w.st.inflight = w.st.inflight + 1 end
      end
    end
    w.ended = function() w.ended_at = now() end
    return w
  end
  local function msgs(...)
    local out = {}
    for i, id in ipairs({ ... }) do out[i] = { id = id, body = "x" } end
    return out
  end

  it("asks only for what the in-flight limit leaves, parks at it, and ends once the consumer is closed", function()
    local w
    in_task(function(sched)
      w = wiring(sched, { msgs("a", "b", "c"), msgs("d"), "closed" })
      local co = sched:spawn(receiver.run, w)
      sched:park(now() + 1)
      assert.same({ "a", "b", "c", "d" }, w.admitted)
      assert.same({ 4, 1 }, w.asks)     -- 4 allowed, then the 1 left
      assert.is_nil(w.ended_at)         -- parked at the limit
      w.st.inflight = 0
      sched:wake(co)
      sched:park(now() + 1)
    end)
    assert.equal("closed", w.reason)
    assert.is_number(w.ended_at)
  end)

  it("hands the run what arrives after a stop, for the run to give back", function()
    local w
    in_task(function(sched)
      w = wiring(sched, { msgs("a", "b") })
      sched:spawn(receiver.run, w)
      sched:park(now() + 0.05)   -- the receive is in flight
      w.stop("stop")
      sched:park(now() + 1)
    end)
    assert.same({}, w.admitted)
    assert.same({ "a", "b" }, w.refused)
  end)
end)

describe("mqlease.run.drain", function()
  local drain = require "mqlease.run.drain"
  local function wiring(sched, mode, grace)
    local w = { o = { mode = mode, grace = grace }, release_delay = 1, st = { drained = 0 }, sched = sched,
      given = {}, nacked = {}, client = { cancel_receives = function() end }, drain_extension = 10,
      wake_receiver = function() end, receiving = function() return false end,
      take_arriving = function() return {} end, refuse = function() error("nothing to refuse") end,
      running_set = {}, waiting = 0 }
    w.seq = { take_all = function() return { { id = "q1" }, { id = "q2" } } end }
    w.waiter = { wake_all = function() w.woken = true end }
    w.give_back = function(m) w.given[#w.given + 1] = m.id end
    w.nrunning = function() local n = 0 for _ in pairs(w.running_set) do n = n + 1 end return n end
    w.running = function() return w.running_set end
    w.ending = function() return w.waiting end
    w.done = function() w.done_at = now() end
    return w
  end
  local function running(w, id)
    local m = { id = id, lease = lease() }
    function m.nack(_, delay)
      assert(delay == 1, "the drain gives back with the consumer's release_delay")
      w.nacked[#w.nacked + 1] = id; m.lease.state = "nacked"; return true
    end
    w.running_set[m] = true
    return m
  end

  it("gives back what never started and wakes what waits at once, lets running handlers finish until grace, then gives them back", function()
    local w, t0, finished_at
    in_task(function(sched)
      w = wiring(sched, "wait", 5)
      local quick = running(w, "quick")
      running(w, "slow")
      t0 = now()
      sched:spawn(drain.run, w)
      sched:park(now() + 2)
      assert.same({ "q1", "q2" }, w.given)
      assert.is_true(w.woken)
      assert.same({}, w.nacked)   -- within grace: nothing running is given back
      w.running_set[quick] = nil  -- quick finishes
      finished_at = now()
      sched:park(now() + 10)
    end)
    assert.same({ "slow" }, w.nacked)
    assert.equal(1, w.st.drained)
    assert.near(5, w.done_at - t0, 0.01)
    assert.is_number(finished_at)
  end)

  it("gives running handlers' messages back at once in mode nack, and waits for what ends by itself", function()
    local w, t0
    in_task(function(sched)
      w = wiring(sched, "nack", 25)
      running(w, "r1")
      w.waiting = 1   -- a message that gives itself back, 3 s from now
      sched:spawn(function() sched:park(now() + 3); w.waiting = 0 end)
      t0 = now()
      sched:spawn(drain.run, w)
      sched:park(now() + 30)
    end)
    assert.same({ "r1" }, w.nacked)
    assert.is_true(w.done_at - t0 >= 3, "the drain ended before the waiting message gave itself back")
    assert.is_true(w.done_at - t0 < 25, "the drain waited for grace in mode nack")
  end)
end)
