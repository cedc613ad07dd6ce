-- A SIGTERM that comes while mqlease.run already drains (run_for or stop
-- began it) was read by the run and dropped: the summary said "run_for", and
-- a caller that runs mqlease.run in a loop (run_for = 60, again and again)
-- went on after it, the operator's signal spent. The signal is now the
-- reason, so the caller knows to end; the drain under way goes on as it was.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

describe("a signal during a drain begun by run_for", function()
  it("becomes the run's reason, and the drain finishes as it was", function()
    local dv = devbroker.start({ "t" })
    local p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "t" } })
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "t", await = 1 })
    finally(function() c:close(); p:close(); dv.stop() end)
    assert(p:send("t", "work"))
    local t0, signalled = mqlease.now(), nil
    local summary = mqlease.run(c, function()
      -- the run's time is up at 0.3 s; the drain lets this handler finish (mode "wait")
      while mqlease.now() - t0 < 0.6 do mqlease.sleep(0.05) end
      -- (the shell's parent is this process)
      assert(os.execute("kill -TERM $PPID"))
      signalled = mqlease.now()
      mqlease.sleep(0.4)
      return true
    end, { signals = true, run_for = 0.3, grace = 10 })
    assert.truthy(signalled, "the handler never ran")
    assert.equal("signal TERM", summary.reason)
    assert.equal(1, summary.acked)
    assert.equal(0, summary.drained)
  end)
end)
