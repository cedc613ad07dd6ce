-- The metric families of the official RocketMQ 5.x clients, beside mqlease's
-- own in mqlease.metrics.text, so that a dashboard built for those clients
-- reads mqlease unchanged (issue 22 item 1). Names, buckets (milliseconds) and
-- labels as in rocketmq-clients' Java client: metrics/HistogramEnum,
-- GaugeEnum, MetricLabels, InvocationStatus. mqlease.run drives a stand-in
-- consumer here: no server is needed.
local mqlease = require "mqlease"
local run = require "mqlease.run"
local wait = require "mqlease.loop"
local fake_consumer = require "support.fake_consumer"
local prom = require "support.prom"

local function label_names(s)
  local names = {}
  for k in pairs(s.labels) do if k ~= "le" then names[#names + 1] = k end end
  table.sort(names)
  return table.concat(names, ",")
end

-- The bucket bounds of one series, in order, as printed.
local function bounds(text, metric, series)
  local out = {}
  for le in text:gmatch(metric .. "_bucket{[^}]*" .. series .. '[^}]*le="([^"]+)"}') do out[#out + 1] = le end
  return out
end

-- rocketmq-clients, java/client/src/main/java/org/apache/rocketmq/client/java/metrics/HistogramEnum.java
local BUCKETS = {
  rocketmq_send_cost_time = { "1.0", "5.0", "10.0", "20.0", "50.0", "200.0", "500.0", "+Inf" },
  rocketmq_delivery_latency = { "1.0", "5.0", "10.0", "20.0", "50.0", "200.0", "500.0", "+Inf" },
  rocketmq_await_time = { "1.0", "5.0", "20.0", "100.0", "1000.0", "5000.0", "10000.0", "+Inf" },
  rocketmq_process_time = { "1.0", "5.0", "10.0", "100.0", "1000.0", "10000.0", "60000.0", "+Inf" },
}

describe("the official clients' metrics under mqlease.run", function()
  local c, texts, inside

  -- 10 messages stored 30 ms before their receipt; each handler sleeps 20 ms,
  -- every 5th fails. A scrape after the 4th handler and one at the end.
  setup(function()
    c = fake_consumer.new { every = 0.005, total = 10, body = "0123456789",
      stored_ago = 0.03, topic = "orders", group = "billing", id = "host@1234#0" }
    texts = {}
    local handled = 0
    run(c, function(m)
      handled = handled + 1
      if handled == 3 then inside = mqlease.metrics.text(c) end
      wait.sleep(0.02)
      if handled == 4 then texts.early = mqlease.metrics.text(c) end
      if handled % 5 == 0 then return nil, "failing on purpose" end
      return true
    end, { concurrency = 1, run_for = 20, nack_delay = 1, on_error = function() end,
      stop = function() return #c.acked + #c.nacked >= 10 end })
    texts.late = mqlease.metrics.text(c)
  end)

  it("keeps mqlease's own families and adds the official ones, each declared once with its type", function()
    local types = prom.parse(texts.late)
    assert.equal("counter", types.mqlease_messages_received_total)
    assert.equal("histogram", types.rocketmq_delivery_latency)
    assert.equal("histogram", types.rocketmq_await_time)
    assert.equal("histogram", types.rocketmq_process_time)
    assert.equal("gauge", types.rocketmq_consumer_cached_messages)
    assert.equal("gauge", types.rocketmq_consumer_cached_bytes)
    assert.is_nil(types.rocketmq_send_cost_time, "a consumer sends nothing")
  end)

  it("uses the Java client's buckets, in milliseconds", function()
    for _, name in ipairs({ "rocketmq_delivery_latency", "rocketmq_await_time" }) do
      assert.same(BUCKETS[name], bounds(texts.late, name, 'topic="orders"'), name)
    end
    for _, status in ipairs({ "success", "failure" }) do
      assert.same(BUCKETS.rocketmq_process_time,
        bounds(texts.late, "rocketmq_process_time", ('invocation_status="%s"'):format(status)), status)
    end
  end)

  it("labels each family as the Java client does, with the consumer's topic, group and client id", function()
    local _, samples = prom.parse(texts.late)
    local want = { topic = "orders", consumer_group = "billing", client_id = "host@1234#0" }
    for _, name in ipairs({ "rocketmq_delivery_latency_count", "rocketmq_await_time_count" }) do
      local found = prom.find(samples, name, want)
      assert.equal(1, #found, name)
      assert.equal("client_id,consumer_group,topic", label_names(found[1]), name)
    end
    local found = prom.find(samples, "rocketmq_process_time_count", want)
    assert.equal(2, #found)
    assert.equal("client_id,consumer_group,invocation_status,topic", label_names(found[1]))
  end)

  it("counts every message: delivery latency and await time once each, process time by invocation status", function()
    local _, samples = prom.parse(texts.late)
    assert.equal(10, prom.value(samples, "rocketmq_delivery_latency_count"))
    assert.equal(10, prom.value(samples, "rocketmq_await_time_count"))
    assert.equal(8, prom.value(samples, "rocketmq_process_time_count", { invocation_status = "success" }))
    assert.equal(2, prom.value(samples, "rocketmq_process_time_count", { invocation_status = "failure" }))
    -- stored 30 ms before the receipt: above the 20 ms bound, within 500 ms
    assert.equal(0, prom.value(samples, "rocketmq_delivery_latency_bucket", { le = "20.0" }))
    assert.equal(10, prom.value(samples, "rocketmq_delivery_latency_bucket", { le = "500.0" }))
    -- each handler slept 20 ms: above 10 ms, below 1 s
    assert.equal(0, prom.value(samples, "rocketmq_process_time_bucket", { invocation_status = "success", le = "10.0" }))
    assert.equal(8, prom.value(samples, "rocketmq_process_time_bucket", { invocation_status = "success", le = "1000.0" }))
    local sum = prom.value(samples, "rocketmq_process_time_sum", { invocation_status = "success" })
    assert.is_true(sum >= 8 * 19.9 and sum < 8 * 1000, "sum " .. sum)
  end)

  it("grows with traffic", function()
    local _, early = prom.parse(texts.early)
    local _, late = prom.parse(texts.late)
    local e = prom.value(early, "rocketmq_process_time_count", { invocation_status = "success" })
    assert.equal(3, e)
    assert.is_true(prom.value(late, "rocketmq_process_time_count", { invocation_status = "success" }) > e)
    assert.is_true(prom.value(late, "rocketmq_await_time_count") > prom.value(early, "rocketmq_await_time_count"))
  end)

  it("reports the messages the run holds and their bytes while it runs, none after", function()
    local _, during = prom.parse(inside)
    assert.is_true(prom.value(during, "rocketmq_consumer_cached_messages") >= 1)
    assert.equal(10 * prom.value(during, "rocketmq_consumer_cached_messages"), prom.value(during, "rocketmq_consumer_cached_bytes"))
    local _, after = prom.parse(texts.late)
    assert.equal(0, prom.value(after, "rocketmq_consumer_cached_messages"))
  end)

  it("keeps one label of each name when constant labels repeat an official one", function()
    local _, samples = prom.parse(mqlease.metrics.text(c, { topic = "orders", group = "billing", worker = 3 }))
    local found = prom.find(samples, "rocketmq_await_time_count", { worker = "3", topic = "orders" })
    assert.equal(1, #found)
  end)
end)

describe("the official send cost time", function()
  it("is recorded per send with its invocation status, in the Java client's buckets", function()
    local metrics = require "mqlease.metrics"
    local p = { id = function() return "host@1#1" end, metrics = function() return {} end }
    metrics.sent(p, "orders", 3, true)
    metrics.sent(p, "orders", 120, true)
    metrics.sent(p, "orders", 900, false)
    local text = mqlease.metrics.text(p)
    local types, samples = prom.parse(text)
    assert.equal("histogram", types.rocketmq_send_cost_time)
    assert.is_nil(types.rocketmq_process_time, "a producer consumes nothing")
    assert.same(BUCKETS.rocketmq_send_cost_time, bounds(text, "rocketmq_send_cost_time", 'invocation_status="success"'))
    local want = { topic = "orders", client_id = "host@1#1", invocation_status = "success" }
    assert.equal(2, prom.value(samples, "rocketmq_send_cost_time_count", want))
    assert.equal(1, prom.value(samples, "rocketmq_send_cost_time_bucket", { invocation_status = "success", le = "5.0" }))
    assert.equal(2, prom.value(samples, "rocketmq_send_cost_time_bucket", { invocation_status = "success", le = "200.0" }))
    assert.equal(1, prom.value(samples, "rocketmq_send_cost_time_count", { invocation_status = "failure" }))
    assert.equal(0, prom.value(samples, "rocketmq_send_cost_time_bucket", { invocation_status = "failure", le = "500.0" }))
    assert.equal("client_id,invocation_status,topic", label_names(prom.find(samples, "rocketmq_send_cost_time_count", want)[1]))
  end)
end)
