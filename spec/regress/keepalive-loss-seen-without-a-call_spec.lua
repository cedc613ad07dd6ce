-- Regression: a lock keepalive whose budget (max_hold) was spent stopped
-- renewing without a word, so its lock lapsed within its TTL while the
-- handler still counted on it; and a lost lock reached lease:alive() only
-- through a Redis call of the handler's own (the event waits in the client's
-- queue until something reads it), so a handler in nginx or cqueues that
-- asked alive() between calls never learnt of it. A spent budget now posts
-- the lost event as a failed renewal does, and keepalive_lost reads the
-- waiting events itself.
local mqlease = require "mqlease"
local env = require "support.env"

local REDIS = "127.0.0.1:" .. env.redis_port

describe("mqlease regression: a lost lock is told at once", function()
  it("posts lock-lost once a keepalive's max is spent, as for a failed renewal", function()
    local r = mqlease.redis(REDIS)
    local key = env.name("regress_ka_spent")
    assert.equal("OK", r:call("SET", key, "me", "PX", 3000))
    local lost = false
    -- renewed every 0.3 s for at most 1 s; the key itself would last 3 s more
    local id = r:keepalive(key, "me", 3, 0.3, 1, function() lost = true end)
    mqlease.sleep(1.6)
    r:call("PING")   -- the event is read with the next reply
    assert.is_true(lost, "the spent keepalive said nothing")
    assert.is_true(r:keepalive_lost(id))
    assert.is_true(r:keepalive_stop(id))
    r:call("DEL", key)
    r:close()
  end)

  it("answers keepalive_lost from the waiting events, with no call of the caller's own", function()
    local r = mqlease.redis(REDIS)
    local other = mqlease.redis(REDIS)
    local key = env.name("regress_ka_gone")
    assert.equal("OK", r:call("SET", key, "me", "PX", 5000))
    local id = r:keepalive(key, "me", 5, 0.3)
    assert.is_false(r:keepalive_lost(id))
    other:call("DEL", key)   -- a failover that lost the key
    other:close()
    local deadline = mqlease.now() + 3
    while not r:keepalive_lost(id) and mqlease.now() < deadline do mqlease.sleep(0.05) end
    assert.is_true(r:keepalive_lost(id), "keepalive_lost did not see the renewal that found the key gone")
    assert.is_true(r:keepalive_stop(id))
    r:close()
  end)
end)
