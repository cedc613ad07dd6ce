-- The exactly-once policy: a per-message Redis mutex with fencing tokens and
-- done markers turns the take-over race (a lease that ran out while its
-- handler still works) into one business effect per message.
local mqlease = require "mqlease"
local env = require "support.env"
local read, wait_for, count = env.read, env.wait_for, env.count

local REDIS = "127.0.0.1:" .. env.redis_port



-- Starts spec/support/eo_worker.lua with the given environment; returns its log path.
local function worker(group, topic, vars)
  local logfile = os.tmpname()
  local prefix = {}
  for k, v in pairs(vars or {}) do prefix[#prefix + 1] = ("%s=%s"):format(k, v) end
  env.sh(("(env %s lua5.4 spec/support/eo_worker.lua %s %s %s %d %s >%s.out 2>&1 &)"):format(
    table.concat(prefix, " "), env.endpoints, group, topic, env.redis_port, logfile, logfile))
  wait_for(function() return read(logfile):match("ready") end, 30, "worker start")
  return logfile
end

local function finished(logfile)
  return read(logfile):match("metrics [^\n]*\n")
end

local function metric(logfile, name)
  return tonumber(read(logfile):match(name .. "=(%d+)"))
end


describe("mqlease.policy.exactly_once", function()
  local r, producer
  local subscribe, takeover
  -- The two take-over scenarios (A's lease runs out after 10 s while its handler works
  -- 25 s, then B meets the message) each take the better part of a minute of clocks:
  -- they start together here, and each of the first two tests checks one.
  local race, risky
  setup(function()
    r = mqlease.redis(REDIS)
    producer = env.producer()
    race = takeover("eo_race", { EO_MAX_RENEWALS = 0, EO_WORK = 25, EO_RUN_FOR = 30, EO_CONCURRENCY = 1 },
      { EO_WORK = 0.1, EO_RUN_FOR = 40 })
    race.start_b()
    risky = takeover("eo_risky", { EO_MAX_RENEWALS = 0, EO_WORK = 25, EO_FAIL = 1, EO_RUN_FOR = 30,
      EO_CONCURRENCY = 1 }, { EO_ON_LOCKED = "ack", EO_RUN_FOR = 40 })
    risky.start_b()
  end)
  teardown(function()
    r:close()
    producer:close()
  end)

  function subscribe(group, topic)
    local c = env.consumer { group = group, topic = topic, await = 5 }
    assert(c:receive(1, { await = 0 }))
    c:close()
  end

  -- A takes one message and its handler starts; start_b() then starts B in the group.
  -- A holds one message at a time, so the redelivery (revived into the retry topic,
  -- which a long poll may only notice seconds later) goes to B.
  function takeover(label, a_vars, b_vars)
    local t = { topic = env.topic(label), group = env.name("g_" .. label) }
    subscribe(t.group, t.topic)
    t.a = worker(t.group, t.topic, a_vars)
    t.id = assert(producer:send(t.topic, label))
    t.start_b = function()
      wait_for(function() return read(t.a):match("run " .. t.id) end, 30, "A's handler")
      t.b = worker(t.group, t.topic, b_vars)
    end
    return t
  end

  it("turns the take-over race into one effect: B defers while A works, then skips the done message", function()
    local a, b, id = race.a, race.b, race.id
    wait_for(function() return finished(a) and finished(b) end, 90, "both workers")
    assert.equal("1", r:call("GET", "biz:" .. id))
    assert.equal(1, count(read(a), "effect " .. id))
    assert.equal(0, count(read(b), "run " .. id), "B ran the handler")
    assert.is_true(metric(b, "handoff") >= 1, "B never found the message locked")
    -- the deferred redelivery came back after A's done marker: skipped, by B or by A
    assert.is_true(metric(a, "duplicate_skipped") + metric(b, "duplicate_skipped") >= 1,
      "the done message was never skipped")
    assert.equal(1, metric(a, "expire_while_alive"))
    assert.equal(1, r:call("EXISTS", mqlease.policy.keys(id).done))
    assert.equal(0, r:call("EXISTS", mqlease.policy.keys(id).lock))   -- released
  end)

  it("shows the risk of on_locked = \"ack\": if the owner then fails, the message is lost", function()
    local a, b, id = risky.a, risky.b, risky.id
    wait_for(function() return finished(a) and finished(b) end, 90, "both workers")
    assert.is_true(metric(b, "handoff") >= 1)
    -- B acked at the handoff, A failed: nobody ever produced the effect ...
    assert.equal(mqlease.null, r:call("GET", "biz:" .. id))
    -- ... and the message will not come back
    local c = env.consumer { group = risky.group, topic = risky.topic, await = 5 }
    assert.same({}, env.collect(c, 15))
    c:close()
  end)

  it("hands out strictly increasing fencing tokens across grants of one message", function()
    local topic, group = env.topic("eo_fence"), env.name("g_eo_fence")
    local c = env.consumer { group = group, topic = topic, await = 2 }
    assert(c:receive(1, { await = 0 }))
    local id = assert(producer:send(topic, "fence"))
    local fences = {}
    mqlease.run(c, function(m, lease)
      fences[#fences + 1] = lease.fence
      return #fences >= 3   -- fail twice, succeed the third time
    end, { signals = false, nack_delay = 0, on_error = function() end,
      policy = mqlease.policy.exactly_once { redis = REDIS },
      stop = function() return #fences >= 3 end })
    assert.equal(3, #fences)
    assert.is_true(fences[1] < fences[2] and fences[2] < fences[3],
      ("fences %s, %s, %s"):format(fences[1], fences[2], fences[3]))
    assert.equal(1, r:call("EXISTS", mqlease.policy.keys(id).done))
  end)

  it("with fail = \"closed\" runs nothing while Redis is down, and completes everything after", function()
    local topic, group = env.topic("eo_redis_down"), env.name("g_eo_redis_down")
    local c = env.consumer { group = group, topic = topic, await = 2 }
    assert(c:receive(1, { await = 0 }))
    local ids = {}
    for i = 1, 5 do ids[i] = assert(producer:send(topic, "down " .. i)) end
    -- the policy's Redis is one of this spec's own (the shared one is never stopped)
    local port = 16402
    env.sh(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no --daemonize yes " ..
      "--pidfile /tmp/mqlease-eo-down-%d.pid --dir /tmp --logfile /tmp/mqlease-eo-down-%d.log"):format(port, port, port))
    finally(function()
      os.execute(("kill -CONT $(cat /tmp/mqlease-eo-down-%d.pid) 2>/dev/null; " ..
        "redis-cli -p %d shutdown nosave >/dev/null 2>&1"):format(port, port))
    end)
    local own
    wait_for(function()
      own = own or mqlease.redis("127.0.0.1:" .. port)
      return own:call("PING") == "PONG"
    end, 10, "the spec's own redis-server")
    local pid = assert(own:call("INFO", "server")):match("process_id:(%d+)")
    assert.is_truthy(pid)
    local ran_while_down, ran, stopped = 0, {}, true
    os.execute("kill -STOP " .. pid)
    local ok, err = pcall(function()
      local business = mqlease.redis(REDIS)
      local t0 = mqlease.now()
      mqlease.run(c, function(m)
        if stopped then ran_while_down = ran_while_down + 1 end
        assert(business:call("INCR", "biz:" .. m.id))
        ran[m.id] = true
        return true
      end, { signals = false, nack_delay = 0, on_error = function() end,
        policy = mqlease.policy.exactly_once { redis = { address = "127.0.0.1:" .. port, timeout = 0.5 },
          fail_delay = 1 },
        stop = function()
          if stopped and mqlease.now() - t0 > 6 then
            -- 6 s of Redis down: nothing ran and nothing was acked
            assert.equal(0, c:metrics().acks_ok)
            os.execute("kill -CONT " .. pid)
            stopped = false
          end
          local n = 0
          for _ in pairs(ran) do n = n + 1 end
          return n >= 5
        end })
      business:close()
    end)
    os.execute("kill -CONT " .. pid)
    own:close()
    assert(ok, err)
    assert.equal(0, ran_while_down)
    assert.is_true((c:metrics().redis_unavailable or 0) >= 1)
    for _, id in ipairs(ids) do assert.equal("1", r:call("GET", "biz:" .. id)) end
  end)

  it("keeps 1,000 messages at one effect each with 4 consumers and random lease expiries", function()
    local topic, group = env.topic("eo_stress"), env.name("g_eo_stress")
    subscribe(group, topic)
    local logs = {}
    -- the workers run until every effect is in and one more lease has passed (the stop
    -- file), at most 120 s: a fixed run time would cut a slow run short
    local stop_file = os.tmpname()
    os.remove(stop_file)
    for i = 1, 4 do
      -- 10 of the messages ("stress 100", "stress 200", ...) outlive their lease (no
      -- renewals, 12 s of work): chosen by body, not by chance, so the race is always run
      logs[i] = worker(group, topic, { EO_MAX_RENEWALS = 0, EO_SLOW_EVERY = 100, EO_SLOW = 12,
        EO_WORK = 0.02, EO_RUN_FOR = 120, EO_STOP_FILE = stop_file })
    end
    local ids = {}
    for i = 1, 1000 do ids[i] = assert(producer:send(topic, "stress " .. i)) end
    local applied = {}
    pcall(wait_for, function()
      for _, id in ipairs(ids) do
        if not applied[id] then
          if r:call("GET", "biz:" .. id) == mqlease.null then return false end
          applied[id] = true
        end
      end
      return true
    end, 110, "")
    -- a redelivery of a message whose lease ran out may still be on its way: give it
    -- the time to come back and meet the done marker before the workers stop
    mqlease.sleep(12)
    assert(io.open(stop_file, "w")):close()
    wait_for(function()
      for _, l in ipairs(logs) do if not finished(l) then return false end end
      return true
    end, 60, "the 4 workers")
    os.remove(stop_file)
    local expired, slow, lines = 0, 0, {}
    for _, l in ipairs(logs) do
      expired = expired + metric(l, "expire_while_alive")
      for _ in read(l):gmatch("slow [^\n]*\n") do slow = slow + 1 end
      lines[#lines + 1] = finished(l)
    end
    assert.is_true(slow >= 10, ("%d slow handlers started, want the 10 chosen"):format(slow))
    assert.is_true(expired >= 1, ("no lease ran out of %d slow handlers: the race was not exercised; %s"):format(
      slow, table.concat(lines)))
    for _, id in ipairs(ids) do
      local v = r:call("GET", "biz:" .. id)
      assert.equal("1", v, "effects of " .. id)
    end
  end)
end)
