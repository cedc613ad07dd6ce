-- FIFO consumption on a real RocketMQ (5.2.0, and 5.3.3 in the suite's
-- second pass): a FIFO topic read by an orderly consumer group
-- (consumeMessageOrderly, so the proxy's Settings say fifo = true). mqlease.run
-- must run the messages of one message group one after another in send order,
-- different groups in parallel, retry a failed message in place (never a nack,
-- which lets the broker reorder) and dead-letter it when its attempts run out
-- before the next one of its group runs; a stop mid-run keeps the order.
local mqlease = require "mqlease"
local wait = require "mqlease.loop"
local env = require "support.env"

local VERSION = env.rocketmq_version

local fifo_topic = env.fifo_topic

-- Sends n messages to each of the groups, interleaved (1 of each group, then 2 ...);
-- bodies "group:i". Returns the message ids by body.
local function send_groups(topic, groups, n)
  local p = env.producer { topics = { topic } }
  local ids = {}
  for i = 1, n do
    for _, g in ipairs(groups) do
      local body = g .. ":" .. i
      ids[body] = assert(p:send(topic, body, { message_group = g }))
    end
  end
  p:close()
  return ids
end

local function parse(body)
  local g, i = body:match("^(.-):(%d+)$")
  return g, tonumber(i)
end

local function range(from, to, skip)
  local out = {}
  for i = from, to do if i ~= skip then out[#out + 1] = i end end
  return out
end

describe("FIFO consumption on RocketMQ " .. VERSION, function()
  it("runs each message group in send order, groups in parallel, failures retried in place, the DLQ after the last attempt", function()
    local topic, group = fifo_topic("fifo_run")
    local c = env.consumer { group = group, topic = topic, invisible = 10, await = 2 }
    assert.is_true(c:metrics().fifo, "the proxy's Settings mark the orderly group as fifo")
    -- and carry the group's retry policy (retryMaxTimes 16 + 1, RocketMQ's customized steps)
    local rp = c:metrics().retry_policy
    assert.is_table(rp, "the proxy's Settings carry a retry policy")
    assert.equal(17, rp.max_attempts)
    assert.same({ 1, 5, 10 }, { rp.steps[1], rp.steps[2], rp.steps[3] })
    assert(c:receive(1, { await = 0 }))   -- a new group starts at the queue's end: join first
    local groups, N = { "ga", "gb", "gc", "gd" }, 25
    local ids = send_groups(topic, groups, N)

    local effects, attempts, running, seen_parallel = {}, {}, {}, 0
    local overlap, wrong_group = nil, nil
    local successes, t0 = 0, mqlease.now()
    for _, g in ipairs(groups) do effects[g] = {} end
    local stats = mqlease.run(c, function(m)
      local g, i = parse(m.body)
      -- recorded, asserted after the run: an error in here is only a nack to the policy
      if m.message_group ~= g and not wrong_group then
        wrong_group = ("%s came with message_group %s"):format(m.body, tostring(m.message_group))
      end
      if running[g] then overlap = ("%s:%d ran while %s:%d ran"):format(g, i, g, running[g]) end
      running[g] = i
      local n = 0
      for _ in pairs(running) do n = n + 1 end
      if n > seen_parallel then seen_parallel = n end
      attempts[m.body] = (attempts[m.body] or 0) + 1
      wait.sleep(math.random() * 0.05)   -- handlers of random length
      running[g] = nil
      -- 5 and 13 of every group fail once; gc:20 fails on every attempt
      if (i == 5 or i == 13) and attempts[m.body] == 1 then return false, "fails once" end
      if g == "gc" and i == 20 then return false, "always fails" end
      effects[g][#effects[g] + 1] = i
      successes = successes + 1
      return true
    end, { concurrency = 16, max_attempts = 3, nack_delay = 0.5, signals = false, run_for = 110,
           on_error = function() end,
           stop = function() return successes >= #groups * N - 1 and c:metrics().dead_lettered.max_attempts == 1 end })
    print(("fifo: %d groups x %d in %.1f s, %d retried in place, %d groups at once at most"):format(
      #groups, N, mqlease.now() - t0, stats.retried or 0, seen_parallel))

    assert.is_nil(wrong_group, wrong_group)
    assert.is_nil(overlap, overlap)
    for _, g in ipairs(groups) do
      -- in send order, each success exactly once (gc:20 never succeeded: in the DLQ)
      assert.same(range(1, N, g == "gc" and 20 or nil), effects[g], "effects of group " .. g)
    end
    assert.equal(3, attempts["gc:20"], "gc:20 ran its three attempts")
    assert.equal(2, attempts["ga:5"])
    assert.equal(1, stats.dead_lettered)
    assert.equal(0, stats.nacked, "no ordered message was nacked")
    assert.equal(#groups * 2 + 2, stats.retried)
    assert.is_true(seen_parallel >= 2, "groups ran in parallel")

    -- the exhausted one is in %DLQ%<group>, body intact
    local dlq = env.consumer { group = env.name("g_fifo_dlq_reader"), topic = "%DLQ%" .. group, invisible = 10, await = 2 }
    local found
    env.collect(dlq, 60, function(m) if m.id == ids["gc:20"] then found = m end; m:ack() end,
      function() return found ~= nil end)
    dlq:close()
    assert.is_userdata(found, "gc:20 is in %DLQ%" .. group)
    assert.equal("gc:20", found.body)
  end)

  it("keeps the order across a stop mid-run and a second run", function()
    local topic, group = fifo_topic("fifo_stop")
    local groups, N = { "sa", "sb", "sc" }, 25
    local c1 = env.consumer { group = group, topic = topic, invisible = 10, await = 2 }
    assert(c1:receive(1, { await = 0 }))
    send_groups(topic, groups, N)

    local effects, count = {}, 0
    for _, g in ipairs(groups) do effects[g] = {} end
    local function handler(m)
      local g, i = parse(m.body)
      wait.sleep(math.random() * 0.05)
      -- 7 of every group fails once: a stop may find it waiting to be tried again
      if i == 7 and m.delivery_attempt == 1 then return false, "fails once" end
      effects[g][#effects[g] + 1] = i
      count = count + 1
      return true
    end
    local first = mqlease.run(c1, handler, { concurrency = 16, nack_delay = 1, signals = false, grace = 10,
      run_for = 60, on_error = function() end, stop = function() return count >= 20 end })
    assert.equal("stop", first.reason)
    assert.is_true(count < #groups * N, "the stop came mid-run")

    local c2 = env.consumer { group = group, topic = topic, invisible = 10, await = 2 }
    mqlease.run(c2, handler, { concurrency = 16, nack_delay = 1, signals = false, run_for = 100,
      on_error = function() end, stop = function() return count >= #groups * N end })
    for _, g in ipairs(groups) do
      assert.same(range(1, N), effects[g], "effects of group " .. g .. " across both runs")
    end
  end)
end)
