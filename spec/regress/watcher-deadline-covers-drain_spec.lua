-- The signal watcher guards the drain under mqlease.run; it must never cut a
-- healthy drain short, nor touch a client the drain has already closed.
-- Before the fix its deadline was grace + 0.5 s, while nacking a running
-- handler's message may take a whole request timeout: a broker answering
-- ChangeInvisibleDuration 2.5 s late made a clean SIGTERM end in _exit(143)
-- (or in the watcher reading a freed client). A second signal, on the other
-- hand, is the operator saying "now": it must end the wait at once.
local mqlease = require "mqlease"
local env = require "support.env"
local devbroker = require "support.devbroker"
local read, wait_for = env.read, env.wait_for

-- Starts a worker under mqlease.run; returns its pid. Its exit status is
-- appended to logfile as "rc=N". (pkill is avoided: under the sanitizer
-- run's LD_PRELOAD it can hang.)
local function start_worker(dv, topic, logfile, grace)
  env.sh(("(lua5.4 spec/support/storm_worker.lua %s g_drain %s %s sleep %s >>%s.out 2>&1 & echo $! >%s.pid; wait $!; echo \"rc=$?\" >>%s) >/dev/null 2>&1 &")
    :format(dv.endpoints, topic, logfile, grace, logfile, logfile, logfile))
  wait_for(function() return read(logfile .. ".pid"):match("%d+") end, 10, "the worker's pid")
  return tonumber(read(logfile .. ".pid"):match("%d+"))
end

local workers = {}
local function signal(pid, sig) os.execute(("kill -%s %d 2>/dev/null"):format(sig, pid)) end

describe("the signal watcher under a slow drain", function()
  local dv, producer
  before_each(function()
    dv = devbroker.start({ "slow" }, { "--delay-change-ms", "2500" })
    producer = assert(mqlease.producer { endpoints = dv.endpoints, topics = { "slow" } })
  end)
  after_each(function()
    -- a worker a failed assertion left behind must not outlive the spec
    for _, pid in ipairs(workers) do signal(pid, "KILL") end
    workers = {}
    producer:close()
    dv.stop()
  end)

  it("lets a drain that outlasts grace finish and exit cleanly", function()
    local logfile = os.tmpname()
    assert(producer:send("slow", "work"))
    local pid = start_worker(dv, "slow", logfile, 0.5)
    workers[#workers + 1] = pid
    wait_for(function() return read(logfile):find("deliver ", 1, true) end, 20, "a delivery")
    local t0 = mqlease.now()
    signal(pid, "TERM")
    wait_for(function() return read(logfile):find("rc=", 1, true) end, 30, "the worker's exit")
    local log = read(logfile)
    -- the running handler's message was nacked (2.5 s late) and the drain ended normally
    assert.truthy(log:find("exit signal TERM acked=0 drained=1", 1, true), log)
    assert.truthy(log:find("rc=0", 1, true), log)
    assert.is_true(mqlease.now() - t0 >= 2.4, "the nack cannot have been answered sooner")
    os.remove(logfile)
  end)

  it("stops waiting at a second signal", function()
    local logfile = os.tmpname()
    assert(producer:send("slow", "work"))
    local pid = start_worker(dv, "slow", logfile, 20)
    workers[#workers + 1] = pid
    wait_for(function() return read(logfile):find("deliver ", 1, true) end, 20, "a delivery")
    signal(pid, "TERM")
    mqlease.sleep(0.5)
    local t0 = mqlease.now()
    signal(pid, "TERM")
    wait_for(function() return read(logfile):find("rc=", 1, true) end, 10, "the worker's exit")
    -- well before the 20 s grace: the second signal ended the wait (128 + SIGTERM)
    assert.is_true(mqlease.now() - t0 < 8)
    assert.truthy(read(logfile):find("rc=143", 1, true), read(logfile))
    os.remove(logfile)
  end)
end)
