-- Transactional messages under a fourth review: when an end counts as "in
-- time" (the broker had it before its check could copy the half message),
-- and the arguments of the transaction checker's begin. No server: the
-- fakes of transaction_review_spec, a real mqlease.producer over a stand-in
-- core and router, with a clock of the spec's own.
local mqlease = require "mqlease"
local core = require "mqlease.core"

local fakes = require "spec.support.transaction_fakes"

-- mqlease.producer and mqlease.transaction loaded afresh over a clock the
-- spec moves (clock.t, seconds). busted restores package.loaded after this file.
local clock = { t = 1000 }
local producer_mod
do
  local real_now = core.now
  core.now = function() return clock.t end
  package.loaded["mqlease.transaction"], package.loaded["mqlease.producer"] = nil, nil
  producer_mod = require "mqlease.producer"
  core.now = real_now
end

local function real_producer(checker) return fakes.real_producer(producer_mod, checker) end

-- Runs fn while each EndTransaction's reply takes `seconds` on the spec's clock.
local function with_slow_replies(p, seconds, fn)
  local router = p._router
  local call = router.call
  router.call = function(...)
    clock.t = clock.t + seconds
    return call(...)
  end
  local ok, err = pcall(fn)
  router.call = call
  assert(ok, err)
end

describe("a fourth review: an end in time is one the broker had in time", function()
  it("sends no second commit for checks after a commit started in time whose reply came late", function()
    local asked = 0
    local p = real_producer(function() asked = asked + 1; return "commit" end)
    local tx = assert(p:begin("B", "out"))
    clock.t = clock.t + 1.5   -- started 1.5 s after the send: within COMMIT_WITHIN
    -- a slow proxy: the OK comes 3.5 s after the send, and the broker may
    -- have had the commit only just before it; a check round at 6 s copied
    -- the half message before the commit's op message was written
    -- (transactionOpBatchInterval), and checks the copy every round
    with_slow_replies(p, 2, function() assert(tx:commit()) end)
    assert.equal("committed", tx.state)
    for _ = 1, 3 do
      clock.t = clock.t + 30
      p.check_of(tx)
      p:poll(0)
    end
    assert.equal(1, #p.ends, ("%d ends of %s went out: a commit answered %.1f s after the send was sent again for a check of its copy")
      :format(#p.ends, tx.message_id, 3.5))
    assert.equal(0, asked)
  end)

  it("still sends a lost end again once when its reply came within COMMIT_WITHIN", function()
    local p = real_producer(function() return "unknown" end)
    local tx = assert(p:begin("B", "out"))
    clock.t = clock.t + 0.5
    with_slow_replies(p, 1, function() assert(tx:commit()) end)   -- answered 1.5 s after the send
    clock.t = clock.t + 10
    p.check_of(tx)
    p:poll(0)
    assert.equal(2, #p.ends)
    assert.is_true(p.ends[2].commit and p.ends[2].from_check)
  end)
end)

describe("a fourth review: the transaction checker's in-time commit is one answered in time", function()
  it("has another worker's check answer unknown for a run's commit the proxy answered late", function()
    local r, p = fakes.redis(), fakes.producer()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local m = fakes.message("M7", "run-a")
    local tx
    assert.equal("ack", t1:policy(fakes.eo_like(r, "mqlease:", true))(m, m.lease, function(hm)
      tx = assert(t1:begin(p, hm, "B", "out"))
      -- started in time (claim P), answered 2.5 s after the send: the broker
      -- may have had it after a check round copied the half message
      local commit = tx.commit
      function tx.commit(self) p.now = p.now + 2.5; return commit(self) end
      return true
    end))
    assert.equal("committed", tx.state)
    assert.equal("P:run-a", r.store["mqlease:{M7}:tx"])
    -- the copy's check, past claim_grace, in another worker
    local t2 = mqlease.policy.transaction_checker { redis = r }
    r.now = 36
    assert.equal("unknown", t2(fakes.view_of(tx)), "a check committed a copy of a half message the run committed")
  end)

  it("still has a check commit a run's commit answered in time that never reached the broker", function()
    local r, p = fakes.redis(), fakes.producer()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local m = fakes.message("M8", "run-a")
    local tx
    assert.equal("ack", t1:policy(fakes.eo_like(r, "mqlease:", true))(m, m.lease, function(hm)
      tx = assert(t1:begin(p, hm, "B", "out"))
      return true
    end))
    assert.equal("committed", tx.state)
    local t2 = mqlease.policy.transaction_checker { redis = r }
    r.now = 36
    assert.equal("commit", t2(fakes.view_of(tx)))
  end)
end)

describe("a fourth review: the transaction checker's begin names a bad argument", function()
  local t, p, m
  before_each(function()
    t = mqlease.policy.transaction_checker { redis = fakes.redis() }
    p, m = fakes.producer(), fakes.message("M1", "run-a")
  end)

  local function raises(pattern, ...)
    local args = { ... }
    local ok, err = pcall(function() local tx = t:begin((table.unpack or unpack)(args, 1, 5)); return tx end)
    assert.is_false(ok, "t:begin did not raise")
    assert.is_truthy(tostring(err):find(pattern, 1, true), "raised: " .. tostring(err))
    -- raised at the caller's line, not inside the module
    assert.is_truthy(tostring(err):find("transaction_reply_spec", 1, true), "raised: " .. tostring(err))
  end

  it("options that are not a table", function()
    raises("bad argument #5 to 'begin' (options table expected, got string)", p, m, "B", "x", "tag")
  end)

  it("properties that are not a table", function()
    raises("option 'properties' must be a table of strings (got string)", p, m, "B", "x", { properties = "x" })
  end)

  it("no producer", function()
    raises("bad argument #1 to 'begin' (a producer expected, got nil)", nil, m, "B", "x")
  end)

  it("no message", function()
    raises("bad argument #2 to 'begin' (the message the handler runs expected, got nil)", p, nil, "B", "x")
  end)
end)

describe("a fourth review: option 'topics' is an array the core and begin read alike", function()
  local config = require "mqlease.config"
  local function refused(topics)
    local ok, err = pcall(config.producer_options, { endpoints = "127.0.0.1:1", topics = topics })
    assert.is_false(ok, "accepted")
    assert.is_truthy(tostring(err):find("option 'topics' must be an array of strings", 1, true), "raised: " .. tostring(err))
  end

  it("refuses a hole, which the core met as 'a topic must be a string (got nil)'", function()
    refused({ "orders", nil, "payments" })
  end)

  it("refuses a topic past a hole, which begin allowed and the proxy was never told of", function()
    local topics = { "orders" }
    topics[3] = "payments"   -- #topics is 1: the core announces "orders" only
    refused(topics)
  end)

  it("refuses a key that is no index", function()
    refused({ "orders", payments = "payments" })
  end)

  it("takes an array", function()
    assert.same({ "orders", "payments" }, config.producer_options({ endpoints = "127.0.0.1:1",
      topics = { "orders", "payments" } }).topics)
  end)
end)
