-- mqlease.metrics.text(c, {}): an empty table of constant labels (say,
-- `opts.labels or {}`) is no label at all. Its label set was written as an
-- empty string joined to the family's own labels, so the series read
-- `mqlease_acks_total{,result="ok"}`, which the text format has no place for:
-- Prometheus refuses the whole scrape on it.
local mqlease = require "mqlease"
local prom = require "support.prom"

local function fake(raw)
  return { metrics = function() return raw end, group = "g", topic = "t", id = function() return "id" end }
end

describe("mqlease.metrics.text with an empty table of constant labels", function()
  local raw = {
    received = 3, acks_ok = 2, inflight = 1, session_state = "ready",
    errors = { { op = "ack", code = "TIMEOUT", n = 1 } }, dead_lettered = { max_attempts = 1 },
    renew_latency = { bounds = { 0.01, 1 }, counts = { 1, 0, 1 }, count = 2, sum = 2.5 },
  }

  it("writes the text it writes with no labels given, and that text parses", function()
    local text = mqlease.metrics.text(fake(raw), {})
    assert.equal(mqlease.metrics.text(fake(raw)), text)
    local _, samples = prom.parse(text)
    assert.equal(2, prom.value(samples, "mqlease_acks_total", '{result="ok"}'))
    assert.equal(3, prom.value(samples, "mqlease_messages_received_total"))
  end)

  it("as for several clients at once", function()
    prom.parse(mqlease.metrics.text({ fake(raw), fake(raw) }, {}))
  end)
end)
