-- A producer's counters in mqlease.metrics.text stay where they were once it
-- is closed, as a consumer's do (consumer.lua keeps its last metrics): a
-- counter that falls back to 0 reads as a reset to Prometheus, and summed with
-- another client's series (mqlease.metrics.text({ p1, p2 })) it goes down,
-- which rate() and increase() take for a restart and count the rest again.
-- The core and the router are stand-ins here: no server is needed.
local core = require "mqlease.core"
local router_mod = require "mqlease.router"
local producer = require "mqlease.producer"
local metrics = require "mqlease.metrics"
local prom = require "support.prom"

describe("a closed producer's metrics", function()
  local saved_producer, saved_start

  before_each(function()
    saved_producer, saved_start = core.producer, router_mod.start
  end)
  after_each(function()
    core.producer, router_mod.start = saved_producer, saved_start
  end)

  local function fake_producer(raw)
    local client = {
      metrics = function() local m = {} for k, v in pairs(raw) do m[k] = v end return m end,
      id = function() return "host@1#0" end,
      terminate = function() return 1 end,
      closed = function() return false end,
    }
    core.producer = function() return client, 0 end
    router_mod.start = function(c)
      local r = router_mod.new(c)
      r.result = function() return { ok = true } end
      r.close = function() end
      return r
    end
    return assert(producer.new({ endpoints = "127.0.0.1:8081" }))
  end

  it("keeps its counters once closed", function()
    local p = fake_producer({ sent_ok = 5, sent_fail = 2, session_state = "ready", inflight = 0 })
    local _, before = prom.parse(metrics.text(p))
    assert.equal(5, prom.value(before, "mqlease_messages_sent_total", '{result="ok"}'))
    p:close()
    local _, after = prom.parse(metrics.text(p))
    assert.equal(5, prom.value(after, "mqlease_messages_sent_total", '{result="ok"}'))
    assert.equal(2, prom.value(after, "mqlease_messages_sent_total", '{result="fail"}'))
    assert.equal(5, p:metrics().sent_ok)
  end)
end)
