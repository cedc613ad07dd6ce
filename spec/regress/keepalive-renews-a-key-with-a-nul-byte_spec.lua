-- Regression: a lock keepalive took its key and owner as C strings, so a
-- key with a NUL byte in it (a message id of a broker that sends one: the
-- exactly-once policy's keys hold the id) was renewed as the part before
-- the NUL. The renewal found that key missing, said the lock was lost, and
-- the real lock lapsed at its TTL while its handler still ran. Redis keys
-- are binary-safe, and so is the keepalive now.
local mqlease = require "mqlease"
local env = require "support.env"

local REDIS = "127.0.0.1:" .. env.redis_port

describe("mqlease regression: a keepalive of a key with a NUL byte", function()
  it("renews that key, with that owner", function()
    local r = mqlease.redis(REDIS)
    local key = env.name("regress_ka_nul") .. "{a\0b}:lock"
    local owner = "c@1/x\0y/1"
    assert.equal("OK", r:call("SET", key, owner, "PX", 1000))
    local id = r:keepalive(key, owner, 1, 0.25)
    mqlease.sleep(1.6)   -- past the TTL the key was set with: only renewals keep it
    assert.is_false(r:keepalive_lost(id), "the keepalive renewed another key and lost the lock")
    assert.equal(owner, r:call("GET", key))
    assert.is_false(r:keepalive_stop(id))
    r:call("DEL", key)
    r:close()
  end)
end)
