-- The exactly-once policy's fencing token issued on read (fence = "on_read",
-- the default): no fence key is touched at the grant, and the first read of
-- lease.fence in the handler issues a token while the lock is still the
-- handler's, or raises. Against the fault model's Redis in simulated time
-- (spec/support/eo_sim.lua), which records every script it is sent here and
-- fails where a spec says.
local policy = require "mqlease.policy"
local core = require "mqlease.core"
local wait = require "mqlease.loop"
local eo_sim = require "spec.support.eo_sim"
local simulate, message = eo_sim.simulate, eo_sim.message
local record, value, copy = eo_sim.record, eo_sim.value, eo_sim.copy

-- The policy's answer for m, asked from a task of its own (the batches of
-- one turn need a scheduler's task), waited for: action, delay, err.
local function ask(sched, p, m, handler)
  local out
  sched:spawn(function() out = table.pack(p(m, m.lease, handler)) end)
  while not out do wait.sleep(0.01) end
  return table.unpack(out, 1, out.n)
end

describe("mqlease.policy.exactly_once fencing token", function()
  it("touches no fence key for a handler that never reads lease.fence", function()
    simulate(function(_, redis, sched)
      local calls = record(redis)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      assert.equal("ack", (ask(sched, p, m, function() return true end)))
      assert.same({ "acquire_many", "finish_many" }, calls)
      assert.is_nil(value(redis, policy.keys("a").fence))
      assert.is_true(redis.done_of("a"))
      assert.is_nil(rawget(m.lease, "fence"))
      assert.is_nil(m.lease.fence, "no token once the handler has ended")
      assert.same({ "acquire_many", "finish_many" }, calls)
    end)
  end)

  it("issues one token at the first read and keeps it for the handler's later reads", function()
    simulate(function(_, redis, sched)
      local calls = record(redis)
      local p = policy.exactly_once({ redis = redis, done_ttl = 600 })
      local m = message("a")
      local seen = {}
      assert.equal("ack", (ask(sched, p, m, function(_, lease)
        seen[1] = lease.fence
        seen[2] = lease.fence
        return true
      end)))
      assert.same({ 1, 1 }, seen)
      assert.same({ "acquire_many", "fence", "finish_many" }, calls)
      -- kept as long as a token at the grant was: the done marker's TTL
      local e = redis.keys[policy.keys("a").fence]
      assert.equal("1", e.value)
      assert.is_true(e.expires > core.now() + 590)
    end)
  end)

  it("issues a greater token to each later attempt that reads it", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local tokens = {}
      for i = 1, 3 do
        local action = ask(sched, p, message("a"), function(_, lease)
          tokens[i] = lease.fence
          return i == 3, "again"
        end)
        assert.equal(i == 3 and "ack" or "nack", action)
      end
      assert.same({ 1, 2, 3 }, tokens)
    end)
  end)

  it("issues a new token when the handler runs again on the same lease (a retry in place)", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      local tokens = {}
      assert.equal("nack", (ask(sched, p, m, function(_, lease) tokens[1] = lease.fence; return false end)))
      assert.equal("ack", (ask(sched, p, m, function(_, lease) tokens[2] = lease.fence; return true end)))
      assert.same({ 1, 2 }, tokens)
    end)
  end)

  it("refuses a token once the lock is another owner's: the read raises, the message is nacked, the loss counted", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis, lock_ttl = 30 })
      local m = message("a")
      local alive_after
      local action, _, err = ask(sched, p, m, function(_, lease)
        -- the lock lapsed (a failover lost it) and another instance took it
        redis.keys[policy.keys("a").lock] = { value = "someone-else", expires = core.now() + 30 }
        local fence = lease.fence
        error("must not get here, got " .. tostring(fence))
      end)
      alive_after = m.lease:alive()
      assert.equal("nack", action)
      assert.matches("no fencing token: the lock of this message is no longer ours", err, 1, true)
      assert.matches("^[^:]*policy_fence_spec%.lua:%d+: ", err)   -- where the handler read it
      assert.is_false(alive_after)
      assert.equal(1, m.counts.lock_lost)
      assert.is_nil(value(redis, policy.keys("a").fence), "no token issued")
      assert.equal("someone-else", value(redis, policy.keys("a").lock), "the other owner's lock left alone")
      assert.is_false(redis.done_of("a"))
    end)
  end)

  it("counts a refused token as a lost lock even when the handler swallows the error and succeeds", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      local action = ask(sched, p, m, function(_, lease)
        redis.keys[policy.keys("a").lock] = nil   -- lapsed
        assert.is_false(pcall(function() return lease.fence end))
        return true
      end)
      -- the done marker still goes (the handler's work is done), as for any
      -- lock lost while a handler ran, and the loss is counted once
      assert.equal("ack", action)
      assert.equal(1, m.counts.lock_lost)
    end)
  end)

  it("raises when Redis does not answer the read, counted as unavailable", function()
    local faults = copy(eo_sim.NO_FAULTS)
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      local action, _, err = ask(sched, p, m, function(_, lease)
        faults.eval_fail = 1
        local ok, e = pcall(function() return lease.fence end)
        faults.eval_fail = 0
        error(e, 0)
      end)
      assert.equal("nack", action)
      assert.matches("no fencing token: no reply within the timeout", err, 1, true)
      assert.equal(1, m.counts.redis_unavailable)
    end, faults)
  end)

  -- Found by a review of the first version (each failed on it):

  it("gives two tasks of one handler reading at once the same token, asked of Redis once", function()
    simulate(function(_, redis, sched)
      local calls = record(redis)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      local got = {}
      assert.equal("ack", (ask(sched, p, m, function(_, lease)
        local left = 2
        for i = 1, 2 do sched:spawn(function() got[i] = lease.fence; left = left - 1 end) end
        while left > 0 do wait.sleep(0.01) end
        got[3] = lease.fence
        return true
      end)))
      assert.same({ 1, 1, 1 }, got)
      assert.same({ "acquire_many", "fence", "finish_many" }, calls)
    end)
  end)

  it("leaves no token on the lease once the handler has ended, in either mode", function()
    for _, mode in ipairs({ "on_read", "on_grant" }) do
      simulate(function(_, redis, sched)
        local p = policy.exactly_once({ redis = redis, fence = mode })
        local m = message("a")
        ask(sched, p, m, function(_, lease) return lease.fence == 1 end)
        assert.is_nil(rawget(m.lease, "fence"), mode)
        assert.is_nil(m.lease.fence, mode)
      end)
    end
  end)

  it("gives a handler run without a lock (fail = \"open\") no token of an earlier attempt", function()
    local faults = copy(eo_sim.NO_FAULTS)
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis, fail = "open" })
      local m = message("a")
      local seen = {}
      ask(sched, p, m, function(_, lease) seen[1] = lease.fence; return false end)
      faults.eval_fail = 1   -- the retry's acquire gets no reply: it runs open, with no lock
      ask(sched, p, m, function(_, lease) seen[2] = lease.fence; return true end)
      faults.eval_fail = 0
      assert.equal(1, seen[1])
      assert.is_nil(seen[2])
    end, faults)
  end)

  it("writes nothing on the lease from a read still out when its attempt ended", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      -- the token's call is held until the next attempt has its lock (a
      -- reply that comes late: a reconnect, a failover's re-send)
      local second_started, eval = false, redis.eval
      redis.eval = function(self, script, keys, args)
        if script == policy.scripts.fence then
          while not second_started do wait.sleep(0.05) end
        end
        return eval(self, script, keys, args)
      end
      local late = {}
      -- the handler's own task reads the token and outlives the handler
      ask(sched, p, m, function(_, lease)
        sched:spawn(function() late.ok, late.err = pcall(function() return lease.fence end) end)
        wait.sleep(0.01)
        return false
      end)
      -- a retry in place takes the lock again; the late call is then refused
      local alive
      ask(sched, p, m, function(_, lease)
        second_started = true
        while late.ok == nil do wait.sleep(0.05) end
        alive = lease:alive()
        return true
      end)
      assert.is_false(late.ok)
      assert.is_true(alive, "the second attempt's lock was taken for lost")
      assert.is_nil(m.counts.lock_lost)
    end)
  end)

  it("keeps a later attempt's readers together when a read of an ended attempt returns among them", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      -- each token call waits for its gate: the stale one (the first
      -- attempt's) until the second attempt's first reader is out
      local gates, n, eval = {}, 0, redis.eval
      redis.eval = function(self, script, keys, args)
        if script == policy.scripts.fence then
          n = n + 1
          local mine = n
          gates[mine] = gates[mine] or false
          while not gates[mine] do wait.sleep(0.01) end
        end
        return eval(self, script, keys, args)
      end
      local stale = {}
      ask(sched, p, m, function(_, lease)
        sched:spawn(function() stale.ok = pcall(function() return lease.fence end) end)
        wait.sleep(0.01)
        return false
      end)
      local got = {}
      assert.equal("ack", (ask(sched, p, m, function(_, lease)
        sched:spawn(function() got[1] = lease.fence end)   -- its call: the second
        wait.sleep(0.05)
        gates[1] = true                                    -- the stale read returns
        while stale.ok == nil do wait.sleep(0.01) end
        sched:spawn(function() got[2] = lease.fence end)   -- must wait for the first
        wait.sleep(0.05)
        gates[2], gates[3] = true, true
        while not (got[1] and got[2]) do wait.sleep(0.01) end
        return true
      end)))
      assert.is_false(stale.ok)
      assert.equal(got[1], got[2])
      assert.equal(2, n, "a second call for one attempt's token")
    end)
  end)

  it("issues the token on read for a plain-table lease of the caller's own, and asks nothing if unread", function()
    simulate(function(_, redis, sched)
      local calls = record(redis)
      local p = policy.exactly_once({ redis = redis })
      local plain = { alive = function() return true end, _lock_lost = function() end }
      local m = message("a")
      local out
      sched:spawn(function() out = { p(m, plain, function() return true end) } end)
      while not out do wait.sleep(0.01) end
      assert.equal("ack", out[1])
      assert.same({ "acquire_many", "finish_many" }, calls)
      local m2, plain2, seen = message("b"), { alive = function() return true end, _lock_lost = function() end }, nil
      out = nil
      sched:spawn(function() out = { p(m2, plain2, function(_, lease) seen = lease.fence; return true end) } end)
      while not out do wait.sleep(0.01) end
      assert.equal("ack", out[1])
      assert.equal(1, seen)
      assert.is_nil(plain2.fence)
    end)
  end)

  it("issues the token at the grant for a lease of the caller's own with a metatable of its own", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      local own = setmetatable({}, { __index = { alive = function() return true end, _lock_lost = function() end } })
      local seen, out
      sched:spawn(function() out = { p(m, own, function(_, lease) seen = lease.fence; return true end) } end)
      while not out do wait.sleep(0.01) end
      assert.equal("ack", out[1])
      assert.equal(1, seen)
    end)
  end)

  it("defers a message whose own lease's token gets no answer, the handler not run and the lock let go", function()
    simulate(function(_, redis, sched)
      local p = policy.exactly_once({ redis = redis })
      local m = message("a")
      local eval = redis.eval
      redis.eval = function(self, script, keys, args)
        if script == policy.scripts.fence then return nil, "no reply within the timeout", "TIMEOUT" end
        return eval(self, script, keys, args)
      end
      local own = setmetatable({}, { __index = { alive = function() return true end, _lock_lost = function() end } })
      local out
      sched:spawn(function() out = { p(m, own, function() error("must not run") end) } end)
      while not out do wait.sleep(0.01) end
      assert.equal("defer", out[1])
      assert.equal(1, m.counts.redis_unavailable)
      assert.is_nil(value(redis, policy.keys("a").lock), "the lock let go")
      assert.same({}, redis.running())
    end)
  end)

  it("issues the token at the grant with fence = \"on_grant\", and never on read", function()
    simulate(function(_, redis, sched)
      local calls = record(redis)
      local p = policy.exactly_once({ redis = redis, fence = "on_grant" })
      local m = message("a")
      local seen
      assert.equal("ack", (ask(sched, p, m, function(_, lease) seen = lease.fence; return true end)))
      assert.equal(1, seen)
      assert.same({ "acquire_many", "finish_many" }, calls)
      assert.equal("1", value(redis, policy.keys("a").fence))
    end)
  end)

  it("names the option when fence is neither \"on_read\" nor \"on_grant\"", function()
    assert.has_error(function() policy.exactly_once({ redis = "127.0.0.1:1", fence = "lazy" }) end,
      "mqlease.policy.exactly_once: option 'fence' must be \"on_read\" or \"on_grant\"")
    assert.has_error(function() policy.exactly_once({ redis = "127.0.0.1:1", fence = true }) end,
      "mqlease.policy.exactly_once: option 'fence' must be \"on_read\" or \"on_grant\"")
  end)
end)
