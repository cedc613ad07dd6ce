-- The consumer is pollable: it runs inside a cqueues controller next to other
-- coroutines, which keep running while a receive long-polls; a transactional
-- producer is polled there too, its checker waiting in the controller.
local cqueues = require "cqueues"
local mqlease = require "mqlease"
local env = require "support.env"

describe("mqlease under cqueues", function()
  it("receives and acks inside a controller while another coroutine ticks", function()
    local topic = env.topic("cqueues")
    local c = env.consumer { group = env.name("g_cqueues"), topic = topic, await = 5 }
    assert(c:receive(1, { await = 0 }))
    local p = env.producer()
    local cq = cqueues.new()
    local ticks, got, stop = 0, {}, false
    cq:wrap(function()
      while not stop do
        ticks = ticks + 1
        cqueues.sleep(0.05)
      end
    end)
    cq:wrap(function()
      -- an empty long poll first: the ticker must keep running meanwhile
      local empty = assert(c:receive(4, { await = 5 }))
      assert.same({}, empty)
      assert(p:send(topic, "via cqueues 1"))
      assert(p:send(topic, "via cqueues 2"))
      while #got < 2 do
        for _, m in ipairs(assert(c:receive(4, { await = 5 }))) do
          assert.is_true(m:ack())
          got[#got + 1] = m.body
        end
      end
      stop = true
      c:close()   -- cancels the descriptor in cqueues before closing it
    end)
    local deadline = mqlease.now() + 60
    while not cq:empty() and mqlease.now() < deadline do
      local ok, err = cq:step(1)
      assert(ok, err)
    end
    assert.is_true(cq:empty())
    table.sort(got)
    assert.same({ "via cqueues 1", "via cqueues 2" }, got)
    -- 5 s of long polling at 20 ticks a second
    assert.is_true(ticks > 50, "the ticker ran only " .. ticks .. " times")
    p:close()
  end)
  it("answers the broker's checks from a polling coroutine, the checker waiting on Redis", function()
    local topic = env.name("cqueues_tx")
    env.sh(("bash mk/rocketmq.sh topics %s:TRANSACTION"):format(topic))
    local key = "mqlease:" .. env.run_id .. ":cqueues_tx"
    local redis = mqlease.redis("127.0.0.1:" .. env.redis_port)
    assert(redis:call("SET", key, "commit"))
    local asked = 0
    local p = env.producer { topics = { topic }, checker = function()
      asked = asked + 1
      return redis:call("GET", key)   -- waits in the controller, as a check may
    end }
    local c = env.consumer { group = env.name("g_cqueues_tx"), topic = topic, await = 2 }
    assert(c:receive(1, { await = 0 }))
    local cq = cqueues.new()
    local ticks, got, stop = 0, {}, false
    cq:wrap(function()
      while not stop do
        ticks = ticks + 1
        cqueues.sleep(0.05)
      end
    end)
    cq:wrap(function()
      while not stop do p:poll(1) end
    end)
    cq:wrap(function()
      -- begun and never ended, as by a producer that died: only the check commits it
      assert(p:begin(topic, "left open"))
      local deadline = mqlease.now() + 60
      while #got == 0 and mqlease.now() < deadline do
        for _, m in ipairs(assert(c:receive(4, { await = 2 }))) do
          assert.is_true(m:ack())
          got[#got + 1] = m.body
        end
      end
      stop = true
    end)
    local deadline = mqlease.now() + 90
    while not cq:empty() and mqlease.now() < deadline do
      local ok, err = cq:step(1)
      assert(ok, err)
    end
    assert.is_true(cq:empty())
    assert.same({ "left open" }, got)
    assert.is_true(asked >= 1, "the checker was never asked")
    -- the broker checks after 3 s at the earliest: the ticker ran all the while
    assert.is_true(ticks > 40, "the ticker ran only " .. ticks .. " times")
    c:close()
    p:close()
    redis:close()
  end)
end)
