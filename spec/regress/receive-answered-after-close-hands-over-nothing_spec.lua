-- A receive whose messages came while another coroutine closed the consumer.
-- close() nacks every lease the core holds (nack_all), those of the messages
-- that receive had brought among them, and its own waits move the receive's
-- result out of the core; the receiving coroutine, resumed after the close
-- (or while close itself waited), still returned those messages: a handler
-- ran on messages whose leases were already given back to the broker, which
-- may hand them to another consumer at once. A receive that ends on a closed
-- consumer now answers CLOSED, as one started on it does, and its messages
-- stay given back.
local mqlease = require "mqlease"
local loop = require "mqlease.loop"
local core = require "mqlease.core"
local devbroker = require "support.devbroker"

-- A loop of our own for one coroutine: its waits yield to the spec, which
-- decides when it runs again.
local function stepped(co_of)
  return {
    name = "stepped",
    owns = function(co) return co == co_of() end,
    wait = function() coroutine.yield("wait") end,
    sleep = function() coroutine.yield("sleep") end,
    forget = function() end,
  }
end

describe("a receive answered while the consumer is closed", function()
  local dv, p, c
  before_each(function()
    dv = devbroker.start({ "t" })
    p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "t" } })
    c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "t",
      invisible = 10, await = 1, release_delay = 0 })
  end)
  after_each(function()
    c:close(); p:close(); dv.stop()
  end)

  it("hands over none of its messages: they were given back by the close", function()
    assert(p:send("t", "m1"))
    local co
    loop.use(stepped(function() return co end))
    co = coroutine.create(function() return c:receive(1, { await = 5 }) end)
    assert.same({ true, "wait" }, { coroutine.resume(co) })
    -- the receive's answer (the message) is in the core, then moved to the
    -- router by a wait of someone else's, as close's own waits do
    local router = c._router
    while next(router.results) == nil do
      core.wait(router.client:fd(), core.now() + 1)
      router:pump()
    end
    assert.is_true(c:close())
    local ok, msgs, err, code = coroutine.resume(co)
    assert.is_true(ok, msgs)
    assert.is_nil(msgs, "a closed consumer handed over " .. tostring(msgs and #msgs) .. " message(s)")
    assert.equal("CLOSED", code, err)
    -- given back, not leaked: another consumer of the group gets it
    local again = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "t", await = 1 })
    finally(function() again:close() end)
    local got, deadline = {}, mqlease.now() + 20
    while #got == 0 and mqlease.now() < deadline do got = assert(again:receive(1)) end
    assert.equal(1, #got)
    assert.equal("m1", got[1].body)
    assert(got[1]:ack())
  end)
end)
