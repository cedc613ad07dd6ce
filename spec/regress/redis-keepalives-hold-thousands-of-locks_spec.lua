-- Regression: the lock keepalive thread picked each next renewal by walking
-- every registered lock and sent the renewals one round trip at a time, so
-- a round of renewals cost (locks x locks) steps plus a round trip a lock.
-- With tens of thousands of handlers holding exactly-once locks (a worker of
-- high concurrency with slow handlers), a round took longer than the locks'
-- TTL, and locks lapsed while their handlers ran: each was told it lost its
-- lock, and another instance could take the message over. Renewals now come
-- due in deadline order from a heap and go out pipelined, as many as are due
-- (up to a pipeline's worth) per round trip.
local mqlease = require "mqlease"
local env = require "support.env"

local REDIS = "127.0.0.1:" .. env.redis_port

-- Makes (or checks) keys prefix1 .. prefixN on the server in one script:
-- undeclared keys are fine on the one plain redis-server of the suite.
local MAKE = [[
for i = 1, tonumber(ARGV[2]) do redis.call('SET', ARGV[1] .. i, 'me', 'PX', ARGV[3]) end
return 1]]
local HELD = [[
local n = 0
for i = 1, tonumber(ARGV[2]) do
  if redis.call('GET', ARGV[1] .. i) == 'me' and redis.call('PTTL', ARGV[1] .. i) > 0 then n = n + 1 end
end
return n]]
local DROP = [[
for i = 1, tonumber(ARGV[2]) do redis.call('DEL', ARGV[1] .. i) end
return 1]]

describe("mqlease regression: lock keepalives for thousands of locks at once", function()
  it("keeps 20,000 locks of a 3 s TTL alive for three TTLs, none lost", function()
    local N, TTL, EVERY = 20000, 3, 1
    local r = mqlease.redis(REDIS)
    local watcher = mqlease.redis(REDIS)
    local prefix = env.name("regress_many_locks") .. ":"
    assert.equal(1, watcher:eval(MAKE, {}, { prefix, N, TTL * 1000 }))
    local ids, lost_calls = {}, 0
    local since = mqlease.now()
    for i = 1, N do
      ids[i] = r:keepalive(prefix .. i, "me", TTL, EVERY, nil, function() lost_calls = lost_calls + 1 end, since)
    end
    -- three TTLs: a lock whose renewals fall behind by one TTL is gone
    local t0, fewest = mqlease.now(), N
    while mqlease.now() - t0 < 3 * TTL do
      mqlease.sleep(0.5)
      fewest = math.min(fewest, watcher:eval(HELD, {}, { prefix, N }))
    end
    local lost = 0
    for i = 1, N do
      if r:keepalive_stop(ids[i]) then lost = lost + 1 end
    end
    watcher:eval(DROP, {}, { prefix, N })
    watcher:close()
    r:close()
    assert.equal(N, fewest, ("only %d of %d locks were held at one check: renewals fell behind"):format(fewest, N))
    assert.equal(0, lost, ("%d of %d keepalives said their lock was lost"):format(lost, N))
    assert.equal(0, lost_calls)
  end)

  it("keeps its locks alive across a SCRIPT FLUSH (the renewals' NOSCRIPT run again as EVAL)", function()
    local N, TTL, EVERY = 300, 1, 0.25
    local r = mqlease.redis(REDIS)
    local watcher = mqlease.redis(REDIS)
    local prefix = env.name("regress_locks_flush") .. ":"
    assert.equal(1, watcher:eval(MAKE, {}, { prefix, N, TTL * 1000 }))
    local ids, since = {}, mqlease.now()
    for i = 1, N do ids[i] = r:keepalive(prefix .. i, "me", TTL, EVERY, nil, nil, since) end
    local t0, fewest = mqlease.now(), N
    while mqlease.now() - t0 < 3 * TTL do
      -- every renewal round finds the script gone
      assert.equal("OK", watcher:call("SCRIPT", "FLUSH"))
      mqlease.sleep(0.1)
      fewest = math.min(fewest, watcher:eval(HELD, {}, { prefix, N }))
    end
    local lost = 0
    for i = 1, N do
      if r:keepalive_stop(ids[i]) then lost = lost + 1 end
    end
    watcher:eval(DROP, {}, { prefix, N })
    watcher:close()
    r:close()
    assert.equal(N, fewest, ("only %d of %d locks were held at one check"):format(fewest, N))
    assert.equal(0, lost)
  end)
end)
