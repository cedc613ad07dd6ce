-- mqlease.run where an adversary reviewing it found it wrong: a policy's
-- defer with a delay that is no number of seconds, or none at all, and the
-- summary's counts. Each spec failed before its fix. Runs the real
-- mqlease.run over the fault model's broker (spec/support/model/broker.lua)
-- with every fault off, in simulated time.
local run = require "mqlease.run"
local wait = require "mqlease.loop"
local core = require "mqlease.core"
local clock_mod = require "spec.support.model.clock"
local broker_mod = require "spec.support.model.broker"

local NO_FAULTS = { death = 0, death_within = 1, ack_fail = 0, applied = 0, nack_fail = 0,
  dead_letter_fail = 0, receive_fail = 0 }

-- Runs mqlease.run over a fault-free model broker of `count` unordered
-- messages (or cfg.groups, FIFO). make(b, clock) -> handler, opts.
-- -> summary (or nil), the error the run raised (or nil), the broker.
-- A guard stops a run that spins without ever letting the clock move.
local function simulate(cfg, make)
  local summary, b
  local polls = 0
  local ok, err = pcall(clock_mod.simulate, cfg.limit or 300, function(clock)
    local poll = core.poll
    core.poll = function(fds, timeout)
      polls = polls + 1
      if polls > 200000 then error("guard: 200000 polls without the run ending", 0) end
      return poll(fds, timeout)
    end
    b = broker_mod.new({ rng = clock_mod.rng(cfg.seed or 1), clock = clock, fifo = cfg.groups ~= nil,
      groups = cfg.groups, count = cfg.count or 3, batch = cfg.batch or 4, invisible = 5,
      faults = NO_FAULTS, release_delay = 0.5 })
    local handler, opts = make(b, clock)
    summary = run(b.consumer, handler, opts)
  end)
  return summary, (not ok) and err or nil, b
end

local function ok_handler(b)
  return function(m)
    b.handler_starts(m)
    wait.sleep(0.5)
    return true
  end
end

describe("mqlease.run at its edges: a consumer that is none", function()
  it("raises naming argument #1 (a consumer that could not be made is nil), before anything runs", function()
    for _, c in ipairs({ false, "c", { receive = true } }) do
      local ok, err = pcall(run, c, function() return true end)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'run' %(consumer: an mqlease.consumer expected", tostring(err))
    end
    -- an error of the caller's, not "run/worker.lua:57: attempt to index a nil value"
    local ok, err = pcall(run, nil, function() return true end)
    assert.is_false(ok)
    assert.equal("bad argument #1 to 'run' (consumer: an mqlease.consumer expected, got nil)",
      (tostring(err):gsub("^[^:]*:%d+: ", "")))
  end)
end)

describe("mqlease.run at its edges: a policy's defer with a bad delay", function()
  it("a defer with delay NaN does not freeze every timed wait of the run (the run still ends)", function()
    local asked = 0
    local summary, err, b = simulate({ count = 3 }, function(b0, clock)
      local handler = ok_handler(b0)
      local function policy(m, lease, h)
        if m.id == "u:1" then
          asked = asked + 1
          if asked == 1 then return "defer", 0 / 0 end
        end
        return require("mqlease.policy").plain(m, lease, h)
      end
      return handler, { concurrency = 4, policy = policy, grace = 2,
        stop = function() return clock.t - 1000 >= 10 end }
    end)
    assert.is_nil(err, "the run did not end: " .. tostring(err))
    assert.is_table(summary)
    assert.is_true(summary.acked >= 2, "the other messages' handlers never woke")
  end)

  it("a defer with delay 0 or less yields: a stop is still seen, and the message is given back unrun", function()
    local asked = 0
    local rounds = 0
    local summary, err = simulate({ count = 1 }, function(b0)
      local function policy(m)
        asked = asked + 1
        -- the guard: acks after 10000 asks, which a run that lets its stop
        -- through never reaches
        if asked > 10000 then return "ack" end
        return "defer", -1
      end
      return ok_handler(b0), { concurrency = 1, policy = policy, grace = 0, mode = "nack",
        stop = function() rounds = rounds + 1; return rounds > 20 end }
    end)
    assert.is_nil(err)
    assert.are.equal(0, summary.acked, ("the message was asked %d times without a yield and then acked"):format(asked))
    assert.is_true(asked < 10000, ("the policy was asked %d times in one scheduler turn"):format(asked))
  end)
end)

describe("mqlease.run at its edges: the run's summary", function()
  it("counts in 'drained' only what the drain gave back, not an ordered message given back behind a nack", function()
    local nacked_once = false
    local summary, err, b = simulate({ groups = { { "g", 3 } }, batch = 3 }, function(b0, clock)
      local function policy(m, lease, h)
        -- the first delivery of the group's first message is given back
        -- (as a deferral past its budget is): what waits behind it follows
        if m.id == "g:1" and not nacked_once then
          nacked_once = true
          return "nack", 0.1
        end
        return require("mqlease.policy").plain(m, lease, h)
      end
      return ok_handler(b0), { concurrency = 2, policy = policy, grace = 5,
        stop = function() return clock.t - 1000 >= 30 end }
    end)
    assert.is_nil(err)
    -- every message of the group was acked in the end, long before the stop
    for i = 1, 3 do assert.is_true(b.by_group.g[i].acked == true, "g:" .. i .. " not acked") end
    assert.are.equal(2, summary.given_back)
    assert.are.equal(0, summary.drained, ("drained %d with nothing left at the stop"):format(summary.drained))
  end)

  it("counts a failed handler once in 'failed' when on_error raises", function()
    local summary, err = simulate({ count = 1 }, function(b0, clock)
      local failed_once = false
      local handler = function(m)
        b0.handler_starts(m)
        if not failed_once then failed_once = true; return nil, "boom" end
        return true
      end
      return handler, { concurrency = 1, grace = 5, nack_delay = 0.5,
        on_error = function() error("on_error broke") end,
        stop = function() return clock.t - 1000 >= 20 end }
    end)
    assert.is_nil(err)
    assert.are.equal(1, summary.acked)
    assert.are.equal(1, summary.failed, ("one handler failure counted %d times"):format(summary.failed))
  end)
end)

describe("mqlease.run at its edges: a receive that raises", function()
  it("is reported and tried again, as a failed receive: the run goes on and ends at its stop", function()
    local raised = 0
    local summary, err = simulate({ count = 3 }, function(b0, clock)
      local receive = b0.consumer.receive
      b0.consumer.receive = function(self, ...)
        if raised < 2 then
          raised = raised + 1
          error("a receive that raised")
        end
        return receive(self, ...)
      end
      return ok_handler(b0), { concurrency = 2, grace = 5,
        stop = function() return clock.t - 1000 >= 20 end }
    end)
    assert.is_nil(err, tostring(err))
    assert.equal(2, raised)
    assert.equal(3, summary.acked, "the run stopped receiving after a receive raised")
    assert.equal("stop", summary.reason)
  end)
end)

describe("mqlease.run at its edges: a NaN delay on the ordered retry path", function()
  it("a nack_delay(attempt) of NaN for a failed ordered message does not freeze the run", function()
    local summary, err, b = simulate({ groups = { { "g", 1 } }, count = 3, batch = 4 }, function(b0, clock)
      local failed = false
      local handler = function(m)
        b0.handler_starts(m)
        if m.id == "g:1" and not failed then failed = true; return nil, "boom" end
        wait.sleep(0.1)
        return true
      end
      return handler, { concurrency = 4, grace = 2, on_error = function() end,
        nack_delay = function() return 0 / 0 end,
        stop = function() return clock.t - 1000 >= 10 end }
    end)
    assert.is_nil(err, "the run did not end: " .. tostring(err))
    assert.is_table(summary)
  end)
end)


describe("mqlease.run at its edges: the stop", function()
  -- A policy that yields before it calls the handler (as the exactly-once
  -- policy waits for its lock) when the stop comes: the handler must not
  -- start during the drain, where grace may cut it off half done. Failed
  -- before the fix: the handler started after the stop and ran to its end.
  for _, mode in ipairs({ "wait", "nack" }) do
    it(("starts no handler once the stop is asked for (mode %s): the message goes back unrun"):format(mode),
      function()
        local started, stopped, refused, errors = 0, false, nil, 0
        local summary, err, b = simulate({ count = 1 }, function(_, clock)
          local function handler()
            started = started + 1
            return true
          end
          local function policy(m, lease, h)
            -- the lock call: out while the stop comes
            wait.sleep(3)
            local ok, why = h(m, lease)
            if not ok then
              refused = why
              return "nack", nil, why
            end
            return "ack"
          end
          return handler, { concurrency = 1, policy = policy, grace = 10, mode = mode,
            on_error = function() errors = errors + 1 end,
            stop = function()
              if clock.t - 1000 >= 1 then stopped = true end
              return stopped
            end }
        end)
        assert.is_nil(err)
        assert.are.same({}, b.violations)
        assert.are.equal(0, started, "a handler started after the stop")
        -- (mode nack gives it back at once, and the run may end before the
        -- policy wakes: then it never asks the handler)
        if mode == "wait" then assert.is_string(refused, "the policy was not told the handler refused") end
        -- (a redelivery that arrives during the drain goes back too)
        assert.is_true(summary.drained >= 1, "nothing was given back")
        assert.are.equal(0, summary.failed)
        assert.are.equal(0, summary.nacked)
        assert.are.equal(0, errors, "on_error was told of a handler that never ran")
        assert.is_falsy(b.msgs[1].acked)
      end)
  end
end)
