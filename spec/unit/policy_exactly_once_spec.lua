-- mqlease.policy.exactly_once without a server: its options, its done marker
-- made again while it matters, its deferral budget, and the lock as
-- lease:alive() sees it. Redis is the fault model's (spec/support/model/redis.lua)
-- in simulated time, made to fail where a test says.
local policy = require "mqlease.policy"
local lease_mod = require "mqlease.lease"
local run = require "mqlease.run"
local clock_mod = require "spec.support.model.clock"
local redis_model = require "spec.support.model.redis"
local broker_model = require "spec.support.model.broker"

local eo_sim = require "spec.support.eo_sim"
local NO_FAULTS, simulate, message = eo_sim.NO_FAULTS, eo_sim.simulate, eo_sim.message

describe("mqlease.policy.exactly_once options", function()
  local redis = { call = true }
  for _, case in ipairs({
    { "done_ttl", 0, "at least 1 second" }, { "done_ttl", 0.5, "at least 1 second" },
    { "lock_ttl", 0.5, "at least 1 second" }, { "defer_delay", 0, "more than 0 seconds" },
    { "fail_delay", 0, "more than 0 seconds" }, { "max_hold", 0, "more than 0 seconds" },
    { "max_defer", -1, "0 or more seconds" }, { "lock_ttl", "30", "a number of seconds" },
    { "done_ttl", 0 / 0, "a number of seconds" },
    -- past 2^31 s the milliseconds sent to Redis overflow or are refused:
    -- a "keep forever" done_ttl such as math.maxinteger wrote no done marker and deleted the fence
    { "done_ttl", 2 ^ 53, "at most 2147483647 seconds" },
    { "lock_ttl", 2 ^ 31, "at most 2147483647 seconds" },
    { "max_hold", 1e300, "at most 2147483647 seconds" },
    { "max_defer", 2 ^ 40, "at most 2147483647 seconds" },
    { "defer_delay", 2 ^ 40, "at most 2147483647 seconds" },
    { "fail_delay", 2 ^ 40, "at most 2147483647 seconds" },
  }) do
    it(("refuses %s = %s, naming it"):format(case[1], tostring(case[2])), function()
      local ok, err = pcall(policy.exactly_once, { redis = redis, [case[1]] = case[2] })
      assert.is_false(ok)
      assert.matches("option '" .. case[1] .. "' must be " .. case[3], err, 1, true)
    end)
  end

  it("refuses batch that is not a boolean, naming it", function()
    local ok, err = pcall(policy.exactly_once, { redis = redis, batch = "no" })
    assert.is_false(ok)
    assert.matches("option 'batch' must be true or false", err, 1, true)
  end)

  it("takes the largest times it allows", function()
    assert.is_function(policy.exactly_once({ redis = redis, done_ttl = 2147483647, lock_ttl = 2147483647,
      max_hold = 2147483647, max_defer = 2147483647, defer_delay = 2147483647, fail_delay = 2147483647 }))
  end)

  it("takes max_defer = 0 (never defer: give back at once)", function()
    assert.is_function(policy.exactly_once({ redis = redis, max_defer = 0 }))
  end)
end)

describe("mqlease.policy.exactly_once done marker", function()
  it("keeps the lock alive and writes the marker again while the lease lives; only then acks", function()
    simulate(function(clock, redis)
      local p = policy.exactly_once({ redis = redis, lock_ttl = 5 })
      local m = message("a")
      local real_eval, finishes, running_at_retry = redis.eval, 0, {}
      redis.eval = function(self, script, keys, args)
        -- the first marker goes in the turn's batch (finish_many), a retry on its own
        if script == policy.scripts.finish or script == policy.scripts.finish_many then
          finishes = finishes + 1
          running_at_retry[#running_at_retry + 1] = #redis.running()
          if finishes <= 3 then return nil, "no reply", "TIMEOUT" end
        end
        return real_eval(self, script, keys, args)
      end
      local action = p(m, m.lease, function() return true end)
      assert.equal("ack", action)
      assert.equal(4, finishes)
      assert.same({ 1, 1, 1, 1 }, running_at_retry)   -- the keepalive ran through every retry
      assert.same({}, redis.running())                 -- and stops once the marker is written
      assert.is_true(redis.done_of("a"))
      assert.equal(1, m.counts.done_marker_failed)
      assert.equal(3, m.counts.done_marker_retries)
    end)
  end)

  it("does not ack when neither the lease nor the lock is left to write the marker", function()
    simulate(function(clock, redis)
      local p = policy.exactly_once({ redis = redis, lock_ttl = 3 })
      local m = message("b")
      local real_eval = redis.eval
      redis.eval = function(self, script, keys, args)
        if script == policy.scripts.finish or script == policy.scripts.finish_many then
          return nil, "no reply", "TIMEOUT"
        end
        return real_eval(self, script, keys, args)
      end
      local action, _, err = p(m, m.lease, function()
        m.lease.state = "lost"
        -- the lock goes too: a Redis that lost it
        redis.keys[policy.keys("b").lock] = nil
        return true
      end)
      assert.equal("nack", action)
      assert.matches("done marker not recorded", err, 1, true)
      assert.is_false(redis.done_of("b"))
      assert.same({}, redis.running())
    end)
  end)

  it("sees a lost lock in lease:alive() without a Redis call of its own", function()
    local lost = false
    local client = { keepalive_lost = function() return lost end, keepalive_stop = function() return lost end }
    local router = { client = { closed = function() return false end,
      lease = function() return "held", 10, 0, 0, false end } }
    local l = lease_mod.new(router, {}, 1, {})
    lease_mod.hold_lock(l, client, 7)
    assert.is_true(l:alive())
    lost = true
    assert.is_false(l:alive())
    assert.is_true(lease_mod.held(l))   -- the broker's lease is still ours
    assert.is_true(lease_mod.drop_lock(l))
  end)
end)

describe("mqlease.policy.exactly_once acquire answers no honest server gives", function()
  -- The acquire answers 1 (the lock is ours), 0 (another owner's) or 2 (done
  -- before). Anything else does not say the lock is ours: the handler must
  -- not run (it used to, for any code but 0 and 2). Alone (batch = false,
  -- as under Redis Cluster) and in a turn's batch alike.
  for _, case in ipairs({
    { "a code of 5", { 5, 1 } }, { "a code of -1", { -1, "oops" } }, { "a string", "OK" },
    { "an empty list", {} }, { "a code as text", { "1", 1 } },
  }) do
    for _, batch in ipairs({ false, true }) do
      it(("defers on %s%s, the handler not run"):format(case[1], batch and " (batched)" or ""), function()
        simulate(function(clock, redis)
          local p = policy.exactly_once({ redis = redis, batch = batch })
          local m = message("x")
          local real_eval = redis.eval
          redis.eval = function(self, script, keys, args)
            if script == policy.scripts.acquire then return case[2] end
            if script == policy.scripts.acquire_many then
              -- two elements a message in one flat list
              local bad = case[2]
              if type(bad) ~= "table" then return { bad, "" } end
              return { bad[1] == nil and "empty" or bad[1], bad[2] or "" }
            end
            return real_eval(self, script, keys, args)
          end
          local ran = false
          local action = p(m, m.lease, function() ran = true; return true end)
          assert.is_false(ran)
          assert.equal("defer", action)
          assert.equal(1, m.counts.redis_unavailable)
          assert.same({}, redis.running())
        end)
      end)
    end
  end
end)

describe("mqlease.policy.exactly_once deferral budget", function()
  it("counts defer_budget_spent once per message, however often it is asked", function()
    simulate(function(clock, redis)
      local p = policy.exactly_once({ redis = redis, max_defer = 2, defer_delay = 1 })
      local m = message("c")
      redis.keys[policy.keys("c").lock] = { value = "someone else", expires = math.huge }
      local actions = {}
      for _ = 1, 6 do
        actions[#actions + 1] = (p(m, m.lease, function() error("must not run") end))
        require("mqlease.loop").sleep(1)
      end
      assert.same({ "defer", "defer", "nack", "nack", "nack", "nack" }, actions)
      assert.equal(1, m.counts.defer_budget_spent)
    end)
  end)

  it("holds an ordered message no longer than max_defer: it is given back, the group starts afresh", function()
    local summary, b
    clock_mod.simulate(3600, function(clock)
      local rng = clock_mod.rng(3)
      local redis = redis_model.new({ rng = rng, clock = clock, faults = NO_FAULTS })
      b = broker_model.new({ rng = rng, clock = clock, fifo = true, groups = { { "g", 3 } }, batch = 3,
        invisible = 5, faults = NO_FAULTS, release_delay = 0.5 })
      -- another owner holds g:1's lock for good
      redis.keys[policy.keys("g:1").lock] = { value = "someone else", expires = math.huge }
      summary = run(b.consumer, function() return true end, {
        policy = policy.exactly_once({ redis = redis, max_defer = 4, defer_delay = 1 }),
        stop = function() return clock.t - 1000 >= 30 end, grace = 1,
      })
    end)
    assert.same({}, b.violations)
    -- each delivery of g:1 is held about max_defer, then given back with
    -- what waits behind it; nothing of the group runs before it
    assert.is_true(summary.nacked >= 4, "nacked " .. summary.nacked)
    assert.is_true(summary.given_back >= 8, "given back " .. summary.given_back)
    assert.equal(0, summary.acked)
    assert.is_true(b.counts.defer_budget_spent >= 4 and b.counts.defer_budget_spent <= b.msgs[1].deliveries)
  end)
end)

describe("mqlease.policy.exactly_once lock lapsed before its handler starts", function()
  -- The acquire's reply can reach the handler's coroutine late (a stalled
  -- process, a long scheduler turn): past lock_ttl from the acquire, the lock
  -- lapsed unrenewed and another instance may hold it and run the message.
  -- The handler must not start then; it used to, beside that other owner.

  -- Runs the policy (lock_ttl 2 s) on a message whose acquire reply is read
  -- `late` seconds after the script ran. -> its action, whether the handler ran.
  local function late_reply(redis, m, batch, late)
    local wait = require "mqlease.loop"
    local p = policy.exactly_once({ redis = redis, batch = batch, lock_ttl = 2 })
    local real_eval = redis.eval
    redis.eval = function(self, script, keys, args)
      local a, b, c = real_eval(self, script, keys, args)
      if script == policy.scripts.acquire or script == policy.scripts.acquire_many then wait.sleep(late) end
      return a, b, c
    end
    local ran = false
    local action = p(m, m.lease, function() ran = true; return true end)
    return action, ran
  end

  for _, batch in ipairs({ false, true }) do
    it(("defers, the handler not run, when the reply came after lock_ttl%s"):format(
      batch and " (batched)" or ""), function()
      simulate(function(clock, redis)
        local m = message("late")
        local action, ran = late_reply(redis, m, batch, 2.5)
        assert.is_false(ran, "the handler ran on a lock that had lapsed")
        assert.equal("defer", action)
        assert.equal(1, m.counts.deferred_held)
        assert.same({}, redis.running())
        assert.is_nil(m.lease.lock_owner)
        -- it holds no lock now, so none is lost: the lease lives on as it waits
        assert.is_true(m.lease:alive(), "the deferred lease read as lock-lost")
      end)
    end)
  end

  it("defers when its overdue renewal has less than a third of lock_ttl (or a second) to land", function()
    simulate(function(clock, redis)
      local m = message("edge")
      local action, ran = late_reply(redis, m, false, 1.5)
      assert.is_false(ran)
      assert.equal("defer", action)
    end)
  end)

  it("runs the handler when the reply came within lock_ttl", function()
    simulate(function(clock, redis)
      local m = message("inside")
      local action, ran = late_reply(redis, m, false, 1.0)
      assert.equal("ack", action)
      assert.is_true(ran)
      assert.is_true(redis.done_of("inside"))
    end)
  end)
end)

describe("mqlease.policy.exactly_once lock given up by its own marker", function()
  -- FINISH deletes the lock it finds ours; a keepalive renewal that runs
  -- before the keepalive is stopped finds the key gone, as after a failover.
  -- That is the owner's own release, not a lost lock: it used to count
  -- lock_lost and turn lease:alive() false, so the ack was not retried.
  for _, batch in ipairs({ false, true }) do
    it(("counts no lock_lost and keeps the lease alive%s"):format(batch and " (batched)" or ""), function()
      simulate(function(clock, redis)
        local p = policy.exactly_once({ redis = redis, batch = batch })
        local m = message("own")
        assert.equal("ack", (p(m, m.lease, function() return true end)))
        assert.is_nil(m.counts.lock_lost, "the marker's own unlock was counted as a lost lock")
        assert.is_true(m.lease:alive(), "the lease looked dead after its own unlock")
        assert.is_nil(redis.lock_lost_of.own)
        assert.same({}, redis.running())
      end)
    end)
  end

  for _, batch in ipairs({ false, true }) do
    it(("counts no lock_lost when a marker applied unanswered was written again%s"):format(
      batch and " (batched)" or ""), function()
      simulate(function(clock, redis)
        local wait = require "mqlease.loop"
        local p = policy.exactly_once({ redis = redis, batch = batch })
        local real_eval, first = redis.eval, true
        redis.eval = function(self, script, keys, args)
          if first and (script == policy.scripts.finish or script == policy.scripts.finish_many) then
            first = false
            real_eval(self, script, keys, args)   -- Redis ran it: the marker written, the lock deleted
            wait.sleep(1)
            return nil, "no reply within the timeout", "TIMEOUT"
          end
          return real_eval(self, script, keys, args)
        end
        local m = message("again")
        assert.equal("ack", (p(m, m.lease, function() return true end)))
        assert.equal(1, m.counts.done_marker_retries)
        assert.is_nil(m.counts.lock_lost, "the first marker's own unlock was counted as a lost lock")
        assert.is_true(m.lease:alive())
      end)
    end)
  end

  it("counts lock_lost when the lock was lost before the marker, though the marker then found it", function()
    simulate(function(clock, redis)
      local wait = require "mqlease.loop"
      -- renewals stop after max_hold: the handler is told its lock is gone
      local p = policy.exactly_once({ redis = redis, batch = false, lock_ttl = 5, max_hold = 1 })
      local m = message("spent")
      local alive_in_handler
      assert.equal("ack", (p(m, m.lease, function(_, lease)
        wait.sleep(2)
        alive_in_handler = lease:alive()
        return true
      end)))
      assert.is_false(alive_in_handler)
      assert.equal(1, m.counts.lock_lost)
      assert.is_false(m.lease:alive())
    end)
  end)

  it("gives up the marker at once when its client is closed", function()
    simulate(function(clock, redis)
      local p = policy.exactly_once({ redis = redis, batch = false })
      local real_eval = redis.eval
      redis.eval = function(self, script, keys, args)
        if script == policy.scripts.finish then return nil, "the redis client is closed", "CLOSED" end
        return real_eval(self, script, keys, args)
      end
      local m = message("closed")
      local started = clock.t
      local action, _, err = p(m, m.lease, function() return true end)
      assert.equal("nack", action)
      assert.matches("done marker not recorded", err, 1, true)
      assert.is_nil(m.counts.done_marker_retries, "retried a marker on a closed client")
      assert.is_true(clock.t - started < 1)
    end)
  end)

  -- a failover lost the lock and another instance took it: found by a
  -- renewal, or only by the marker's script (no renewal since the takeover)
  for _, seen in ipairs({ true, false }) do
    it(("counts lock_lost when the marker found the lock another owner's%s"):format(
      seen and "" or " before any renewal did"), function()
      simulate(function(clock, redis)
        local p = policy.exactly_once({ redis = redis, batch = false })
        if not seen then
          redis.keepalive_stop = function() return false end
          redis.keepalive_lost = function() return false end
        end
        local m = message("taken")
        assert.equal("ack", (p(m, m.lease, function()
          redis.keys[policy.keys("taken").lock] = { value = "someone else", expires = math.huge }
          return true
        end)))
        assert.equal(1, m.counts.lock_lost)
        assert.is_false(m.lease:alive())
      end)
    end)
  end
end)

describe("mqlease.policy.keys under Redis Cluster's hash tags", function()
  -- Redis hashes the part of a key between its first '{' and the first '}'
  -- after it, or the whole key when that part is empty (cluster.c keyHashSlot).
  local function hashed(key)
    local open = key:find("{", 1, true)
    if open then
      local close = key:find("}", open + 1, true)
      if close and close > open + 1 then return key:sub(open + 1, close - 1) end
    end
    return key
  end

  it("puts one message's keys under one non-empty tag, whatever its id", function()
    for _, id in ipairs({ "", "}", "}x", "}}", "%", "%7d", "a}b", "{", "x{y}", "01AB\0CD", "7F000001" }) do
      local k = policy.keys(id)
      local t = hashed(k.lock)
      assert.is_true(t ~= k.lock, ("id %q: its lock key %q is hashed whole"):format(id, k.lock))
      assert.equal(t, hashed(k.fence), ("id %q: lock and fence in different slots"):format(id))
      assert.equal(t, hashed(k.done), ("id %q: lock and done in different slots"):format(id))
    end
  end)

  it("keeps every other id's keys as they were, and no two ids share keys", function()
    assert.same({ lock = "mqlease:{01AB}:lock", fence = "mqlease:{01AB}:fence", done = "mqlease:{01AB}:done" },
      policy.keys("01AB"))
    assert.equal("mqlease:{%7d}:lock", policy.keys("%7d").lock)
    assert.equal("mqlease:{a}b}:lock", policy.keys("a}b").lock)
    assert.equal("mqlease:{%7d61}%:lock", policy.keys("}a").lock)
    local seen = {}
    for _, id in ipairs({ "", "}", "%", "%7d", "%25", "}x", "%7d78", "%%", "x", "%}%", "%7d}%", "%}", "%7d78}%" }) do
      local lock = policy.keys(id).lock
      assert.is_nil(seen[lock], ("ids %q and %q share %s"):format(tostring(seen[lock]), id, lock))
      seen[lock] = id
    end
  end)
end)
