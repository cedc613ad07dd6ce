-- Transactional messages where an adversary reviewing them found them wrong.
-- Each spec failed before its fix. No server: fakes of Redis and of the
-- producer, as policy_transaction_spec uses.
local mqlease = require "mqlease"
local tc_mod = require "mqlease.policy.transaction"
local transaction = require "mqlease.transaction"
local message_mod = require "mqlease.message"
local config = require "mqlease.config"

-- The fake Redis of policy_transaction_spec: eval of the claim script only,
-- run over a table, with a clock of its own (r.now) for TTLs.
local function fake_redis()
  local r = { store = {}, expire_at = {}, now = 0, down = false, evals = 0, args = {} }
  function r.call() error("not used") end
  local function live(key)
    local at = r.expire_at[key]
    if at and at <= r.now then r.store[key], r.expire_at[key] = nil, nil end
    return r.store[key]
  end
  local function call(name, key, ...)
    name = name:lower()
    if name == "get" then return live(key) or false end
    if name == "exists" then return live(key) and 1 or 0 end
    if name == "ttl" then
      if not live(key) then return -2 end
      return r.expire_at[key] and math.floor(r.expire_at[key] - r.now) or -1
    end
    if name == "set" then
      local value, ex, seconds = ...
      assert.equal("EX", ex)
      -- as Redis: EX takes a positive integer that fits (LLONG_MAX / 1000)
      if not tostring(seconds):match("^%d+$") or tonumber(seconds) > 9223372036854775 then
        error("ERR invalid expire time in 'set' command")
      end
      r.store[key], r.expire_at[key] = value, r.now + tonumber(seconds)
      return { ok = "OK" }
    end
    -- a set: a table of members (the ids of the half messages a check committed)
    if name == "sadd" then
      local set = live(key) or {}
      r.store[key] = set
      local new = set[...] and 0 or 1
      set[...] = true
      return new
    end
    if name == "sismember" then return (live(key) or {})[...] and 1 or 0 end
    if name == "expire" then
      if not live(key) then return 0 end
      r.expire_at[key] = r.now + tonumber((...))
      return 1
    end
    error("the fake Redis has no " .. name)
  end
  function r:eval(script, keys, args)
    assert.equal(tc_mod.script, script)
    self.evals = self.evals + 1
    self.args[#self.args + 1] = args
    if self.down then return nil, "connection refused", "UNAVAILABLE" end
    local env = { redis = { call = call }, KEYS = keys, ARGV = args, string = string, tonumber = tonumber }
    local ok, res = pcall(assert(load(script, "=claim", "t", env)))
    if not ok then return nil, tostring(res), "REDIS_ERROR" end
    return res
  end
  return r
end

-- A producer stand-in whose transactions record their end; rollback_fails
-- makes a rollback get no answer (the transaction stays open).
local function fake_producer(rollback_fails)
  local p = { begun = {}, polls = 0, now = 0 }
  function p:begin(topic, body, opts)
    -- each half message its own id, as the broker's are (a copy a check makes keeps it)
    local tx = { id = ("H%d"):format(#self.begun + 1), topic = topic, body = body, opts = opts, state = "open",
      sent = p.now }
    function tx:commit() self.state = "committed"; return true end
    function tx:rollback()
      if rollback_fails then return nil, "no answer", "TIMEOUT" end
      self.state = "rolled_back"; return true
    end
    function tx:age() return p.now - self.sent end
    self.begun[#self.begun + 1] = tx
    return tx
  end
  function p:poll() self.polls = self.polls + 1; return 0 end
  return p
end

local function message(id, run) return { id = id, lease = { lock_owner = run } } end

-- the exactly-once policy reduced to its outcome (success: marker, then
-- ack), its marker naming the run, as exactly_once's does under t:policy
-- (mqlease.policy.mark_runs)
local function eo_like(r, prefix)
  return function(m, lease, handler)
    local ok, res = pcall(handler, m, lease)
    if not (ok and res) then return "nack" end
    r.store[prefix .. "{" .. m.id .. "}:done"] = lease.lock_owner
    return "ack"
  end
end

-- The view a check gives the checker of half message tx (what t reads).
local function view_of(tx)
  return { id = tx.id, properties = tx.opts.properties }
end

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
