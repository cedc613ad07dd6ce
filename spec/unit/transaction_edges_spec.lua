-- Transactional messages where an adversary reviewing them found them wrong.
-- Each spec failed before its fix. No server: fakes of Redis and of the
-- producer, as policy_transaction_spec uses.
local mqlease = require "mqlease"
local transaction = require "mqlease.transaction"
local message_mod = require "mqlease.message"
local config = require "mqlease.config"

local fakes = require "spec.support.transaction_fakes"
local fake_redis, fake_producer, message = fakes.redis, fakes.producer, fakes.message
local view_of = fakes.view_of
local function eo_like(r, prefix) return fakes.eo_like(r, prefix, true) end

-- A real mqlease.transaction producer state over a fake router: every
-- EndTransaction is recorded in p.ends; p.replies scripts router:call's answers.
local function tx_producer(checker)
  local p = { ends = {}, replies = {} }
  local router = { client = {} }
  function router.client.end_transaction(_, topic, message_id, transaction_id, commit, from_check)
    p.ends[#p.ends + 1] = { topic = topic, id = message_id, transaction_id = transaction_id, commit = commit,
      from_check = from_check }
    return #p.ends
  end
  function router.client.fd() return -1 end
  function router.pump() end
  function router.call()
    local reply = table.remove(p.replies, 1) or { ok = true }
    if reply.ok then return reply end
    return nil, reply.err, reply.code
  end
  p._router = router
  transaction.attach(p, { topics = { "B" }, checker = checker })
  return p
end

-- An orphan event for the half message of tx, as the core hands it over.
local function orphan(tx)
  local m = {}
  m[message_mod.SLOTS.id] = tx.message_id
  m[message_mod.SLOTS.body] = "b"
  return { kind = "orphan", transaction_id = tx.transaction_id, message = m, shape = { topic = tx.topic } }
end

describe("transactions at their edges: mqlease.policy.transaction_checker", function()
  it("never commits the output of a run whose handler failed (its rollback got no answer)", function()
    local r, p = fake_redis(), fake_producer(true)
    local t = mqlease.policy.transaction_checker { redis = r }
    local pol = t:policy(eo_like(r, "mqlease:"))
    -- run X: sends its half message, then fails; its rollback gets no answer
    local mx = message("M1", "run-x")
    assert.equal("nack", pol(mx, mx.lease, function(hm)
      assert(t:begin(p, hm, "B", "x-out"))
      error("handler X broke")
    end))
    local tx_x = p.begun[1]
    assert.equal("open", tx_x.state)
    -- run Y of the redelivery completes: its done marker is written; a check of
    -- X's half message comes between Y's marker and Y's claim (or Y dies there)
    local my = message("M1", "run-y")
    local answer_for_x
    local eo = eo_like(r, "mqlease:")
    t:policy(function(...)
      local action = eo(...)
      answer_for_x = t:check(view_of(tx_x))
      return action
    end)(my, my.lease, function(hm)
      assert(t:begin(p, hm, "B", "y-out"))
      return true
    end)
    -- X's handler failed: its output must not be delivered (and Y's must)
    assert.are_not.equal("commit", answer_for_x)
    assert.equal("committed", p.begun[2].state)
  end)

  it("commits every half message of a late run, not only the first one a check asks about", function()
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local m = message("M2", "run-a")
    local within = transaction.COMMIT_WITHIN
    assert.equal("ack", t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out-1"))
      assert(t:begin(p, hm, "B", "out-2"))
      p.now = p.now + within   -- a slow rest of the handler: left to the checks (L)
      return true
    end))
    assert.equal("L:run-a", r.store["mqlease:{M2}:tx"])
    assert.equal("open", p.begun[1].state)
    assert.equal("open", p.begun[2].state)
    -- the broker checks both half messages (each is its own, not a copy)
    assert.equal("commit", t(view_of(p.begun[1])))
    local answers = {}
    for _, at in ipairs({ 0, 30, 60, 600, 3600 }) do   -- every later round of checks
      r.now = at
      answers[#answers + 1] = t(view_of(p.begun[2]))
    end
    assert.truthy(table.concat(answers, ","):find("commit"),
      "the second half message is never committed: " .. table.concat(answers, ","))
  end)

  it("refuses a claim_ttl Redis cannot take as SET ... EX, naming the option", function()
    local ok, err = pcall(mqlease.policy.transaction_checker, { redis = fake_redis(), claim_ttl = 1e20 })
    if ok then
      -- accepted: every claim then fails, and nothing is ever committed
      local r, p = fake_redis(), fake_producer()
      local t = mqlease.policy.transaction_checker { redis = r, claim_ttl = 1e20 }
      local m = message("M3", "run-a")
      t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
        assert(t:begin(p, hm, "B", "out"))
        return true
      end)
      assert.is_false(ok, ("claim_ttl = 1e20 accepted; ARGV[2] = %q, the run's half message is %s, a check answers %s")
        :format(r.args[1][2], p.begun[1].state, t(view_of(p.begun[1]))))
    end
    assert.matches("option 'claim_ttl'", err)
  end)
end)

describe("transactions at their edges: mqlease.transaction", function()
  it("sends no second commit for a transaction its own checker has committed", function()
    local p = tx_producer(function() return "commit" end)
    local tx = assert(transaction.begun(p, "B", { message_id = "MID1", transaction_id = "TX1", offset = 1 }, nil,
      require("mqlease.core").now() - 10))
    -- the commit gets no answer: the transaction stays open (docs: end it again,
    -- or let the checker answer)
    p.replies[1] = { ok = false, err = "deadline exceeded", code = "TIMEOUT" }
    local ok, _, code = tx:commit()
    assert.is_nil(ok); assert.equal("TIMEOUT", code)
    -- the broker checks it; the checker answers commit, and it is sent
    p._router.on_orphan(orphan(tx))
    assert.equal(1, (transaction.poll(p, 0)))
    assert.equal(2, #p.ends)
    assert.is_true(p.ends[2].from_check)
    -- the caller ends it again, as the docs allow: the producer knows it ended it
    tx:commit()
    assert.equal(2, #p.ends, "a second commit of TX1 went out after the check had committed it")
  end)

  it("sends no end from a check whose checker ran while the producer's own commit went out", function()
    local tx
    local p
    p = tx_producer(function()
      -- the checker waits (Redis, a database); meanwhile another coroutine commits
      assert(tx:commit())
      return "commit"
    end)
    tx = assert(transaction.begun(p, "B", { message_id = "MID2", transaction_id = "TX2", offset = 2 }, nil,
      require("mqlease.core").now() - 10))
    p._router.on_orphan(orphan(tx))
    transaction.poll(p, 0)
    assert.equal("committed", tx.state)
    assert.equal(1, #p.ends, ("%d EndTransaction commits of TX2 went out"):format(#p.ends))
  end)
end)

describe("transactions at their edges: begin options", function()
  it("refuses a 'timeout', which nothing keeps, pointing at request_timeout", function()
    for _, v in ipairs({ "banana", 5 }) do
      local ok, err = pcall(config.check_begin, "B", "body", { timeout = v })
      assert.is_false(ok, "begin accepted timeout = " .. tostring(v))
      assert.matches("option 'timeout' is not one of a send: the producer's option 'request_timeout'", err, 1, true)
    end
    assert.matches("option 'timeout'", config.send_options_problem({ timeout = 5 }), 1, true)
  end)
end)

describe("transactions at their edges: a second review", function()
  it("does not lose both runs' output when a check rolls back a run whose claim then comes", function()
    -- runs A and B of one message both ran (A's lock lapsed, B took it over):
    -- A wrote its marker, B overwrote it (a marker is written whoever holds
    -- the lock); a check of A's half message lands before A's (slow) claim
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r }
    local done = "mqlease:{M1}:done"
    local answer_a
    local pol_a = t:policy(function(m, lease, handler)
      assert(handler(m, lease))
      r.store[done] = lease.lock_owner       -- A's marker
      r.store[done] = "run-b"                -- B's marker, written after it
      answer_a = t:check(view_of(p.begun[1]))  -- the broker checks A's half message
      return "ack"
    end)
    local ma = message("M1", "run-a")
    assert.equal("ack", pol_a(ma, ma.lease, function(hm)
      assert(t:begin(p, hm, "B", "a-out"))
      p.now = p.now + 10   -- a slow handler: L, the checks commit
      return true
    end))
    local pol_b = t:policy(function(m, lease, handler)
      assert(handler(m, lease))
      return "ack"
    end)
    local mb = message("M1", "run-b")
    assert.equal("ack", pol_b(mb, mb.lease, function(hm)
      assert(t:begin(p, hm, "B", "b-out"))
      return true
    end))
    -- what reaches B's consumers: A's output unless the check rolled it
    -- back, B's unless it was rolled back; exactly one of them
    local delivered_a = answer_a ~= "rollback"
    local delivered_b = p.begun[2].state == "committed"
    assert.is_true(delivered_a ~= delivered_b, ("the check answered %s for A's half message (the marker names B), "
      .. "the claim is %s, B's output is %s"):format(tostring(answer_a), tostring(r.store["mqlease:{M1}:tx"]),
      p.begun[2].state))
  end)

  it("sends no second commit of a transaction a check committed, however many ended since", function()
    local p = tx_producer(function() return "commit" end)
    local now = require("mqlease.core").now
    local tx = assert(transaction.begun(p, "B", { message_id = "MID0", transaction_id = "TX0", offset = 0 }, nil,
      now() - 10))
    p._router.on_orphan(orphan(tx))
    assert.equal(1, (transaction.poll(p, 0)))
    assert.equal(1, #p.ends)
    -- a busy producer: 4096 other transactions end meanwhile
    for i = 1, 4096 do
      assert(assert(transaction.begun(p, "B", { message_id = "MID" .. i, transaction_id = "TX" .. i, offset = i },
        nil, now())):commit())
    end
    local before = #p.ends
    assert.is_true(tx:commit())
    assert.equal(before, #p.ends, "a second commit of TX0 went out after its check had committed it")
  end)
end)

describe("transactions at their edges: copies of what the run committed itself", function()
  it("answers unknown for a copy of a half message the policy committed in time, after claim_grace", function()
    -- with recovery (check immunity) the broker may copy a half message it
    -- checks while young, and a commit in time leaves the copy checked again
    -- (without it the broker copies none so young: transaction_review_spec)
    local r, p = fake_redis(), fake_producer()
    local t = mqlease.policy.transaction_checker { redis = r, recovery = 60 }
    local m = message("M4", "run-a")
    assert.equal("ack", t:policy(eo_like(r, "mqlease:"))(m, m.lease, function(hm)
      assert(t:begin(p, hm, "B", "out-1"))
      assert(t:begin(p, hm, "B", "out-2"))
      return true
    end))
    assert.equal("P:run-a", r.store["mqlease:{M4}:tx"])
    assert.equal("committed", p.begun[1].state)
    assert.equal("committed", p.begun[2].state)
    r.now = 60   -- past claim_grace: the run's commits should have come
    assert.equal("unknown", t(view_of(p.begun[2])), "a copy of a half message the policy committed was committed")
    assert.equal("unknown", t(view_of(p.begun[1])))
  end)
end)

describe("a check that comes with the session's start", function()
  -- The proxy may ask about a half message as soon as the producer's
  -- Telemetry stream announces its topics, and the check then comes in the
  -- same batch of events as the start's result, which the router read
  -- before the producer had a place for checks: it was dropped, and the
  -- broker asked again later, spending one of its transactionCheckMax.
  it("is kept for the producer's first poll", function()
    local core = require "mqlease.core"
    local producer_mod = require "mqlease.producer"
    local m = {}
    m[message_mod.SLOTS.id] = "MID-EARLY"
    m[message_mod.SLOTS.body] = "b"
    m.properties = {}
    local batches = { { { kind = "op", op = 1, ok = true },
      { kind = "orphan", transaction_id = "TX-EARLY", message = m, shape = { topic = "B" } } } }
    local client = {}
    function client.events() return table.remove(batches, 1) or {} end
    function client.fd() return -1 end
    function client.closed() return false end
    function client.id() return "fake" end
    function client.close() end
    local made = core.producer
    core.producer = function() return client, 1 end
    local asked = {}
    local ok, p = pcall(producer_mod.new, { endpoints = "127.0.0.1:1", topics = { "B" },
      checker = function(view) asked[#asked + 1] = view.id; return "unknown" end })
    core.producer = made
    assert(ok, p)
    assert.equal(1, (p:poll(0)))
    assert.same({ "MID-EARLY" }, asked)
  end)
end)
