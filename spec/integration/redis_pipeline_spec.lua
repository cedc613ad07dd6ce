-- mqlease.redis inside mqlease's scheduler: the calls of one scheduler turn
-- cross to Redis in one round trip (a pipeline), each with its own reply, and
-- the exactly-once policy pays a round trip per turn, not per script. Needs
-- only Redis: the consumer is a stand-in.
local mqlease = require "mqlease"
local scheduler = require "mqlease.scheduler"
local run = require "mqlease.run"
local wait = require "mqlease.loop"
local env = require "support.env"

-- A consumer that hands out n messages, 32 per receive, then nothing; acks
-- answer at once. Only what mqlease.run and the policy touch.
local function fake_consumer(n)
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
  local prefix = env.name("pipe_m")
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
    -- two scripts a message (acquire; done marker + unlock): 192 commands,
    -- which one at a time took 192 round trips
    assert.equal(192, after.commands - before.commands)
    assert.is_true(after.round_trips - before.round_trips <= 24,
      ("%d round trips for 192 commands"):format(after.round_trips - before.round_trips))
  end)
end)
