-- Regression: issue 10, defect 9 (dev broker). A receive that arrives while
-- the broker is paused is parked on the waiting list; `set paused 0` used to
-- dispatch it while it was still listed. Not answerable yet, it was added to
-- the list a second time -- a cycle: the tick spun forever holding the store
-- lock and the control port stopped answering. Answerable at once, it stayed
-- listed after its answer and kept popping messages into a finished call.
local mqlease = require "mqlease"
local env = require "support.env"
local devbroker = require "support.devbroker"

describe("dev broker regression (issue 10, paused receive)", function()
  local dv
  before_each(function() dv = devbroker.start({ "t1" }) end)
  after_each(function() dv.stop() end)

  -- a consumer that has its route already: its next receive goes straight to ReceiveMessage
  local function consumer()
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "t1",
                                        await = 5, invisible = 30 })
    assert.same({}, assert(c:receive(1, { await = 0 })))
    return c
  end

  -- unpauses from another process `after` seconds from now (returns at once: the
  -- background job keeps no pipe of ours open)
  local function unpause_in(after)
    env.sh(("(sleep %s; bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; echo \"set paused 0\" >&3; head -n1 <&3') >/dev/null 2>&1 &")
      :format(after, dv.control_port))
  end

  it("keeps the control port answering after a parked receive with nothing to deliver resumes", function()
    local c = consumer()
    assert.matches("^ok", dv.control("set paused 1"))
    unpause_in(1)
    c:receive(1)   -- parked, resumed after 1 s, then a long poll with nothing to find
    assert.matches("^ok calls=%d+", dv.control("stats") or "no answer from the control port")
    local msgs = assert(c:receive(1, { await = 1 }))
    assert.same({}, msgs)
    c:close()
  end)

  it("gives a resumed receive its batch and nothing more, leaving the rest for the next one", function()
    local c = consumer()
    local p = assert(mqlease.producer { endpoints = dv.endpoints })
    assert(p:send("t1", "first"))
    assert(p:send("t1", "second"))
    assert.matches("^ok", dv.control("set paused 1"))
    unpause_in(1)
    local first = assert(c:receive(1))
    assert.equal(1, #first)
    local second = assert(c:receive(1, { await = 2 }))
    assert.equal(1, #second, "the second message was swallowed by the answered receive")
    assert.are_not.equal(first[1].id, second[1].id)
    assert.is_true(first[1]:ack())
    assert.is_true(second[1]:ack())
    c:close()
    p:close()
  end)
end)
