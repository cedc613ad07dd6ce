-- One owner for a message's end, on a real RocketMQ and a real Redis: the
-- edges where a retry in place, a lease that ends, a failed release, a done
-- marker that cannot be written and a stop meet (docs/guarantees.md, "One
-- owner for a message's end"). The fault model in spec/unit/run_model_spec.lua
-- proves the rules over thousands of simulated schedules; these prove them
-- against the servers.
local mqlease = require "mqlease"
local policy = require "mqlease.policy"
local wait = require "mqlease.loop"
local env = require "support.env"

local VERSION = env.rocketmq_version
local REDIS = "127.0.0.1:" .. env.redis_port
-- The CLIENT PAUSE spec's own redis-server: a pause of the shared one stalls
-- every spec that runs beside this file (a keepalive regression spec once saw
-- its lock lapse behind a renewal held 4 s by this pause).
local PAUSED_PORT = 16480
local PAUSED_RUN = "/tmp/mqlease-redis-life-" .. env.run_id

local function paused_redis(cmd)
  return env.execute(("MQLEASE_REDIS_PORT=%d MQLEASE_REDIS_RUN=%s bash spec/support/redis.sh %s >/dev/null 2>&1")
    :format(PAUSED_PORT, PAUSED_RUN, cmd))
end

local fifo_topic = env.fifo_topic

local function send(topic, bodies, group)
  local p = env.producer { topics = { topic } }
  for _, body in ipairs(bodies) do assert(p:send(topic, body, { message_group = group })) end
  p:close()
end

-- A consumer of a fresh topic holding one message (body), and a Redis key
-- prefix of its own for the exactly-once policy.
local function one_message(base, body)
  local topic, group = env.topic(base), env.name("g_" .. base)
  local c = env.consumer { group = group, topic = topic, await = 2 }
  assert(c:receive(1, { await = 0 }))   -- join the group before the send
  send(topic, { body })
  return c, env.name(base) .. ":"
end

-- Effects of a FIFO run, by body: the bodies in the order their handlers
-- succeeded, and how often each did.
local function recorder()
  local r = { order = {}, times = {}, log = {} }
  function r.effect(body)
    r.order[#r.order + 1] = body
    r.times[body] = (r.times[body] or 0) + 1
  end
  return r
end

describe("a message's end on RocketMQ " .. VERSION, function()
  it("keeps a FIFO group in order, each effect once, when a lease budget runs out during a retry in place", function()
    local topic, group = fifo_topic("life_budget")
    -- the budget: a lease is renewed for at most 13 s in all, then let expire
    local c = env.consumer { group = group, topic = topic, invisible = 10, max_lease = 13, await = 2, batch = 8 }
    assert.is_true(c:metrics().fifo)
    assert(c:receive(1, { await = 0 }))   -- join the group first: it starts at the queue's end
    local bodies = { "g:1", "g:2", "g:3", "g:4", "g:5" }
    send(topic, bodies, "g")
    local r, tries = recorder(), {}
    local summary = mqlease.run(c, function(m)
      tries[m.body] = (tries[m.body] or 0) + 1
      r.log[#r.log + 1] = ("%.1f %s try %d (broker attempt %d)"):format(mqlease.now(), m.body, tries[m.body],
        m.delivery_attempt)
      -- g:2 fails its first five tries: retried in place every 3 s, its
      -- lease's 13 s run out during the retries
      if m.body == "g:2" and tries[m.body] <= 5 then return false, "not yet" end
      r.effect(m.body)
      return true
    end, { nack_delay = 3, run_for = 90, stop = function() return #r.order == #bodies end, grace = 5 })
    local log = table.concat(r.log, "\n")
    assert.same(bodies, r.order, log)
    for _, b in ipairs(bodies) do assert.equal(1, r.times[b], b .. " took effect more than once\n" .. log) end
    -- the budget ended g:2's lease while it waited: what was held behind it went back unrun
    assert.is_true(summary.given_back >= 1, "given back " .. summary.given_back .. "\n" .. log)
    assert.is_true(tries["g:2"] >= 6, log)
    assert.is_true((c:metrics().budget_expire or 0) >= 1, "the budget ended no lease\n" .. log)
  end)

  it("keeps a FIFO group in order, each effect once, when an ack fails: it is made again before the group moves on", function()
    local topic, group = fifo_topic("life_ack")
    local c = env.consumer { group = group, topic = topic, invisible = 10, await = 2, batch = 8 }
    assert(c:receive(1, { await = 0 }))
    local bodies = { "g:1", "g:2", "g:3", "g:4" }
    send(topic, bodies, "g")
    local r, events = recorder(), {}
    -- the first AckMessage that carries g:2 gets no answer (it never leaves);
    -- the run must ack it again, and only then start g:3
    local real_ack, failed_once = c.ack, false
    c.ack = function(self, msgs)
      for _, m in ipairs(msgs) do
        if m.body == "g:2" and not failed_once then
          failed_once = true
          events[#events + 1] = "ack g:2 failed"
          return nil, "no reply within the request timeout (injected)", "TIMEOUT"
        end
      end
      local ok, err, code, results = real_ack(self, msgs)
      for _, m in ipairs(msgs) do events[#events + 1] = "ack " .. m.body .. (ok and " ok" or " failed") end
      return ok, err, code, results
    end
    local summary = mqlease.run(c, function(m)
      events[#events + 1] = "start " .. m.body
      r.effect(m.body)
      return true
    end, { run_for = 60, stop = function() return #r.order == #bodies end, grace = 5 })
    local log = table.concat(events, "\n")
    assert.is_true(failed_once, log)
    assert.same(bodies, r.order, log)
    for _, b in ipairs(bodies) do assert.equal(1, r.times[b], log) end
    -- g:3 started only after g:2's second ack succeeded
    local acked_at, started_at
    for i, e in ipairs(events) do
      if e == "ack g:2 ok" then acked_at = acked_at or i end
      if e == "start g:3" then started_at = started_at or i end
    end
    assert.is_truthy(acked_at, log)
    assert.is_true(acked_at < started_at, log)
    assert.equal(4, summary.acked)
    assert.equal(1, c:metrics().release_retries)
  end)

  it("under exactly once, never acks while Redis refuses the done marker (CLIENT PAUSE WRITE), then does it once", function()
    assert.is_true(paused_redis("start"), "the spec's own redis-server started")
    finally(function() paused_redis("stop") end)
    local own = "127.0.0.1:" .. PAUSED_PORT
    local c, prefix = one_message("life_pause", "x")
    local admin = mqlease.redis(own)
    local effects, paused_until, acked_at = 0, nil, nil
    local real_ack = c.ack
    c.ack = function(self, msgs)
      acked_at = acked_at or mqlease.now()
      return real_ack(self, msgs)
    end
    local summary = mqlease.run(c, function()
      effects = effects + 1
      if not paused_until then
        -- writes (and so the FINISH script) wait 4 s: the policy's call times out
        assert(admin:call("CLIENT", "PAUSE", "4000", "WRITE"))
        paused_until = mqlease.now() + 4
      end
      return true
    end, { policy = policy.exactly_once({ redis = own, prefix = prefix }), run_for = 40,
      stop = function() return acked_at ~= nil and mqlease.now() > acked_at + 12 end, grace = 5 })
    assert.is_truthy(acked_at, "never acked")
    assert.is_true(acked_at >= paused_until, ("acked %.2f s before the pause ended"):format(paused_until - acked_at))
    assert.equal(1, effects)
    assert.equal(1, summary.acked)
    assert.is_true((c:metrics().done_marker_failed or 0) >= 1)
    -- the done marker is there: a redelivery would be acked without running
    local found = admin:call("KEYS", prefix .. "*:done")
    admin:close()
    assert.equal(1, #found, "one done marker under " .. prefix)
  end)

  it("stops the lock of a handler that outlives grace when the run returns: the key lapses within lock_ttl", function()
    local c, prefix = one_message("life_grace", "slow")
    local started, lock_key = false, nil
    local summary = mqlease.run(c, function(m)
      started = true
      lock_key = policy.keys(m.id, prefix).lock
      wait.sleep(60)   -- far past grace
      return true
    end, { policy = policy.exactly_once({ redis = REDIS, prefix = prefix, lock_ttl = 3 }),
      stop = function() return started end, grace = 1 })
    assert.is_true(started)
    assert.equal("stop", summary.reason)
    local admin = mqlease.redis(REDIS)
    local returned = mqlease.now()
    -- renewed every second until the run returned; gone within lock_ttl after
    local gone_after
    while mqlease.now() < returned + 8 do
      if admin:call("EXISTS", lock_key) == 0 then gone_after = mqlease.now() - returned break end
      wait.sleep(0.2)
    end
    admin:close()
    assert.is_truthy(gone_after, "the lock " .. lock_key .. " was still renewed 8 s after mqlease.run returned")
    assert.is_true(gone_after <= 3.5, ("gone %.1f s after the run returned"):format(gone_after))
  end)
end)
