-- Regression: RocketMQ issue #9583, "ack doesn't work after changeInvisibleDuration".
-- Messages popped together from one queue share the batch's start offset in
-- their receipt handles. The 5.2 proxy keeps that start offset in the handle a
-- change returns, while the broker's new checkpoint starts at the message's
-- own offset; unless the client mends the handle, every renewal leaves a
-- checkpoint behind and acked messages come back, once per renewal.
local mqlease = require "mqlease"
local env = require "support.env"

describe("mqlease regression #9583", function()
  it("keeps renewed, acked messages of one batch from coming back", function()
    local topic = env.topic("regress_9583")
    local group = env.name("g_regress_9583")
    local worker = env.consumer { group = group, topic = topic, invisible = 10, await = 5 }
    local rival = env.consumer { group = group, topic = topic, invisible = 10, await = 5, renew = false }
    assert(worker:receive(1, { await = 0 }))
    local p = env.producer()
    -- 8 messages over 4 queues: some queue holds two or more, popped in one batch
    for i = 1, 8 do assert(p:send(topic, "batch " .. i)) end
    p:close()
    local held = {}
    local deadline = mqlease.now() + 30
    while #held < 8 and mqlease.now() < deadline do
      for _, m in ipairs(assert(worker:receive(8))) do held[#held + 1] = m end
    end
    assert.equal(8, #held)
    local per_queue = {}
    for _, m in ipairs(held) do per_queue[m.queue_id] = (per_queue[m.queue_id] or 0) + 1 end
    local shared = false
    for _, n in pairs(per_queue) do shared = shared or n > 1 end
    assert.is_true(shared, "no two messages came from one queue: the case is not exercised")

    -- three renewals of each: the first 3 to 6.3 s after the receive (at each lease's
    -- own phase), then one every 3.3 s
    mqlease.sleep(14)
    for _, m in ipairs(held) do
      assert.is_true(m.lease.renewals >= 3)
      assert.is_true(m:ack())
    end
    -- a leftover checkpoint would revive within its 10 s (+ the revive lag)
    assert.same({}, env.collect(rival, 20))
    assert.equal(0, worker:metrics().expire_while_alive)
    worker:close()
    rival:close()
  end)
end)
