-- The exactly-once policy where an adversary reviewing it found it wrong: an
-- answer no honest server gives, a lock of its own left behind, a read of
-- the token between two of its steps, a lease of the caller's own. Each spec
-- failed before its fix. Against the fault model's Redis in simulated time
-- (spec/support/eo_sim.lua), as policy_fence_spec does.
local policy = require "mqlease.policy"
local core = require "mqlease.core"
local wait = require "mqlease.loop"
local eo_sim = require "spec.support.eo_sim"
local run = require "mqlease.run"
local clock_mod = require "spec.support.model.clock"
local broker_mod = require "spec.support.model.broker"
local simulate, message = eo_sim.simulate, eo_sim.message
local value, copy = eo_sim.value, eo_sim.copy

-- Slows the done marker's reply on the model Redis (the script ran; its
-- answer is 0.3 s late). before(script), if given, may answer a call first:
-- true and the answer.
local function slow_marker(redis, before)
  local real_eval = redis.eval
  redis.eval = function(self, script, keys, args)
    if before then
      local answered, a, b, c = before(script)
      if answered then return a, b, c end
    end
    local a, b, c = real_eval(self, script, keys, args)
    if script == policy.scripts.finish_many or script == policy.scripts.finish then wait.sleep(0.3) end
    return a, b, c
  end
end

-- The policy's answer for m, asked from a task of its own (the batches of
-- one turn need a scheduler's task), waited for: action, delay, err.
local function ask(sched, p, m, handler, lease)
  local out
  sched:spawn(function() out = table.pack(p(m, lease or m.lease, handler)) end)
  while not out do wait.sleep(0.01) end
  return table.unpack(out, 1, out.n)
end

describe("exactly-once at its edges: the done marker's answer", function()
  -- ACQUIRE's answer is held to 1/0/2 (anything else: the lock is not known
  -- to be ours). FINISH's is taken as "marker written" whatever it is: any
  -- non-nil value alone, any number in a batch. No honest server answers
  -- these, and the docs promise "No ack goes without the marker".
  for _, case in ipairs({
    { "a status string", false, "OK" }, { "an empty list", false, {} },
    { "a code of 7 (batched)", true, { 7 } }, { "a code of -1 (batched)", true, { -1 } },
  }) do
    it(("acks no message whose marker script answered %s, no marker written"):format(case[1]), function()
      simulate(function(_, redis, sched)
        local p = policy.exactly_once({ redis = redis, batch = case[2] })
        local real_eval, bad = redis.eval, true
        redis.eval = function(self, script, keys, args)
          if bad and (script == policy.scripts.finish or script == policy.scripts.finish_many) then
            bad = false   -- the first answer only: a retry reaches the real script
            return case[3]
          end
          return real_eval(self, script, keys, args)
        end
        local m = message("fin")
        local action = ask(sched, p, m, function() return true end)
        assert.is_true(action ~= "ack" or redis.done_of("fin"),
          "acked with no done marker written (the marker script answered " .. case[1] .. ")")
      end)
    end)
  end
end)

describe("exactly-once at its edges: fence = \"on_grant\" and a token no honest server gives", function()
  -- issue_fence (on_read) takes only an integer >= 1; at the grant
  -- (on_grant) whatever sits beside the 1 becomes lease.fence, and the
  -- handler runs and writes with it.
  for _, case in ipairs({
    { "an empty string", { 1, "" } }, { "a negative number", { 1, -5 } }, { "no token at all", { 1 } },
    { "a string", { 1, "7" } },
  }) do
    for _, batch in ipairs({ false, true }) do
      it(("does not run the handler on a grant whose token is %s%s"):format(case[1], batch and " (batched)" or ""),
        function()
          simulate(function(_, redis, sched)
            local p = policy.exactly_once({ redis = redis, fence = "on_grant", batch = batch })
            local real_eval = redis.eval
            redis.eval = function(self, script, keys, args)
              if script == policy.scripts.acquire then return case[2] end
              if script == policy.scripts.acquire_many then
                -- two elements a message; a missing token is the client's null
                return { case[2][1], case[2][2] == nil and core.null or case[2][2] }
              end
              return real_eval(self, script, keys, args)
            end
            local m = message("g")
            local seen, ran = nil, false
            ask(sched, p, m, function(_, lease) ran = true; seen = lease.fence; return true end)
            assert.is_true(not ran or (math.type(seen) == "integer" and seen >= 1),
              ("the handler ran with lease.fence = %q (%s)"):format(tostring(seen), type(seen)))
          end)
        end)
    end
  end
end)

describe("exactly-once at its edges: on_locked = \"ack\" and a lock of the policy's own", function()
  -- The policy leaves a lock of its own behind (an acquire Redis ran but
  -- whose reply was lost, an unlock that got no reply) and then, asked again
  -- on the same lease, finds it "held by another live owner" and acks: no
  -- owner runs the message. ACQUIRE's {0, owner} names the owner, which
  -- here is this very policy's, not running.
  it("does not ack, unrun, a message whose first acquire ran in Redis but got no reply", function()
    local faults = copy(eo_sim.NO_FAULTS)
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis, on_locked = "ack", fail_delay = 1 })
      local m = message("ghost")
      local ran = false
      local handler = function() ran = true; return true end
      faults.eval_fail, faults.applied = 1, 1   -- the acquire runs; its reply is lost
      assert.equal("defer", (ask(sched, p, m, handler)))
      faults.eval_fail, faults.applied = 0, 0
      wait.sleep(1)                              -- fail_delay: asked again, in place
      local action = ask(sched, p, m, handler)
      assert.is_true(ran or action ~= "ack", "acked a message whose handler never ran (no other owner exists)")
    end, faults)
  end)

  it("does not ack an ordered message retried in place after its handler failed and its unlock got no reply",
    function()
      simulate(function(_, redis, sched)
        local p = policy.exactly_once({ redis = redis, on_locked = "ack" })
        local real_eval = redis.eval
        redis.eval = function(self, script, keys, args)
          if script == policy.scripts.unlock then return nil, "no reply within the timeout", "TIMEOUT" end
          return real_eval(self, script, keys, args)
        end
        local m = message("fifo")
        assert.equal("nack", (ask(sched, p, m, function() return false, "failed" end)))
        -- mqlease.run retries an ordered message in place (the retry policy's delay)
        wait.sleep(1)
        local ran = false
        local action = ask(sched, p, m, function() ran = true; return true end)
        assert.is_true(ran or action ~= "ack", "acked a message whose only handler run failed")
      end)
    end)
end)

describe("exactly-once at its edges: a fence read from a task of the handler while its done marker is out", function()
  -- The success path lets the lock go (lock_owner, _fence_issue cleared)
  -- only after the marker's script; the failure path before its unlock. A
  -- read in between is sent, finds the lock the marker just deleted, and
  -- marks the lease lock-lost: lock_lost counted and alive() false, for a
  -- lock that was ours to the end.
  it("counts no lock_lost and leaves the lease alive", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      slow_marker(redis)
      local m = message("stray")
      local read = {}
      local action = ask(sched, p, m, function(_, lease)
        sched:spawn(function()
          wait.sleep(0.1)
          read.ok, read.value = pcall(function() return lease.fence end)
        end)
        return true
      end)
      while read.ok == nil do wait.sleep(0.01) end
      assert.equal("ack", action)
      -- the handler has ended: no token (lease.fence reads nil), none asked for
      assert.is_true(read.ok, tostring(read.value))
      assert.is_nil(read.value)
      assert.is_nil(m.counts.lock_lost, "the marker's own unlock counted as a lost lock")
      assert.is_true(m.lease:alive(), "the lease reads lock-lost after its own marker")
    end)
  end)
end)

describe("exactly-once at its edges: a plain-table lease of the caller's own used for a second message", function()
  -- The policy writes the first message into the lease (_message) and
  -- never again: the second message's token is asked for the first
  -- message's lock, refused, and its handler fails (counted a lost lock).
  it("issues the second message its own token", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local own = { alive = function() return true end, _lock_lost = function() end }
      local a, b = message("a"), message("b")
      assert.equal("ack", (ask(sched, p, a, function() return true end, own)))
      local seen, err
      local action = ask(sched, p, b, function(_, lease)
        local ok, f = pcall(function() return lease.fence end)
        if ok then seen = f else err = f end
        return ok
      end, own)
      assert.equal(1, seen, "no token for b: " .. tostring(err))
      assert.equal("ack", action)
      assert.is_nil(b.counts.lock_lost)
    end)
  end)
end)

describe("exactly-once at its edges: a done marker written again after a reply that proves the first did not run", function()
  -- finish() takes a retry's 0 for "unlocked" (the first try, unanswered,
  -- may have deleted the lock). After an error reply (OOM, READONLY, BUSY:
  -- the script did not run) it cannot have: the 0 is a lock another owner
  -- took, and the loss goes uncounted (drop_lock(lease, true) even clears
  -- what the keepalive saw), though another instance may run the message.
  it("counts lock_lost when the lock was taken between an unrun marker and its retry", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis, batch = false })
      local real_eval, first = redis.eval, true
      redis.eval = function(self, script, keys, args)
        if first and script == policy.scripts.finish then
          first = false
          -- a failover lost our lock and another instance took it; this
          -- call was refused by the server, unrun
          redis.keys[policy.keys("oom").lock] = { value = "someone else", expires = math.huge }
          return nil, "OOM command not allowed when used memory > 'maxmemory'.", "REDIS_ERROR"
        end
        return real_eval(self, script, keys, args)
      end
      local m = message("oom")
      assert.equal("ack", (ask(sched, p, m, function() return true end)))
      assert.equal(1, m.counts.done_marker_retries)
      assert.equal("someone else", value(redis, policy.keys("oom").lock))
      assert.equal(1, m.counts.lock_lost, "a lock another owner took was not counted lost")
    end)
  end)
end)

describe("exactly-once at its edges: a lease of the caller's own whose metatable has __newindex (a proxy)", function()
  -- The policy writes its fields (lock_owner, _lock_client, fence, ...) by
  -- plain assignment, which a proxy's __newindex sends to the table behind
  -- it, and reads them back with rawget from the proxy: under the default
  -- fence = "on_read" the token is refused as "not held" at every ask, so
  -- the handler never runs, and drop_lock finds no keepalive to stop.
  it("runs the handler and leaves no keepalive running", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("proxy")
      local proxy = setmetatable({}, { __index = m.lease, __newindex = m.lease })
      local ran = false
      local action = ask(sched, p, m, function() ran = true; return true end, proxy)
      assert.same({}, redis.running(), "a lock keepalive left running after the policy returned")
      assert.is_true(ran, "the handler did not run (" .. tostring(action) .. ")")
      assert.equal("ack", action)
    end)
  end)
end)

describe("exactly-once at its edges: a proxy lease (its metatable's __newindex forwards to m.lease) under mqlease.run", function()
  local policy = require "mqlease.policy"
  local redis_model = require "spec.support.model.redis"
  local eo_sim = require "spec.support.eo_sim"

  -- A custom policy that hands exactly_once a proxy of the run's lease (the
  -- shape of policy_edges_spec's proxy), a handler that hangs past grace.
  local function run_cut_off(wrap, fence)
    local summary, redis, b
    clock_mod.simulate(3600, function(clock)
      local rng = clock_mod.rng(5)
      redis = redis_model.new({ rng = rng, clock = clock, faults = eo_sim.NO_FAULTS })
      b = broker_mod.new({ rng = rng, clock = clock, count = 1, batch = 1, invisible = 10,
        faults = eo_sim.NO_FAULTS, release_delay = 0.5, eo = redis })
      local eo = policy.exactly_once({ redis = redis, lock_ttl = 6, fence = fence })
      local p = eo
      if wrap then
        p = function(m, lease, handler)
          return eo(m, setmetatable({}, { __index = lease, __newindex = lease }), handler)
        end
      end
      summary = run(b.consumer, function() wait.sleep(1000); return true end, {
        policy = p, concurrency = 1, grace = 1, mode = "wait",
        stop = function() return clock.t - 1000 >= 2 end })
    end)
    return summary, redis, b
  end

  it("(control) a plain lease: the run stops the keepalive of a handler cut off by grace", function()
    local _, redis = run_cut_off(false)
    assert.same({}, redis.running())
  end)

  for _, fence in ipairs({ "on_read", "on_grant" }) do
    it("a proxy lease: the run stops the keepalive of a handler cut off by grace (fence = " .. fence .. ")", function()
      local _, redis = run_cut_off(true, fence)
      assert.same({}, redis.running(), "a lock keepalive runs on after mqlease.run returned (until max_hold)")
    end)
  end
end)


describe("exactly-once at its edges: a fence read of the handler's left waiting behind another read while the marker is out", function()
  it("counts no lock_lost and leaves the lease alive when the first read failed", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local fence_calls = 0
      slow_marker(redis, function(script)
        if script ~= policy.scripts.fence then return end
        fence_calls = fence_calls + 1
        if fence_calls == 1 then
          -- the first read's call times out (unrun)
          wait.sleep(0.05)
          return true, nil, "no reply within the timeout", "TIMEOUT"
        end
      end)
      local m = message("stray2")
      local reads = {}
      local function reader(i, delay)
        return function(lease)
          if delay then wait.sleep(delay) end
          local ok, v = pcall(function() return lease.fence end)
          reads[i] = { ok = ok, value = v }
        end
      end
      local action = ask(sched, p, m, function(_, lease)
        sched:spawn(reader(1), lease)
        sched:spawn(reader(2, 0.005), lease)   -- waits for the first read's answer
        wait.sleep(0.02)                       -- both reads are out: the handler returns
        return true
      end)
      while not (reads[1] and reads[2]) do wait.sleep(0.01) end
      assert.equal("ack", action)
      assert.is_nil(m.counts.lock_lost, "the marker's own unlock counted as a lost lock (second read: "
        .. tostring(reads[2].value) .. ")")
      assert.is_true(m.lease:alive(), "the lease reads lock-lost after its own marker")
    end)
  end)
end)

describe("exactly-once at its edges: done markers that name their run", function()
  -- mqlease.policy.transaction_checker's checks tell the run that completed
  -- a message from one that failed or died by the marker's value
  for _, batch in ipairs({ true, false }) do
    it(("writes the run's owner as the marker once mark_runs asked, else '1'%s"):format(
      batch and " (batched)" or ""), function()
      simulate(function(_, redis, sched)
        local plain_p = policy.exactly_once({ redis = redis, batch = batch })
        local p = policy.exactly_once({ redis = redis, batch = batch })
        assert.is_true(policy.mark_runs(p))
        assert.is_false(policy.mark_runs(function() end), "a policy of the caller's own cannot be asked")
        local owner
        assert.equal("ack", (ask(sched, p, message("named"), function(_, lease)
          owner = lease.lock_owner
          return true
        end)))
        assert.is_string(owner)
        assert.equal(owner, value(redis, policy.keys("named").done))
        assert.equal("ack", (ask(sched, plain_p, message("unnamed"), function() return true end)))
        assert.equal("1", value(redis, policy.keys("unnamed").done))
      end)
    end)
  end
end)

describe("exactly-once at its edges: a lease of the caller's own that ends while its token is asked for", function()
  -- A lease with a metatable of its own gets its token before the handler
  -- runs (one call to Redis, a yield). The policy does not start a handler
  -- whose broker lease ended while its lock was taken; the same holds when
  -- it ended during the token's call: the message may be redelivered to
  -- another consumer by now.
  it("does not run the handler, and lets the lock go", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("ends")
      local alive = true
      local eval = redis.eval
      redis.eval = function(self, script, keys, args)
        if script == policy.scripts.fence then alive = false end   -- the broker's lease ends meanwhile
        return eval(self, script, keys, args)
      end
      local own = setmetatable({}, { __index = { alive = function() return alive end, _lock_lost = function() end } })
      local ran = false
      local action = ask(sched, p, m, function() ran = true; return true end, own)
      assert.is_false(ran, "the handler ran on a lease that ended while its token was asked for")
      assert.equal("nack", action)
      assert.is_nil(value(redis, policy.keys("ends").lock), "the lock let go")
      assert.same({}, redis.running())
    end)
  end)
end)
