-- Retry budgets that only real failures spend. Every nack spends a delivery
-- attempt, and past the last one a message goes to %DLQ%<group>: so the
-- exactly-once policy must not nack a message it only could not run yet
-- (Redis unreachable, or its lock held by a live owner). It keeps the lease,
-- renewed, and asks again after a delay, within max_defer. And a message past
-- its attempts is dead-lettered only after its done marker was checked.
local mqlease = require "mqlease"
local env = require "support.env"

local VERSION = os.getenv("ROCKETMQ_VERSION") or "5.2.0"
local OWN_PORT = 16479   -- this spec's own Redis: the shared one is never stopped
local OWN_RUN = "/tmp/mqlease-redis-budget-" .. env.run_id

local function own_redis(cmd)
  return env.execute(("MQLEASE_REDIS_PORT=%d MQLEASE_REDIS_RUN=%s bash spec/support/redis.sh %s >/dev/null 2>&1")
    :format(OWN_PORT, OWN_RUN, cmd))
end

describe("retry budgets on RocketMQ " .. VERSION, function()
  it("holds messages while Redis is stopped for 15 s: with max_attempts = 2, none dead-lettered, none lost", function()
    assert.is_true(own_redis("start"), "the spec's own redis-server started")
    finally(function() own_redis("stop") end)
    local topic, group = env.topic("budget_outage"), env.name("g_budget_outage")
    local c = env.consumer { group = group, topic = topic, invisible = 10, await = 1 }
    assert(c:receive(1, { await = 0 }))
    local p = env.producer { topics = { topic } }
    local ids, N = {}, 24
    for i = 1, N do ids[i] = assert(p:send(topic, "budget " .. i)) end
    p:close()

    local effects, done, outage_started = {}, 0, false
    local t0 = mqlease.now()
    local stats = mqlease.run(c, function(m)
      if not outage_started and done >= 4 then
        -- Redis goes away for 15 s while most messages still wait
        outage_started = true
        env.sh(("(MQLEASE_REDIS_PORT=%d MQLEASE_REDIS_RUN=%s bash spec/support/redis.sh stop; sleep 15; " ..
          "MQLEASE_REDIS_PORT=%d MQLEASE_REDIS_RUN=%s bash spec/support/redis.sh start) >/dev/null 2>&1 &")
          :format(OWN_PORT, OWN_RUN, OWN_PORT, OWN_RUN))
      end
      mqlease.sleep(0.5)
      effects[m.id] = (effects[m.id] or 0) + 1
      done = done + 1
      return true
    end, { concurrency = 2, max_attempts = 2, signals = false, run_for = 110, on_error = function() end,
           policy = mqlease.policy.exactly_once { redis = { address = "127.0.0.1:" .. OWN_PORT, timeout = 0.5 },
             fail_delay = 1, defer_delay = 1 },
           stop = function()
             local n = 0
             for _ in pairs(effects) do n = n + 1 end
             return n >= N
           end })
    local m = c:metrics()
    print(("budget: %d messages in %.1f s, redis_unavailable %d, fail_closed_held %d, done_marker_failed %d, dead-lettered %d"):format(
      N, mqlease.now() - t0, m.redis_unavailable or 0, m.fail_closed_held or 0, m.done_marker_failed or 0, stats.dead_lettered))
    assert.is_true(outage_started)
    -- seen by an acquire (the message is held, fail closed), or by a done
    -- marker that could not be written (the handler's slot keeps it, with its
    -- lock, and writes it again: no ack without it)
    assert.is_true((m.redis_unavailable or 0) + (m.done_marker_failed or 0) >= 1, "the outage was seen")
    assert.equal(0, stats.dead_lettered, "no message that never ran was dead-lettered")
    assert.is_true((m.fail_closed_held or 0) + (m.done_marker_retries or 0) >= 1, "messages were held through it")
    assert.equal(0, (m.dead_lettered or {}).max_attempts or 0)
    for i, id in ipairs(ids) do
      assert.equal(1, effects[id], "effects of message " .. i)   -- none lost, none twice
    end
  end)

  it("skips a message past its attempts by its done marker instead of dead-lettering it", function()
    local redis = "127.0.0.1:" .. env.redis_port
    local topic, group = env.topic("budget_done"), env.name("g_budget_done")
    local c = env.consumer { group = group, topic = topic, invisible = 10, await = 1 }
    assert(c:receive(1, { await = 0 }))
    local p = env.producer { topics = { topic } }
    local id = assert(p:send(topic, "effect done, ack failed"))
    p:close()
    local policy = mqlease.policy.exactly_once { redis = redis }
    -- attempt 1: the effect happens and its done marker is written, but the
    -- ack never reaches the broker (here: the message is given back instead)
    local first
    env.collect(c, 30, function(m) if m.id == id then first = m end end, function() return first ~= nil end, 1)
    assert.is_userdata(first)
    local effects = 0
    local action = policy(first, first.lease, function() effects = effects + 1; return true end)
    assert.equal("ack", action)
    -- what attempt 2 must find: the done marker, and no lock left to wait for
    local r = mqlease.redis(redis)
    local keys = mqlease.policy.keys(id)
    assert.equal(1, r:call("EXISTS", keys.done), "attempt 1 wrote no done marker")
    assert.equal(0, r:call("EXISTS", keys.lock), "attempt 1's lock outlived it")
    r:close()
    assert(first:nack(0))

    -- attempt 2 reaches a run that allows one attempt: the done marker says it is done
    local stats = mqlease.run(c, function() effects = effects + 1; return true end,
      { max_attempts = 1, signals = false, run_for = 40, policy = policy, on_error = function() end,
        stop = function() return (c:metrics().duplicate_skipped or 0) >= 1 or c:metrics().dead_lettered.max_attempts ~= nil end })
    assert.equal(1, effects, "the handler ran once, on attempt 1")
    assert.equal(0, stats.dead_lettered, "not dead-lettered")
    assert.equal(1, stats.acked, "acked as a known duplicate")
    assert.equal(1, c:metrics().duplicate_skipped)
  end)
end)
