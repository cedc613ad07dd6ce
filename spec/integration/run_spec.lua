-- mqlease.run: many handlers at once as coroutines, failures become nacks, and
-- the in-flight limit holds.
local mqlease = require "mqlease"
local env = require "support.env"

local function fresh(base, opts)
  local topic = env.topic(base)
  opts = opts or {}
  opts.group = env.name("g_" .. base)
  opts.topic = topic
  opts.await = opts.await or 2
  local c = env.consumer(opts)
  assert(c:receive(1, { await = 0 }))
  return c, topic
end

describe("mqlease.run", function()
  local producer
  setup(function() producer = env.producer() end)
  teardown(function() producer:close() end)

  it("runs 200 sleeping handlers 50 at a time in about 1/50 of the serial time", function()
    local c, topic = fresh("sched_conc", { batch = 32 })
    for i = 1, 200 do assert(producer:send(topic, "job " .. i)) end
    local handled, running, peak = 0, 0, 0
    local t0 = mqlease.now()
    local summary = mqlease.run(c, function(m)
      running = running + 1
      if running > peak then peak = running end
      mqlease.sleep(0.5)   -- yields to the scheduler
      running = running - 1
      handled = handled + 1
      return true
    end, { concurrency = 50, signals = false, stop = function() return handled >= 200 end })
    local elapsed = mqlease.now() - t0
    assert.equal(200, handled)
    assert.equal(200, summary.acked)
    assert.equal(0, summary.failed)
    assert.equal(50, peak)
    -- serial: 100 s; 50 at a time: 2 s plus receiving and acking (peak above says 50 ran
    -- at once; this only says they overlapped in time, with room for a loaded machine)
    assert.is_true(elapsed < 100 / 5, ("took %.1f s"):format(elapsed))
    assert.equal("stop", summary.reason)
  end)

  it("nacks when a handler raises, and keeps going", function()
    local c, topic = fresh("sched_raise")
    local bad = assert(producer:send(topic, "raise on first attempt"))
    for i = 1, 5 do assert(producer:send(topic, "fine " .. i)) end
    local errors, done, attempts = {}, {}, {}
    local summary = mqlease.run(c, function(m)
      attempts[#attempts + 1] = m.delivery_attempt
      if m.id == bad and m.delivery_attempt == 1 then error("boom") end
      done[m.id] = m.delivery_attempt
      return true
    end, { signals = false, nack_delay = 0,
      on_error = function(m, err) errors[#errors + 1] = { id = m.id, err = err } end,
      stop = function() local n = 0; for _ in pairs(done) do n = n + 1 end; return n >= 6 end })
    assert.equal(1, #errors)
    assert.equal(bad, errors[1].id)
    assert.matches("boom", errors[1].err)
    assert.equal(2, done[bad])
    assert.equal(6, summary.acked)
    assert.equal(1, summary.nacked)
    assert.equal(1, summary.failed)
  end)

  it("never holds more than max_inflight messages, seen from inside the handlers", function()
    local c, topic = fresh("sched_inflight", { batch = 32 })
    for i = 1, 40 do assert(producer:send(topic, "x" .. i)) end
    local handled, worst = 0, 0
    mqlease.run(c, function()
      local held = c:metrics().inflight
      if held > worst then worst = held end
      mqlease.sleep(0.2)
      handled = handled + 1
      return true
    end, { concurrency = 5, max_inflight = 8, signals = false, stop = function() return handled >= 40 end })
    assert.equal(40, handled)
    assert.is_true(worst <= 8, "held " .. worst)
    assert.is_true(worst >= 5)
  end)

  it("pauses receiving at max_inflight_bytes", function()
    -- two messages per receive, so the limit is seen between receives
    local c, topic = fresh("sched_bytes", { batch = 2 })
    local body = ("b"):rep(1000)
    for _ = 1, 20 do assert(producer:send(topic, body)) end
    local handled, worst = 0, 0
    mqlease.run(c, function()
      local held = c:metrics().inflight
      if held > worst then worst = held end
      mqlease.sleep(0.5)   -- long enough for the next receive to land while handlers run
      handled = handled + 1
      return true
    end, { concurrency = 10, max_inflight_bytes = 3000, signals = false, stop = function() return handled >= 20 end })
    assert.equal(20, handled)
    -- receiving stops once 3000 bytes are held; the last receive may bring a batch past it
    assert.is_true(worst <= 4, "held " .. worst)
    assert.is_true(worst >= 3, "held only " .. worst)
  end)

  it("rejects bad run options by name", function()
    local c = fresh("sched_opts")
    local ok, err = pcall(mqlease.run, c, function() return true end, { concurency = 3 })
    assert.is_false(ok)
    assert.matches("unknown option 'concurency'", err)
    ok, err = pcall(mqlease.run, c, function() return true end, { concurrency = 10, max_inflight = 5 })
    assert.is_false(ok)
    assert.matches("'max_inflight' %(5%) must be at least 'concurrency' %(10%)", err)
    c:close()
  end)
end)
