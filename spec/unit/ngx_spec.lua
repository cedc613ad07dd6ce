-- mqlease.ngx without nginx: a stand-in ngx shows what start() accepts and
-- arms, and that the /metrics text merges the consumers of a worker into one
-- exposition (each metric family once, every consumer's samples under it).

describe("mqlease.ngx", function()
  local NAMES = { "ngx", "ngx.semaphore", "mqlease.ngx", "mqlease.loop.ngx", "mqlease.consumer" }
  local saved

  before_each(function()
    saved = {}
    for _, name in ipairs(NAMES) do saved[name] = package.loaded[name]; package.loaded[name] = nil end
    package.loaded.ngx = {
      phase = "init_worker", timers = {},
      worker = { id = function() return 1 end, exiting = function() return false end },
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

  -- Two consumers of one group and topic in a worker carry the same labels
  -- (group, topic, worker): each series was written twice, which the
  -- Prometheus text format forbids ("Each line must have a unique combination
  -- of a metric name and labels", exposition_formats). It is written once,
  -- their values added (gauges that are no count at their maximum).
  it("writes each series once for two consumers of one group and topic, their values added", function()
    local prom = require "support.prom"
    local function same(received, inflight, invisible)
      return { group = "a", topic = "t", metrics = function()
        return { received = received, inflight = inflight, invisible_seconds = invisible, session_state = "ready" }
      end }
    end
    local text = require("mqlease.ngx").metrics_text({ same(3, 1, 30), same(5, 2, 60), consumer("b", 4) })
    local _, samples = prom.parse(text)
    assert.equal(8, prom.value(samples, "mqlease_messages_received_total", { group = "a" }))
    assert.equal(4, prom.value(samples, "mqlease_messages_received_total", { group = "b" }))
    assert.equal(3, prom.value(samples, "mqlease_inflight_leases", { group = "a" }))
    assert.equal(60, prom.value(samples, "mqlease_invisible_seconds", { group = "a" }))
    assert.equal(2, prom.value(samples, "mqlease_session_state", { group = "a", state = "ready" }))
    assert.equal(3, prom.value(samples, "rocketmq_consumer_cached_messages", { group = "a", consumer_group = "a" }))
  end)

  it("is empty while the worker has no consumer", function()
    assert.equal("", require("mqlease.ngx").metrics_text({}))
  end)

  -- a lua_shared_dict stand-in: set, get, get_keys
  local function shared_dict()
    local data = {}
    return {
      data = data,
      set = function(_, k, v) data[k] = v; return true end,
      get = function(_, k) return data[k] end,
      get_keys = function() local ks = {}; for k in pairs(data) do ks[#ks + 1] = k end; table.sort(ks); return ks end,
    }
  end

  it("raises naming a wrong 'workers' or 'shared_dict'", function()
    local ngx_ = package.loaded.ngx
    ngx_.shared = { there = shared_dict() }
    local mqngx = require "mqlease.ngx"
    local function start(o)
      o.consumers, o.handler = { CONSUMER }, function() end
      return function() mqngx.start(o) end
    end
    assert.has_error(start { workers = {} }, "mqlease.ngx.start: option 'workers' must be an array of worker ids (ngx.worker.id())")
    assert.has_error(start { workers = { 0, 1.5 } },
      "mqlease.ngx.start: option 'workers': workers[2] must be a worker id, an integer from 0")
    assert.has_error(start { shared_dict = 3 }, "mqlease.ngx.start: option 'shared_dict' must be a string")
    assert.has_error(start { shared_dict = "missing" },
      "mqlease.ngx.start: option 'shared_dict': no lua_shared_dict 'missing' in nginx.conf")
    assert.equal(0, #ngx_.timers)
    assert.is_true(mqngx.start { consumers = { CONSUMER, CONSUMER }, handler = function() end,
      workers = { 0, 2 }, shared_dict = "there" })
  end)

  -- Runs the armed timer with a stand-in ngx.thread; returns what it spawned.
  local function fire(worker_id, opts)
    local ngx_ = package.loaded.ngx
    ngx_.worker.id = function() return worker_id end
    local spawned = {}
    ngx_.thread = { spawn = function(fn, ...) spawned[#spawned + 1] = { fn, ... }; return #spawned end, wait = function() end }
    local mqngx = require "mqlease.ngx"
    opts.consumers, opts.handler = { CONSUMER, CONSUMER }, function() end
    assert.is_true(mqngx.start(opts))
    ngx_.timers[1][2](false)
    return spawned, mqngx
  end

  it("runs the consumers only on the workers listed in 'workers'", function()
    assert.equal(0, #fire(1, { workers = { 0, 2 } }))
  end)

  it("runs every consumer on a listed worker", function()
    assert.equal(2, #fire(2, { workers = { 0, 2 } }))
  end)

  it("runs them on every worker without 'workers'", function()
    assert.equal(2, #fire(3, {}))
  end)

  it("answers /metrics with every worker's text from the shared dict, each family once", function()
    local ngx_ = package.loaded.ngx
    local dict = shared_dict()
    ngx_.shared = { metrics = dict }
    ngx_.worker.exiting = function() return false end
    local mqngx = require "mqlease.ngx"
    -- what workers 0 and 2 published
    ngx_.worker.id = function() return 0 end
    dict.data["mqlease:metrics:0"] = mqngx.metrics_text({ consumer("a", 3) })
    ngx_.worker.id = function() return 2 end
    dict.data["mqlease:metrics:2"] = mqngx.metrics_text({ consumer("a", 7) })
    dict.data["other:key"] = "not ours"
    local spawned = fire(1, { shared_dict = "metrics" })
    assert.equal(3, #spawned)   -- the publisher and the two consumers
    local text = mqngx.metrics_text_all()
    assert.truthy(text:find('mqlease_messages_received_total{group="a",topic="t",worker="0"} 3', 1, true), text)
    assert.truthy(text:find('mqlease_messages_received_total{group="a",topic="t",worker="2"} 7', 1, true), text)
    assert.is_nil(text:find("not ours", 1, true))
    local types = {}
    for name in text:gmatch("# TYPE (%S+)") do
      assert.is_nil(types[name], "TYPE twice for " .. name)
      types[name] = true
    end
    -- and this worker published its own (no consumer yet: an empty text)
    assert.equal("", dict.data["mqlease:metrics:1"])
    -- two texts that share series (the worker label keeps real workers
    -- apart; a stand-in key repeats worker 0's): each series once, added
    dict.data["mqlease:metrics:0b"] = dict.data["mqlease:metrics:0"]
    local _, samples = require("support.prom").parse(mqngx.metrics_text_all())
    assert.equal(6, require("support.prom").value(samples, "mqlease_messages_received_total", { worker = "0" }))
  end)

  it("answers /leases with this worker's leases as JSON and / with the live page", function()
    local ngx_ = package.loaded.ngx
    local printed = {}
    ngx_.header = {}
    ngx_.print = function(s) printed[#printed + 1] = s end
    ngx_.say = function(s) printed[#printed + 1] = s .. "\n" end
    local mqngx = require "mqlease.ngx"
    mqngx.leases()
    assert.is_nil(ngx_.status)   -- 200
    assert.equal("application/json", ngx_.header["Content-Type"])
    local v = require("cjson").decode(table.concat(printed))
    assert.same({ 1, 0, "no consumer is running" }, { v.worker, #v.leases, v.note })
    printed = {}
    mqngx.leases_page()
    assert.equal("text/html; charset=utf-8", ngx_.header["Content-Type"])
    assert.matches("<h1>mqlease: leases held (worker 1)</h1>", table.concat(printed), 1, true)
    -- a consumer of this worker with no run yet: its gauges, and a note
    local view = mqngx.leases_view({ [2] = consumer("a", 3) })
    assert.equal("this consumer tracks no leases", view.note)
  end)
  -- OpenResty's privileged agent (ngx.process.enable_privileged_agent) runs
  -- init_worker_by_lua* too, and ngx.worker.id() is nil there: it is no
  -- worker. Taken for worker 0, it ran the consumers a second time where
  -- `workers` meant worker 0 alone, and its metrics overwrote worker 0's in
  -- the shared dict each second (the scrape saw worker 0's counters jump
  -- between two processes').
  it("starts nothing in a process with no worker id (the privileged agent), nor poses as worker 0", function()
    local ngx_ = package.loaded.ngx
    local dict = shared_dict()
    ngx_.shared = { metrics = dict }
    ngx_.worker.id = function() return nil end
    ngx_.NOTICE, ngx_.log = "notice", function() end
    local spawned = {}
    ngx_.thread = { spawn = function(fn, ...) spawned[#spawned + 1] = { fn, ... }; return #spawned end, wait = function() end }
    local mqngx = require "mqlease.ngx"
    assert.is_true(mqngx.start { consumers = { CONSUMER }, handler = function() end, workers = { 0 }, shared_dict = "metrics" })
    for _, t in ipairs(ngx_.timers) do t[2](false) end
    mqngx.publish()   -- its publisher's round, had it one
    assert.equal(0, #spawned)
    assert.is_nil(dict.data["mqlease:metrics:0"])
    -- its options are still checked
    package.loaded["mqlease.ngx"] = nil
    assert.has_error(function() require("mqlease.ngx").start { consumers = { CONSUMER } } end,
      "mqlease.ngx.start: option 'handler' must be a function")
  end)

  -- Making a consumer can raise, not only fail: the core's "cannot create an
  -- eventfd" (EMFILE) or "cannot start the client thread" (EAGAIN) are
  -- luaL_errors. Unprotected, the raise ended the light thread that serves
  -- the consumer, and this worker never consumed again until a reload.
  it("tries a consumer again after a backoff when making it raises, as when it fails", function()
    local ngx_ = package.loaded.ngx
    local exiting, attempts, logged = false, 0, {}
    ngx_.worker.exiting = function() return exiting end
    ngx_.worker.pid = function() return 4242 end
    ngx_.ERR, ngx_.NOTICE = "error", "notice"
    ngx_.log = function(_, ...) logged[#logged + 1] = table.concat({ ... }) end
    ngx_.sleep = function(s) require("mqlease.core").sleep(s) end
    package.loaded["mqlease.consumer"] = {
      new = function()
        attempts = attempts + 1
        if attempts == 1 then error("mqlease.core: cannot create an eventfd", 0) end
        exiting = true   -- the second try fails too, and the worker quits meanwhile
        return nil, "the session did not start", "TIMEOUT"
      end,
    }
    local spawned = fire(0, {})
    local serve = spawned[1]
    assert.has_no_error(function() serve[1]((table.unpack or unpack)(serve, 2)) end)
    assert.equal(2, attempts)
    assert.truthy(logged[1]:find("did not start: mqlease.core: cannot create an eventfd", 1, true), logged[1])
  end)
end)
