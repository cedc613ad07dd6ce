-- mqlease.lab.experiment without a broker or a worker: the launcher and the
-- producer are stand-ins (nothing is spawned, nothing connects), so what is
-- tested is what the lab reads from the run's directory.
local scenario = require "mqlease.lab.scenario"
local analyze = require "mqlease.lab.analyze"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

describe("a lab run in a kept directory", function()
  local saved_launch, saved_experiment, mqlease, saved_producer, dir

  before_each(function()
    saved_launch = package.loaded["mqlease.launch"]
    saved_experiment = package.loaded["mqlease.lab.experiment"]
    local real = require "mqlease.launch"
    local fake = {}
    for k, v in pairs(real) do fake[k] = v end
    -- a worker that never starts: no process, no log line
    fake.spawn = function() return 424242 end
    fake.alive = function() return false end
    fake.stop_pid = function() return true end
    package.loaded["mqlease.launch"] = fake
    package.loaded["mqlease.lab.experiment"] = nil
    mqlease = require "mqlease"
    saved_producer = mqlease.producer
    mqlease.producer = function()
      return { send = function() return "ID" end, close = function() end }
    end
    dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p '" .. dir .. "'")
  end)

  after_each(function()
    mqlease.producer = saved_producer
    package.loaded["mqlease.launch"] = saved_launch
    package.loaded["mqlease.lab.experiment"] = saved_experiment
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("does not take the previous run's logs and stop file for this one's", function()
    -- what `mqlease lab s.lua --keep DIR` left the last time: a worker log and the stop file
    write(dir .. "/worker1-1.log", "ready\nstart 1 a 100 1\nend 1 a 200 ok 1 -\nexit\n")
    write(dir .. "/stop", "")
    local s = scenario.check({ name = "again", time_scale = 0.01,
      workload = { rate = 1, duration = 1, drain = 0 }, fleet = { workers = 1 } })
    local experiment = require "mqlease.lab.experiment"
    local raw, err = experiment.run(s, { dir = dir, keep = true, endpoints = "127.0.0.1:1", topic = "t",
      lua = "true" })
    if raw then
      local r = analyze.report(raw)
      error(("a worker that never started was taken as ready; the report: %d runs, %d lost"):format(r.runs, r.lost))
    end
    assert.matches("worker 1 did not start", err, 1, true)
    assert.is_false(exists(dir .. "/stop"))   -- or the next workers would stop at once
  end)
end)
