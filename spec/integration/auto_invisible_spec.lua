-- invisible = "auto": the invisible duration of new receives (and renewals)
-- follows the observed handler times, p99 x margin within bounds. Against the
-- dev broker with its receive minimum lowered to 1 s, so the bounds can be
-- short (a real proxy needs minInvisibleTimeMillsForRecv lowered the same way).
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

describe("invisible = \"auto\"", function()
  local dv
  before_each(function() dv = devbroker.start({ "auto" }, { "--min-invisible-ms", "1000" }) end)
  after_each(function() dv.stop() end)

  local function send(n)
    local p = assert(mqlease.producer { endpoints = dv.endpoints })
    for i = 1, n do assert(p:send("auto", "job " .. i)) end
    p:close()
  end

  -- receives up to n messages, each handed to fn(messages) a batch at a time
  local function consume(c, n, fn)
    local got = 0
    while got < n do
      local msgs = assert(c:receive(math.min(32, n - got), { await = 5 }))
      assert.is_true(#msgs > 0, "the broker ran dry")
      got = got + #msgs
      fn(msgs)
    end
  end

  it("starts at the start value, then asks for p99 x margin of how long leases were held", function()
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g1", topic = "auto", await = 5,
      invisible = "auto", auto_invisible = { min = 1, max = 60, margin = 2, start = 20 } })
    send(100 + 96 + 8)
    assert.equal(20, c:metrics().invisible_seconds)
    local first = true
    -- 100 handlers that take no time: the value falls to the floor
    consume(c, 100, function(msgs)
      if first then
        -- what the broker was asked for shows in the lease's deadline
        assert.is_true(msgs[1].lease:remaining() > 15)
        first = false
      end
      assert(c:ack(msgs))
    end)
    assert.equal(1, c:metrics().invisible_seconds)
    -- 96 handlers of 1.5 s, longer than the 1 s window the first batch gets:
    -- renewals keep them; after that batch the value has moved up already
    local batch = 0
    consume(c, 96, function(msgs)
      batch = batch + 1
      if batch == 1 then assert.is_true(msgs[1].lease:remaining() <= 1) end
      mqlease.sleep(1.5)
      for _, m in ipairs(msgs) do assert.is_true(m.lease:alive()) end
      assert(c:ack(msgs))
    end)
    local m = c:metrics()
    assert.is_true(m.renew_success >= 96)
    assert.equal(0, m.expire_while_alive)
    -- half the handlers took 1.5 s: the p99 is in their bucket (1.5-1.54 s, more when a
    -- batch's ack is slow: 32 samples move together), x 2
    assert.is_true(m.invisible_seconds >= 3 and m.invisible_seconds < 4.5, m.invisible_seconds)
    consume(c, 8, function(msgs)
      for _, msg in ipairs(msgs) do
        assert.is_true(msg.lease:remaining() > 2.5 and msg.lease:remaining() <= m.invisible_seconds)
      end
      assert(c:ack(msgs))
    end)
    local text = mqlease.metrics.text(c)
    assert.matches("mqlease_invisible_seconds [%d.]+", text)
    c:close()
  end)

  it("gives a crashed consumer's message to another one within the window it learned", function()
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g2", topic = "auto", await = 5,
      invisible = "auto", auto_invisible = { min = 1, max = 60, start = 60 } })
    send(101)
    consume(c, 100, function(msgs) assert(c:ack(msgs)) end)
    assert.equal(1, c:metrics().invisible_seconds)
    local held = assert(c:receive(1, { await = 5 }))[1]
    assert(held:let_expire())   -- as if the worker died: no more renewals
    local other = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g2", topic = "auto",
      invisible = 10, await = 5 })
    -- one long poll of 5 s sees it again: 1 s, not the 60 s a fixed start would have taken
    local again = assert(other:receive(1, { await = 5 }))
    assert.equal(1, #again)
    assert.equal(held.id, again[1].id)
    assert.equal(2, again[1].delivery_attempt)
    assert(again[1]:ack())
    other:close()
    c:close()
  end)
end)
