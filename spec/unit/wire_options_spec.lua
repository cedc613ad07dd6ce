-- The options and metrics of wire fidelity, without a server: on_corrupt, corrupt_delay and
-- max_body are validated by name, run's max_attempts too, and the corrupted / malformed /
-- dead-lettered counters reach the Prometheus text by reason.
local mqlease = require "mqlease"
local metrics = require "mqlease.metrics"

local base = { endpoints = "127.0.0.1:1", group = "g", topic = "t" }

local function with(extra)
  local o = {}
  for k, v in pairs(base) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  return o
end

describe("wire fidelity options", function()
  it("rejects an unknown on_corrupt, naming the option and its choices", function()
    assert.has_error(function() mqlease.consumer(with { on_corrupt = "drop" }) end,
      [[mqlease.consumer: option 'on_corrupt' must be one of "dlq", "nack" (got "drop")]])
  end)

  it("rejects a max_body below 1 KiB and a negative corrupt_delay", function()
    assert.has_error(function() mqlease.consumer(with { max_body = 10 }) end)
    local ok, err = pcall(mqlease.consumer, with { max_body = 10 })
    assert.is_false(ok)
    assert.matches("max_body", err)
    ok, err = pcall(mqlease.consumer, with { corrupt_delay = -1 })
    assert.is_false(ok)
    assert.matches("corrupt_delay", err)
  end)

  it("rejects a max_attempts of 0 before touching the consumer", function()
    local ok, err = pcall(mqlease.run, {}, function() end, { max_attempts = 0 })
    assert.is_false(ok)
    assert.matches("max_attempts", err)
  end)

  it("exports corrupted, malformed and dead-lettered counts by reason", function()
    local fake = { metrics = function()
      return {
        corrupted = { digest_mismatch = 2, body_too_large = 1 },
        malformed = { no_receipt_handle = 3 },
        dead_lettered = { max_attempts = 4, corrupted = 2 },
        errors = { { op = "receive", code = "PROTOCOL", n = 1 } },
      }
    end }
    local text = metrics.text(fake)
    assert.matches('mqlease_messages_corrupted_total{reason="digest_mismatch"} 2\n', text, 1, true)
    assert.matches('mqlease_messages_corrupted_total{reason="body_too_large"} 1\n', text, 1, true)
    assert.matches('mqlease_messages_malformed_total{reason="no_receipt_handle"} 3\n', text, 1, true)
    assert.matches('mqlease_messages_dead_lettered_total{reason="max_attempts"} 4\n', text, 1, true)
    assert.matches('mqlease_errors_total{op="receive",code="PROTOCOL"} 1\n', text, 1, true)
  end)
end)
