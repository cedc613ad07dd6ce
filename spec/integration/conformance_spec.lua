-- Conformance: the same behaviours, against the real RocketMQ and against
-- mqlease-devbroker. A difference is a bug in the dev broker (or a documented
-- divergence, README "Dev broker").
local mqlease = require "mqlease"
local env = require "support.env"
local devbroker = require "support.devbroker"

local function suite(name, setup_broker)
  describe("conformance (" .. name .. ")", function()
    local broker
    setup(function() broker = setup_broker() end)
    teardown(function() if broker.stop then broker.stop() end end)

    local function consumer(topic, group, opts)
      opts = opts or {}
      opts.endpoints, opts.topic, opts.group = broker.endpoints, topic, broker.group(group)
      opts.await = opts.await or 5
      local c = assert(mqlease.consumer(opts))
      assert(c:receive(1, { await = 0 }))
      return c
    end

    local function producer()
      return assert(mqlease.producer { endpoints = broker.endpoints })
    end

    it("delivers what was sent, byte for byte, with tag, keys and properties", function()
      local topic = broker.topic("cf_roundtrip")
      local c = consumer(topic, broker.name("g_cf_roundtrip"))
      local p = producer()
      local sent = {}
      for i = 1, 20 do
        local body = ("cf %d \0\255 %s"):format(i, ("z"):rep(i * 50))
        sent[assert(p:send(topic, body, { tag = "T" .. (i % 2), keys = { "k" .. i }, properties = { i = tostring(i) } }))] = i
      end
      local got = env.collect(c, 30, function(m) assert(m:ack()) end, function(all) return #all >= 20 end)
      assert.equal(20, #got)
      for _, m in ipairs(got) do
        local i = sent[m.id]
        assert.is_number(i)
        assert.equal(("cf %d \0\255 %s"):format(i, ("z"):rep(i * 50)), m.body)
        assert.equal("T" .. (i % 2), m.tag)
        assert.same({ "k" .. i }, m.keys)
        assert.same({ i = tostring(i) }, m.properties)
        assert.equal(1, m.delivery_attempt)
        sent[m.id] = nil
      end
      assert.is_nil(next(sent))
      c:close()
      p:close()
    end)

    it("filters by tag", function()
      local topic = broker.topic("cf_filter")
      local c = consumer(topic, broker.name("g_cf_filter"), { filter = "A || C" })
      local p = producer()
      for _, tag in ipairs({ "A", "B", "C", "B" }) do assert(p:send(topic, "tag " .. tag, { tag = tag })) end
      local got = env.collect(c, 12, function(m) assert(m:ack()) end, function(all) return #all >= 2 end)
      local tags = {}
      for _, m in ipairs(got) do tags[#tags + 1] = m.tag end
      table.sort(tags)
      assert.same({ "A", "C" }, tags)
      c:close()
      p:close()
    end)

    it("redelivers a nacked message at once as the next attempt", function()
      local topic = broker.topic("cf_nack")
      local c = consumer(topic, broker.name("g_cf_nack"))
      local p = producer()
      local id = assert(p:send(topic, "nack"))
      local first = env.collect(c, 20, nil, function(all) return #all >= 1 end)[1]
      assert.equal(id, first.id)
      assert.is_true(first:nack(0))
      local second = env.collect(c, 20, nil, function(all) return #all >= 1 end)[1]
      assert.equal(id, second.id)
      assert.equal(2, second.delivery_attempt)
      assert.is_true(second:ack())
      c:close()
      p:close()
    end)

    it("keeps a renewed message hidden and brings an unrenewed one back after the invisible duration", function()
      local topic = broker.topic("cf_lease")
      local group = broker.name("g_cf_lease")
      local holder = consumer(topic, group, { invisible = 10, batch = 1 })
      local forgetful = consumer(topic, group, { invisible = 10, batch = 1, renew = false })
      local p = producer()
      local kept_id = assert(p:send(topic, "kept"))
      local kept = env.collect(holder, 20, nil, function(all) return #all >= 1 end)[1]
      assert.equal(kept_id, kept.id)
      local lost_id = assert(p:send(topic, "forgotten"))
      local lost = env.collect(forgetful, 20, nil, function(all) return #all >= 1 end)[1]
      assert.equal(lost_id, lost.id)
      -- past both leases (and RocketMQ's revive lag): only the unrenewed one comes back
      local back = env.collect(forgetful, 25, nil, function(all) return #all >= 1 end)
      assert.equal(1, #back)
      assert.equal(lost_id, back[1].id)
      assert.equal(2, back[1].delivery_attempt)
      assert.is_true(kept.lease:alive())
      -- renewed through more than one invisible duration (the first renewal comes 3 to
      -- 6.3 s after the receive, at the lease's own phase, then one every 3.3 s)
      env.wait_for(function() return kept.lease.renewals >= 3 end, 10, "three renewals")
      assert.is_true(kept.lease:alive())
      assert.is_true(kept:ack())
      assert.is_true(back[1]:ack())
      holder:close()
      forgetful:close()
      p:close()
    end)

    it("sends body digests the official Node.js client finds correct", function()
      local topic = broker.topic("cf_digest")
      -- the Node consumer starts first: on RocketMQ a brand-new group may begin at the queue's end
      local wait = devbroker.node_view(broker.endpoints, broker.group(broker.name("g_cf_digest")), topic, 3, 40)
      mqlease.sleep(5)
      local p = producer()
      local ids = {}
      for i = 1, 3 do ids[assert(p:send(topic, ("digest %d %s"):format(i, ("\0\255"):rep(i * 100))))] = true end
      p:close()
      local view = wait()
      assert.equal(3, #view)
      for _, v in ipairs(view) do
        assert.is_true(ids[v.id])
        assert.is_false(v.corrupted)
      end
    end)

    it("answers TOPIC_NOT_FOUND and MESSAGE_BODY_TOO_LARGE", function()
      local c, _, code = mqlease.consumer { endpoints = broker.endpoints, group = "g", topic = broker.name("cf_absent") }
      assert.is_nil(c)
      assert.equal("TOPIC_NOT_FOUND", code)
      local p = producer()
      local id
      id, _, code = p:send(broker.name("cf_absent"), "x")
      assert.is_nil(id)
      assert.equal("TOPIC_NOT_FOUND", code)
      local topic = broker.topic("cf_big")
      id, _, code = p:send(topic, ("x"):rep(4 * 1024 * 1024 + 1))
      assert.is_nil(id)
      assert.equal("MESSAGE_BODY_TOO_LARGE", code)
      p:close()
    end)
  end)
end

suite("RocketMQ", function()
  return { endpoints = env.endpoints, topic = env.topic, name = env.name, group = env.group }
end)

suite("mqlease-devbroker", function()
  local dv = devbroker.start()
  return {
    endpoints = dv.endpoints, name = env.name, stop = dv.stop,
    group = function(name) return name end,   -- the dev broker takes any group
    topic = function(base)
      local name = env.name(base)
      assert.matches("^ok", dv.control("topic " .. name))
      return name
    end,
  }
end)
