-- A policy (or on_error, or nack_delay) that raised inside mqlease.run left
-- its message unsettled: the concurrency slot was gone for good and the lease
-- renewed for an hour. After max_inflight such errors the run consumed nothing
-- more. (Found by a review of the lease life cycle; failed before its fix.)
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

describe("a policy that raises inside mqlease.run", function()
  it("costs neither a slot nor the message", function()
    local dv = devbroker.start({ "boom" })
    local p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "boom" } })
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "boom",
      invisible = 10, await = 1, release_delay = 0 })
    finally(function() c:close(); p:close(); dv.stop() end)
    for i = 1, 6 do assert(p:send("boom", "m" .. i)) end
    local raised, handled, errors = 0, {}, 0
    local summary = mqlease.run(c, function(m)
      handled[m.body] = true
      return true
    end, {
      concurrency = 1, max_inflight = 2, signals = false,
      on_error = function() errors = errors + 1 end,
      policy = function(m, lease, handler)
        if m.delivery_attempt == 1 and raised < 3 then
          raised = raised + 1
          error("policy blew up on " .. m.body)
        end
        return mqlease.policy.plain(m, lease, handler)
      end,
      stop = function()
        local n = 0
        for _ in pairs(handled) do n = n + 1 end
        return n == 6
      end,
      run_for = 30,
    })
    local n = 0
    for _ in pairs(handled) do n = n + 1 end
    assert.equal(6, n, "every message handled, the three that raised on a later attempt")
    assert.equal("stop", summary.reason)
    assert.equal(3, summary.failed)
    assert.equal(3, errors)
  end)
end)
