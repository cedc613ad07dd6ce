-- Consume-transform-produce exactly once, on the real RocketMQ: two workers
-- (examples/transactions/worker.lua, mqlease.policy.exactly_once with
-- mqlease.policy.transaction_checker) move 1,000 messages from topic IN to the
-- TRANSACTION topic OUT while one of them is SIGKILLed 10 times at random
-- moments and started again: OUT holds exactly one message per input.
local mqlease = require "mqlease"
local env = require "support.env"
local read, wait_for = env.read, env.wait_for

local N, KILLS = 1000, 10

describe("consume-transform-produce through transactions", function()
  local input = env.topic("cpt_in")
  local output = env.name("cpt_out")
  env.sh(("bash mk/rocketmq.sh topics %s:TRANSACTION"):format(output))
  local group = env.group(env.name("g_cpt"))
  local reader_group = env.name("g_cpt_reader")
  local redis = "127.0.0.1:" .. env.redis_port
  local workers = {}   -- slot -> { pid =, log = }
  local logs = {}      -- every worker's log, the killed ones' too: a failure names their lines

  local function start_worker(slot)
    local log = os.tmpname()
    env.sh(("(LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' LOG=%s WORK=0.2 " ..
      "exec lua5.4 examples/transactions/worker.lua %s %s %s %s %s >%s.out 2>&1 & echo $! >%s.pid)")
      :format(log, env.endpoints, group, input, output, redis, log, log))
    local pid = tonumber(read(log .. ".pid"))
    wait_for(function() return read(log):match("ready") end, 60, "worker " .. slot .. " start")
    workers[slot] = { pid = pid, log = log }
    logs[#logs + 1] = log
  end

  teardown(function()
    for _, w in pairs(workers) do env.stop_pid(w.pid, 30) end
    for _, log in ipairs(logs) do
      os.remove(log)
      os.remove(log .. ".out")
      os.remove(log .. ".pid")
    end
  end)

  it("sends exactly one output per input while a worker is killed 10 times", function()
    local reader = env.consumer { group = reader_group, topic = output, invisible = 30, await = 2 }
    -- a brand-new group may start at the queue's end: subscribe (and poll once) before producing
    assert(reader:receive(1, { await = 0 }))
    start_worker(1)
    start_worker(2)
    local p = env.producer { topics = { input } }
    local list = {}
    for i = 1, N do list[i] = "order-" .. i end
    local results, failed = p:send_many(input, list)
    local codes = {}
    for _, r in ipairs(results) do
      if not r.ok then codes[r.code .. ": " .. tostring(r.err)] = (codes[r.code .. ": " .. tostring(r.err)] or 0) + 1 end
    end
    local why = {}
    for k, n in pairs(codes) do why[#why + 1] = n .. " x " .. k end
    assert.equal(0, failed, "sends failed: " .. table.concat(why, "; "))
    local inputs = {}
    for i, r in ipairs(results) do inputs[r.message_id] = list[i] end
    p:close()

    math.randomseed(os.time())
    for k = 1, KILLS do
      mqlease.sleep(0.5 + math.random() * 1.5)
      local slot = k % 2 + 1
      os.execute("kill -KILL " .. workers[slot].pid)
      wait_for(function() return not env.alive(workers[slot].pid) end, 10, "the kill")
      start_worker(slot)
    end

    -- every input's output, then long enough for the broker's checks of what the
    -- killed workers left open (3 s + 2 s in the harness) to end all of them
    local got, ids, count, done_at = {}, {}, 0, nil
    env.collect(reader, 400, function(m)
      local source = m.keys[1]
      got[source] = (got[source] or 0) + 1
      ids[source] = (ids[source] and ids[source] .. " " or "") .. m.id
      count = count + 1
      assert.equal(inputs[source]:upper(), m.body)
      assert(m:ack())
    end, function()
      local distinct = 0
      for _ in pairs(got) do distinct = distinct + 1 end
      if distinct >= N and not done_at then done_at = mqlease.now() end
      return done_at ~= nil and mqlease.now() - done_at > 15
    end, 2)
    reader:close()
    local twice = {}
    -- each with the ids of its outputs (one id twice is a commit sent twice, two ids two
    -- runs') and the workers' lines about it ("sent <input> <output>"), in one line
    for id, n in pairs(got) do
      if n > 1 then
        local lines = {}
        for k, log in ipairs(logs) do
          for line in (read(log) or ""):gmatch("[^\n]+") do
            if line:find(id, 1, true) then lines[#lines + 1] = "log " .. k .. ": " .. line end
          end
        end
        twice[#twice + 1] = id .. " -> " .. ids[id] .. " [" .. table.concat(lines, ", ") .. "]"
      end
    end
    assert.equal(0, #twice, #twice .. " inputs with more than one output: " .. table.concat(twice, "; "))
    for id in pairs(inputs) do assert.equal(1, got[id], "no output for input " .. id) end
    assert.equal(N, count)
  end)
end)
