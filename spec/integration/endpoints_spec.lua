-- Several endpoints: at start the client tries them in order and stays on
-- the first that answers. Port 1 on loopback stands for a dead proxy (nobody
-- listens there; the connection is refused at once).
local mqlease = require "mqlease"
local env = require "support.env"

local DEAD = "127.0.0.1:1"

local function error_count(client, op, code)
  for _, e in ipairs(client:metrics().errors or {}) do
    if e.op == op and e.code == code then return e.n end
  end
  return 0
end

describe("mqlease with several endpoints", function()
  it("passes over a dead first endpoint and produces and consumes through the second", function()
    local topic = env.topic("endpoints")
    local group = env.name("g_endpoints")
    local list = DEAD .. "; " .. env.endpoints
    local consumer = env.consumer { endpoints = list, group = group, topic = topic, invisible = 10, await = 5 }
    assert(consumer:receive(1, { await = 0 }))
    local producer = env.producer { endpoints = list, topics = { topic } }
    local id = assert(producer:send(topic, "via the second"))
    local got
    env.collect(consumer, 30, function(m)
      if m.id == id then got = m end
      assert(m:ack())
    end, function() return got ~= nil end)
    assert.is_userdata(got)
    assert.equal("via the second", got.body)

    for _, c in ipairs({ consumer, producer }) do
      assert.equal(1, c:metrics().reconnects)
      assert.equal("ready", c:metrics().session_state)
      assert.equal(1, error_count(c, "start", "UNAVAILABLE"))
      local text = mqlease.metrics.text(c)
      assert.truthy(text:find('mqlease_session_state{state="ready"} 1', 1, true))
      assert.truthy(text:find("mqlease_session_reconnects_total 1", 1, true))
    end
    producer:close()
    consumer:close()
  end)

  it("stays on the first endpoint when it answers", function()
    local p = env.producer { endpoints = env.endpoints .. ";" .. DEAD }
    assert.equal(0, p:metrics().reconnects)
    assert.equal(0, error_count(p, "start", "UNAVAILABLE"))
    p:close()
  end)

  it("fails the start with the last endpoint's error when none answers", function()
    local t0 = mqlease.now()
    local p, err, code = mqlease.producer { endpoints = DEAD .. ";127.0.0.1:2", start_timeout = 5 }
    assert.is_nil(p)
    assert.equal("UNAVAILABLE", code)
    assert.matches("127.0.0.1:2", err)
    assert.is_true(mqlease.now() - t0 < 5, "a refused connection must not wait for start_timeout")
  end)

  it("does not try the next endpoint when the proxy answered with an error", function()
    -- the topic does not exist: any proxy of the cluster would say so
    local c, _, code = mqlease.consumer {
      endpoints = env.endpoints .. ";" .. DEAD, group = env.name("g_endpoints_nt"), topic = env.name("no_such_topic"),
      start_timeout = 5,
    }
    assert.is_nil(c)
    assert.equal("TOPIC_NOT_FOUND", code)
  end)
end)
