-- mqlease.scheduler without a server: parked tasks sleep until wake(), a
-- deadline wait runs once due, and a turn's poll looks only at the tasks that
-- wait for a descriptor, and at deadlines only when the earliest may have
-- passed (hundreds of parked tasks cost it nothing).
local scheduler = require "mqlease.scheduler"
local core = require "mqlease.core"
local clock_mod = require "spec.support.model.clock"

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

describe("mqlease.scheduler", function()
  it("wakes a parked task only through wake(), and runs a deadline wait once due", function()
    -- in simulated time (poll moves the clock by what it would sleep), so the
    -- check of how long poll slept is exact, whatever the machine's load
    clock_mod.simulate(60, function()
      local s = scheduler.new(function(_, err) error(err) end)
      local log, sleepers = {}, {}
      for i = 1, 300 do
        sleepers[i] = s:spawn(function()
          s:park()
          log[#log + 1] = "woken " .. i
        end)
      end
      local started = core.now()
      s:spawn(function()
        s:park(core.now() + 0.05)
        log[#log + 1] = "deadline"
        s:wake(sleepers[7])
    end)
    s:run_ready()   -- every task runs up to its wait
    assert.equal(0, #log)
    -- the deadline wait is filed; the 300 parked ones are not
    assert.equal(1, count(s.deadlines))
    assert.equal(0, count(s.fd_waits))
    while #log < 2 do s:poll(1); s:run_ready() end
    assert.same({ "deadline", "woken 7" }, log)
    -- poll slept until the deadline: not past it by its 1 s bound
    assert.near(0.05, core.now() - started, 1e-9)
    assert.equal(0, count(s.deadlines))
    assert.is_nil(s.next_deadline)
    assert.equal(299, s.count)
    -- a wake-up of a task that is not waiting changes nothing
    s:wake(sleepers[7])
    s:run_ready()
    assert.equal(2, #log)
    end)
  end)

  it("gives up a task's deadline when another task wakes it first", function()
    local s = scheduler.new(function(_, err) error(err) end)
    local woke_at
    local sleeper = s:spawn(function()
      s:park(core.now() + 30)
      woke_at = core.now()
    end)
    s:spawn(function() s:wake(sleeper) end)
    s:run_ready()
    assert.equal(0, count(s.deadlines))   -- woken in the same round: nothing left to poll for
    local started = core.now()
    s:poll(1)   -- the ready queue is not empty: poll does not sleep
    s:run_ready()
    assert.is_truthy(woke_at)
    assert.is_true(core.now() - started < 0.5)
    assert.equal(0, s.count)
    -- its deadline may still be the next one the scheduler knows of: that
    -- costs an early look at the deadlines, which finds none
    s:spawn(function() s:park(core.now() + 0.02) end)
    s:run_ready()
    local t0 = core.now()
    while s.count > 0 do s:poll(1); s:run_ready() end
    assert.is_true(core.now() - t0 < 0.5)
    assert.is_nil(s.next_deadline)
  end)
end)

describe("mqlease.scheduler against a task that waits for what it cannot", function()
  it("a deadline of NaN fails its task and does not stop every other timed wait", function()
    local errs = {}
    local s = scheduler.new(function(_, err) errs[#errs + 1] = tostring(err) end)
    local woke = false
    s:spawn(function() s:park(0 / 0) end)
    s:spawn(function()
      s:park(core.now() + 0.02)
      woke = true
    end)
    s:run_ready()
    local started = core.now()
    while not woke and core.now() - started < 0.5 do
      s:poll(0.05)
      s:run_ready()
    end
    assert.is_true(woke, "a wait with a deadline never woke after a NaN deadline")
    assert.equal(1, #errs)
    assert.truthy(errs[1]:find("NaN", 1, true), errs[1])
    assert.equal(0, s.count)
  end)

  it("fails a task that yields something it cannot wait for, and runs the others on", function()
    local errs = {}
    local s = scheduler.new(function(_, err) errs[#errs + 1] = tostring(err) end)
    local done = false
    s:spawn(function() coroutine.yield(true) end)
    s:spawn(function() coroutine.yield({ deadline = "soon" }) end)
    s:spawn(function() coroutine.yield({ fd = "x" }) end)
    s:spawn(function()
      s:park(core.now() + 0.01)
      done = true
    end)
    local ok, err = pcall(s.loop, s)
    assert.is_true(ok, tostring(err))
    assert.is_true(done)
    assert.equal(3, #errs)
    assert.equal(0, s.count)
  end)
end)

describe("mqlease.router under mqlease.scheduler", function()
  local router_mod = require "mqlease.router"
  local adapter = require "mqlease.loop.scheduler"

  -- a core client that holds events until the spec hands them over
  local function fake_client()
    local queue = {}
    return {
      queue = queue,
      fd = function() return 99 end,
      closed = function() return false end,
      events = function()
        local out = { table.unpack(queue) }
        for i = #queue, 1, -1 do queue[i] = nil end
        return out
      end,
    }
  end

  it("wakes a task registered with expect() once, when its result comes, and forgets it", function()
    local s = scheduler.new(function(_, err) error(err) end)
    local client = fake_client()
    local r = router_mod.new(client)
    local previous = adapter.set_scheduler(s)
    local resumes = 0
    -- parked as a Redis command is, from joining its batch to its reply; counts its wake-ups
    local waiter = s:spawn(function()
      while true do
        resumes = resumes + 1
        s:park(core.now() + 5)
      end
    end)
    s:run_ready()
    -- the "flush", a task of the same scheduler, registers the waiter for op 41
    local registered
    s:spawn(function() registered = r:expect(41, waiter, s) end)
    s:run_ready()
    assert.is_true(registered)
    assert.equal(waiter, r.waiters[41])
    assert.equal(1, resumes)
    -- another op's result wakes nobody
    client.queue[1] = { kind = "op", op = 40, ok = true }
    r:pump()
    s:run_ready()
    assert.equal(1, resumes)
    -- its own result wakes it, and result() hands the event over and forgets the registration
    client.queue[1] = { kind = "op", op = 41, ok = true, reply = "PONG" }
    r:pump()
    assert.is_false(s.tasks[waiter])   -- ready
    assert.equal("PONG", r:result(41).reply)
    assert.is_nil(r.waiters[41])
    assert.is_nil(r.waiter_sched[41])
    adapter.set_scheduler(previous)
  end)

  it("registers nothing for a scheduler that is not the caller's", function()
    local s = scheduler.new(function(_, err) error(err) end)
    local r = router_mod.new(fake_client())
    local co = coroutine.create(function() end)
    assert.is_false(r:expect(7, co, s))   -- called from the main thread, not a task of s
    assert.is_nil(r.waiters[7])
  end)

  it("registers a whole batch with expect_all(): op first + i - 1 wakes waiter i, and no other", function()
    local s = scheduler.new(function(_, err) error(err) end)
    local client = fake_client()
    local r = router_mod.new(client)
    local previous = adapter.set_scheduler(s)
    local resumes = {}
    local waiters = {}
    for i = 1, 3 do
      resumes[i] = 0
      waiters[i] = s:spawn(function()
        while true do
          resumes[i] = resumes[i] + 1
          s:park(core.now() + 5)
        end
      end)
    end
    s:run_ready()
    local registered
    s:spawn(function() registered = r:expect_all(20, waiters, s) end)
    s:run_ready()
    assert.is_true(registered)
    assert.same({ waiters[1], waiters[2], waiters[3] }, { r.waiters[20], r.waiters[21], r.waiters[22] })
    -- the second op's result wakes the second waiter only
    client.queue[1] = { kind = "op", op = 21, ok = true, reply = "two" }
    r:pump()
    s:run_ready()
    assert.same({ 1, 2, 1 }, resumes)
    assert.equal("two", r:result(21).reply)
    assert.is_nil(r.waiters[21])
    assert.equal(waiters[3], r.waiters[22])
    adapter.set_scheduler(previous)
  end)

  it("expect_all() registers none of a batch for a scheduler that is not the caller's", function()
    local s = scheduler.new(function(_, err) error(err) end)
    local r = router_mod.new(fake_client())
    local cos = { coroutine.create(function() end), coroutine.create(function() end) }
    assert.is_false(r:expect_all(7, cos, s))
    assert.is_nil(r.waiters[7])
    assert.is_nil(r.waiters[8])
  end)
end)
