-- Giving a message back: nack(0) redelivers it at once as the next attempt; a
-- message nobody acks comes back when its invisible duration ends.
local mqlease = require "mqlease"
local env = require "support.env"

describe("mqlease nack and expiry", function()
  local topic = env.topic("nack")
  local consumer, producer

  setup(function()
    -- no renewal here: these specs are about what the broker does on its own
    consumer = env.consumer { group = env.name("g_nack"), topic = topic, invisible = 10, await = 5, renew = false }
    assert(consumer:receive(1, { await = 0 }))
    producer = env.producer()
  end)

  teardown(function()
    consumer:close()
    producer:close()
  end)

  local function receive_id(id, timeout)
    local found
    -- 1 s polls: a given-back message is timed by the broker, not by the poll's end
    env.collect(consumer, timeout, function(m)
      if m.id == id then found = m else assert(m:ack()) end
    end, function() return found ~= nil end, 1)
    return found
  end

  it("nack(0) makes the message come back with delivery_attempt + 1", function()
    local id = assert(producer:send(topic, "nack me"))
    local first = receive_id(id, 30)
    assert.is_not_nil(first, "the message never arrived")
    assert.equal(1, first.delivery_attempt)
    assert.is_true(first:nack(0))
    assert.equal("nacked", first.lease.state)
    assert.is_false(first.lease:alive())

    local t0 = mqlease.now()
    local second = receive_id(id, 30)
    assert.is_not_nil(second, "the nacked message did not come back")
    assert.equal(2, second.delivery_attempt)
    assert.equal("nack me", second.body)
    assert.is_true(mqlease.now() - t0 < 10, "a nack(0) should not wait for the invisible duration")
    assert.is_true(second:ack())
  end)

  it("brings an unacked message back after the invisible duration", function()
    local id = assert(producer:send(topic, "forget me"))
    local first = receive_id(id, 30)
    assert.is_not_nil(first)
    local t0 = mqlease.now()
    local second = receive_id(id, 40)
    local waited = mqlease.now() - t0
    assert.is_not_nil(second, "the message never came back")
    assert.equal(first.delivery_attempt + 1, second.delivery_attempt)
    assert.is_true(waited >= 8, ("came back after %.1f s, before the 10 s invisible duration"):format(waited))
    assert.is_false(first.lease:alive())
    assert.equal("lost", first.lease.state)
    assert.is_true(second:ack())
    -- the first delivery's handle is stale now: the broker says so
    local ok, err, code = first:ack()
    assert.is_nil(ok)
    assert.is_string(err)
    assert.equal("LEASE_LOST", code)
  end)
end)
