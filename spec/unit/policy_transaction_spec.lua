-- mqlease.policy.transaction_checker: which run's half messages commit. A
-- fake Redis runs the claim script's logic over a table (and can be down), a
-- fake producer records what each transaction was told; the real policy
-- (the exactly-once one) is on the real broker in transaction_cpt_spec.
local mqlease = require "mqlease"

local fakes = require "spec.support.transaction_fakes"
local fake_redis, fake_producer, message = fakes.redis, fakes.producer, fakes.message
local function eo_like(r, prefix) return fakes.eo_like(r, prefix) end

describe("mqlease.policy.transaction_checker", function()
  it("commits a run's half messages once its done marker is written and its claim is taken", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local m = message("M1", "run-a")
    local policy = t:policy(eo_like(r, "mqlease:"))
    local action = policy(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out-1", { tag = "x", properties = { k = "v" } }))
      assert(t:begin(p, hm, "B", "out-2"))
      return true
    end)
    assert.equal("ack", action)
    assert.equal(2, #p.begun)
    for _, tx in ipairs(p.begun) do assert.equal("committed", tx.state) end
    assert.same({ k = "v", ["mqlease.source"] = "M1", ["mqlease.run"] = "run-a" }, p.begun[1].opts.properties)
    assert.equal("x", p.begun[1].opts.tag)
    assert.is_nil(p.begun[1].opts.recovery)   -- the broker's transactionTimeOut (see the option)
    assert.equal("P:run-a", r.store["mqlease:{M1}:tx"])
    assert.equal(1, p.polls)
    -- a check of them: unknown while the run may be committing them, then commit
    -- (the run's commit never came), once: the claim is the check's from then on,
    -- and a check after it is of a copy the broker made; of another run's, rollback
    local a = { properties = { ["mqlease.source"] = "M1", ["mqlease.run"] = "run-a" } }
    assert.equal("unknown", t(a))
    r.now = 15
    assert.equal("commit", t(a))
    assert.equal("C:run-a", r.store["mqlease:{M1}:tx"])
    assert.equal("unknown", t(a))
    r.now = 100
    assert.equal("unknown", t(a))
    assert.equal("rollback", t({ properties = { ["mqlease.source"] = "M1", ["mqlease.run"] = "run-b" } }))
  end)

  it("leaves a late run's output to the checks: one commits it, the later ones (of copies) do not", function()
    -- the broker checks a half message older than its transactionTimeOut and
    -- copies it; a commit of the original after that would leave the copy to
    -- be committed too, so a run past COMMIT_WITHIN commits nothing itself
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local m = message("M8", "run-a")
    local action = t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out"))
      p.now = p.now + require("mqlease.transaction").COMMIT_WITHIN   -- a slow rest of the handler
      return true
    end)
    assert.equal("ack", action)
    assert.equal("open", p.begun[1].state)
    assert.equal("L:run-a", r.store["mqlease:{M8}:tx"])
    local a = { properties = { ["mqlease.source"] = "M8", ["mqlease.run"] = "run-a" } }
    assert.equal("commit", t(a))     -- at once: nobody else commits it
    assert.equal("C:run-a", r.store["mqlease:{M8}:tx"])
    assert.equal("unknown", t(a))    -- a copy the broker keeps checking
    r.now = 3600
    assert.equal("unknown", t(a))
    assert.equal("rollback", t({ properties = { ["mqlease.source"] = "M8", ["mqlease.run"] = "run-b" } }))
  end)

  it("commits only the transactions still in time when a run's claim comes at the edge", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local m = message("M9", "run-a")
    local within = require("mqlease.transaction").COMMIT_WITHIN
    -- the claim script's round trip takes the first one past the edge
    local eval = r.eval
    function r.eval(...)
      p.now = within - 0.1 + 0.2
      return eval(...)
    end
    t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "first"))
      p.now = 0.2
      assert(t:begin(p, hm, "B", "second"))
      p.now = within - 0.1
      return true
    end)
    assert.equal("P:run-a", r.store["mqlease:{M9}:tx"])
    assert.equal("open", p.begun[1].state)        -- 2.1 s old at the commit: left to the checks
    assert.equal("committed", p.begun[2].state)   -- 1.9 s
  end)

  it("rolls back at once what a failed handler sent", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local m = message("M2", "run-a")
    local action = t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out"))
      error("handler broke")
    end)
    assert.equal("nack", action)
    assert.equal("rolled_back", p.begun[1].state)
    assert.is_nil(r.store["mqlease:{M2}:tx"])
  end)

  it("rolls back a run whose message another run claimed first", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    r:claim("mqlease:{M3}:tx", "C:run-other")
    local m = message("M3", "run-a")
    t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out"))
      return true
    end)
    assert.equal("rolled_back", p.begun[1].state)
  end)

  it("answers checks from the done marker and the claim: unknown, claimed by the check, rolled back", function()
    local r = fake_redis()
    local t = mqlease.policy.transaction_checker { redis = r, prefix = "pfx:" }
    local a = { properties = { ["mqlease.source"] = "M4", ["mqlease.run"] = "run-a" } }
    local b = { properties = { ["mqlease.source"] = "M4", ["mqlease.run"] = "run-b" } }
    -- no done marker yet: the run may still finish
    assert.equal("unknown", t:check(a))
    assert.is_nil(r.store["pfx:{M4}:tx"])
    -- done, nobody claimed (the run died between its marker and its claim): the first check claims
    r.store["pfx:{M4}:done"] = "1"
    assert.equal("commit", t:check(b))
    assert.equal("C:run-b", r.store["pfx:{M4}:tx"])
    assert.equal("rollback", t:check(a))
    -- asked again, at once or much later: a copy the broker made of a committed
    -- half message (a commit for it would deliver the message twice)
    assert.equal("unknown", t:check(b))
    r.now = 16
    assert.equal("unknown", t:check(b))
    -- not one of ours, and Redis down: ask again later
    assert.equal("unknown", t:check({ properties = {} }))
    r.down = true
    assert.equal("unknown", t:check(a))
  end)

  it("leaves the transactions to the checks when Redis does not answer the claim", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local m = message("M5", "run-a")
    local inner = eo_like(r, "mqlease:")
    t:policy(function(...)
      local action = inner(...)
      r.down = true
      return action
    end)(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out"))
      return true
    end)
    assert.equal("open", p.begun[1].state)
  end)

  it("commits nothing from the run when a check claimed its output first (the check committed)", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local m = message("M6", "run-a")
    t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out"))
      -- between the done marker and the run's claim, a check of this half message
      r.store["mqlease:{M6}:done"] = "1"
      assert.equal("commit", t:check({ properties = { ["mqlease.source"] = "M6", ["mqlease.run"] = "run-a" } }))
      return true
    end)
    assert.equal("open", p.begun[1].state)
    assert.equal("C:run-a", r.store["mqlease:{M6}:tx"])
  end)

  it("raises on wrong use, naming the option or the call", function()
    assert.has_error(function() mqlease.policy.transaction_checker { nope = 1 } end,
      "mqlease.policy.transaction_checker: unknown option 'nope'")
    assert.has_error(function() mqlease.policy.transaction_checker { claim_ttl = 0 } end,
      "mqlease.policy.transaction_checker: option 'claim_ttl' must be from 1 to 2147483647 seconds")
    assert.has_error(function() mqlease.policy.transaction_checker { recovery = 0.5 } end,
      "mqlease.policy.transaction_checker: option 'recovery' must be whole seconds from 1 to 3600")
    local t2 = mqlease.policy.transaction_checker { redis = fake_redis(), recovery = 60 }
    local p2, m2 = fake_producer(), message("M7", "run-a")
    assert(t2:begin(p2, m2, "B", "out"))
    assert.equal(60, p2.begun[1].opts.recovery)
    assert.has_error(function() mqlease.policy.transaction_checker { claim_grace = -1 } end,
      "mqlease.policy.transaction_checker: option 'claim_grace' must be 0 or more seconds, less than 'claim_ttl'")
    local t = mqlease.policy.transaction_checker { redis = fake_redis() }
    assert.error_matches(function() t:begin(fake_producer(), { id = "X", lease = {} }, "B", "b") end,
      "begin needs a message run under mqlease.policy.exactly_once")
    assert.error_matches(function() t:policy(nil) end, "the exactly%-once policy expected")
  end)
end)

describe("mqlease.policy.transaction_checker: a check that raises (a checker's bad answer)", function()
  it("costs neither the message it polled after nor the poll task, which says so and goes on", function()
    local r, p = fake_redis(), fake_producer()
    function p:poll()
      self.polls = self.polls + 1
      mqlease.sleep(0.01)
      -- the wrapper's poll after the message, then the poll task's first one
      if self.polls <= 2 then error("the checker answered true for message H" .. self.polls) end
      if self.polls >= 4 then self._closed = true end
      return 0
    end
    local t = mqlease.policy.transaction_checker { redis = r }
    local said = {}
    local stderr = io.stderr
    io.stderr = { write = function(_, ...) for _, s in ipairs({ ... }) do said[#said + 1] = s end end }
    local action, raised
    local s = require("mqlease.scheduler").new()
    s:spawn(function()
      local m = message("M1", "run-a")
      local ok, a = pcall(t:policy(eo_like(r, "mqlease:")), m, m.lease, function(hm)
        assert(t:begin(p, hm, "B", "out"))
        return true
      end)
      if ok then action = a else raised = a end
    end)
    s:loop()
    io.stderr = stderr
    assert.is_nil(raised, "the message's policy raised: " .. tostring(raised))
    assert.equal("ack", action)
    assert.equal(4, p.polls, "the poll task stopped at the first check that raised")
    local text = table.concat(said)
    assert.matches("checker answered true for message H1", text, 1, true)
    assert.matches("checker answered true for message H2", text, 1, true)
  end)
end)
