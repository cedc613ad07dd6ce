-- mqlease.consumer, mqlease.message and mqlease.lease where an adversary
-- reviewing them found them wrong. Each spec failed before its fix.
--
-- The consumer is the real one (mqlease.consumer.new), over a stand-in for
-- its core client: every operation answers at once, as an event the router
-- reads on its next pump, and lease ids count from 1 in each client, as the
-- core's lease table does (src/lease/mql_lease.c). Like the core it raises
-- when handed a number that is no integer (luaL_checkinteger), and it keeps
-- a lease busy while a release of it is under way (release_start's BUSY).
local core = require "mqlease.core"
local consumer_mod = require "mqlease.consumer"
local message = require "mqlease.message"

-- (as luaL_checkinteger takes it: a number of integral value in range,
-- a float one too; LuaJIT has no math.type)
local function integer(v, what)
  if type(v) ~= "number" or v ~= math.floor(v) or v >= 2 ^ 63 or v < -2 ^ 63 then
    error(("bad argument to '%s' (number has no integer representation)"):format(what), 2)
  end
  return v
end

-- A core client holding leases 1..n of its own messages. leases[id] is the
-- core's state of lease id (nil once it ended); pending[id] true while a
-- release of it is under way (nothing answers it until the spec says so).
local function fake_client()
  local f = { queue = {}, leases = {}, pending = {}, acked = {}, nacked = {}, next_op = 1, next_lease = 0,
    is_closed = false, hold = false }
  local function op(ev)
    f.next_op = f.next_op + 1
    ev.kind, ev.op = "op", f.next_op
    f.queue[#f.queue + 1] = ev
    return f.next_op
  end
  local function lease_event(id, state)
    f.queue[#f.queue + 1] = { kind = "lease", lease_id = id, state = state, renewals = 0 }
  end
  f.lease_event = lease_event
  f.client = {
    closed = function() return f.is_closed end,
    close = function() f.is_closed = true end,
    fd = function() return -1 end,
    id = function() return "fake@0#0" end,
    events = function() local q = f.queue; f.queue = {}; return q end,
    metrics = function() return {} end,
    cancel_receives = function() end,
    terminate = function() return op({ ok = true }) end,
    nack_all = function() return op({ ok = true }) end,
    lease = function(_, id)
      local state = f.leases[integer(id, "lease")]
      if state then return state, 10, 0, 0, false end
      return nil
    end,
    receive = function(_, n, await_ms, max_bytes)
      integer(await_ms, "receive")
      if max_bytes ~= nil then integer(max_bytes, "receive") end
      local msgs, shapes = {}, {}
      for i = 1, n do
        f.next_lease = f.next_lease + 1
        local id = f.next_lease
        f.leases[id] = "held"
        msgs[i] = message.new({ id = "m" .. id, body = "b", offset = id, born_at = 1, lease = id })
        shapes[i] = { topic = "t", delivery_attempt = 1 }
      end
      return op({ ok = true, messages = msgs, shapes = shapes })
    end,
    ack = function(_, ids)
      local entries, first = {}, nil
      for i, id in ipairs(ids) do
        integer(id, "ack")
        if not f.leases[id] then
          entries[i] = { ok = false, err = "no lease", code = "NO_LEASE" }
        elseif f.pending[id] then
          entries[i] = { ok = false, err = "a release of this lease is already under way", code = "BUSY" }
        else
          f.leases[id] = nil
          f.acked[#f.acked + 1] = id
          lease_event(id, "acked")
          entries[i] = { ok = true }
        end
        if not entries[i].ok and not first then first = entries[i] end
      end
      return op({ ok = first == nil, err = first and first.err, code = first and first.code, entries = entries })
    end,
    nack = function(_, id, delay_ms)
      integer(id, "nack")
      integer(delay_ms, "nack")
      f.leases[id] = nil
      f.nacked[#f.nacked + 1] = id
      lease_event(id, "nacked")
      return op({ ok = true, entries = { { ok = true } } })
    end,
    let_expire = function(_, id)
      if f.leases[id] == nil or f.pending[id] then return false end
      f.leases[id] = "expiring"
      return true
    end,
  }
  return f
end

-- A real consumer over a fake core client: consumer, its fake.
local function consumer_over_fake()
  local f = fake_client()
  local make = core.consumer
  core.consumer = function() return f.client, 1 end
  f.queue[1] = { kind = "op", op = 1, ok = true }   -- the session start
  local ok, c = pcall(consumer_mod.new, { endpoints = "127.0.0.1:1", group = "g", topic = "t" })
  core.consumer = make
  assert(ok, c)
  return c, f
end

describe("mqlease.consumer: c:ack(msgs) with a message of another consumer", function()
  it("refuses it instead of acking the message of its own that has the same lease id", function()
    local c1, f1 = consumer_over_fake()
    local c2, f2 = consumer_over_fake()
    local m1 = assert(c1:receive(1))[1]
    local m2 = assert(c2:receive(1))[1]
    -- each core counts its lease ids from 1: both messages hold lease 1
    assert.equal(message.lease_id(m1), message.lease_id(m2))
    local ok, err = pcall(c2.ack, c2, { m1 })
    -- c2's own message, whose handler never finished, must not be acked
    assert.same({}, f2.acked)
    assert.equal("held", f2.leases[1])
    assert.equal("held", m2.lease.state)
    -- nor m1 reported acked while its core still renews it
    assert.equal("held", m1.lease.state)
    assert.same({}, f1.acked)
    assert.is_false(ok)
    assert.matches("another consumer", tostring(err))
    -- its own consumer acks it
    assert.is_true(c1:ack({ m1 }))
    assert.equal("acked", m1.lease.state)
  end)

  it("refuses what is no message, naming its place in msgs", function()
    local c = consumer_over_fake()
    local m = assert(c:receive(1))[1]
    assert.has_error(function() c:ack({ m, "m2" }) end,
      "bad argument #1 to 'ack' (msgs[2] is not a message of this consumer)")
  end)
end)

describe("mqlease.consumer: c:ack(msgs) with a hole in msgs", function()
  it("raises, acking none, where it acked the messages before the hole and answered true", function()
    local c, f = consumer_over_fake()
    local ms = assert(c:receive(3))
    local ok, err = pcall(c.ack, c, { ms[1], nil, ms[3] })
    assert.is_false(ok)
    assert.matches("bad argument #1 to 'ack' %(an array of messages without holes", tostring(err))
    assert.same({}, f.acked)
    assert.equal("held", ms[1].lease.state)
    assert.equal("held", ms[3].lease.state)
    -- nor a table whose messages are named fields (# is 1: only ms[1] would go)
    ok, err = pcall(c.ack, c, { ms[1], last = ms[3] })
    assert.is_false(ok)
    assert.matches("without holes or named fields", tostring(err))
    assert.same({}, f.acked)
    assert.is_true(c:ack({ ms[1], ms[2], ms[3] }))
    assert.same({ 1, 2, 3 }, f.acked)
  end)
end)

describe("mqlease.message: m:let_expire() on a lease that is not lost", function()
  it("answers BUSY, not LEASE_LOST, while a release of it is under way", function()
    local c, f = consumer_over_fake()
    local m = assert(c:receive(1))[1]
    f.pending[message.lease_id(m)] = true   -- an ack in flight, from another coroutine
    local ok, err, code = m:let_expire()
    assert.is_nil(ok)
    assert.equal("BUSY", code, err)
    -- the lease is still ours: alive, and not let go
    assert.is_true(m.lease:alive())
  end)

  it("answers ALREADY_ACKED when an ack ended it and its event is not read yet", function()
    local c, f = consumer_over_fake()
    local m = assert(c:receive(1))[1]
    local id = message.lease_id(m)
    -- another coroutine's ack came back; nobody has pumped the router since
    f.leases[id] = nil
    f.lease_event(id, "acked")
    local ok, err, code = m:let_expire()
    assert.is_nil(ok)
    assert.equal("ALREADY_ACKED", code, err)
  end)
end)

describe("mqlease: a NaN or an unbounded number given as an option", function()
  it("m:nack(NaN) raises naming 'delay', and no nack is sent", function()
    local c, f = consumer_over_fake()
    local m = assert(c:receive(1))[1]
    local ok, err = pcall(m.nack, m, 0 / 0)
    assert.is_false(ok)
    assert.matches("bad argument #1 to 'nack' %(delay", tostring(err))
    assert.same({}, f.nacked)
    assert.equal("held", m.lease.state)
  end)

  it("c:receive(n, { await = NaN }) raises naming 'await'", function()
    local c = consumer_over_fake()
    local ok, err = pcall(c.receive, c, 1, { await = 0 / 0 })
    assert.is_false(ok)
    assert.matches("option 'await'", tostring(err))
  end)

  it("c:receive(n, { max_bytes = math.huge }) raises naming 'max_bytes'", function()
    local c = consumer_over_fake()
    for _, v in ipairs({ math.huge, 2 ^ 63, 1e300 }) do
      local ok, err = pcall(c.receive, c, 1, { max_bytes = v })
      assert.is_false(ok)
      assert.matches("option 'max_bytes'", tostring(err))
    end
  end)
end)
