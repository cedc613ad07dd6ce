-- The budget's own nack (on_budget = "nack") is a ChangeInvisibleDuration, as
-- a renewal is: one whose reply never came may still have been applied, and
-- the broker then hands the message on after release_delay, with a handle we
-- never saw, while this lease waits for its deadline and its handler may
-- still run. A renewal like that marks the lease uncertain; the budget's nack
-- said nothing (no flag, no count), and its failure was counted nowhere.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

describe("a budget nack without a reply", function()
  it("marks the lease uncertain and counts the failed nack", function()
    -- every ChangeInvisibleDuration is answered 1.5 s late, past the 0.5 s request timeout
    local dv = devbroker.start({ "late" }, { "--delay-change-ms", "1500" })
    local p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "late" } })
    -- no renewal allowed: the budget is spent at the first renewal's time (1 s)
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "late",
      invisible = 10, renew_every = 1, request_timeout = 0.5, await = 2,
      max_renewals = 0, on_budget = "nack" })
    finally(function() c:close(); p:close(); dv.stop() end)
    assert(p:send("late", "x"))
    local msgs = assert(c:receive(1))
    assert.equal(1, #msgs)
    local m = msgs[1]
    assert.is_false(m.lease.uncertain)
    -- the nack goes out at about 1 s and times out about 0.5 s later
    local deadline = mqlease.now() + 5
    while c:metrics().nacks_fail == 0 and mqlease.now() < deadline do mqlease.sleep(0.1) end
    local metrics = c:metrics()
    assert.equal(1, metrics.budget_nack)
    assert.equal(1, metrics.nacks_fail)
    assert.truthy(mqlease.metrics.text(c):find('mqlease_errors_total{[^}]*op="nack"[^}]*code="TIMEOUT"[^}]*} 1'))
    assert.is_true(m.lease.uncertain)
    -- the lease waits for its deadline, unrenewed, as before
    assert.equal("expiring", m.lease.state)
  end)
end)
