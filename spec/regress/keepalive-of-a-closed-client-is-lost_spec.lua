-- Regression: a Redis client closed while one of its lock keepalives ran
-- (a client of the user's own, given to the exactly-once policy as its
-- 'redis', closed by other code of theirs) answered keepalive_lost and
-- keepalive_stop with false: the lock looked kept, lease:alive() stayed
-- true while the lock lapsed at its TTL unrenewed, and the policy's
-- done-marker retries went on for as long as the lease lived. A closed
-- client renews nothing, so its keepalives are lost.
local mqlease = require "mqlease"
local lease_mod = require "mqlease.lease"
local env = require "support.env"

local REDIS = "127.0.0.1:" .. env.redis_port

describe("mqlease regression: the keepalives of a closed Redis client", function()
  it("are lost, to keepalive_lost and to keepalive_stop", function()
    local r = mqlease.redis(REDIS)
    local key = env.name("regress_ka_closed")
    assert.equal("OK", r:call("SET", key, "me", "PX", 3000))
    local id = r:keepalive(key, "me", 3, 1)
    local id2 = r:keepalive(key, "me", 3, 1)
    assert.is_false(r:keepalive_lost(id))
    r:close()
    assert.is_true(r:keepalive_lost(id), "a closed client's keepalive looked alive")
    assert.is_true(r:keepalive_stop(id), "stopping a closed client's keepalive said it had held")
    assert.is_true(r:keepalive_stop(id2))
    local other = mqlease.redis(REDIS)
    other:call("DEL", key)
    other:close()
  end)

  it("end the lock a lease holds, so the lease is no longer alive", function()
    local r = mqlease.redis(REDIS)
    local id = env.name("regress_ka_closed_lease")
    local key = mqlease.policy.keys(id, "regress:").lock
    assert.equal("OK", r:call("SET", key, "me", "PX", 3000))
    local lease = {}   -- the lock's half of a lease (lease.lock_kept reads only it)
    lease_mod.hold_lock(lease, r, r:_keep_lock_of("regress:", id, "me", 3000, 1000, 0, 0))
    assert.is_true(lease_mod.lock_kept(lease))
    r:close()
    assert.is_false(lease_mod.lock_kept(lease), "the lock of a closed client looked kept")
    assert.is_true(lease_mod.drop_lock(lease))
    local other = mqlease.redis(REDIS)
    other:call("DEL", key)
    other:close()
  end)
end)
