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

-- Holds n locks of ttl seconds, renewed every `every`, for three TTLs (a
-- lock whose renewals fall behind by one TTL is gone), calling between()
-- on the watcher before each check. -> the fewest held at one check, how
-- many keepalives said lost at their stop, how many on_lost calls came.
local function hold(name, n, ttl, every, check_every, between)
  local r = mqlease.redis(REDIS)
  local watcher = mqlease.redis(REDIS)
  local prefix = env.name(name) .. ":"
  assert.equal(1, watcher:eval(MAKE, {}, { prefix, n, ttl * 1000 }))
  local ids, lost_calls, since = {}, 0, mqlease.now()
  for i = 1, n do
    ids[i] = r:keepalive(prefix .. i, "me", ttl, every, nil, function() lost_calls = lost_calls + 1 end, since)
  end
  local t0, fewest = mqlease.now(), n
  while mqlease.now() - t0 < 3 * ttl do
    if between then between(watcher) end
    mqlease.sleep(check_every)
    fewest = math.min(fewest, watcher:eval(HELD, {}, { prefix, n }))
  end
  local lost = 0
  for i = 1, n do
    if r:keepalive_stop(ids[i]) then lost = lost + 1 end
  end
  watcher:eval(DROP, {}, { prefix, n })
  watcher:close()
  r:close()
  return fewest, lost, lost_calls
end

describe("mqlease regression: lock keepalives for thousands of locks at once", function()
  it("keeps 20,000 locks of a 3 s TTL alive for three TTLs, none lost", function()
    local N = 20000
    local fewest, lost, lost_calls = hold("regress_many_locks", N, 3, 1, 0.5)
    assert.equal(N, fewest, ("only %d of %d locks were held at one check: renewals fell behind"):format(fewest, N))
    assert.equal(0, lost, ("%d of %d keepalives said their lock was lost"):format(lost, N))
    assert.equal(0, lost_calls)
  end)

  it("keeps its locks alive across a SCRIPT FLUSH (the renewals' NOSCRIPT run again as EVAL)", function()
    local N = 300
    -- every renewal round finds the script gone
    local fewest, lost, lost_calls = hold("regress_locks_flush", N, 1, 0.25, 0.1, function(watcher)
      assert.equal("OK", watcher:call("SCRIPT", "FLUSH"))
    end)
    assert.equal(N, fewest, ("only %d of %d locks were held at one check"):format(fewest, N))
    assert.equal(0, lost)
    assert.equal(0, lost_calls)
  end)
end)
