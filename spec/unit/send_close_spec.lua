-- producer:send_many when the producer is closed under it (by another
-- coroutine), where an adversary reviewing the send path found it wrong. The
-- spec failed before its fix. A real mqlease.producer over the stand-in core
-- client and router of spec/support/transaction_fakes.lua; no server.
local producer_mod = require "mqlease.producer"
local fakes = require "support.transaction_fakes"

describe("producer:send_many closed under it", function()
  -- One message in flight (max_inflight 1) and two waiting for a slot when
  -- another coroutine closes the producer: the one in flight may or may not
  -- be stored, but the two were never handed to the core. Their results said
  -- "the producer was closed before the proxy answered (the message may or
  -- may not be stored)", as the one in flight's: a caller that resends what
  -- may be missing (and leaves alone what may be stored, to not store it
  -- twice) could not tell the messages never sent from it.
  it("says a message never sent was not sent, and the one in flight may be stored", function()
    local p = fakes.real_producer(producer_mod)
    p._max = 1   -- max_inflight = 1 (the stand-in producer takes the defaults)
    local router, closed = p._router, false
    -- the first wait for an answer is where the other coroutine closes the producer;
    -- the proxy has answered nothing yet
    function router.pump()
      if not closed then closed = true; p:close() end
    end
    local results, failed = p:send_many("B", { "one", "two", "three" })
    assert.equal(3, failed)
    assert.equal(1, #p.sends, "only the first message reached the core")
    assert.equal("CLOSED", results[1].code)
    assert.matches("may or may not be stored", results[1].err, 1, true)
    for i = 2, 3 do
      assert.equal("CLOSED", results[i].code)
      assert.not_matches("may or may not be stored", results[i].err, 1, true)
      assert.matches("was not sent", results[i].err, 1, true)
    end
  end)
end)
