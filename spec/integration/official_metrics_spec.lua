-- The official RocketMQ 5.x clients' metric families, recorded against the
-- real broker: a producer's sends, and a consumer's receipts and handlers
-- under mqlease.run (the server-free details are in spec/unit/official_metrics_text_spec.lua).
local mqlease = require "mqlease"
local env = require "support.env"
local prom = require "support.prom"

-- The samples of a scrape (prom.parse checks the whole text).
local function samples_of(text)
  return select(2, prom.parse(text))
end

describe("the official clients' metrics against the broker", function()
  it("counts each send, receipt and handler of a real round trip under the official names and labels", function()
    local topic = env.topic("official_metrics")
    local group = env.name("g_official_metrics")
    local c = env.consumer { group = group, topic = topic }
    assert(c:receive(1, { await = 0 }))
    local producer = env.producer()
    finally(function() producer:close() end)
    for i = 1, 3 do assert(producer:send(topic, "m" .. i)) end

    local sent = samples_of(mqlease.metrics.text(producer))
    assert.equal(3, prom.value(sent, "rocketmq_send_cost_time_count",
      { topic = topic, client_id = producer:id(), invocation_status = "success" }))

    local id = c:id()
    mqlease.sleep(0.3)   -- stored at least 300 ms before their receipt
    local handled, during = 0, nil
    local summary = mqlease.run(c, function(m)
      handled = handled + 1
      if handled == 1 then during = samples_of(mqlease.metrics.text(c)) end
      return m.body ~= "m3", "m3 fails"
    end, { run_for = 60, nack_delay = 30, on_error = function() end, stop = function() return handled >= 3 end })
    assert.equal(3, summary.received)

    -- the run closed the consumer; its samples keep the id it had
    local labels = { topic = topic, consumer_group = group, client_id = id }
    assert.is_true(prom.value(during, "rocketmq_consumer_cached_messages", labels) >= 1)
    assert.is_true(prom.value(during, "rocketmq_consumer_cached_bytes", labels) >= 2)

    local s = samples_of(mqlease.metrics.text(c))
    assert.equal(3, prom.value(s, "rocketmq_delivery_latency_count", labels))
    assert.equal(3, prom.value(s, "rocketmq_await_time_count", labels))
    labels.invocation_status = "success"
    assert.equal(2, prom.value(s, "rocketmq_process_time_count", labels))
    labels.invocation_status = "failure"
    assert.equal(1, prom.value(s, "rocketmq_process_time_count", labels))
    -- in milliseconds: each waited at least 300 ms (and surely not a minute)
    local sum = prom.value(s, "rocketmq_delivery_latency_sum", { topic = topic })
    assert.is_true(sum >= 3 * 250 and sum < 3 * 60000, "delivery latency sum " .. sum)
  end)
end)
