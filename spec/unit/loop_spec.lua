-- Which event-loop adapter mqlease.loop picks, shown without any server: the
-- adapters are asked in order, each loaded only when its loop is present.

local saved

-- A fresh copy of the Lua layer per test (the core stays), so adapters added
-- or loop modules faked here never leak into other specs.
local function fresh()
  for name in pairs(package.loaded) do
    if (name:match("^mqlease") and name ~= "mqlease.core") or name == "ngx" or name == "ngx.semaphore" then
      package.loaded[name] = nil
    end
  end
  return require "mqlease.loop"
end

-- Runs fn in a plain coroutine (owned by no loop) and returns its results.
local function in_coroutine(fn)
  local co = coroutine.create(fn)
  local ok, a, b = coroutine.resume(co)
  assert(ok, a)
  return a, b
end

-- A stand-in for OpenResty's ngx and ngx.semaphore, in the given phase.
local function fake_ngx(phase)
  local ngx = { phase = phase, slept = {} }
  ngx.get_phase = function() return ngx.phase end
  ngx.sleep = function(s) ngx.slept[#ngx.slept + 1] = s end
  package.loaded.ngx = ngx
  package.loaded["ngx.semaphore"] = { new = function() return {} end }
  return ngx
end

local function recording_adapter(owner)
  local a = { name = "mine", calls = {} }
  function a.owns() return owner end
  function a.wait(fd, deadline) a.calls[#a.calls + 1] = { "wait", fd, deadline } end
  function a.sleep(s) a.calls[#a.calls + 1] = { "sleep", s } end
  function a.forget(fd) a.calls[#a.calls + 1] = { "forget", fd } end
  return a
end

-- Each test of a describe block that calls this gets package.loaded back as
-- it was before the test (the adapters and stand-ins a test loads go).
local function keep_loaded_modules()
  before_each(function()
    saved = {}
    for k, v in pairs(package.loaded) do saved[k] = v end
  end)
  after_each(function()
    for k in pairs(package.loaded) do package.loaded[k] = nil end
    for k, v in pairs(saved) do package.loaded[k] = v end
  end)
end

describe("mqlease.loop picks an event-loop adapter", function()
  keep_loaded_modules()

  it("blocks in poll(2) on the main thread and in a coroutine no loop owns", function()
    local wait = fresh()
    assert.equal("poll", wait.adapter().name)
    assert.equal("poll", in_coroutine(function() return wait.adapter().name end))
  end)

  it("yields to mqlease's own scheduler inside its tasks, and only there", function()
    local wait = fresh()
    local scheduler = require "mqlease.scheduler"
    local s = scheduler.new()
    local inside
    s:spawn(function() inside = wait.adapter().name end)
    s:loop()
    assert.equal("scheduler", inside)
    assert.equal("poll", wait.adapter().name)
  end)

  it("waits through cqueues inside a controller", function()
    local wait = fresh()
    local cqueues = require "cqueues"
    local cq = cqueues.new()
    local inside
    cq:wrap(function() inside = wait.adapter().name end)
    assert(cq:loop())
    assert.equal("cqueues", inside)
    assert.equal("poll", in_coroutine(function() return wait.adapter().name end))
  end)

  it("waits through nginx in a light thread of a yieldable phase, never in init_worker", function()
    local wait = fresh()
    local ngx = fake_ngx("timer")
    assert.equal("ngx", in_coroutine(function() return wait.adapter().name end))
    assert.equal("poll", wait.adapter().name)          -- the main thread never yields
    ngx.phase = "init_worker"
    assert.equal("poll", in_coroutine(function() return wait.adapter().name end))
    ngx.phase = "content"
    in_coroutine(function() wait.sleep(0.25) end)
    assert.same({ 0.25 }, ngx.slept)
  end)

  it("asks an adapter added with use() before the built-in ones", function()
    local wait = fresh()
    local mine = recording_adapter(true)
    wait.use(mine)
    wait.wait(7, 12.5)
    wait.sleep(0.5)
    assert.same({ { "wait", 7, 12.5 }, { "sleep", 0.5 } }, mine.calls)
  end)

  it("skips an added adapter that does not own the coroutine", function()
    local wait = fresh()
    wait.use(recording_adapter(false))
    assert.equal("poll", wait.adapter().name)
  end)

  it("tells every loaded adapter to forget a descriptor about to close", function()
    local wait = fresh()
    local mine = recording_adapter(false)
    wait.use(mine)
    wait.forget(42)
    assert.same({ { "forget", 42 } }, mine.calls)
  end)

  it("raises naming the function an adapter lacks", function()
    local wait = fresh()
    local bad = recording_adapter(true)
    bad.forget = nil
    assert.has_error(function() wait.use(bad) end, "mqlease.loop.use: the adapter lacks function 'forget'")
  end)

  it("gives mqlease.run the adapter's scheduler, or its own", function()
    local wait = fresh()
    assert.equal("mqlease.scheduler", getmetatable(wait.scheduler()).__name)
    local mine = recording_adapter(true)
    local tasks = {}
    mine.scheduler = function() return tasks end
    wait.use(mine)
    assert.equal(tasks, wait.scheduler())
  end)

  it("refuses signals = true in a loop whose scheduler cannot watch signals", function()
    local wait = fresh()
    local run = require "mqlease.run"
    local mine = recording_adapter(true)
    mine.scheduler = function() return { spawn = function() end } end
    wait.use(mine)
    local consumer = { options = { release_delay = 1, batch = 1 }, _router = { client = {} } }
    assert.has_error(function() run(consumer, function() return true end, { signals = true }) end,
      "mqlease.run: option 'signals' must be false in this event loop (it owns the signals; use 'stop')")
  end)
end)

-- OpenResty's light threads, semaphores and sleeps as plain coroutines: a
-- thread runs at spawn up to its first yield; a wait of 0 seconds, or on a
-- semaphore with a resource, does not yield (as ngx.semaphore's wait does
-- not); anything else yields, and step() resumes each suspended thread once.
local function light_threads()
  local ngx = fake_ngx("timer")
  ngx.threads, ngx.raised, ngx.logged = {}, {}, {}
  ngx.ERR = "error"
  ngx.worker = { exiting = function() return false end }
  ngx.log = function(_, ...) ngx.logged[#ngx.logged + 1] = table.concat({ ... }) end
  ngx.sleep = function(s) ngx.slept[#ngx.slept + 1] = s; coroutine.yield("sleep") end
  local function resume(co)
    local ok, err = coroutine.resume(co)
    if not ok then ngx.raised[#ngx.raised + 1] = tostring(err) end
  end
  ngx.thread = {
    spawn = function(fn)
      local co = coroutine.create(fn)
      ngx.threads[#ngx.threads + 1] = co
      resume(co)
      return co
    end,
  }
  function ngx.step()
    for _, co in ipairs(ngx.threads) do
      if coroutine.status(co) == "suspended" then resume(co) end
    end
  end
  package.loaded["ngx.semaphore"] = {
    new = function(n)
      local sema = { n = n or 0 }
      function sema.count() return sema.n end
      function sema.post(_, k) sema.n = sema.n + (k or 1) end
      function sema.wait(_, t)
        if sema.n > 0 then sema.n = sema.n - 1; return true end
        if t == 0 then return nil, "timeout" end
        coroutine.yield("sema")
        return nil, "timeout"
      end
      return sema
    end,
  }
  return ngx
end

describe("mqlease.loop.ngx's tasks (mqlease.run in OpenResty)", function()
  keep_loaded_modules()

  it("a hold of 0 s or less yields once, as under mqlease.scheduler: a policy that defers at once lets the others run", function()
    fresh()
    local ngx = light_threads()
    local core = require "mqlease.core"
    local s = require("mqlease.loop.ngx").scheduler()
    local waiter = require("mqlease.run.waiter").new(s, function() return false end)
    local m = { lease = { alive = function() return true end } }
    local why
    local co = s:spawn(function() why = waiter:hold(m, 0) end)
    ngx.step()   -- past its first sleep: into the hold
    assert.is_nil(why, "the hold returned without yielding once")
    assert.equal("suspended", coroutine.status(co))
    ngx.step()
    assert.equal("again", why)
    -- and a park whose deadline has passed yields too
    local parked = 0
    s:spawn(function() s:park(core.now() - 1); parked = parked + 1 end)
    ngx.step()
    assert.equal(0, parked)
    ngx.step()
    assert.equal(1, parked)
    assert.same({}, ngx.raised)
  end)

  it("a task that raises is reported with its own error, and the loop is told it ended", function()
    fresh()
    local ngx = light_threads()
    local s = require("mqlease.loop.ngx").scheduler()   -- as mqlease.run makes it: no on_error
    s:spawn(function() error("boom", 0) end)
    ngx.step()
    assert.same({}, ngx.raised)
    assert.equal(0, s.count)
    assert.equal(1, s.done:count())
    assert.equal(1, #ngx.logged)
    assert.truthy(ngx.logged[1]:find("boom", 1, true), ngx.logged[1])
  end)
end)
