-- mqlease.metrics.text renders a consumer's raw metrics table as Prometheus
-- text (format 0.0.4). A fake consumer stands in: no server is needed.
local mqlease = require "mqlease"
local prom = require "support.prom"

local function fake(raw)
  return { metrics = function() return raw end }
end

local function hist(counts, sum)
  local bounds = { 0.01, 0.1, 1 }
  local n = 0
  for _, c in ipairs(counts) do n = n + c end
  return { bounds = bounds, counts = counts, count = n, sum = sum }
end

describe("mqlease.metrics.text", function()
  local raw = {
    received = 7, acks_ok = 5, acks_fail = 1, renew_success = 12, renew_uncertain = 2,
    leases_dropped = 1, inflight = 3, session_state = "ready", invisible_seconds = 12.5,
    errors = { { op = "ack", code = "INVALID_RECEIPT_HANDLE", n = 1 }, { op = "renew", code = 'we"ird', n = 2 } },
    renew_latency = hist({ 1, 2, 0, 1 }, 3.2),
  }

  it("declares each family once with its type, and every sample parses", function()
    local types, samples = prom.parse(mqlease.metrics.text(fake(raw)))
    assert.equal("counter", types.mqlease_messages_received_total)
    assert.equal("gauge", types.mqlease_inflight_leases)
    assert.equal("histogram", types.mqlease_renew_latency_seconds)
    assert.is_true(#samples > 20)
  end)

  it("carries a producer's transaction counters, answers and resolutions as labels", function()
    local _, samples = prom.parse(mqlease.metrics.text(fake({ tx_begun = 4, tx_commit_ok = 2, tx_rollback_fail = 1,
      orphan_checks = 5, tx_check_unknown = 3, tx_check_already_ended = 1, tx_check_end_fail = 1, tx_check_resent = 2 })))
    assert.equal(4, prom.value(samples, "mqlease_transactions_begun_total"))
    assert.equal(2, prom.value(samples, "mqlease_transactions_ended_total", '{resolution="commit",result="ok"}'))
    assert.equal(1, prom.value(samples, "mqlease_transactions_ended_total", '{resolution="rollback",result="fail"}'))
    assert.equal(0, prom.value(samples, "mqlease_transactions_ended_total", '{resolution="rollback",result="ok"}'))
    assert.equal(5, prom.value(samples, "mqlease_transaction_checks_received_total"))
    assert.equal(3, prom.value(samples, "mqlease_transaction_checks_total", '{answer="unknown"}'))
    assert.equal(1, prom.value(samples, "mqlease_transaction_checks_total", '{answer="already_ended"}'))
    assert.equal(0, prom.value(samples, "mqlease_transaction_checks_total", '{answer="commit"}'))
    assert.equal(2, prom.value(samples, "mqlease_transaction_checks_total", '{answer="resent"}'))
    assert.equal(1, prom.value(samples, "mqlease_transaction_check_ends_failed_total"))
  end)

  it("carries the counters, results as labels, and escapes label values", function()
    local _, samples = prom.parse(mqlease.metrics.text(fake(raw)))
    assert.equal(7, prom.value(samples, "mqlease_messages_received_total"))
    assert.equal(1, prom.value(samples, "mqlease_acks_total", '{result="fail"}'))
    assert.equal(2, prom.value(samples, "mqlease_lease_renew_total", '{result="uncertain"}'))
    assert.equal(1, prom.value(samples, "mqlease_leases_dropped_total"))
    assert.equal(3, prom.value(samples, "mqlease_inflight_leases"))
    assert.equal(12.5, prom.value(samples, "mqlease_invisible_seconds"))
    assert.equal(2, prom.value(samples, "mqlease_errors_total", '{op="renew",code="we\\"ird"}'))
    assert.equal(1, prom.value(samples, "mqlease_session_state", '{state="ready"}'))
  end)

  it("carries renewals first: held receives and the due queue's age", function()
    local with = { inflight = 0, session_state = "ready", receives_held = 9, receives_held_empty = 4,
      renew_queue_age_seconds = 0.25, renew_queue_age_max_seconds = 1.5 }
    local types, samples = prom.parse(mqlease.metrics.text(fake(with)))
    assert.equal("counter", types.mqlease_receives_held_total)
    assert.equal("gauge", types.mqlease_renew_queue_age_seconds)
    assert.equal(9, prom.value(samples, "mqlease_receives_held_total"))
    assert.equal(4, prom.value(samples, "mqlease_receives_held_empty_total"))
    assert.equal(0.25, prom.value(samples, "mqlease_renew_queue_age_seconds"))
    assert.equal(1.5, prom.value(samples, "mqlease_renew_queue_age_max_seconds"))
  end)

  it("renders histograms as cumulative buckets ending in +Inf, with sum and count", function()
    local _, samples = prom.parse(mqlease.metrics.text(fake(raw)))
    local n = "mqlease_renew_latency_seconds"
    assert.equal(1, prom.value(samples, n .. "_bucket", '{le="0.01"}'))
    assert.equal(3, prom.value(samples, n .. "_bucket", '{le="0.1"}'))
    assert.equal(3, prom.value(samples, n .. "_bucket", '{le="1"}'))
    assert.equal(4, prom.value(samples, n .. "_bucket", '{le="+Inf"}'))
    assert.equal(4, prom.value(samples, n .. "_count"))
    assert.near(3.2, prom.value(samples, n .. "_sum"), 1e-9)
  end)

  it("adds constant labels to every sample", function()
    local _, samples = prom.parse(mqlease.metrics.text(fake(raw), { instance = "a", zone = 'x"y' }))
    for _, s in ipairs(samples) do
      assert.truthy(s.label_text:find('instance="a"', 1, true), s.name .. s.label_text)
      assert.truthy(s.label_text:find('zone="x\\"y"', 1, true), s.name .. s.label_text)
    end
  end)
  it("raises on a constant label that is no label name, or one a family already carries", function()
    for _, name in ipairs({ "pod-name", "a b", '"', "1st", "", "result", "reason", "le", "state" }) do
      local ok, err = pcall(mqlease.metrics.text, fake(raw), { [name] = "x" })
      assert.is_false(ok, name)
      assert.matches("mqlease.metrics.text: ", err, 1, true)
    end
    assert.has_error(function() mqlease.metrics.text(fake(raw), { "x" }) end)
    -- the names mqlease.ngx gives stay, and the text they make parses
    prom.parse(mqlease.metrics.text(fake(raw), { group = "g", topic = "t", worker = 0, _x1 = "y" }))
  end)

  it("shows the server's retry policy, the fifo flag and the holds and in-place retries", function()
    local with = {
      inflight = 0, session_state = "ready", fifo = true,
      retry_policy = { max_attempts = 17, steps = { 1, 5, 10 } },
      fifo_retries = 4, deferred_held = 2, fail_closed_held = 9, defer_budget_spent = 1,
    }
    local types, samples = prom.parse(mqlease.metrics.text(fake(with)))
    assert.equal("gauge", types.mqlease_retry_max_attempts)
    assert.equal(17, prom.value(samples, "mqlease_retry_max_attempts"))
    assert.equal(1, prom.value(samples, "mqlease_fifo"))
    assert.equal(4, prom.value(samples, "mqlease_fifo_retries_total"))
    assert.equal(2, prom.value(samples, "mqlease_held_total", '{reason="locked"}'))
    assert.equal(9, prom.value(samples, "mqlease_held_total", '{reason="redis_unavailable"}'))
    assert.equal(1, prom.value(samples, "mqlease_defer_budget_spent_total"))
    -- a producer has neither
    local _, bare = prom.parse(mqlease.metrics.text(fake({ inflight = 0, session_state = "ready" })))
    assert.is_nil(prom.value(bare, "mqlease_retry_max_attempts"))
    assert.is_nil(prom.value(bare, "mqlease_fifo"))
  end)
end)

-- The Prometheus text format writes each series (a metric name and its label
-- set) once: "Each line must have a unique combination of a metric name and
-- labels. Otherwise, the ingestion behavior is undefined"
-- (https://prometheus.io/docs/instrumenting/exposition_formats/). Clients of one
-- process carry no label of their own (one would change every user's series),
-- so the series of those that meet under the same labels are written once:
-- counters, histograms and gauges that count things added, the other gauges
-- at their maximum.
describe("mqlease.metrics.text of several clients", function()
  local function client(raw, fields)
    local c = { metrics = function() return raw end }
    for k, v in pairs(fields or {}) do c[k] = v end
    return c
  end
  local function consumer(id, raw)
    return client(raw, { group = "g", topic = "t", id = function() return id end })
  end
  local function producer(id, raw)
    return client(raw, { id = function() return id end })
  end

  local a = consumer("host@1#1", {
    received = 7, acks_ok = 5, inflight = 3, session_state = "ready", invisible_seconds = 30, fifo = false,
    retry_policy = { max_attempts = 17 }, renew_queue_age_seconds = 0.25, renew_queue_age_max_seconds = 2,
    errors = { { op = "ack", code = "TIMEOUT", n = 1 } }, corrupted = { digest_mismatch = 2 },
    renew_latency = hist({ 1, 2, 0, 1 }, 3.25),
  })
  local b = consumer("host@1#2", {
    received = 4, acks_ok = 4, inflight = 2, session_state = "reconnecting", invisible_seconds = 60, fifo = true,
    retry_policy = { max_attempts = 17 }, renew_queue_age_seconds = 0.5, renew_queue_age_max_seconds = 1,
    errors = { { op = "ack", code = "TIMEOUT", n = 2 }, { op = "renew", code = "TIMEOUT", n = 1 } },
    corrupted = { digest_mismatch = 1, inflate_failed = 1 },
    renew_latency = hist({ 0, 1, 1, 0 }, 0.5),
  })

  it("writes each series once for two consumers of one group and topic, their counts added", function()
    local types, samples = prom.parse(mqlease.metrics.text({ a, b }, { instance = "x" }))
    assert.equal("counter", types.mqlease_messages_received_total)
    assert.equal(11, prom.value(samples, "mqlease_messages_received_total"))
    assert.equal(9, prom.value(samples, "mqlease_acks_total", { result = "ok" }))
    assert.equal(3, prom.value(samples, "mqlease_errors_total", { op = "ack", code = "TIMEOUT" }))
    assert.equal(1, prom.value(samples, "mqlease_errors_total", { op = "renew", code = "TIMEOUT" }))
    assert.equal(3, prom.value(samples, "mqlease_messages_corrupted_total", { reason = "digest_mismatch" }))
    assert.equal(1, prom.value(samples, "mqlease_messages_corrupted_total", { reason = "inflate_failed" }))
    for _, s in ipairs(samples) do assert.equal("x", s.labels.instance, s.name) end
    assert.equal("", mqlease.metrics.text({}))
    assert.has_error(function() mqlease.metrics.text({ a, {} }) end, "mqlease.metrics.text: clients[2] is no consumer or producer")
    -- a consumer that could not be made (nil): the error said where metrics.lua failed
    assert.has_error(function() mqlease.metrics.text(nil) end,
      "mqlease.metrics.text: a consumer or producer, or an array of them, expected (got nil)")
  end)

  it("adds histograms bucket by bucket, with their sums and counts", function()
    local _, samples = prom.parse(mqlease.metrics.text({ a, b }))
    local n = "mqlease_renew_latency_seconds"
    assert.equal(1, prom.value(samples, n .. "_bucket", { le = "0.01" }))
    assert.equal(4, prom.value(samples, n .. "_bucket", { le = "0.1" }))
    assert.equal(5, prom.value(samples, n .. "_bucket", { le = "1" }))
    assert.equal(6, prom.value(samples, n .. "_bucket", { le = "+Inf" }))
    assert.equal(6, prom.value(samples, n .. "_count"))
    assert.near(3.75, prom.value(samples, n .. "_sum"), 1e-9)
  end)

  it("adds the gauges that count, and takes the others at their maximum", function()
    local _, samples = prom.parse(mqlease.metrics.text({ a, b }))
    assert.equal(5, prom.value(samples, "mqlease_inflight_leases"))
    assert.equal(1, prom.value(samples, "mqlease_session_state", { state = "ready" }))
    assert.equal(1, prom.value(samples, "mqlease_session_state", { state = "reconnecting" }))
    assert.equal(0, prom.value(samples, "mqlease_session_state", { state = "failed" }))
    assert.equal(60, prom.value(samples, "mqlease_invisible_seconds"))
    assert.equal(0.5, prom.value(samples, "mqlease_renew_queue_age_seconds"))
    assert.equal(2, prom.value(samples, "mqlease_renew_queue_age_max_seconds"))
    assert.equal(17, prom.value(samples, "mqlease_retry_max_attempts"))
    assert.equal(1, prom.value(samples, "mqlease_fifo"))
    -- the official families carry the client id: two series, not one
    assert.equal(2, #prom.find(samples, "rocketmq_consumer_cached_messages"))
    assert.equal(3, prom.value(samples, "rocketmq_consumer_cached_messages", { client_id = "host@1#1" }))
  end)

  it("adds the official families' series when their labels meet too (clients without an id)", function()
    local c1 = client({ inflight = 2, session_state = "ready" }, { group = "g", topic = "t" })
    local c2 = client({ inflight = 4, session_state = "ready" }, { group = "g", topic = "t" })
    local _, samples = prom.parse(mqlease.metrics.text({ c1, c2 }))
    assert.equal(6, prom.value(samples, "rocketmq_consumer_cached_messages", { client_id = "" }))
  end)

  it("writes each series once for two producers, and for a consumer and a producer", function()
    local metrics = require "mqlease.metrics"
    local p1 = producer("host@1#3", { sent_ok = 3, tx_begun = 1, inflight = 0, session_state = "ready" })
    local p2 = producer("host@1#4", { sent_ok = 2, sent_fail = 1, inflight = 0, session_state = "ready" })
    metrics.sent(p1, "orders", 3, true)
    metrics.sent(p2, "orders", 30, true)
    local types, samples = prom.parse(mqlease.metrics.text({ p1, p2 }))
    assert.equal(5, prom.value(samples, "mqlease_messages_sent_total", { result = "ok" }))
    assert.equal(1, prom.value(samples, "mqlease_transactions_begun_total"))
    assert.equal(2, prom.value(samples, "mqlease_session_state", { state = "ready" }))
    assert.equal("histogram", types.rocketmq_send_cost_time)
    assert.equal(2, #prom.find(samples, "rocketmq_send_cost_time_count"))
    -- a consumer beside them: every family once, the producer's and the consumer's
    types, samples = prom.parse(mqlease.metrics.text({ a, p1, b, p2 }))
    assert.equal(11, prom.value(samples, "mqlease_messages_received_total"))
    assert.equal(5, prom.value(samples, "mqlease_messages_sent_total", { result = "ok" }))
    assert.equal(5, prom.value(samples, "mqlease_inflight_leases"))
    assert.equal(3, prom.value(samples, "mqlease_session_state", { state = "ready" }))
    assert.equal("histogram", types.rocketmq_send_cost_time)
    assert.equal("histogram", types.rocketmq_process_time)
  end)

  it("merges exposition texts (of other processes) by the same rules", function()
    local metrics = require "mqlease.metrics"
    local text = metrics.merge({ metrics.text(a), metrics.text(b), "" })
    local _, samples = prom.parse(text)
    assert.equal(11, prom.value(samples, "mqlease_messages_received_total"))
    assert.equal(60, prom.value(samples, "mqlease_invisible_seconds"))
    assert.equal(6, prom.value(samples, "mqlease_renew_latency_seconds_count"))
    assert.equal(text, metrics.merge({ text }))
    assert.equal("", metrics.merge({}))
  end)

  it("knows how to merge every gauge it writes, as docs/metrics.md says", function()
    local metrics = require "mqlease.metrics"
    local run = client({ inflight = 0, session_state = "ready" }, { group = "g", id = function() return "host@1#9" end })
    metrics.holding(run, function() return 1, 10 end)   -- as mqlease.run does: cached bytes
    local types = prom.parse(mqlease.metrics.text({ a, run }))
    assert.equal("gauge", types.rocketmq_consumer_cached_bytes)
    local doc = assert(io.open("docs/metrics.md")):read("a")
    for name, kind in pairs(types) do
      if kind == "gauge" then
        local rule = metrics.GAUGES[name]
        assert.truthy(rule == "sum" or rule == "max", name)
        assert.truthy(doc:find("| `" .. name .. "` | " .. rule .. " |", 1, true), name .. " " .. rule .. " in docs/metrics.md")
      end
    end
  end)
end)
