-- Transactional messages under a third review: a check's end that never
-- reaches the broker, the claim's TTL beside the :txc set's, and the ends a
-- producer sends again. No server: the fakes of policy_transaction_spec, and
-- a real mqlease.producer over a stand-in core and router with a clock of
-- the spec's own.
local mqlease = require "mqlease"
local core = require "mqlease.core"

local fakes = require "spec.support.transaction_fakes"
local fake_redis, fake_producer, message = fakes.redis, fakes.producer, fakes.message
local view_of = fakes.view_of
local function eo_like(r, prefix) return fakes.eo_like(r, prefix, true) end

-- mqlease.producer and mqlease.transaction loaded afresh over a clock the
-- spec moves (clock.t, seconds): the producer's "later than ENDED_QUIET"
-- then needs no sleep. busted restores package.loaded after this file.
local clock = { t = 1000 }
local producer_mod, transaction
do
  local real_now = core.now
  core.now = function() return clock.t end
  package.loaded["mqlease.transaction"], package.loaded["mqlease.producer"] = nil, nil
  transaction = require "mqlease.transaction"
  producer_mod = require "mqlease.producer"
  core.now = real_now
end

-- a real producer over a stand-in core (spec/support/transaction_fakes.lua)
local function real_producer(checker) return fakes.real_producer(producer_mod, checker) end

describe("a third review: a check's end that never reaches the broker (suspicion 1)", function()
  it("answers unknown to every later check once a check's commit got no reply: lost, never twice", function()
    local r = fake_redis()
    local t = mqlease.policy.transaction_checker { redis = r }
    local p = real_producer(t)
    local m = message("M1", "run-a")
    local tx
    assert.equal("ack", t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      tx = assert(t:begin(p, hm, "B", "out"))
      tx._props = { ["mqlease.source"] = "M1", ["mqlease.run"] = "run-a" }
      clock.t = clock.t + 3   -- a slow rest of the handler: L, left to the checks
      return true
    end))
    assert.equal("L:run-a", r.store["mqlease:{M1}:tx"])
    assert.equal(0, #p.ends)
    -- the broker's check: the claim script records MID1 in :txc, and the
    -- commit it answers gets no reply (or the process dies before sending it)
    p.replies[1] = { ok = false, err = "deadline exceeded", code = "DEADLINE_EXCEEDED" }
    p.check_of(tx)
    p:poll(0)
    assert.equal(1, #p.ends)
    assert.is_true(p.ends[1].commit and p.ends[1].from_check)
    assert.is_true(r.store["mqlease:{M1}:txc"]["MID1"])
    -- every later round (copies of the half message, the same message id):
    -- the commit may have reached the broker, so nothing more is sent
    for _ = 1, 15 do
      clock.t, r.now = clock.t + 30, r.now + 30
      p.check_of(tx)
      p:poll(0)
    end
    assert.equal(1, #p.ends, "a second commit went out for a half message a check's commit may have ended")
    assert.equal("unknown", t(view_of({ id = "MID1", opts = { properties = tx._props } })))
  end)
end)

describe("a third review: the claim's TTL and the :txc set's (suspicion 2)", function()
  it("never keeps a claim whose set has lapsed, and reads the set only under a live claim", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r, claim_ttl = 600 }
    local m = message("M2", "run-a")
    assert.equal("ack", t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out-1"))
      assert(t:begin(p, hm, "B", "out-2"))
      p.now = p.now + 3   -- left to the checks (L)
      return true
    end))
    local claim, set = "mqlease:{M2}:tx", "mqlease:{M2}:txc"
    local answers = {}
    -- the broker's rounds: H1 first, H2 only much later (its own recovery),
    -- then copies of both
    for _, step in ipairs({ { 0, 1 }, { 30, 1 }, { 400, 2 }, { 430, 1 }, { 599, 1 }, { 599, 2 } }) do
      r.now = step[1]
      answers[#answers + 1] = t(view_of(p.begun[step[2]]))
      -- the set lives at least as long as the claim: a claim C never stands
      -- alone, which would read every half message as a copy
      if r.store[claim] then
        assert.is_true(r.expire_at[set] >= r.expire_at[claim],
          ("at %d s the claim lapses at %d, its set at %d"):format(r.now, r.expire_at[claim], r.expire_at[set]))
      end
    end
    assert.same({ "commit", "unknown", "commit", "unknown", "unknown", "unknown" }, answers)
  end)
end)

describe("a third review: ends a producer sends again (suspicion 3)", function()
  it("sends no second commit for a check of a half message with recovery committed in time", function()
    -- with check immunity (recovery), RocketMQ 5.2's check copies a half
    -- message it meets while young (TransactionalMessageServiceImpl
    -- .checkPrepareQueueOffset -> putImmunityMsgBackToHalfQueue): a commit in
    -- time ends the original and leaves the copy, which is checked after the
    -- immunity with the same message and transaction id
    local asked = 0
    local p = real_producer(function() asked = asked + 1; return "unknown" end)
    local tx = assert(p:begin("B", "out", { recovery = 60 }))
    clock.t = clock.t + 0.5
    assert(tx:commit())   -- in time: 0.5 s after the send
    assert.equal(1, #p.ends)
    clock.t = clock.t + 60   -- the copy's check, after the immunity
    p.check_of(tx)
    p:poll(0)
    assert.equal(1, #p.ends, ("the producer sent the commit of %s again for a check of its copy (its checker was asked %d times)")
      :format(tx.message_id, asked))
  end)

  it("sends a lost in-time end again once, not for every later check (of copies the resend left)", function()
    local asked = 0
    local p = real_producer(function() asked = asked + 1; return "unknown" end)
    local tx = assert(p:begin("B", "out"))
    clock.t = clock.t + 0.5
    assert(tx:commit())   -- in time; the proxy answered OK, and the broker never heard
    clock.t = clock.t + 10   -- transactionTimeOut later: the check of a lost commit
    p.check_of(tx)
    p:poll(0)
    assert.equal(2, #p.ends)
    assert.is_true(p.ends[2].commit and p.ends[2].from_check)
    -- the resend answered a check: the broker may copy the half message
    -- again before its op message is read, and check the copy
    clock.t = clock.t + 30
    p.check_of(tx)
    p:poll(0)
    assert.equal(2, #p.ends, ("%d commits of %s went out: the resend was sent again for a check of its copy")
      :format(#p.ends, tx.message_id))
  end)

  it("commits a run's lost in-time commit once, whichever of two workers each check reaches", function()
    local r = fake_redis()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local t2 = mqlease.policy.transaction_checker { redis = r }
    local p1, p2 = real_producer(t1), real_producer(t2)
    local m = message("M5", "run-a")
    local tx
    local sent = clock.t
    assert.equal("ack", t1:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      tx = assert(t1:begin(p1, hm, "B", "out"))
      tx._props = { ["mqlease.source"] = "M5", ["mqlease.run"] = "run-a" }
      return true
    end))
    assert.equal("committed", tx.state)   -- the proxy said OK; the broker never heard
    assert.equal(1, #p1.ends)
    -- the broker's rounds, each to one producer of the group, the first
    -- transactionTimeOut after the send, then one every transactionCheckInterval
    for i, p in ipairs({ p1, p2, p1, p2, p1, p1 }) do
      local at = i == 1 and 6 or 6 + 30 * (i - 1)
      clock.t, r.now = sent + at, at
      p.check_of(tx)
      p:poll(0)
    end
    local from_checks = 0
    for _, ends in ipairs({ p1.ends, p2.ends }) do
      for _, e in ipairs(ends) do if e.from_check and e.commit then from_checks = from_checks + 1 end end
    end
    assert.equal(1, from_checks, ("%d commits answered checks (worker 1 sent %d ends, worker 2 %d)")
      :format(from_checks, #p1.ends, #p2.ends))
  end)

  it("commits, once, a run's in-time commit that never reached the broker when another worker is asked", function()
    -- without recovery the broker copies no half message younger than its
    -- transactionTimeOut, so a check of one the run committed in time means
    -- the commit never reached the broker (a proxy in cluster mode passes
    -- EndTransaction on one-way and answers OK first). The check goes to any
    -- producer of the group (ProducerManager.getAvailableChannel): here one
    -- in another worker, whose ring of ends does not know the transaction.
    local r, p1 = fake_redis(), fake_producer()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local m = message("M3", "run-a")
    assert.equal("ack", t1:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t1:begin(p1, hm, "B", "out"))
      return true
    end))
    assert.equal("committed", p1.begun[1].state)   -- the proxy said OK; the broker never heard
    local t2 = mqlease.policy.transaction_checker { redis = r }
    local answers = {}
    for _, at in ipairs({ 6, 36, 66, 96, 126 }) do   -- transactionTimeOut, then every transactionCheckInterval
      r.now = at
      answers[#answers + 1] = t2(view_of(p1.begun[1]))
    end
    local commits = select(2, table.concat(answers, ","):gsub("commit", ""))
    assert.equal(1, commits, "the worker asked answered " .. table.concat(answers, ",")
      .. ": the run's output is never delivered")
  end)
end)
