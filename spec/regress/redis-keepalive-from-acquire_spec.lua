-- Regression (issue 20, item 5): a lock keepalive counted its lock's age from
-- its own registration, not from the acquire that set the TTL. Between the two
-- lie the acquire's reply and, in a busy Lua VM, the wait until the handler's
-- coroutine runs again; the keepalive took the lock for that much fresher than
-- it was, so its first renewal could come after the key had expired, and
-- keepalive_stop could call a lapsed lock held. A keepalive now takes the time
-- the acquire was sent (mqlease.now() before it), and the exactly-once policy
-- passes it.
local mqlease = require "mqlease"
local env = require "support.env"

local REDIS = "127.0.0.1:" .. env.redis_port

describe("mqlease regression: a lock keepalive counts from the acquire", function()
  it("renews at once a lock registered late, before its TTL from the acquire runs out", function()
    local r = mqlease.redis(REDIS)
    local key = env.name("regress_ka_since_lock")
    local t_sent = mqlease.now()
    assert.equal("OK", r:call("SET", key, "me", "PX", 6000))
    local t_reply = mqlease.now()
    -- registered 4.5 s after the lock was taken: a renewal every 2 s counted from
    -- the registration would come at 6.5 s, after the key (6 s TTL) is gone.
    -- Counted from the acquire it is due at once, with 1.5 s to spare: a margin a
    -- loaded machine's scheduler does not eat (0.4 s did, in a CI run at load 30).
    mqlease.sleep(4.5 - (mqlease.now() - t_reply))
    local left = r:call("PTTL", key)
    assert.is_true(left > 0, "the spec's own sleep overshot: the key expired before the registration")
    local lost = false
    local id = r:keepalive(key, "me", 6.0, 2.0, nil, function() lost = true end, t_sent)
    mqlease.sleep(2.5)   -- past 6.5 s from the acquire
    r:call("PING")   -- events are read on the next call
    assert.is_false(lost, "the first renewal came after the lock's TTL from the acquire ("
      .. left .. " ms were left at the registration)")
    assert.equal("me", r:call("GET", key))
    assert.is_false(r:keepalive_stop(id))
    r:call("DEL", key)
    r:close()
  end)

  it("reports a lock lost once its TTL from the acquire has run out without a renewal", function()
    -- nothing listens on this port: no renewal can work
    local socket = require "socket"
    local s = assert(socket.bind("127.0.0.1", 0))
    local _, port = s:getsockname()
    s:close()
    local r = mqlease.redis { address = "127.0.0.1:" .. port, timeout = 0.2 }
    -- acquired 1.5 s ago with a 2 s TTL; stopped 0.7 s after the registration
    local id = r:keepalive("k", "me", 2.0, 0.6, nil, nil, mqlease.now() - 1.5)
    mqlease.sleep(0.7)
    assert.is_true(r:keepalive_stop(id), "2.2 s after the acquire, a 2 s lock never renewed was called held")
    r:close()
  end)

  it("keeps an exactly-once lock whose handler starts 4.5 s after the acquire (a busy VM)", function()
    local r = mqlease.redis(REDIS)
    -- r, but the acquire's caller resumes only 4.5 s after the reply came
    local late = env.own_redis_client(r, {
      eval = function(_, script, keys, args)
        local res, err, code = r:eval(script, keys, args)
        if script == mqlease.policy.scripts.acquire then mqlease.sleep(4.5) end
        return res, err, code
      end,
    })
    local id, prefix = env.name("regress_ka_since_eo"), "mqlease:regress:"
    local lock_key = mqlease.policy.keys(id, prefix).lock
    local counts = {}
    local m = { id = id, consumer = {
      count = function(_, name) counts[name] = (counts[name] or 0) + 1 end,
      id = function() return "regress-consumer" end } }
    local lease = { _lock_lost = function(self) self.lost = true end,
      alive = function(self) return not self.lost end }
    -- lock_ttl 6: renewals every 2 s; counted from the handler's start the
    -- first would come 6.5 s after the acquire, half a second after the key is
    -- gone (at 6 s it raced the expiry, and a run with that bug passed);
    -- counted from the acquire it is due at once, 1.5 s before the key lapses
    local policy = mqlease.policy.exactly_once { redis = late, prefix = prefix, lock_ttl = 6 }
    local owner_at_end
    local action, _, err = policy(m, lease, function()
      mqlease.sleep(3)
      owner_at_end = r:call("GET", lock_key)
      return true
    end)
    assert.equal("ack", action, err)
    assert.is_nil(counts.lock_lost, "the lock lapsed before its first renewal")
    assert.is_true(lease:alive())
    assert.is_string(owner_at_end)
    assert.matches("^regress%-consumer/", owner_at_end)
    -- the unlock rides in the done marker's script, before the ack: the lock is gone
    assert.equal(mqlease.null, r:call("GET", lock_key), "the lock outlived the ack")
    r:close()
  end)
end)
