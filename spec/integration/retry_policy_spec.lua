-- The server's retry policy. The proxy sends each consumer its group's
-- RetryPolicy in the Telemetry Settings (GrpcClientSettingsManager): max
-- attempts = retryMaxTimes + 1 = 17 and, for a group nobody configured,
-- RocketMQ's CUSTOMIZED backoff 1s 5s 10s 30s 1m 2m ... 2h. c:metrics() shows
-- it, and mqlease.run nacks a failed message with its delay unless the run
-- sets nack_delay.
local mqlease = require "mqlease"
local env = require "support.env"

local VERSION = os.getenv("ROCKETMQ_VERSION") or "5.2.0"

describe("the server's retry policy on RocketMQ " .. VERSION, function()
  it("is shown in c:metrics() and sets run's nack delays: a nacked message returns after 1, 5, 10, 30 s", function()
    local topic = env.topic("retry_policy")
    local c = env.consumer { group = env.name("g_retry_policy"), topic = topic, invisible = 30, await = 1 }
    local rp = c:metrics().retry_policy
    assert.is_table(rp, "the proxy sent a retry policy")
    assert.equal(17, rp.max_attempts)
    assert.same({ 1, 5, 10, 30, 60 }, { rp.steps[1], rp.steps[2], rp.steps[3], rp.steps[4], rp.steps[5] })
    assert.is_false(c:metrics().fifo)
    assert(c:receive(1, { await = 0 }))
    local p = env.producer { topics = { topic } }
    local id = assert(p:send(topic, "fails four times"))
    p:close()

    local arrived = {}
    local stats = mqlease.run(c, function(m)
      if m.id ~= id then return true end
      arrived[m.delivery_attempt] = mqlease.now()
      return m.delivery_attempt >= 5, "fails on attempts 1 to 4"
    end, { concurrency = 4, signals = false, run_for = 110, on_error = function() end,
           stop = function() return arrived[5] ~= nil end })
    assert.is_table(stats)
    assert.is_number(arrived[5], "attempt 5 arrived")
    local gaps = {}
    for i = 1, 4 do gaps[i] = arrived[i + 1] - arrived[i] end
    print(("retry policy: nacked message back after %.1f, %.1f, %.1f, %.1f s"):format(gaps[1], gaps[2], gaps[3], gaps[4]))
    -- each gap is the policy's step plus the broker's revive lag (it comes in
    -- steps of about 5 s here: 1 -> 5 s, 5 -> 10 s, 10 -> 15 s) -- never
    -- shorter than the step; the fourth tells the policy's 30 s well apart
    -- from the 8 s of a fixed 2^(n-1) (which comes back after about 10 s)
    for i, step in ipairs { 1, 5, 10, 30 } do
      assert.is_true(gaps[i] >= step, ("gap %d: %.1f s, the policy says %d s"):format(i, gaps[i], step))
      assert.is_true(gaps[i] < step + 15, ("gap %d: %.1f s, far past the policy's %d s"):format(i, gaps[i], step))
    end
  end)
end)
