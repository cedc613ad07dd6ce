-- mqlease.run coalesces acks without a server: a stand-in consumer records each
-- AckMessage (consumer:ack) the run sends and answers per message.
local run = require "mqlease.run"
local wait = require "mqlease.loop"

-- A consumer that hands out n messages (as many as asked per receive), then
-- nothing; ack answers after a short yield (like a call in flight), failing
-- the ids in fail.
local function fake_consumer(n, fail)
  local c = {
    options = { release_delay = 1, batch = 32, request_timeout = 3 },
    _router = { client = { cancel_receives = function() end } },
    requests = {}, acked = {}, nacked = {}, given = 0,
  }
  function c.metrics() return {} end
  function c.count() end
  local function message(i)
    local m = { id = "m" .. i, body = "x", delivery_attempt = 1,
      lease = { alive = function() return true end } }
    function m.nack() c.nacked[#c.nacked + 1] = m.id; return true end
    function m.ack() error("mqlease.run acked one message by itself") end
    return m
  end
  function c.receive(_, want)
    if c.given >= n then
      wait.sleep(0.01)
      return {}
    end
    local msgs = {}
    for i = c.given + 1, math.min(n, c.given + want) do msgs[#msgs + 1] = message(i) end
    c.given = c.given + #msgs
    return msgs
  end
  function c.ack(_, msgs)
    c.requests[#c.requests + 1] = #msgs
    wait.sleep(0.001)
    local results, all = {}, true
    for i, m in ipairs(msgs) do
      if fail and fail[m.id] then
        results[i] = { err = "no such handle", code = "INVALID_RECEIPT_HANDLE" }
        all = false
      else
        results[i] = true
        c.acked[#c.acked + 1] = m.id
      end
    end
    if all then return true end
    return nil, "no such handle", "INVALID_RECEIPT_HANDLE", results
  end
  function c.close() end
  return c
end

describe("mqlease.run acks", function()
  it("coalesces the acks of handlers that finish together into requests of at most 32", function()
    local c = fake_consumer(100)
    local handled = 0
    local summary = run(c, function()
      handled = handled + 1
      return true
    end, { concurrency = 100, max_inflight = 100, signals = false, run_for = 5,
      stop = function() return #c.acked >= 100 end })
    assert.equal(100, handled)
    assert.equal(100, summary.acked)
    assert.equal(100, #c.acked)
    local total = 0
    for _, n in ipairs(c.requests) do
      assert.is_true(n <= 32, "a request of " .. n .. " entries")
      total = total + n
    end
    assert.equal(100, total)
    assert.is_true(#c.requests <= 8, #c.requests .. " requests for 100 acks")
  end)

  it("gives each handler the result of its own message", function()
    local c = fake_consumer(40, { m3 = true, m17 = true, m33 = true })
    local summary = run(c, function() return true end,
      { concurrency = 40, max_inflight = 40, signals = false, run_for = 5,
        stop = function() return #c.acked + 3 >= 40 and #c.requests > 0 end })
    assert.equal(37, #c.acked)
    assert.equal(37, summary.acked)
    for _, id in ipairs(c.acked) do
      assert.is_true(id ~= "m3" and id ~= "m17" and id ~= "m33")
    end
  end)

  it("still acks a lone message at once, in a request of its own", function()
    local c = fake_consumer(1)
    local summary = run(c, function() return true end,
      { signals = false, run_for = 5, stop = function() return #c.acked >= 1 end })
    assert.equal(1, summary.acked)
    assert.same({ 1 }, c.requests)
  end)
end)
