-- mqlease.policy.transaction_checker: which run's half messages commit. A
-- fake Redis runs the claim script's logic over a table (and can be down), a
-- fake producer records what each transaction was told; the real policy
-- (the exactly-once one) is on the real broker in transaction_cpt_spec.
local mqlease = require "mqlease"
local tc_mod = require "mqlease.policy.transaction"

-- A Redis stand-in: eval of the claim script only -- the script's own text,
-- run here over store with a redis.call of GET, SET (EX), EXISTS, TTL, SADD,
-- SISMEMBER and EXPIRE --
-- with a clock of its own (r.now, seconds) for the TTLs; down = true makes
-- every call fail as an unreachable server does.
local function fake_redis()
  local r = { store = {}, expire_at = {}, now = 0, down = false, evals = 0 }
  function r.call() error("not used") end
  local function live(key)
    local at = r.expire_at[key]
    if at and at <= r.now then r.store[key], r.expire_at[key] = nil, nil end
    return r.store[key]
  end
  local function call(name, key, ...)
    name = name:lower()
    if name == "get" then return live(key) or false end   -- a nil reply is false inside a script
    if name == "exists" then return live(key) and 1 or 0 end
    if name == "ttl" then
      if not live(key) then return -2 end
      return r.expire_at[key] and math.floor(r.expire_at[key] - r.now) or -1
    end
    if name == "set" then
      local value, ex, seconds = ...
      assert.equal("EX", ex)
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
    if self.down then return nil, "connection refused", "UNAVAILABLE" end
    local env = { redis = { call = call }, KEYS = keys, ARGV = args, string = string, tonumber = tonumber }
    return assert(load(script, "=claim", "t", env))()
  end
  -- a claim another run (or a check) took earlier
  function r:claim(key, value) self.store[key], self.expire_at[key] = value, self.now + 7 * 86400 end
  return r
end

-- A producer stand-in whose transactions record their end; p.now is its
-- clock (seconds), from which a transaction's age counts.
local function fake_producer()
  local p = { begun = {}, polls = 0, now = 0 }
  function p:begin(topic, body, opts)
    local tx = { topic = topic, body = body, opts = opts, state = "open", sent = p.now }
    function tx:commit() self.state = "committed"; return true end
    function tx:rollback() self.state = "rolled_back"; return true end
    function tx:age() return p.now - self.sent end
    self.begun[#self.begun + 1] = tx
    return tx
  end
  function p:poll() self.polls = self.polls + 1; return 0 end
  return p
end

-- A message of run `run` (its exactly-once lock owner).
local function message(id, run)
  return { id = id, lease = { lock_owner = run } }
end

-- What the exactly-once policy does around a handler, reduced to its outcome:
-- runs it, then (success) writes the done marker into r and answers "ack".
local function eo_like(r, prefix)
  return function(m, lease, handler)
    local ok, res = pcall(handler, m, lease)
    if not (ok and res) then return "nack" end
    r.store[prefix .. "{" .. m.id .. "}:done"] = "1"
    return "ack"
  end
end

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
