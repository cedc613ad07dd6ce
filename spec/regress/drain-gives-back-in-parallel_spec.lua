-- Regression: issue 20, item 7. mqlease.run's drain gave the messages that
-- were received but never started back one at a time, each nack waiting for
-- the previous one's answer. Against a slow broker (or one behind a
-- partition) n queued messages took n answers' time, past the watcher's
-- deadline, and the process was ended without its summary. They go back all
-- at once now, as the running ones already did.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

local N = 12            -- messages held when the stop comes: 1 running, 11 queued
local LATE = 1.5        -- seconds the dev broker takes to answer each ChangeInvisibleDuration

describe("the drain of mqlease.run against a slow broker", function()
  local dv, producer, consumer
  before_each(function()
    dv = devbroker.start({ "slowdrain" }, { "--delay-change-ms", tostring(LATE * 1000) })
    producer = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "slowdrain" } })
  end)
  after_each(function()
    if consumer then consumer:close() end
    consumer = nil
    producer:close()
    dv.stop()
  end)

  it("gives back every held message within about one answer's time, not one per message", function()
    for i = 1, N do assert(producer:send("slowdrain", "m" .. i)) end
    consumer = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g_slowdrain",
      topic = "slowdrain", invisible = 30, await = 5, batch = 16, release_delay = 1 })
    local stopped_at
    local summary = mqlease.run(consumer, function()
      mqlease.sleep(60)   -- the one running handler outlives the drain
      return true
    end, { concurrency = 1, max_inflight = N, grace = 0, mode = "nack", signals = false,
      stop = function()
        if not stopped_at and consumer:metrics().received >= N then stopped_at = mqlease.now() end
        return stopped_at ~= nil
      end })
    local took = mqlease.now() - stopped_at
    assert.equal("stop", summary.reason)
    assert.equal(N, summary.received)
    assert.equal(N, summary.drained)            -- each given back, none lost or kept
    assert.equal(0, consumer:metrics().inflight)
    -- one at a time cannot take less than (N - 1) answers: 16.5 s; all at once
    -- takes one answer (two if a renewal was out first) plus the receive's end
    assert.is_true(took < (N - 1) * LATE / 2, ("the drain took %.1f s"):format(took))
  end)
end)
