-- A check's commit that provably never left: the producer was closed (by
-- another coroutine: a stop, a drain) while its checker waited for Redis.
-- The claim script had already recorded the commit (claim C, the half
-- message's id in :txc) when the producer refused to send it; every later
-- check, in whichever worker, read that record as "committed by a check: a
-- copy" and answered unknown, and the broker dropped the half message after
-- transactionCheckMax checks: the run's output was lost although its done
-- marker was written. An end that never reached the broker leaves the
-- decision to the next check, which answers from Redis.
--
-- No server: the fakes of policy_transaction_spec, and real producers over a
-- stand-in core and router with a clock of the spec's own.
local mqlease = require "mqlease"
local core = require "mqlease.core"

local fakes = require "spec.support.transaction_fakes"
local fake_redis, message, view_of = fakes.redis, fakes.message, fakes.view_of
local function eo_like(r, prefix) return fakes.eo_like(r, prefix, true) end

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

-- a real producer over a stand-in core (spec/support/transaction_fakes.lua)
local function real_producer(checker) return fakes.real_producer(producer_mod, checker) end

-- The fake Redis with a reply that waits: the next eval runs its script (the
-- server has done it) and then yields, as a reply on its way does, until
-- the spec resumes the coroutine.
local function slow_redis()
  local r = fake_redis()
  local eval = r.eval
  function r:eval(...)
    local got, err, code = eval(self, ...)
    if self.hold then
      self.hold = false
      coroutine.yield("waiting for Redis")
    end
    return got, err, code
  end
  return r
end

-- A run of message id under t through p that completes later than
-- COMMIT_WITHIN (claim L: its half messages are left to the checks);
-- outputs: how many half messages it sends. Returns them.
local function late_run(r, t, p, id, outputs)
  local m = message(id, "run-a")
  local txs = {}
  assert.equal("ack", t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
    for i = 1, outputs do
      local tx = assert(t:begin(p, hm, "B", "out-" .. i))
      tx._props = { ["mqlease.source"] = id, ["mqlease.run"] = "run-a" }
      txs[i] = tx
    end
    clock.t = clock.t + 3
    return true
  end))
  assert.equal("L:run-a", r.store["mqlease:{" .. id .. "}:tx"])
  return txs
end

-- The check of tx runs in p's poll, its checker waiting for Redis while
-- another coroutine closes p (and does meanwhile(), if given); then the
-- reply comes. Returns poll's results.
local function check_closed_meanwhile(r, p, tx, meanwhile)
  p.check_of(tx)
  r.hold = true
  local co = coroutine.create(function() return p:poll(0) end)
  local ok, state = coroutine.resume(co)
  assert(ok, state)
  assert.equal("waiting for Redis", state)
  assert(p:close())
  if meanwhile then meanwhile() end
  local done, n, err = coroutine.resume(co)
  assert(done, n)
  assert.equal("dead", coroutine.status(co))
  return n, err
end

-- The commits that answered checks, over producers ps.
local function check_commits(ps)
  local n = 0
  for _, p in ipairs(ps) do
    for _, e in ipairs(p.ends) do if e.from_check and e.commit then n = n + 1 end end
  end
  return n
end

describe("a check's commit that never left the closed producer", function()
  it("is made by the next check, in another worker, once", function()
    local r = slow_redis()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local p1 = real_producer(t1)
    local tx = late_run(r, t1, p1, "M1", 1)[1]
    assert.equal(1, check_closed_meanwhile(r, p1, tx))
    assert.equal(0, #p1.ends, "the closed producer sent an end")
    -- the broker asks again, every transactionCheckInterval, a producer of
    -- the group that is still there
    local t2 = mqlease.policy.transaction_checker { redis = r }
    local p2 = real_producer(t2)
    for _ = 1, 5 do
      clock.t, r.now = clock.t + 30, r.now + 30
      p2.check_of(tx)
      p2:poll(0)
    end
    assert.equal(1, check_commits({ p1, p2 }), "the run's output was never committed (the checks answered "
      .. "from a commit the closed producer never sent)")
  end)

  it("leaves the commits that did leave, of the run's other half messages, as they are", function()
    local r = slow_redis()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local p1 = real_producer(t1)
    local txs = late_run(r, t1, p1, "M2", 2)
    -- the first half message's check commits it
    p1.check_of(txs[1])
    p1:poll(0)
    assert.equal(1, check_commits({ p1 }))
    -- the second's commit never leaves
    check_closed_meanwhile(r, p1, txs[2])
    assert.equal(1, #p1.ends)
    local t2 = mqlease.policy.transaction_checker { redis = r }
    local p2 = real_producer(t2)
    for _ = 1, 3 do
      clock.t, r.now = clock.t + 30, r.now + 30
      p2.check_of(txs[1])   -- copies of the committed one
      p2.check_of(txs[2])
      p2:poll(0)
    end
    assert.equal(1, #p2.ends, ("worker 2 sent %d ends"):format(#p2.ends))
    assert.equal(txs[2].message_id, p2.ends[1].id)
    assert.equal("unknown", t2(view_of({ id = txs[1].message_id, opts = { properties = txs[1]._props } })))
  end)

  it("and the run's own commit that never left is made by a check after claim_grace, once", function()
    -- the same close while t:policy waits for its claim (P): the record says
    -- the run commits, and a P older than claim_grace is committed by a check
    local r = slow_redis()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local p1 = real_producer(t1)
    local m = message("M4", "run-a")
    local tx
    local co = coroutine.create(function()
      return t1:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
        tx = assert(t1:begin(p1, hm, "B", "out"))
        tx._props = { ["mqlease.source"] = "M4", ["mqlease.run"] = "run-a" }
        r.hold = true   -- the claim's reply
        return true
      end)
    end)
    assert.equal("waiting for Redis", select(2, assert(coroutine.resume(co))))
    assert(p1:close())
    assert.equal("ack", select(2, assert(coroutine.resume(co))))
    assert.equal("P:run-a", r.store["mqlease:{M4}:tx"])
    assert.equal("open", tx.state)
    assert.equal(0, #p1.ends)
    local t2 = mqlease.policy.transaction_checker { redis = r }
    local p2 = real_producer(t2)
    for _, at in ipairs({ 6, 36, 66, 96 }) do
      clock.t, r.now = clock.t + 30, at
      p2.check_of(tx)
      p2:poll(0)
    end
    assert.equal(1, check_commits({ p2 }))
  end)

  it("is an error of poll's when Redis cannot take the record back", function()
    local r = slow_redis()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local p1 = real_producer(t1)
    local tx = late_run(r, t1, p1, "M5", 1)[1]
    local n, err = check_closed_meanwhile(r, p1, tx, function() r.down = true end)
    assert.equal(1, n)
    assert.matches("commit of message MID%d+ was never sent, and the checker could not take it back: "
      .. "connection refused", err)
  end)

  it("is not taken back when the commit started and got no reply: it may have landed", function()
    local r = slow_redis()
    local t1 = mqlease.policy.transaction_checker { redis = r }
    local p1 = real_producer(t1)
    local tx = late_run(r, t1, p1, "M3", 1)[1]
    p1.replies[1] = { ok = false, err = "the client is closed", code = "CLOSED" }
    p1.check_of(tx)
    p1:poll(0)
    assert.equal(1, #p1.ends)
    local t2 = mqlease.policy.transaction_checker { redis = r }
    local p2 = real_producer(t2)
    clock.t, r.now = clock.t + 30, r.now + 30
    p2.check_of(tx)
    p2:poll(0)
    assert.equal(0, #p2.ends, "a second commit went out for a half message whose commit may have landed")
  end)
end)
