-- Shutdown without duplicates: SIGTERM drains, a restart never multiplies
-- messages, kill -9 only costs the lease length, and a stuck handler cannot
-- hold the process past its grace.
local mqlease = require "mqlease"
local env = require "support.env"
local read, wait_for, count = env.read, env.wait_for, env.count



-- Starts a worker process; returns its pid.
local function start_worker(group, topic, logfile, mode, grace, invisible)
  local out = env.sh(("lua5.4 spec/support/storm_worker.lua %s %s %s %s %s %s %s >>%s.out 2>&1 & echo $!"):format(
    env.endpoints, group, topic, logfile, mode, grace or 1, invisible or 10, logfile))
  return tonumber(out:match("%d+"))
end

local alive = env.alive


describe("mqlease shutdown", function()
  local producer
  setup(function() producer = env.producer() end)
  teardown(function() producer:close() end)

  it("survives a restart storm: 10 SIGTERMs mid-handler, no message doubled or lost, each acked once", function()
    local topic = env.topic("storm")
    local group = env.name("g_storm")
    local logfile = os.tmpname()
    local ids = {}
    -- subscribe the group before producing
    local c = env.consumer { group = group, topic = topic, await = 5 }
    assert(c:receive(1, { await = 0 }))
    c:close()
    for i = 1, 5 do ids[#ids + 1] = assert(producer:send(topic, "storm " .. i)) end

    for restart = 1, 10 do
      local before = count(read(logfile), "deliver ")
      local pid = start_worker(group, topic, logfile, "fail", 1)
      -- mid-handler: some message has started (handlers work 3 s before failing)
      wait_for(function() return count(read(logfile), "deliver ") > before end, 30, "a delivery in round " .. restart)
      mqlease.sleep(1)
      os.execute(("kill -TERM %d"):format(pid))
      wait_for(function() return not alive(pid) end, 10, "worker exit in round " .. restart)
      local deliveries = {}
      for id in read(logfile):gmatch("deliver (%x+) %d+") do deliveries[id] = (deliveries[id] or 0) + 1 end
      for id, n in pairs(deliveries) do
        -- at most one delivery per run of a worker, never doubling
        assert.is_true(n <= restart, ("%s delivered %d times in %d runs"):format(id, n, restart))
      end
    end
    assert.equal(0, count(read(logfile), "ack "))

    -- the last run succeeds: every message is finally acked, exactly once
    local pid = start_worker(group, topic, logfile, "ok", 1)
    wait_for(function() return count(read(logfile), "ack ") >= #ids end, 60, "all acks")
    mqlease.sleep(2)
    os.execute(("kill -TERM %d"):format(pid))
    wait_for(function() return not alive(pid) end, 10, "the last worker's exit")
    local text = read(logfile)
    for _, id in ipairs(ids) do
      assert.equal(1, count(text, "ack " .. id), "acks of " .. id)
    end
    assert.equal(#ids, count(text, "ack "))
    assert.equal(11, count(text, "exit signal TERM"))
    os.remove(logfile)
    os.remove(logfile .. ".out")
  end)

  it("brings a message back within the invisible duration after kill -9", function()
    local topic = env.topic("kill9")
    local group = env.name("g_kill9")
    local logfile = os.tmpname()
    local c = env.consumer { group = group, topic = topic, invisible = 10, await = 5 }
    assert(c:receive(1, { await = 0 }))
    local pid = start_worker(group, topic, logfile, "sleep")
    wait_for(function() return read(logfile):match("ready") end, 30, "the worker")
    local id = assert(producer:send(topic, "kill me"))
    wait_for(function() return read(logfile):match("deliver " .. id) end, 30, "the delivery")
    mqlease.sleep(4)   -- a renewal or so into the handler
    os.execute(("kill -KILL %d"):format(pid))
    local t0 = mqlease.now()
    local got = env.collect(c, 30, nil, function(all) return #all >= 1 end, 1)
    local waited = mqlease.now() - t0
    assert.equal(1, #got)
    assert.equal(id, got[1].id)
    assert.equal(2, got[1].delivery_attempt)
    -- at most the 10 s lease from the last renewal, the broker's revive lag (1-3 s,
    -- more when the JVM is starved) and a 1 s poll: far from the handler's 60 s
    assert.is_true(waited <= 10 + 8, ("came back after %.1f s"):format(waited))
    assert.is_true(got[1]:ack())
    c:close()
    os.remove(logfile)
    os.remove(logfile .. ".out")
  end)

  it("ends within grace + 2 s when a handler spins in a busy loop, and gives its message back", function()
    local topic = env.topic("busy")
    local group = env.name("g_busy")
    local logfile = os.tmpname()
    local c = env.consumer { group = group, topic = topic, invisible = 10, await = 5 }
    assert(c:receive(1, { await = 0 }))
    local grace = 2
    -- a 30 s lease: a release (grace + 0.5 s, release_delay 1 s, revive lag) cannot be
    -- mistaken for an expiry, which would come 20 s or more after the exit
    local pid = start_worker(group, topic, logfile, "busy", grace, 30)
    wait_for(function() return read(logfile):match("ready") end, 30, "the worker")
    local id = assert(producer:send(topic, "spin"))
    wait_for(function() return read(logfile):match("deliver " .. id) end, 30, "the delivery")
    local t0 = mqlease.now()
    os.execute(("kill -TERM %d"):format(pid))
    wait_for(function() return not alive(pid) end, grace + 10, "the worker's exit")
    local took = mqlease.now() - t0
    assert.is_true(took <= grace + 2, ("shutdown took %.1f s"):format(took))
    -- released by the core, not left to expire: back long before the 10 s lease
    local got = env.collect(c, 20, nil, function(all) return #all >= 1 end, 1)
    assert.equal(1, #got)
    assert.equal(id, got[1].id)
    assert.is_true(mqlease.now() - t0 < 15, "the message was not released")
    assert.is_true(got[1]:ack())
    c:close()
    os.remove(logfile)
    os.remove(logfile .. ".out")
  end)
end)
