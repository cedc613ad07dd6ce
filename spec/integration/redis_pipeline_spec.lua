-- mqlease.redis inside mqlease's scheduler: the calls of one scheduler turn
-- cross to Redis in one round trip (a pipeline), each with its own reply, and
-- the exactly-once policy pays a round trip per turn, not per script, and one
-- script call for the messages of a turn (mqlease.policy.batch), in which
-- one message's error is its own. Needs only Redis: the consumer is a
-- stand-in.
local mqlease = require "mqlease"
local scheduler = require "mqlease.scheduler"
local run = require "mqlease.run"
local wait = require "mqlease.loop"
local env = require "support.env"

-- A consumer that hands out n messages, 32 per receive, then nothing; acks
-- answer at once. Only what mqlease.run and the policy touch.
local function fake_consumer(n, name)
  local c = {
    options = { release_delay = 1, batch = 32, request_timeout = 3 },
    _router = { client = { cancel_receives = function() end } },
    acked = {}, nacked = {}, given = 0, counts = {},
  }
  function c.metrics() return {} end
  function c.count(_, what) c.counts[what] = (c.counts[what] or 0) + 1 end
  function c.id() return "spec-consumer" end
  function c.close() end
  function c.ack(_, msgs)
    for _, m in ipairs(msgs) do c.acked[#c.acked + 1] = m.id end
    return true
  end
  local prefix = env.name(name or "pipe_m")
  c.prefix = prefix
  local function message(i)
    local m = { id = prefix .. i, body = "x", delivery_attempt = 1, consumer = c,
      lease = { alive = function() return true end, _lock_lost = function() end } }
    function m.nack() c.nacked[#c.nacked + 1] = m.id; return true end
    return m
  end
  function c.receive(_, want)
    if c.given >= n then
      wait.sleep(0.01)
      return {}
    end
    local msgs = {}
    for i = c.given + 1, math.min(n, c.given + want, c.given + 32) do msgs[#msgs + 1] = message(i) end
    c.given = c.given + #msgs
    return msgs
  end
  return c
end

describe("mqlease.redis in mqlease's scheduler", function()
  local r
  setup(function() r = mqlease.redis("127.0.0.1:" .. env.redis_port) end)
  teardown(function() r:close() end)

  -- Runs fn(i) in n tasks that all start in one scheduler turn; their results.
  local function in_one_turn(n, fn)
    local sched, out = scheduler.new(), {}
    for i = 1, n do sched:spawn(function() out[i] = { fn(i) } end) end
    sched:loop()
    return out
  end

  it("sends the calls of one turn in one round trip, each with its own reply", function()
    local before = r:stats()
    local got = in_one_turn(40, function(i) return r:call("ECHO", "v" .. i) end)
    local after = r:stats()
    for i = 1, 40 do assert.equal("v" .. i, got[i][1]) end
    assert.equal(40, after.commands - before.commands)
    assert.equal(1, after.round_trips - before.round_trips)
  end)

  it("re-runs a script the server lacks as EVAL in one more round trip, then uses its SHA1", function()
    local script = "return ARGV[1] -- " .. env.name("fresh")   -- unknown to the server
    local before = r:stats()
    local got = in_one_turn(20, function(i) return r:eval(script, {}, { "s" .. i }) end)
    local mid = r:stats()
    for i = 1, 20 do assert.equal("s" .. i, got[i][1]) end
    assert.equal(2, mid.round_trips - before.round_trips)
    in_one_turn(20, function(i) return r:eval(script, {}, { "s" .. i }) end)
    assert.equal(1, r:stats().round_trips - mid.round_trips)
  end)

  it("answers a call in a new scheduler after one stopped with its batch unflushed", function()
    local first = scheduler.new()
    first:spawn(function() r:call("ECHO", "never sent") end)
    first:loop(function() return true end)   -- stops after one round: its flush never runs
    local got = in_one_turn(1, function() return r:call("ECHO", "next") end)
    assert.equal("next", got[1][1])
  end)

  it("keeps outside a scheduler one call to one round trip", function()
    local before = r:stats()
    assert.equal("solo", r:call("ECHO", "solo"))
    assert.equal(1, r:stats().round_trips - before.round_trips)
  end)

  it("runs exactly-once over 96 messages in a round trip per turn, not one per script", function()
    local c = fake_consumer(96)
    local policy = mqlease.policy.exactly_once { redis = r }
    local ran = {}
    local before = r:stats()
    run(c, function(m) ran[m.id] = (ran[m.id] or 0) + 1; return true end, {
      policy = policy, concurrency = 64, signals = false, stop = function() return #c.acked >= 96 end })
    local after = r:stats()
    assert.equal(96, #c.acked)
    assert.equal(0, #c.nacked)
    for _, id in ipairs(c.acked) do
      assert.equal(1, ran[id])
      local keys = mqlease.policy.keys(id)
      assert.equal(1, r:call("EXISTS", keys.done))
      assert.equal(0, r:call("EXISTS", keys.lock))   -- unlocked with the done marker
    end
    -- two scripts a message (acquire; done marker + unlock), which one at a
    -- time took 192 round trips; the messages of a turn share one script
    -- call of each (mqlease.policy.batch): at most 32 in one, so at least 6
    local commands, trips = after.commands - before.commands, after.round_trips - before.round_trips
    assert.is_true(commands >= 6 and commands <= 24, ("%d commands for 96 messages"):format(commands))
    assert.is_true(trips <= commands, ("%d round trips for %d commands"):format(trips, commands))
  end)

  it("sends one script a message with batch = false (for a proxy that shards by hash tag)", function()
    local c = fake_consumer(64, "pipe_single")
    local policy = mqlease.policy.exactly_once { redis = r, batch = false }
    local before = r:stats()
    run(c, function() return true end, {
      policy = policy, concurrency = 64, signals = false, stop = function() return #c.acked >= 64 end })
    assert.equal(64, #c.acked)
    assert.equal(128, r:stats().commands - before.commands)
  end)

  it("fails in a shared script call only the message whose key is of the wrong type", function()
    local c = fake_consumer(40, "pipe_poisoned")
    -- the token at the grant: the poisoned fence key fails the acquire's INCR
    local policy = mqlease.policy.exactly_once { redis = r, defer_delay = 0.05, fence = "on_grant" }
    -- message 7's fence is a list: its INCR fails inside the batch's script
    local poisoned = c.prefix .. 7
    local fence = mqlease.policy.keys(poisoned).fence
    r:call("DEL", fence)
    r:call("RPUSH", fence, "not a counter")
    local ran, deadline = {}, mqlease.now() + 10
    run(c, function(m) ran[m.id] = (ran[m.id] or 0) + 1; return true end, {
      policy = policy, concurrency = 64, signals = false, grace = 1,
      -- or after 10 s: a batch that failed its 39 other messages too never gets there
      stop = function()
        return (#c.acked >= 39 and c.counts.redis_unavailable ~= nil) or mqlease.now() > deadline
      end })
    assert.equal(39, #c.acked)
    for _, id in ipairs(c.acked) do
      assert.are_not.equal(poisoned, id)
      assert.equal(1, ran[id])
    end
    -- the poisoned one never ran: it failed closed (kept, asked again), as alone
    assert.is_nil(ran[poisoned])
    assert.is_true(c.counts.redis_unavailable >= 1)
    -- given back, if at all, only at the stop (the run's drain), never run
    for _, id in ipairs(c.nacked) do assert.equal(poisoned, id) end
    r:call("DEL", fence, mqlease.policy.keys(poisoned).lock)
  end)
end)
