-- A renewal whose reply never came may still have been applied by the broker
-- (a new handle we never saw, a deadline our handle cannot cancel). README
-- used to promise that a stale handle is never reused; the lease now says
-- plainly that it is uncertain (lease.uncertain, renew{result="uncertain"})
-- and keeps the message hidden with the handle it has.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

describe("a renewal without a reply", function()
  it("marks the lease uncertain, counts it, and keeps the lease held", function()
    -- every renewal is answered 1.5 s late, past the 0.5 s request timeout
    local dv = devbroker.start({ "late" }, { "--delay-change-ms", "1500" })
    local p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "late" } })
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "late",
      invisible = 10, renew_every = 1, request_timeout = 0.5, await = 2 })
    finally(function() c:close(); p:close(); dv.stop() end)
    assert(p:send("late", "x"))
    local msgs = assert(c:receive(1))
    assert.equal(1, #msgs)
    local m = msgs[1]
    assert.is_false(m.lease.uncertain)
    mqlease.sleep(2.5)
    assert.is_true(m.lease.uncertain)
    assert.is_true(m.lease:alive())
    assert.is_true(c:metrics().renew_uncertain >= 1)
    assert.truthy(mqlease.metrics.text(c):find('mqlease_lease_renew_total{result="uncertain"} [1-9]'))
    assert.is_true(m:ack())
  end)
end)
