-- A handler that drops a message (never acks, nacks or lets it expire, and
-- keeps no reference) used to leave its lease renewed by the core until
-- max_lease, an hour by default: the message was stuck. The lease's finalizer
-- now nacks it (visible again after release_delay) and counts it.
local mqlease = require "mqlease"
local env = require "support.env"

describe("a message the handler drops", function()
  it("comes back soon after Lua collects it, and is counted", function()
    local topic = env.topic("dropped")
    local group = env.name("g_dropped")
    local producer = env.producer()
    local c = env.consumer { group = group, topic = topic, invisible = 10, await = 5, release_delay = 0 }
    finally(function() c:close(); producer:close() end)
    assert(c:receive(1, { await = 0 }))
    local id = assert(producer:send(topic, "dropped on the floor"))

    local got
    env.collect(c, 30, function(m) if m.id == id then got = true else assert(m:ack()) end end,
      function() return got end)
    assert.is_true(got, "the message never arrived")
    -- the only references were inside collect: nothing holds the message now
    collectgarbage("collect")
    collectgarbage("collect")
    c:metrics()   -- let the session take the nack's event
    assert.equal(1, c:metrics().leases_dropped)

    -- renewed leases would keep it hidden for far longer than this
    local t0 = mqlease.now()
    local back
    env.collect(c, 20, function(m)
      if m.id == id then back = m end
    end, function() return back ~= nil end)
    assert.is_not_nil(back, "the dropped message did not come back within 20 s")
    assert.equal(2, back.delivery_attempt)
    assert.is_true(mqlease.now() - t0 < 20)
    assert.is_true(back:ack())
  end)
end)
