-- Issue 20, item 6: mqlease.run on a closed consumer never returned. receive
-- answered CLOSED, the receiver logged it and tried again a second later,
-- forever; the drain could not have ended it either (cancelling the receives
-- of a closed client raises). Before the fix both specs ran into their
-- run_for safety net; now the run ends with reason "closed".
local mqlease = require "mqlease"
local env = require "support.env"

describe("mqlease.run on a consumer that is closed", function()
  it("returns at once with reason 'closed' when the consumer was closed before", function()
    local topic = env.topic("issue20_closed")
    local c = env.consumer { group = env.name("g_issue20_closed"), topic = topic }
    c:close()
    local ran = 0
    local started = mqlease.now()
    local summary = mqlease.run(c, function() ran = ran + 1; return true end, { signals = false, run_for = 20 })
    assert.equal("closed", summary.reason)
    assert.is_true(mqlease.now() - started < 10, "the run took " .. (mqlease.now() - started) .. " s")
    assert.equal(0, ran)
    assert.equal(0, summary.received)
  end)

  it("ends with reason 'closed' when a handler closes the consumer under it", function()
    local topic = env.topic("issue20_closed_later")
    local group = env.name("g_issue20_closed_later")
    local c = env.consumer { group = group, topic = topic }
    assert(c:receive(1, { await = 0 }))
    local producer = env.producer()
    finally(function() producer:close() end)
    assert(producer:send(topic, "close it"))
    local ran = 0
    local summary = mqlease.run(c, function()
      ran = ran + 1
      c:close()
      return true
    end, { signals = false, run_for = 40 })
    assert.equal("closed", summary.reason)
    assert.equal(1, ran)
    assert.equal(1, summary.received)
    -- the close nacked the message: its ack could not happen, and nothing was counted twice
    assert.equal(0, summary.acked)
    -- given back by the close: another consumer of the group gets it again
    local again = env.consumer { group = group, topic = topic }
    finally(function() again:close() end)
    local got = env.collect(again, 30, function(m) m:ack() end, function(all) return #all >= 1 end, 5)
    assert.equal(1, #got)
    assert.equal("close it", got[1].body)
  end)
end)
