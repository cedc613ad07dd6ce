-- Fakes for the transaction checker's unit specs (policy_transaction_spec,
-- transaction_edges_spec): a Redis that runs the claim script's own text over
-- a table, a producer whose transactions record their end, a message of a
-- run, and the exactly-once policy reduced to its outcome.
local tc_mod = require "mqlease.policy.transaction"

local _M = {}

-- A Redis stand-in: eval of the claim script, the note of commits and the
-- taking back of a commit never sent only -- the scripts' own text,
-- run here over store with a redis.call of GET, SET (EX, as Redis takes it),
-- EXISTS, TTL, SADD, SISMEMBER, SREM and EXPIRE -- with a clock of its own (r.now,
-- seconds) for the TTLs; down = true makes every call fail as an unreachable
-- server does. r.args holds each call's ARGV.
function _M.redis()
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
      if ex ~= "EX" then error("the fake Redis takes SET key value EX seconds only") end
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
    if name == "srem" then
      local set = live(key)
      if not (set and set[...]) then return 0 end
      set[...] = nil
      -- as Redis: a set without members is no key
      if next(set) == nil then r.store[key], r.expire_at[key] = nil, nil end
      return 1
    end
    if name == "expire" then
      if not live(key) then return 0 end
      r.expire_at[key] = r.now + tonumber((...))
      return 1
    end
    error("the fake Redis has no " .. name)
  end
  function r:eval(script, keys, args)
    if script ~= tc_mod.script and script ~= tc_mod.note_script and script ~= tc_mod.unsent_script then
      error("the fake Redis runs the claim script, the note of commits and the taking back of one only")
    end
    self.evals = self.evals + 1
    self.args[#self.args + 1] = args
    if self.down then return nil, "connection refused", "UNAVAILABLE" end
    local env = { redis = { call = call }, KEYS = keys, ARGV = args, string = string, tonumber = tonumber }
    local ok, res = pcall(assert(load(script, "=claim", "t", env)))
    if not ok then return nil, tostring(res), "REDIS_ERROR" end
    return res
  end
  -- a claim another run (or a check) took earlier
  function r:claim(key, value) self.store[key], self.expire_at[key] = value, self.now + 7 * 86400 end
  return r
end

-- A producer stand-in whose transactions record their end; p.now is its
-- clock (seconds), from which a transaction's age counts; rollback_fails
-- makes a rollback get no answer (the transaction stays open).
function _M.producer(rollback_fails)
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

-- The view a check gives the checker of the fake producer's half message
-- tx (what the transaction checker reads).
function _M.view_of(tx)
  return { id = tx.id, properties = tx.opts.properties }
end

-- A message of run `run` (its exactly-once lock owner).
function _M.message(id, run) return { id = id, lease = { lock_owner = run } } end

-- What the exactly-once policy does around a handler, reduced to its
-- outcome: runs it, then (success) writes the done marker into r and answers
-- "ack". named: the marker names the run, as exactly_once's does under
-- t:policy (mqlease.policy.mark_runs); else '1', as a wrapper of the
-- caller's own leaves it.
function _M.eo_like(r, prefix, named)
  return function(m, lease, handler)
    local ok, res = pcall(handler, m, lease)
    if not (ok and res) then return "nack" end
    r.store[prefix .. "{" .. m.id .. "}:done"] = named and lease.lock_owner or "1"
    return "ack"
  end
end

-- A real producer (producer_mod: mqlease.producer, as the spec loaded it)
-- over a stand-in core client and router: a send is answered at once
-- (message id MID<n>, transaction id TX<n>; what the core was given for it
-- in p.sends[n]: topic, body, group, deliver_at_ms, delay_ms), an
-- EndTransaction that starts is
-- recorded in p.ends and answered p.replies[1] or OK (one on a closed client
-- fails the spec), p.check_of(tx) queues the proxy's check of tx's half
-- message (or of a copy: the same ids), and p:close() ends the session as
-- the core does.
function _M.real_producer(producer_mod, checker)
  local core = require "mqlease.core"
  local message_mod = require "mqlease.message"
  local router_mod = require "mqlease.router"
  local ends, replies, events, sends, n = {}, {}, {}, {}, 0
  local client, closed = {}, false
  function client:route() return 0 end
  function client:send(topic, body, _, _, properties, group, deliver_at_ms, delay_ms, _, _, transactional, recovery_ms)
    n = n + 1
    sends[n] = { topic = topic, body = body, group = group, deliver_at_ms = deliver_at_ms, delay_ms = delay_ms }
    events[#events + 1] = { kind = "op", op = 1000 + n, ok = true, message_id = "MID" .. n,
      transaction_id = "TX" .. n, offset = n, properties = properties, recovery_ms = recovery_ms,
      transactional = transactional, topic = topic }
    return 1000 + n
  end
  function client:end_transaction(topic, message_id, transaction_id, commit, from_check)
    assert(not closed, "an EndTransaction started on a closed client")
    ends[#ends + 1] = { topic = topic, id = message_id, transaction_id = transaction_id, commit = commit,
      from_check = from_check }
    return #ends
  end
  function client:terminate() return 0 end
  function client.fd() return -1 end
  function client.closed() return closed end
  function client.id() return "fake" end
  function client.metrics() return { sent_ok = 0, sent_fail = 0 } end
  local router = { client = client }
  function router:pump()
    local q = events
    events = {}
    for _, ev in ipairs(q) do
      if ev.kind == "orphan" then self.on_orphan(ev) else assert(self.on_op(ev)) end
    end
  end
  function router.call()
    local reply = table.remove(replies, 1) or { ok = true }
    if reply.ok then return reply end
    return nil, reply.err, reply.code
  end
  function router.result() return { ok = true } end
  function router.close() closed = true end
  local real_core_producer, real_start = core.producer, router_mod.start
  core.producer = function() return client, 0 end
  router_mod.start = function() return router end
  local ok, p = pcall(producer_mod.new, { endpoints = "127.0.0.1:1", topics = { "B" }, checker = checker })
  core.producer, router_mod.start = real_core_producer, real_start
  assert(ok, p)
  p.ends, p.replies, p.sends = ends, replies, sends
  function p.check_of(tx)
    local m = {}
    m[message_mod.SLOTS.id] = tx.message_id
    m[message_mod.SLOTS.body] = "b"
    m.properties = tx._props
    events[#events + 1] = { kind = "orphan", transaction_id = tx.transaction_id, message = m,
      shape = { topic = tx.topic } }
  end
  return p
end

return _M
