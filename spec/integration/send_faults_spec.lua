-- Sends in flight against the dev broker, which can hold its answers back:
-- max_inflight bounds the calls open at once, and every send gets a result
-- when the proxy freezes, dies or the producer closes under it -- none hangs,
-- none is lost.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"
local scheduler = require "mqlease.scheduler"

local function bodies(n, prefix)
  local list = {}
  for i = 1, n do list[i] = prefix .. i end
  return list
end

-- Counts the results of send_many by outcome: { ok = n, [code] = n }.
local function outcomes(results)
  local by = {}
  for _, r in ipairs(results) do
    local k = r.ok and "ok" or r.code
    by[k] = (by[k] or 0) + 1
  end
  return by
end

-- Runs fn() in a task of a scheduler of its own beside watch(p) tasks, until all end.
local function run_tasks(...)
  local s = scheduler.new(function(_, err) error(err) end)
  for _, fn in ipairs({ ... }) do s:spawn(fn) end
  s:loop()
end

-- Waits (yielding) until p has n sends in flight.
local function until_inflight(p, n)
  while p:inflight() < n do mqlease.sleep(0.01) end
end

describe("sends in flight", function()
  -- one dev broker for the describe (a stop takes a second or two); each test
  -- starts with no fault set
  local dv
  setup(function() dv = devbroker.start({ "t1" }) end)
  teardown(function() dv.stop() end)
  before_each(function()
    assert.matches("^ok", dv.control("set delay_send_ms 0"))
    assert.matches("^ok", dv.control("set paused 0"))
  end)

  -- messages the dev broker has stored so far
  local function stored()
    return tonumber(dv.control("stats"):match("sent=(%d+)"))
  end

  local function producer(opts)
    opts = opts or {}
    opts.endpoints = dv.endpoints
    local p = assert(mqlease.producer(opts))
    assert(p:send("t1", "route"))   -- the topic's route, learned once
    return p
  end

  it("keeps at most max_inflight sends open, and answers every message of a batch in order", function()
    local p = producer { max_inflight = 8 }
    local before = stored()
    assert.matches("^ok", dv.control("set delay_send_ms 100"))
    local results, failed, most = nil, nil, 0
    run_tasks(function() results, failed = p:send_many("t1", bodies(40, "m")) end,
      function()
        while not results do
          most = math.max(most, p:inflight())
          mqlease.sleep(0.01)
        end
      end)
    assert.equal(0, failed)
    assert.equal(8, most)
    assert.equal(40, #results)
    local ids = {}
    for _, r in ipairs(results) do
      assert.is_true(r.ok)
      assert.is_number(r.offset)
      assert.is_nil(ids[r.message_id], "a message id twice")
      ids[r.message_id] = true
    end
    assert.equal(before + 40, stored())
    local none, nfailed = p:send_many("t1", {})
    assert.same({}, none)
    assert.equal(0, nfailed)
    p:close()
  end)

  it("sends from many coroutines at once, each getting its own id", function()
    local p = producer { max_inflight = 16 }
    local before = stored()
    local ids, n = {}, 0
    local tasks = {}
    for t = 1, 40 do
      tasks[t] = function()
        for i = 1, 10 do
          local id, offset = p:send("t1", ("c%d-%d"):format(t, i))
          assert.is_string(id, offset)
          assert.is_nil(ids[id])
          ids[id] = true
          n = n + 1
        end
      end
    end
    run_tasks((table.unpack or unpack)(tasks))
    assert.equal(400, n)
    assert.equal(0, p:inflight())
    assert.equal(before + 400, stored())
    p:close()
  end)

  it("gives each of 500 sends a TIMEOUT when the proxy stops answering (every call has a deadline)", function()
    local p = producer { max_inflight = 500, request_timeout = 1 }
    assert.matches("^ok", dv.control("set paused 1"))
    local results, failed = p:send_many("t1", bodies(500, "frozen"))
    assert.equal(500, failed)
    assert.same({ TIMEOUT = 500 }, outcomes(results))
    assert.equal(0, p:inflight())
    assert.matches("^ok", dv.control("set paused 0"))
    p:close()
  end)

  it("fails every send in flight with CLOSED when the producer closes under them", function()
    local p = producer { max_inflight = 64, request_timeout = 10 }
    assert.matches("^ok", dv.control("set delay_send_ms 10000"))
    local results, failed, single = nil, nil, nil
    run_tasks(function() results, failed = p:send_many("t1", bodies(200, "closing")) end,
      function() single = { p:send("t1", "one more") } end,
      function()
        until_inflight(p, 64)
        p:close()
      end)
    -- 63 or 64 of the batch were in flight, the rest never started: all CLOSED
    assert.equal(200, failed)
    assert.same({ CLOSED = 200 }, outcomes(results))
    assert.is_nil(single[1])
    assert.equal("CLOSED", single[3])
    assert.equal(0, p:inflight())
    local after = p:send_many("t1", { "late" })
    assert.equal("CLOSED", after[1].code)
  end)

  it("takes the reply of a send whose coroutine is gone, so no result is left behind", function()
    local p = producer {}
    assert.matches("^ok", dv.control("set delay_send_ms 200"))
    local s = scheduler.new()
    s:spawn(function() p:send("t1", "abandoned") end)
    s:loop(function() return p:inflight() == 1 end)
    s = nil   -- the task is never resumed
    assert.matches("^ok", dv.control("set delay_send_ms 0"))
    local results = p:send_many("t1", { "next" })
    assert.is_true(results[1].ok)
    -- the abandoned reply arrived first (200 ms late) or is taken while we wait for it
    while p:inflight() > 0 do mqlease.sleep(0.05); p._router:pump() end
    assert.is_nil(next(p._router.results))
    p:close()
  end)

  describe("when the proxy dies", function()
    local doomed
    before_each(function() doomed = devbroker.start({ "t1" }) end)
    after_each(function() doomed.stop() end)

    it("gives each send in flight an error when the proxy dies, and refuses none afterwards silently", function()
      local p = assert(mqlease.producer { endpoints = doomed.endpoints, max_inflight = 500, request_timeout = 2 })
      assert(p:send("t1", "route"))
      assert.matches("^ok", doomed.control("set delay_send_ms 10000"))
      local results, failed
      run_tasks(function() results, failed = p:send_many("t1", bodies(500, "doomed")) end,
        function()
          until_inflight(p, 500)
          os.execute(("kill -9 %d"):format(doomed.pid))
        end)
      assert.equal(500, failed)
      assert.equal(500, #results)
      for _, r in ipairs(results) do
        assert.is_false(r.ok)
        assert.is_string(r.err)
        assert.is_string(r.code)
      end
      assert.equal(0, p:inflight())
      -- the next send finds no proxy: an error, not a hang
      local id, err, code = p:send("t1", "after")
      assert.is_nil(id)
      assert.is_string(err)
      assert.is_string(code)
      p:close()
    end)
  end)
end)
