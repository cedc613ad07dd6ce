-- mqlease lab scenarios: a scenario table is checked before anything starts,
-- and a bad field raises an error that names it; the shipped examples pass;
-- the workload's handler times have the tail the scenario asks for.
local scenario = require "mqlease.lab.scenario"
local workload = require "mqlease.lab.workload"
local lab_cli = require "mqlease.cli.lab"

local function base()
  return { workload = { rate = 10, duration = 5 } }
end

local function with(patch)
  local t = base()
  for k, v in pairs(patch) do t[k] = v end
  return t
end

local function raises(t, pattern)
  local ok, err = pcall(scenario.check, t)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err), 1, true)
  return err
end

describe("a lab scenario", function()
  it("is completed with defaults", function()
    local s = scenario.check(base(), "x")
    assert.equal("x", s.name)
    assert.equal(1, s.time_scale)
    assert.equal(2, s.fleet.workers)
    assert.equal("plain", s.fleet.policy.kind)
    assert.equal("drain", s.fleet.shutdown)
    assert.same({ fixed = 1 }, s.workload.handler)
    assert.same({}, s.faults)
  end)

  it("names a bad workload field", function()
    raises({ workload = { rate = -1, duration = 5 } }, "scenario.workload.rate must be a number")
    raises({ workload = { rate = 1 } }, "scenario.workload.duration is required")
    raises({ workload = { rate = 1, duration = 5, poison_rate = 2 } }, "scenario.workload.poison_rate")
    raises({ workload = { rate = 1, duration = 5, handler = { p99 = 6, p999 = 3 } } }, "scenario.workload.handler.p999")
    raises({ workload = { rate = 1, duration = 5, rat = 3 } }, "scenario.workload.rat is not a scenario field")
  end)

  it("names an unknown top-level field and a bad time scale", function()
    raises(with { worklod = {} }, "scenario.worklod is not a scenario field")
    raises(with { time_scale = 0 }, "scenario.time_scale must be a number from 0.001 to 10")
    raises("nope", "scenario must be a table")
  end)

  it("checks the fleet's consumer options with the library's own rules, scaled", function()
    raises(with { fleet = { consumer = { invisibl = 5 } } }, "scenario.fleet.consumer: unknown option 'invisibl'")
    raises(with { fleet = { consumer = { topic = "t" } } }, "scenario.fleet.consumer.topic is set by the lab")
    -- 5 scenario seconds at a tenth of the time is half a second: below the library's 1 s
    raises(with { time_scale = 0.1, fleet = { consumer = { invisible = 5 } } },
      "scenario.fleet.consumer (scaled by time_scale 0.1): option 'invisible'")
    raises(with { fleet = { run = { concurrency = 3 } } }, "scenario.fleet.run.concurrency is not a scenario field")
    raises(with { fleet = { run = { mode = "later" } } }, "scenario.fleet.run: option 'mode'")
    raises(with { fleet = { shutdown = "sometimes" } }, "scenario.fleet.shutdown must be")
    raises(with { fleet = { workers = 0 } }, "scenario.fleet.workers must be an integer from 1 to 64")
  end)

  it("checks the policy", function()
    raises(with { fleet = { policy = "twice" } }, "scenario.fleet.policy must be")
    raises(with { fleet = { policy = { exactly_once = { lock_ttl = "x" } } } },
      "scenario.fleet.policy.exactly_once: option 'lock_ttl'")
    raises(with { fleet = { policy = { exactly_once = { redis = "h:1" } } } },
      "scenario.fleet.policy.exactly_once.redis is not a scenario field")
    local s = scenario.check(with { fleet = { policy = { exactly_once = { lock_ttl = 10 } } } })
    assert.equal("exactly_once", s.fleet.policy.kind)
    assert.equal(10, s.fleet.policy.options.lock_ttl)
  end)

  it("names a bad fault by its index", function()
    raises(with { faults = { { kill = 1 } } }, "scenario.faults[1].at is required")
    raises(with { faults = { { at = 1, kill = 3 } } }, "scenario.faults[1].kill must be an integer from 1 to 2")
    raises(with { faults = { { at = 1 }, } }, "scenario.faults[1] must have exactly one of kill, term, redis, broker, proxy")
    raises(with { faults = { { at = 1, proxy = "pause" } } }, 'scenario.faults[1].proxy must be "freeze" or "thaw"')
    raises(with { faults = { { at = 1, proxy = "freeze", restart = 2 } } }, "scenario.faults[1].restart goes only with kill or term")
    raises(with { faults = { { at = 1, kill = 1, term = 2 } } }, "exactly one of")
    raises(with { faults = { { at = 1, redis = "down" } } }, "scenario.faults[1].redis needs fleet.policy exactly_once")
    raises(with { faults = { { at = 1, broker = { fail_chnage = 1 } } } },
      "scenario.faults[1].broker.fail_chnage is not a dev broker setting")
    raises(with { faults = { { at = 1, broker = { fail_change = 2 } } } }, "scenario.faults[1].broker.fail_change")
    raises(with { faults = { { at = 1, redis = "up", restart = 1 } } }, "scenario.faults[1].restart goes only with kill or term")
    raises(with { faults = { { at = 1000, kill = 1 } } }, "scenario.faults[1].at must be a number from 0 to 65")
  end)

  it("names a faults key that is not a position in the list", function()
    -- one fault without its braces: the list's keys are at and kill, and no fault ran
    raises(with { faults = { at = 30, kill = 1 } }, "scenario.faults.at is not a fault position")
    raises(with { faults = { { at = 1, kill = 1 }, extra = { at = 2, kill = 2 } } },
      "scenario.faults.extra is not a fault position")
    -- a hole: the faults after it were dropped
    raises(with { faults = { [1] = { at = 1, kill = 1 }, [3] = { at = 2, kill = 2 } } },
      "scenario.faults[3] is not a fault position")
  end)

  it("keeps the file's order of faults at the same time", function()
    local f = {}
    for i = 1, 8 do f[i] = { at = 5, broker = { fail_change = i / 100 } } end
    local s = scenario.check(with { faults = f })
    for i = 1, 8 do assert.near(i / 100, s.faults[i].settings.fail_change, 1e-12) end
  end)

  it("refuses a broker value the dev broker would refuse or truncate", function()
    raises(with { faults = { { at = 1, broker = { paused = 0.5 } } } },
      "scenario.faults[1].broker.paused must be an integer from 0 to 1")
    raises(with { faults = { { at = 1, broker = { max_renewals = 1.5 } } } },
      "scenario.faults[1].broker.max_renewals must be an integer")
    local s = scenario.check(with { faults = { { at = 1, broker = { paused = true, max_renewals = 3 } } } })
    assert.same({ paused = 1, max_renewals = 3 }, s.faults[1].settings)
  end)

  it("refuses a handler max below the p999 it was asked for", function()
    raises({ workload = { rate = 1, duration = 5, handler = { p99 = 6, p999 = 252, max = 100 } } },
      "scenario.workload.handler.max must be a number from 252")
    -- a p999 left to its default (10 x p99) is cut to a max given below it
    local s = scenario.check({ workload = { rate = 1, duration = 5, handler = { p99 = 6, max = 7 } } })
    assert.equal(7, s.workload.handler.p999)
    assert.equal(7, s.workload.handler.max)
  end)

  it("refuses fleet options the workers cannot be given (their config is JSON)", function()
    -- mqlease.run takes nack_delay = fn(attempt), but the lab's workers would not:
    -- the run failed after the dev broker had started, with cjson's message
    raises(with { fleet = { run = { nack_delay = function() return 1 end } } },
      "scenario.fleet.run.nack_delay must be plain data")
    local ok, err = pcall(require("cjson").encode, scenario.check(with { fleet = { run = { nack_delay = 2 } } }).fleet)
    assert.is_true(ok, err)
  end)

  it("sorts faults by time and keeps their targets", function()
    local s = scenario.check(with { faults = { { at = 4, term = "busiest", restart = 1 }, { at = 2, kill = 2 } } })
    assert.equal(2, s.faults[1].at)
    assert.equal("kill", s.faults[1].action)
    assert.equal(2, s.faults[1].target)
    assert.equal("busiest", s.faults[2].target)
    assert.equal(1, s.faults[2].restart)
  end)

  it("loads every shipped example", function()
    for _, name in ipairs({ "no_renewal", "renewed", "push4x_restarts", "drained_restarts", "kill_exactly_once", "chaos" }) do
      local s = scenario.load("examples/lab/" .. name .. ".lua")
      assert.equal(name, s.name)
      assert.truthy(#s.description > 0)
    end
  end)

  it("names the file and the field of a bad scenario file", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("return { workload = { rate = 1, duration = 'long' } }")
    f:close()
    local ok, err = pcall(scenario.load, path)
    os.remove(path)
    assert.is_false(ok)
    assert.matches(path .. ": scenario.workload.duration must be a number", err, 1, true)
  end)

  it("scales the consumer's times, and only those", function()
    local c = scenario.scaled_consumer({ invisible = 10, batch = 16, auto_invisible = { min = 10, margin = 2 } }, 0.1)
    assert.near(1, c.invisible, 1e-9)
    assert.equal(16, c.batch)
    assert.near(1, c.auto_invisible.min, 1e-9)
    assert.equal(2, c.auto_invisible.margin)
  end)
end)

describe("the lab workload", function()
  it("draws the heavy tail the scenario asks for: p99 and p99.9 where they were put", function()
    local d = { mean = 1, p99 = 6, p999 = 252, max = 300 }
    local v = {}
    local n = 100000
    for i = 1, n do v[i] = workload.handler_seconds((i - 0.5) / n, d) end
    table.sort(v)
    assert.near(6, v[math.ceil(0.99 * n)], 0.01)
    assert.near(252, v[math.ceil(0.999 * n)], 252 * 0.01)
    assert.near(252, workload.handler_seconds(0.999, d), 1e-6)
    assert.equal(300, v[n])
    assert.is_true(v[math.floor(n / 2)] < 1)   -- the exponential body: the median is below the mean
  end)

  it("carries sequence, handler time and poison in a body of the asked size", function()
    local body = workload.body(42, 1234.4, true, 100)
    assert.equal(100, #body)
    assert.same({ seq = 42, ms = 1234, poison = true }, workload.parse(body))
    assert.is_nil(workload.parse("hello"))
    assert.equal(3, workload.handler_seconds(0.5, { fixed = 3 }))
  end)
end)

describe("mqlease lab flags", function()
  it("takes scenario files and the report's paths", function()
    local ok, o = lab_cli.parse({ "a.lua", "b.lua", "--html", "r.html", "--json", "r.json" })
    assert.is_true(ok, o)
    assert.same({ "a.lua", "b.lua" }, o.scenarios)
    assert.equal("r.html", o.html)
    assert.equal("r.json", o.json)
  end)

  it("writes mqlease-lab.html by default", function()
    local ok, o = lab_cli.parse({ "a.lua" })
    assert.is_true(ok, o)
    assert.equal("mqlease-lab.html", o.html)
  end)

  it("refuses what does not fit together", function()
    local ok, err = lab_cli.parse({ "a.lua", "--endpoints", "h:8081" })
    assert.is_false(ok)
    assert.matches("needs --topic", err, 1, true)
    ok, err = lab_cli.parse({ "a.lua", "--topic", "t" })
    assert.is_false(ok)
    assert.matches("option '--topic' needs --endpoints", err, 1, true)
    ok, err = lab_cli.parse({ "a.lua", "--redis", "nohost" })
    assert.is_false(ok)
    assert.matches("option '--redis' must be HOST:PORT", err, 1, true)
    ok = lab_cli.parse({})
    assert.is_false(ok)
  end)

  it("takes a real proxy's --endpoints and --topic, checks the topic's name and --redis as the policy does", function()
    local ok, o = lab_cli.parse({ "a.lua", "--endpoints", "h:8081", "--topic", "lab_topic" })
    assert.is_true(ok, o)
    assert.equal("lab_topic", o.topic)
    local err
    ok, err = lab_cli.parse({ "a.lua", "--endpoints", "h:8081", "--topic", "a b" })
    assert.is_false(ok)
    assert.matches("^option '%-%-topic': option 'topic' must be a name", err)
    ok, err = lab_cli.parse({ "a.lua", "--redis", "[::1]:6379" })
    assert.is_false(ok)
    assert.matches("^option '%-%-redis': mqlease.redis: option 'address'", err)
  end)

  it("is a subcommand of mqlease with its own help", function()
    local options = require "mqlease.cli.options"
    local ok, r = options.parse({ "lab", "--help" }, {})
    assert.is_true(ok)
    assert.matches("--endpoints HOST:PORT", r.help, 1, true)
    ok, r = options.parse({ "lab", "a.lua", "--html", "x.html" }, {})
    assert.is_true(ok)
    assert.equal("lab", r.command)
    assert.same({ "a.lua", "--html", "x.html" }, r.opts.args)
  end)
end)
