-- Bad input raises a clear error naming the option; network and broker
-- failures return nil, message, code; nothing crashes.
local mqlease = require "mqlease"
local env = require "support.env"

describe("mqlease errors", function()
  local function raises(pattern, fn)
    local ok, err = pcall(fn)
    assert.is_false(ok, "expected an error matching " .. pattern)
    assert.matches(pattern, err)
  end

  -- (option checks that need no server: spec/unit/options_spec.lua)
  describe("bad options", function()
    it("rejects bad send arguments before anything is sent", function()
      local p = env.producer()
      raises("body: string expected", function() p:send("t", 42) end)
      raises("option 'tag' must be a non%-blank string without '|'", function() p:send("t", "x", { tag = "a|b" }) end)
      raises("unknown option 'tags'", function() p:send("t", "x", { tags = "a" }) end)
      p:close()
    end)
  end)

  describe("runtime failures", function()
    it("returns UNAVAILABLE for an endpoint where nothing listens, within the start timeout", function()
      local t0 = mqlease.now()
      local c, err, code = mqlease.consumer { endpoints = "127.0.0.1:1", group = "g", topic = "t", start_timeout = 5 }
      assert.is_nil(c)
      assert.equal("UNAVAILABLE", code)
      assert.is_string(err)
      assert.is_true(mqlease.now() - t0 < 6)
      local p, perr, pcode = mqlease.producer { endpoints = "127.0.0.1:1", start_timeout = 5 }
      assert.is_nil(p)
      assert.is_string(perr)
      assert.equal("UNAVAILABLE", pcode)
    end)

    it("returns TOPIC_NOT_FOUND for a topic the broker does not have", function()
      local c, err, code = mqlease.consumer {
        endpoints = env.endpoints, group = env.name("g_nosuch"), topic = env.name("no_such_topic") }
      assert.is_nil(c)
      assert.equal("TOPIC_NOT_FOUND", code)
      assert.matches("QueryRoute", err)
      local p = env.producer()
      local id, serr, scode = p:send(env.name("no_such_topic"), "x")
      assert.is_nil(id)
      assert.is_string(serr)
      assert.equal("TOPIC_NOT_FOUND", scode)
      local counted = false
      for _, e in ipairs(p:metrics().errors) do
        if e.op == "route" and e.code == "TOPIC_NOT_FOUND" then counted = e.n == 1 end
      end
      assert.is_true(counted, "the failure was not counted")
      p:close()
    end)

    it("reports acking twice instead of crashing, and counts it", function()
      local topic = env.topic("errors_ack")
      local c = env.consumer { group = env.name("g_errors_ack"), topic = topic, await = 5 }
      assert(c:receive(1, { await = 0 }))
      local p = env.producer()
      assert(p:send(topic, "twice"))
      local msgs = env.collect(c, 30, nil, function(all) return #all >= 1 end)
      assert.equal(1, #msgs)
      assert.is_true(msgs[1]:ack())
      local ok, err, code = msgs[1]:ack()
      assert.is_nil(ok)
      assert.equal("ALREADY_ACKED", code)
      assert.matches("already acked", err)
      ok, err, code = msgs[1]:nack(1)
      assert.is_nil(ok)
      assert.equal("ALREADY_ACKED", code)
      local m = c:metrics()
      assert.equal(1, m.acks_ok)
      assert.equal(1, m.acks_fail)
      c:close()
      p:close()
      ok, err, code = msgs[1]:ack()
      assert.is_nil(ok)
      assert.equal("CLOSED", code)
    end)

    it("returns CLOSED from a closed consumer instead of raising", function()
      local c = env.consumer { group = env.name("g_closed"), topic = env.topic("errors_ack"), await = 5 }
      c:close()
      local msgs, err, code = c:receive()
      assert.is_nil(msgs)
      assert.equal("CLOSED", code)
      assert.is_string(err)
      assert.is_true(c:close())
    end)
  end)
end)
