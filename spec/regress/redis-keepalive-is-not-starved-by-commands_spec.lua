-- Regression (issue 10, defect 3): Redis lock keepalives starved behind commands.
-- The client's thread served every queued command before any keepalive, so a
-- queue of slow commands (busy handlers, or a slow Redis) delayed a renewal
-- past the lock's TTL: the lock expired while nobody was told. Renewals now
-- have their own connection and deadline order, and a lock whose TTL ran out
-- without a renewal is reported lost by keepalive_stop.
local mqlease = require "mqlease"
local env = require "support.env"

local REDIS = "127.0.0.1:" .. env.redis_port

describe("mqlease regression: lock keepalives and a busy Redis client", function()
  it("keeps a lock alive while its client works through seconds of queued commands", function()
    local r = mqlease.redis(REDIS)
    local watcher = mqlease.redis(REDIS)
    local key = env.name("regress_keepalive_lock")
    local idle = env.name("regress_keepalive_empty_list")
    assert.equal("OK", r:call("SET", key, "me", "PX", 1000))
    local lost = false
    local id = r:keepalive(key, "me", 1.0, 0.3, nil, function() lost = true end)
    -- 12 commands that each block 0.25 s on the server: 3 s of queue, 3 TTLs
    local client = r._session.client
    local ops = {}
    for i = 1, 12 do ops[i] = client:command("BLPOP", idle, "0.25") end
    local t0, gone_at = mqlease.now(), nil
    while mqlease.now() - t0 < 3.2 do
      if watcher:call("GET", key) ~= "me" then gone_at = gone_at or (mqlease.now() - t0) end
      mqlease.sleep(0.05)
    end
    for _, op in ipairs(ops) do r._session:result(op) end
    assert.is_nil(gone_at, ("the lock expired %.2f s into the queue: its renewal waited behind commands"):format(gone_at or 0))
    assert.is_false(lost)
    assert.is_false(r:keepalive_stop(id))
    watcher:call("DEL", key)
    watcher:close()
    r:close()
  end)
end)

describe("mqlease regression: exactly_once and a lock lost while its handler runs", function()
  it("turns lease:alive() false and counts lock_lost when keepalive_stop reports the loss", function()
    local r = mqlease.redis(REDIS)
    local id = env.name("regress_eo_lock_lost")
    local prefix = "mqlease:regress:"
    local counts = {}
    local m = { id = id, consumer = {
      count = function(_, name) counts[name] = (counts[name] or 0) + 1 end,
      id = function() return "regress-consumer" end } }
    local lease = { _lock_lost = function(self) self.lost = true end,
      alive = function(self) return not self.lost end }
    local policy = mqlease.policy.exactly_once { redis = r, prefix = prefix, lock_ttl = 1 }
    local alive_after
    local action = policy(m, lease, function()
      -- a failover that lost the lock: the key is gone and somebody else holds it
      local lock = mqlease.policy.keys(id, prefix).lock
      assert.equal("OK", r:call("SET", lock, "other-owner", "PX", 5000))
      -- renewals every lock_ttl / 3 find it taken; past lock_ttl the lock is lost whichever
      -- the keepalive thread noticed first (a taken key, or no renewal for a whole ttl)
      mqlease.sleep(1.5)
      return true
    end)
    alive_after = lease:alive()
    assert.equal("ack", action)   -- the effect happened; the done marker still holds
    assert.is_false(alive_after, "lease:alive() stayed true after the lock was lost")
    assert.equal(1, counts.lock_lost)
    r:close()
  end)
end)
