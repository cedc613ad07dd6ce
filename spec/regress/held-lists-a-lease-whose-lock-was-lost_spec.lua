-- c:held() left out a lease whose Redis lock (the exactly-once policy's) was
-- lost: it asked lease:alive(), which answers false once the lock is gone.
-- The broker still hides the message for us, the core renews it, and only an
-- ack, a nack or its deadline ends it; a caller counting or giving back what
-- the consumer holds missed it. c:held() lists every lease the consumer holds
-- at the broker; the lock's loss shows on the lease: lease:alive() is false.
local mqlease = require "mqlease"
local lease_mod = require "mqlease.lease"
local devbroker = require "support.devbroker"

describe("c:held()", function()
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

  local function receive_one()
    assert(p:send("t", "x"))
    local deadline = mqlease.now() + 10
    while mqlease.now() < deadline do
      local m = assert(c:receive(1))[1]
      if m then return m end
    end
    error("nothing received")
  end

  -- the lease of m is in c:held() (compared as objects)
  local function listed(m)
    for _, lease in ipairs(c:held()) do
      if lease == m.lease then return true end
    end
    return false
  end

  it("lists a lease whose lock the policy saw lost, until it is released", function()
    local m = receive_one()
    m.lease:_lock_lost()   -- what the exactly-once policy calls on a lost lock
    assert.is_false(m.lease:alive())
    assert.is_true(lease_mod.held(m.lease))
    assert.is_true(listed(m))
    assert(m:ack())
    assert.is_false(listed(m))
  end)

  it("lists a lease whose lock keepalive reports the loss", function()
    local m = receive_one()
    -- a lock client whose keepalive 7 was lost (lease:alive() asks it)
    local lock_client = { keepalive_lost = function(_, id) return id == 7 end }
    lease_mod.hold_lock(m.lease, lock_client, 7)
    assert.is_false(m.lease:alive())
    assert.is_true(listed(m))
    assert(m:nack())
    assert.is_false(listed(m))
  end)
end)
