-- mqlease.ngx without nginx: a stand-in ngx shows what start() accepts and
-- arms, and that the /metrics text merges the consumers of a worker into one
-- exposition (each metric family once, every consumer's samples under it).

describe("mqlease.ngx", function()
  local NAMES = { "ngx", "ngx.semaphore", "mqlease.ngx", "mqlease.loop.ngx" }
  local saved

  before_each(function()
    saved = {}
    for _, name in ipairs(NAMES) do saved[name] = package.loaded[name]; package.loaded[name] = nil end
    package.loaded.ngx = {
      phase = "init_worker", timers = {},
      worker = { id = function() return 1 end },
      get_phase = function() return package.loaded.ngx.phase end,
      timer = { at = function(delay, fn) table.insert(package.loaded.ngx.timers, { delay, fn }); return true end },
    }
    package.loaded["ngx.semaphore"] = { new = function() return {} end }
  end)
  after_each(function()
    for _, name in ipairs(NAMES) do package.loaded[name] = saved[name] end
  end)

  local function consumer(group, received)
    return { group = group, topic = "t", metrics = function() return { received = received } end }
  end

  local CONSUMER = { endpoints = "127.0.0.1:8081", group = "g", topic = "t" }

  it("arms one timer from init_worker, and only once per worker", function()
    local mqngx = require "mqlease.ngx"
    assert.is_true(mqngx.start { consumers = { CONSUMER }, handler = function() return true end })
    assert.equal(1, #package.loaded.ngx.timers)
    assert.equal(0, package.loaded.ngx.timers[1][1])
    assert.has_error(function() mqngx.start { consumers = { CONSUMER }, handler = function() end } end,
      "mqlease.ngx.start: already started in this worker")
  end)

  it("refuses to start before the fork", function()
    package.loaded.ngx.phase = "init"
    assert.has_error(function()
      require("mqlease.ngx").start { consumers = { CONSUMER }, handler = function() end }
    end, "mqlease.ngx.start: call it from init_worker_by_lua* (got phase 'init'): consumers must start after the fork, once per worker")
    assert.equal(0, #package.loaded.ngx.timers)
  end)

  it("raises naming a wrong option before arming anything", function()
    local mqngx = require "mqlease.ngx"
    local function start(o) return function() mqngx.start(o) end end
    local h = function() end
    assert.has_error(start { handler = h }, "mqlease.ngx.start: option 'consumers' must be an array of consumer option tables")
    assert.has_error(start { consumers = { CONSUMER } }, "mqlease.ngx.start: option 'handler' must be a function")
    assert.has_error(start { consumers = { CONSUMER }, handler = h, signals = true },
      "mqlease.ngx.start: option 'signals' must be false: nginx owns the signals")
    assert.has_error(start { consumers = { CONSUMER }, handler = h, thread_pool = 4 },
      "mqlease.ngx.start: option 'thread_pool' must be a string")
    assert.has_error(start { consumers = { { group = "g", topic = "t" } }, handler = h })   -- endpoints
    assert.has_error(start { consumers = { CONSUMER }, handler = h, concurrency = 0 })
    assert.equal(0, #package.loaded.ngx.timers)
  end)

  it("declares each family once and labels each consumer's samples", function()
    local text = require("mqlease.ngx").metrics_text({ consumer("a", 3), consumer("b", 5) })
    local types, helps = {}, {}
    for name in text:gmatch("# TYPE (%S+)") do
      assert.is_nil(types[name], "TYPE twice for " .. name)
      types[name] = true
    end
    for name in text:gmatch("# HELP (%S+)") do
      assert.is_nil(helps[name], "HELP twice for " .. name)
      helps[name] = true
    end
    assert.is_true(types.mqlease_messages_received_total)
    assert.truthy(text:find('mqlease_messages_received_total{group="a",topic="t",worker="1"} 3', 1, true))
    assert.truthy(text:find('mqlease_messages_received_total{group="b",topic="t",worker="1"} 5', 1, true))
    -- both samples follow their family's one TYPE line
    local family = text:match("# TYPE mqlease_messages_received_total counter\n(.-)\n#")
    assert.equal(2, select(2, family:gsub("\n", "")) + 1)
  end)

  it("is empty while the worker has no consumer", function()
    assert.equal("", require("mqlease.ngx").metrics_text({}))
  end)
end)
