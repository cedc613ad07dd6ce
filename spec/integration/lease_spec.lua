-- The lease engine: the C core keeps a message hidden for as long as its
-- handler runs -- while Lua sleeps, spins or is blocked in C -- and stops
-- exactly where the budget says.
local mqlease = require "mqlease"
local core = require "mqlease.core"
local env = require "support.env"

local INVISIBLE = 10

-- Starts a second consumer of the group in another process; returns a reader.
local function start_poller(group, topic, seconds)
  local outfile = os.tmpname()
  env.sh(("(lua5.4 spec/support/poller.lua %s %s %s %d %s >%s.log 2>&1 &)"):format(
    env.endpoints, group, topic, seconds, outfile, outfile))
  local function read()
    local f = io.open(outfile)
    local text = f and f:read("a") or ""
    if f then f:close() end
    return text
  end
  local deadline = mqlease.now() + 30
  while not read():match("ready") and mqlease.now() < deadline do mqlease.sleep(0.2) end
  assert.matches("ready", read(), "the poller did not start")
  return {
    wait_done = function()
      local d = mqlease.now() + seconds + 30
      while not read():match("done") and mqlease.now() < d do mqlease.sleep(0.5) end
      local text = read()
      os.remove(outfile)
      os.remove(outfile .. ".log")
      assert.matches("done", text, "the poller did not finish")
      local got = {}
      for id, attempt in text:gmatch("(%x+) (%d+)") do got[#got + 1] = { id = id, attempt = tonumber(attempt) } end
      return got
    end,
  }
end

local function one_message(consumer, producer, topic, body)
  local id = assert(producer:send(topic, body))
  local msgs = env.collect(consumer, 30, nil, function(all) return #all >= 1 end)
  assert.equal(1, #msgs)
  assert.equal(id, msgs[1].id)
  return msgs[1]
end

describe("mqlease lease engine", function()
  local producer
  setup(function() producer = env.producer() end)
  teardown(function() producer:close() end)

  local function holds_for(label, hold)
    local topic = env.topic("lease_" .. label)
    local group = env.name("g_lease_" .. label)
    local c = env.consumer { group = group, topic = topic, invisible = INVISIBLE, await = 5 }
    assert(c:receive(1, { await = 0 }))
    local m = one_message(c, producer, topic, "hold me " .. label)
    -- the poller runs through the hold and 15 s past the ack: enough for a
    -- redelivery at the last deadline (+ the broker's revive lag) to show up
    -- two and a half invisible durations: the message would have come back twice without
    -- renewals; a renewal comes every third of one
    local poller = start_poller(group, topic, 2.5 * INVISIBLE + 15)
    local t0 = mqlease.now()
    hold(2.5 * INVISIBLE)
    assert.is_true(mqlease.now() - t0 >= 2.5 * INVISIBLE)
    assert.is_true(m.lease:alive(), "the lease died while the handler ran: " .. m.lease.state)
    assert.is_true(m.lease.renewals >= 6, "only " .. m.lease.renewals .. " renewals in 25 s")
    assert.is_true(m.lease:remaining() > 0)
    assert.is_true(m:ack())
    assert.same({}, poller.wait_done())
    local metrics = c:metrics()
    assert.equal(0, metrics.expire_while_alive)
    assert.equal(0, metrics.renew_fail)
    assert.is_true(metrics.renew_success >= 6)
    c:close()
  end

  it("renews while the handler sleeps (outside a coroutine: blocked in C), and the final ack holds", function()
    holds_for("sleep", function(s) mqlease.sleep(s) end)
  end)

  it("renews while the Lua VM is blocked in a busy loop", function()
    holds_for("busy", function(s)
      local deadline = core.now() + s
      local x = 0
      while core.now() < deadline do x = x + 1 end
      return x
    end)
  end)

  it("lets a lease expire when max_renewals is spent: the next consumer gets attempt 2", function()
    local topic = env.topic("lease_budget")
    local group = env.name("g_lease_budget")
    local a = env.consumer { group = group, topic = topic, invisible = INVISIBLE, await = 5, max_renewals = 1 }
    local b = env.consumer { group = group, topic = topic, invisible = INVISIBLE, await = 5 }
    assert(a:receive(1, { await = 0 }))
    local m = one_message(a, producer, topic, "budget")
    assert.equal(1, m.delivery_attempt)
    local got = env.collect(b, 40, nil, function(all) return #all >= 1 end)
    assert.equal(1, #got)
    assert.equal(m.id, got[1].id)
    assert.equal(2, got[1].delivery_attempt)
    assert.is_false(m.lease:alive())
    assert.equal("lost", m.lease.state)
    assert.equal(1, m.lease.renewals)
    local metrics = a:metrics()
    assert.equal(1, metrics.expire_while_alive)
    assert.equal(1, metrics.budget_expire)
    assert.equal(1, metrics.renew_success)
    assert.is_true(got[1]:ack())
    local ok, _, code = m:ack()
    assert.is_nil(ok)
    assert.equal("LEASE_LOST", code)
    a:close()
    b:close()
  end)

  it("gives the message back at once when the budget ends with on_budget = \"nack\"", function()
    local topic = env.topic("lease_budget_nack")
    local group = env.name("g_lease_budget_nack")
    -- a 30 s lease: one renewal 9 to 19 s after the receive (at the lease's own phase of
    -- the 10 s period), the budget ends (nack) a period later (19 to 29 s), an expiry
    -- would come 30 s after the renewal (39 s at the earliest); the broker's revive lag
    -- after a nack (1-3 s, once 8 s on a loaded box) stays inside the gap, which a 10 s
    -- lease did not leave, and the state says which way it went
    local LONG = 30
    local a = env.consumer { group = group, topic = topic, invisible = LONG, await = 5,
      max_renewals = 1, on_budget = "nack", release_delay = 0 }
    local b = env.consumer { group = group, topic = topic, invisible = LONG, await = 5 }
    assert(a:receive(1, { await = 0 }))
    local m = one_message(a, producer, topic, "budget nack")
    local t0 = mqlease.now()
    local got = env.collect(b, 70, nil, function(all) return #all >= 1 end, 1)
    local waited = mqlease.now() - t0
    assert.equal(1, #got)
    assert.equal(2, got[1].delivery_attempt)
    -- which way it came back first, then when
    assert.equal("nacked", m.lease.state)
    local metrics = a:metrics()
    assert.equal(1, metrics.budget_nack)
    assert.equal(0, metrics.expire_while_alive)
    assert.is_true(waited < LONG + 9, ("came back after %.1f s"):format(waited))
    assert.is_true(got[1]:ack())
    a:close()
    b:close()
  end)

  it("exposes metrics as valid Prometheus text", function()
    local topic = env.topic("lease_metrics")
    local c = env.consumer { group = env.name("g_lease_metrics"), topic = topic, invisible = INVISIBLE, await = 5 }
    assert(c:receive(1, { await = 0 }))
    local m = one_message(c, producer, topic, "metrics")
    -- one renewal: the first comes 0.9 to 1.9 periods (3 to 6.3 s) after the receive,
    -- at the lease's own phase
    env.wait_for(function() return c:metrics().renew_success >= 1 end, 10, "a renewal")
    assert.is_true(m:ack())
    local text = mqlease.metrics.text(c, { instance = "spec" })
    c:close()

    -- every line a valid HELP, TYPE or sample (support/prom.lua), then the values
    local prom = require "support.prom"
    local types, samples = prom.parse(text)
    local function value(name, labels)
      return prom.value(samples, name, labels)
    end
    assert.equal(1, value("mqlease_messages_received_total"))
    assert.equal(1, value("mqlease_acks_total", { result = "ok" }))
    assert.is_true(value("mqlease_lease_renew_total", { result = "success" }) >= 1)
    assert.equal(0, value("mqlease_lease_expire_while_alive_total"))
    assert.equal(0, value("mqlease_inflight_leases"))
    assert.equal("histogram", types.mqlease_renew_latency_seconds)
    assert.equal(value("mqlease_renew_latency_seconds_count"),
      value("mqlease_renew_latency_seconds_bucket", { le = "+Inf" }))
    assert.equal(1, value("mqlease_handler_seconds_count"))
    assert.is_truthy(text:find('instance="spec"', 1, true))
  end)
end)
