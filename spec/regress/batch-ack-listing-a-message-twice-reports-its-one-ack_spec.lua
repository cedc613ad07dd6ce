-- c:ack({m, m}): one message listed twice in a batch ack. The message was
-- acked once, but the second entry reported BUSY ("a release of this lease is
-- already under way": the core refuses a second release of a lease while one
-- is pending, and the first entry's release was that one), so the call
-- returned nil, err, "BUSY" for an ack that had worked, and acks_fail counted
-- a failure that never was. Each entry now reports the one ack's outcome,
-- whether it worked or failed, and the message is acked and counted once.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

local function ok(line) assert.matches("^ok", line or "no answer from the control port") end

describe("a batch ack that lists a message twice", function()
  local dv, p, c
  before_each(function()
    dv = devbroker.start({ "t" })
    p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "t" } })
    c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "t",
      invisible = 10, await = 1 })
  end)
  after_each(function()
    c:close(); p:close(); dv.stop()
  end)

  local function receive(n)
    for i = 1, n do assert(p:send("t", "m" .. i)) end
    local got, deadline = {}, mqlease.now() + 10
    while #got < n and mqlease.now() < deadline do
      for _, m in ipairs(assert(c:receive(n - #got))) do got[#got + 1] = m end
    end
    assert.equal(n, #got)
    return got
  end

  it("acks it once and reports that ack for each of its entries", function()
    local got = receive(2)
    local a, b = got[1], got[2]
    local done, err, code, results = c:ack({ a, b, a })
    assert.is_true(done, tostring(err) .. " " .. tostring(code) .. " "
      .. tostring(results and results[3] and results[3].code))
    assert.equal("acked", a.lease.state)
    assert.equal("acked", b.lease.state)
    local m = c:metrics()
    assert.equal(2, m.acks_ok)
    assert.equal(0, m.acks_fail)
    -- acked for real: nothing comes back
    assert.same({}, assert(c:receive(2, { await = 1 })))
  end)

  it("reports the one ack's failure for each of its entries, not BUSY", function()
    local a = receive(1)[1]
    ok(dv.control("set fail_ack 1"))
    local done, err, code, results = c:ack({ a, a })
    assert.is_nil(done)
    assert.is_not.equal("BUSY", code, err)
    assert.is_table(results[1])
    assert.same(results[1], results[2])
    assert.equal(code, results[1].code)
    local m = c:metrics()
    assert.equal(0, m.acks_ok)
    assert.equal(1, m.acks_fail)
    -- a failed ack leaves the lease to expire at its deadline, as a single one does
    assert.equal("expiring", a.lease.state)
  end)
end)
