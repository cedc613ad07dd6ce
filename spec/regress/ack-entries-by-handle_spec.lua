-- One AckMessage may carry two leases of the same message id: the broker
-- redelivered while we still held the first (here: a dev broker whose clock
-- runs 5x fast). Their entries used to be matched by message id, so both took
-- the first entry's status: the live lease was reported failed (and renewed
-- on) although the broker had acked it. Entries are matched by receipt handle
-- now, one outcome per lease.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

describe("an ack of two leases of one message", function()
  it("gives each lease the outcome of its own receipt handle", function()
    local dv = devbroker.start({ "twice" }, { "--time-scale", "0.2" })
    local p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "twice" } })
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "twice",
      invisible = 10, renew = false, await = 5 })
    finally(function() c:close(); p:close(); dv.stop() end)
    assert(p:send("twice", "x"))
    local first = assert(c:receive(1))[1]
    assert.is_not_nil(first)
    -- the broker's 10 s lease ends after 2 s: it delivers again, the client still holds the first
    local second = assert(c:receive(1, { await = 5 }))[1]
    assert.is_not_nil(second, "no redelivery")
    assert.equal(first.id, second.id)
    assert.equal(2, second.delivery_attempt)

    local ok, err, code, results = c:ack({ first, second })
    assert.is_nil(ok)
    assert.equal("INVALID_RECEIPT_HANDLE", code, err)
    assert.equal("INVALID_RECEIPT_HANDLE", results[1].code)
    assert.is_true(results[2])
    assert.equal("acked", second.lease.state)
    assert.equal("lost", first.lease.state)
    -- acked for real: nothing comes back
    assert.same({}, assert(c:receive(1, { await = 3 })))
  end)
end)
