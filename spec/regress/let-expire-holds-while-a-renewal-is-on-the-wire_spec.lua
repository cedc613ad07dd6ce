-- let_expire() while a renewal was in flight was undone by its reply: the
-- lease went back to held and renewed on until max_lease. (Found by a review
-- of the lease life cycle; failed before its fix.)
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

describe("let_expire", function()
  it("holds even while a renewal is on the wire", function()
    local dv = devbroker.start({ "exp" }, { "--delay-change-ms", "1500" })
    local p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "exp" } })
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "exp",
      invisible = 10, renew_every = 1, await = 2 })
    finally(function() c:close(); p:close(); dv.stop() end)
    assert(p:send("exp", "x"))
    local m = assert(c:receive(1))[1]
    -- the first renewal leaves after ~1 s and is answered 1.5 s later
    local deadline = mqlease.now() + 5
    while m.lease.state ~= "renewing" and mqlease.now() < deadline do mqlease.sleep(0.05) end
    assert.equal("renewing", m.lease.state)
    assert.is_true(m:let_expire())
    mqlease.sleep(3)   -- the reply is back by now
    assert.equal("expiring", m.lease.state)
    local renewals = m.lease.renewals
    mqlease.sleep(2)
    assert.equal(renewals, m.lease.renewals, "renewed after let_expire")
  end)
end)
