-- mqlease.redis and the exactly-once policy on a Sentinel-managed Redis
-- (spec/support/redis-ha.sh: 1 master, 1 replica, 3 sentinels on loopback).
local mqlease = require "mqlease"
local env = require "support.env"
local workload = require "support.redis_ha_workload"

local HA = workload.HA
local SENTINELS = { "127.0.0.1:16415", "127.0.0.1:16416", "127.0.0.1:16417" }

describe("mqlease.redis with Sentinel", function()
  setup(function() env.sh(HA .. "start-sentinel") end)
  teardown(function() os.execute(HA .. "stop >/dev/null") end)

  it("finds the master through the sentinels and follows a failover without re-sending", function()
    -- timeout 2: WAIT may block up to its own timeout, and a loaded machine (load 6 on 2
    -- cores) took more than 0.5 s for the replica's acknowledgement
    local r = mqlease.redis { sentinels = SENTINELS, master = "mqmaster", timeout = 2 }
    local key = env.name("sentinel_counter")
    assert.equal(1, r:call("INCR", key))
    -- replication is asynchronous: the kill must not come before the replica has the write
    assert.equal(1, r:call("WAIT", 1, 1500))
    local before = env.sh(HA .. "master"):gsub("%s+$", "")
    assert.equal(before, "127.0.0.1:" .. r:call("INFO", "server"):match("tcp_port:(%d+)"))
    env.sh(HA .. "kill-master")
    -- every call fails until the replica is promoted; none is sent twice
    local failures, v, code = 0, nil, nil
    local deadline = mqlease.now() + 30
    repeat
      v, _, code = r:call("INCR", key)
      if not v then
        failures = failures + 1
        assert.is_truthy(code == "UNAVAILABLE" or code == "TIMEOUT", code)
        mqlease.sleep(0.2)
      end
    until v or mqlease.now() > deadline
    assert.equal(2, v)   -- the replica had the first INCR, the failed calls ran nowhere
    assert.is_true(failures >= 1)
    local after = env.sh(HA .. "master"):gsub("%s+$", "")
    assert.are_not.equal(before, after)
    assert.equal(after, "127.0.0.1:" .. r:call("INFO", "server"):match("tcp_port:(%d+)"))
    r:close()
  end)

  it("authenticates to sentinels that want a password of their own, and says so when none is given", function()
    env.sh(HA .. "start-auth-sentinel")
    local AUTH_SENTINEL = { "127.0.0.1:16418" }
    local master = env.sh(HA .. "master"):gsub("%s+$", "")
    -- no password: the sentinel answers NOAUTH, which is a configuration error, not an outage
    local r = mqlease.redis { sentinels = AUTH_SENTINEL, master = "mqauth", timeout = 0.5 }
    local v, err, code = r:call("PING")
    assert.is_nil(v)
    assert.equal("REDIS_AUTH", code, err)
    assert.matches("no sentinel named a master 'mqauth' %(127%.0%.0%.1:16418 answered NOAUTH", err)
    r:close()
    -- a wrong password
    r = mqlease.redis { sentinels = AUTH_SENTINEL, master = "mqauth", sentinel_password = "nope", timeout = 0.5 }
    v, err, code = r:call("PING")
    assert.is_nil(v)
    assert.equal("REDIS_AUTH", code, err)
    assert.matches("WRONGPASS", err)
    r:close()
    -- requirepass, then an ACL user; the master itself wants no password here
    for _, creds in ipairs { { sentinel_password = "sentinel-secret" },
                             { sentinel_username = "watcher", sentinel_password = "watcher-pass" } } do
      local opts = { sentinels = AUTH_SENTINEL, master = "mqauth", timeout = 0.5 }
      for k, val in pairs(creds) do opts[k] = val end
      r = mqlease.redis(opts)
      assert.equal("PONG", r:call("PING"))
      assert.equal(master, "127.0.0.1:" .. r:call("INFO", "server"):match("tcp_port:(%d+)"))
      r:close()
    end
    -- the first sentinel refusing does not stop the next one from answering
    r = mqlease.redis { sentinels = { AUTH_SENTINEL[1], SENTINELS[1] }, master = "mqmaster", timeout = 0.5 }
    assert.equal("PONG", r:call("PING"))
    r:close()
  end)

  it("raises on options that do not fit Sentinel", function()
    local ok, msg = pcall(mqlease.redis, { sentinels = SENTINELS })
    assert.is_false(ok)
    assert.matches("option 'master' is required with 'sentinels'", msg)
    ok, msg = pcall(mqlease.redis, { sentinels = { "nohost" }, master = "m" })
    assert.is_false(ok)
    assert.matches("option 'sentinels' must be a list", msg)
    ok, msg = pcall(mqlease.redis, { sentinels = SENTINELS, master = "m", address = "h:1" })
    assert.is_false(ok)
    assert.matches("exactly one of the options 'address', 'sentinels', 'cluster'", msg)
    ok, msg = pcall(mqlease.redis, { address = "h:1", sentinel_password = "x" })
    assert.is_false(ok)
    assert.matches("option 'sentinel_password' needs 'sentinels'", msg)
    ok, msg = pcall(mqlease.redis, { sentinels = SENTINELS, master = "m", sentinel_username = "u" })
    assert.is_false(ok)
    assert.matches("option 'sentinel_username' needs 'sentinel_password'", msg)
  end)
end)

describe("mqlease.policy's batch scripts on a replica", function()
  setup(function() env.sh(HA .. "start-sentinel") end)
  teardown(function() os.execute(HA .. "stop >/dev/null") end)

  -- The batch scripts catch each message's error in a pcall. A READONLY (a
  -- master demoted under the client: a link in steady use is not rechecked
  -- against the sentinels) came back as one string a message, not as the
  -- reply's error, so the link never looked for the new master and every
  -- batched acquire failed closed. No write runs on a replica, so the whole
  -- script is refused, and the link runs it again on the promoted master.
  it("answers READONLY as the reply's own error, not one a message", function()
    local replica = mqlease.redis("127.0.0.1:16411")
    assert.matches("slave", replica:call("ROLE")[1])
    local a, b = mqlease.policy.keys(env.name("ro_a")), mqlease.policy.keys(env.name("ro_b"))
    local got, err, code = replica:eval(mqlease.policy.scripts.acquire_many,
      { a.lock, a.fence, a.done, b.lock, b.fence, b.done }, { "5000", "60000", "me", "me" })
    assert.is_nil(got, "per-message answers from a replica")
    assert.equal("REDIS_ERROR", code)
    assert.matches("^READONLY", err)
    got, err, code = replica:eval(mqlease.policy.scripts.finish_many, { a.lock, a.done }, { "60", "me" })
    assert.is_nil(got, "per-message answers from a replica")
    assert.equal("REDIS_ERROR", code)
    assert.matches("^READONLY", err)
    replica:close()
  end)
end)

describe("mqlease.policy.exactly_once with Sentinel", function()
  setup(function() env.sh(HA .. "start-sentinel") end)
  teardown(function() os.execute(HA .. "stop >/dev/null") end)

  it("keeps 300 messages at one effect each with 3 workers while the master is killed mid-run", function()
    local out = workload.run {
      name = "eo_sentinel", messages = 300, fault_after = 90,
      worker_env = { EO_SENTINELS = table.concat(SENTINELS, ","), EO_MASTER = "mqmaster" },
      fault = function() env.sh(HA .. "kill-master") end,
    }
    local once, more, none = workload.report("sentinel failover", out)
    assert.equal(0, none, "messages never applied")
    -- a failover that lost a lock lets a second owner run; the fence check must
    -- then have rejected the stale write, so every effect is applied once
    assert.equal(0, more, "effects applied more than once")
    assert.equal(300, once)
    -- noticed by an acquire that found no master, or by a done marker written
    -- again until the new master took it (the ack waits for it)
    assert.is_true(out.unavailable + out.done_marker_failed >= 1,
      "no worker noticed the failover: the fault was not exercised")
  end)
end)

describe("mqlease.policy.exactly_once with Sentinel, the master frozen past a failover", function()
  setup(function() env.sh(HA .. "start-sentinel") end)
  teardown(function() os.execute(HA .. "stop >/dev/null") end)

  it("keeps 300 messages at one effect each with 3 workers while the master freezes, is replaced and comes back", function()
    local function master() return env.sh(HA .. "master"):gsub("%s+$", "") end
    local frozen_for
    local out = workload.run {
      name = "eo_sentinel_freeze", messages = 300, fault_after = 90,
      worker_env = { EO_SENTINELS = table.concat(SENTINELS, ","), EO_MASTER = "mqmaster" },
      fault = function()
        local old = master()
        local port = env.sh(HA .. "freeze-master"):match("%d+")
        local t0 = mqlease.now()
        env.wait_for(function() return master() ~= old end, 30, "the failover")
        mqlease.sleep(1)
        -- back, still a master in its own eyes, until the sentinels demote it
        env.sh(HA .. "thaw " .. port)
        frozen_for = mqlease.now() - t0
      end,
    }
    local once, more, none = workload.report(("sentinel freeze (%.1f s frozen)"):format(frozen_for), out)
    assert.equal(0, none, "messages never applied")
    assert.equal(0, more, "effects applied more than once")
    assert.equal(300, once)
    -- a frozen master answers nothing: the commands queued when it froze (done markers,
    -- unlocks, acquires) wait out their timeout, and what follows runs on the new master
    assert.is_true(out.unavailable + out.done_marker_failed >= 1,
      "no worker noticed the freeze: the fault was not exercised")
  end)
end)

-- The business store of the lock tests: applies a write only with a fence greater
-- than any seen.
local FENCED_WRITE = [[
local seen = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= seen then return 0 end
redis.call('set', KEYS[2], ARGV[1])
redis.call('incr', KEYS[1])
return 1
]]

-- One policy user: a stand-in consumer that counts, and a lease the policy can mark lost.
local function instance(name)
  local counts = {}
  local consumer = {
    count = function(_, k) counts[k] = (counts[k] or 0) + 1 end,
    id = function() return name end,
  }
  local lease = { _lock_lost = function(self) self.lost = true end,
    alive = function(self) return not self.lost end }
  return consumer, lease, counts
end

-- A takes the lock on a master cut off from its replica. In A's handler the
-- master dies and the replica is promoted without A's lock; the broker hands
-- the message to B meanwhile (A's lease ran out, say), and B runs it on the
-- new master, writing with its token (until the new master answers as one,
-- B's policy fails closed: nack, retry). Then a_writes(lease, write, seen)
-- is A's write, and its answer the handler's. fence: the policies' option.
-- -> a table: seen (action_b, fence_b, b: B's write; what a_writes put),
-- action_a, err_a, counts_a, counts_b, lease_a, business, redeliver_to_a(handler)
local function lose_the_lock(name, fence, a_writes)
  local id = env.name(name)
  local business = mqlease.redis("127.0.0.1:" .. env.redis_port)
  local function write(token)
    return business:eval(FENCED_WRITE, { "biz:" .. id, "bizfence:" .. id }, { token })
  end
  local opts = { redis = { sentinels = SENTINELS, master = "mqmaster", timeout = 0.5 }, lock_ttl = 3,
    fence = fence }
  local policy_a, policy_b = mqlease.policy.exactly_once(opts), mqlease.policy.exactly_once(opts)
  local ca, lease_a, counts_a = instance("A")
  local cb, lease_b, counts_b = instance("B")
  local old = env.sh(HA .. "master"):gsub("%s+$", "")
  -- the replica stops hearing from the master: A's lock and fence never reach it
  env.sh(HA .. "cut-replica")
  local seen = {}
  local action_a, _, err_a = policy_a({ id = id, consumer = ca }, lease_a, function(_, lease)
    env.sh(HA .. "kill-master")
    env.sh(HA .. "thaw-replica")
    env.wait_for(function() return env.sh(HA .. "master"):gsub("%s+$", "") ~= old end, 30, "the failover")
    local deadline = mqlease.now() + 20
    repeat
      seen.action_b = policy_b({ id = id, consumer = cb }, lease_b, function(_, lb)
        seen.fence_b = lb.fence
        seen.b = write(lb.fence)
        return seen.b == 1, "stale fence"
      end)
      if not seen.fence_b then mqlease.sleep(0.3) end
    until seen.fence_b or mqlease.now() > deadline
    return a_writes(lease, write, seen)
  end)
  return { seen = seen, action_a = action_a, err_a = err_a, counts_a = counts_a, counts_b = counts_b,
    lease_a = lease_a, business = business, id = id,
    redeliver_to_a = function(handler)
      return policy_a({ id = id, consumer = ca }, select(2, instance("A")), handler)
    end }
end

describe("mqlease.policy.exactly_once when a failover loses a lock", function()
  setup(function() env.sh(HA .. "start-sentinel") end)
  teardown(function() os.execute(HA .. "stop >/dev/null") end)

  -- the token at each grant (fence = "on_grant"): the new master has no lock
  -- and no fence, and B is granted A's token
  it("lets the fence reject the second owner's write: one effect, the lost lock counted", function()
    local r = lose_the_lock("failover_lost_lock", "on_grant", function(lease, write, seen)
      seen.a = write(lease.fence)
      seen.fence_a = lease.fence
      mqlease.sleep(1.5)   -- a renewal of A's lock runs on the new master
      return seen.a == 1, "stale fence"
    end)
    local seen = r.seen
    -- the failover handed out one token twice ...
    assert.equal(seen.fence_a, seen.fence_b)
    -- ... and the fence-checking writer applied exactly one of the two writes
    assert.equal(1, seen.b)
    assert.equal(0, seen.a)
    assert.equal("1", r.business:call("GET", "biz:" .. r.id))
    assert.equal("ack", seen.action_b)
    assert.equal("nack", r.action_a)
    -- A learns that its lock was lost, and the count shows it
    assert.is_false(r.lease_a:alive())
    assert.equal(1, r.counts_a.lock_lost)
    assert.is_nil(r.counts_b.lock_lost)
    -- the redelivery to A finds B's done marker
    assert.equal("ack", r.redeliver_to_a(function() error("ran twice") end))
    assert.equal(1, r.counts_a.duplicate_skipped)
    r.business:close()
  end)
end)

describe("mqlease.policy.exactly_once when a failover loses a lock, the token issued on read", function()
  setup(function() env.sh(HA .. "start-sentinel") end)
  teardown(function() os.execute(HA .. "stop >/dev/null") end)

  -- The token issued on read (the default): A asks for it only when it
  -- writes, after the failover, of the new master, which holds B's lock or
  -- none of A's: A gets no token, so no stale write is even tried, and A
  -- learns at once that its lock is lost.
  it("gives the old owner no token at all when the token is issued on read", function()
    local r = lose_the_lock("failover_on_read", "on_read", function(lease, write, seen)
      seen.read_a = true
      seen.fence_a = lease.fence   -- raises: no token for A
      seen.a = write(seen.fence_a)
      return true
    end)
    local seen = r.seen
    assert.equal("ack", seen.action_b)
    assert.equal(1, seen.fence_b)
    assert.equal(1, seen.b)
    assert.is_true(seen.read_a)
    assert.is_nil(seen.fence_a, "A was given a token after the failover")
    assert.is_nil(seen.a, "A wrote")
    assert.equal("nack", r.action_a)
    assert.matches("no fencing token: the lock of this message is no longer ours", r.err_a, 1, true)
    assert.equal("1", r.business:call("GET", "biz:" .. r.id))
    assert.is_false(r.lease_a:alive())
    assert.equal(1, r.counts_a.lock_lost)
    assert.is_nil(r.counts_b.lock_lost)
    r.business:close()
  end)
end)

describe("mqlease.policy.exactly_once when the master freezes past a failover and comes back", function()
  -- each test fails the master over: each starts from a fresh setup
  before_each(function() env.sh(HA .. "start-sentinel") end)
  after_each(function() os.execute(HA .. "stop >/dev/null") end)

  local function master() return env.sh(HA .. "master"):gsub("%s+$", "") end

  -- A SIGSTOPped master is failed over, then SIGCONTinued: it still takes itself for the
  -- master, and accepts writes, until the sentinels make it a replica (seconds later), which
  -- throws those writes away. A connection opened before the freeze and idle since then
  -- still leads there.
  it("writes the done marker to the promoted master, not the old one come back: the redelivery is a known duplicate", function()
    local id = env.name("frozen_master")
    local business = mqlease.redis("127.0.0.1:" .. env.redis_port)
    local function write(fence)
      return business:eval(FENCED_WRITE, { "biz:" .. id, "bizfence:" .. id }, { fence })
    end
    -- a lock TTL well past the failover (a few seconds here): A's lock, renewed on the
    -- promoted master, is there all along for B to find
    -- the token at each grant (fence = "on_grant"), whose failover these specs follow
    local opts = { redis = { sentinels = SENTINELS, master = "mqmaster", timeout = 0.5 }, lock_ttl = 20,
      fence = "on_grant" }
    local policy_a, policy_b = mqlease.policy.exactly_once(opts), mqlease.policy.exactly_once(opts)
    local ca, lease_a, counts_a = instance("A")
    local cb, lease_b, counts_b = instance("B")
    local old, seen = master(), {}
    local action_a, _, err_a = policy_a({ id = id, consumer = ca }, lease_a, function(_, lease)
      -- replication is asynchronous: A's lock must be on the replica before the freeze
      env.wait_for(function()
        return env.sh(("redis-cli -p 16411 exists '%s'"):format(mqlease.policy.keys(id).lock)):match("1")
      end, 5, "A's lock on the replica")
      seen.frozen = env.sh(HA .. "freeze-master"):match("%d+")
      local t_frozen = mqlease.now()
      env.wait_for(function() return master() ~= old end, 30, "the failover")
      seen.failover = mqlease.now() - t_frozen
      -- the broker hands the message to B meanwhile (A's lease ran out, say): A's lock,
      -- renewed on the promoted master, turns B away
      local deadline = mqlease.now() + 20
      repeat
        seen.action_b = policy_b({ id = id, consumer = cb }, lease_b, function() seen.b_ran = true; return true end)
        if not counts_b.handoff then mqlease.sleep(0.3) end
      until counts_b.handoff or mqlease.now() > deadline
      env.sh(HA .. "thaw " .. seen.frozen)   -- two masters, until the sentinels demote the old one
      seen.role_at_thaw = env.sh(HA .. "role " .. seen.frozen):gsub("%s+$", "")
      seen.a = write(lease.fence)
      return seen.a == 1, "stale fence"
    end)
    assert.equal("ack", action_a, err_a)
    -- the promoted master has A's done marker ...
    local now_master = mqlease.redis { sentinels = SENTINELS, master = "mqmaster", timeout = 0.5 }
    local keys = mqlease.policy.keys(id)
    seen.done = now_master:call("GET", keys.done)
    -- the unlock rode in the done marker's script, before the ack: A's lock is gone there
    assert.equal(mqlease.null, now_master:call("GET", keys.lock), "A's lock outlived its ack")
    -- ... so the redelivery to B is acked as a known duplicate, without running
    local deadline = mqlease.now() + 15
    local again
    repeat
      again = policy_b({ id = id, consumer = cb }, select(2, instance("B")), function(_, lb)
        seen.b_ran_again = true
        return write(lb.fence) == 1, "stale fence"
      end)
      if again == "nack" or again == "defer" then mqlease.sleep(0.5) end
    until (again ~= "nack" and again ~= "defer") or mqlease.now() > deadline
    print(("\n  frozen master: %s frozen, %s promoted after %.1f s; B %s; done marker on the new master: %s; " ..
      "redelivery: %s%s; effects: %s"):format(seen.frozen, master(), seen.failover,
        seen.b_ran and "ran the handler" or "turned away", seen.done == mqlease.null and "none" or tostring(seen.done),
        tostring(again), seen.b_ran_again and " (handler ran again)" or "", tostring(business:call("GET", "biz:" .. id))))
    assert.is_nil(seen.b_ran, "B ran the handler while A held the lock")
    -- a message locked by a live owner keeps its lease and is asked about again
    assert.equal("defer", seen.action_b)
    assert.equal(1, counts_b.handoff)
    assert.equal("master", seen.role_at_thaw, "the old master was demoted before A wrote: no two masters")
    assert.is_nil(counts_a.lock_lost)
    assert.equal("1", seen.done, "the done marker went to the old master and was lost with its demotion")
    assert.equal("ack", again)
    assert.is_nil(seen.b_ran_again, "the redelivery ran the handler again")
    assert.equal("1", business:call("GET", "biz:" .. id))
    now_master:close()
    business:close()
  end)

  it("keeps the old owner's write out by its fence when its lock never reached the promoted master", function()
    local id = env.name("frozen_master_stale")
    local business = mqlease.redis("127.0.0.1:" .. env.redis_port)
    local function write(fence)
      return business:eval(FENCED_WRITE, { "biz:" .. id, "bizfence:" .. id }, { fence })
    end
    -- the token at each grant (fence = "on_grant"), whose failover these specs follow
    local opts = { redis = { sentinels = SENTINELS, master = "mqmaster", timeout = 0.5 }, lock_ttl = 3,
      fence = "on_grant" }
    local policy_a, policy_b = mqlease.policy.exactly_once(opts), mqlease.policy.exactly_once(opts)
    local ca, lease_a, counts_a = instance("A")
    local cb, lease_b, counts_b = instance("B")
    local old, seen = master(), {}
    -- the replica stops hearing from the master: A's lock and fence never reach it
    env.sh(HA .. "cut-replica")
    local action_a = policy_a({ id = id, consumer = ca }, lease_a, function(_, lease)
      seen.frozen = env.sh(HA .. "freeze-master"):match("%d+")
      env.sh(HA .. "thaw-replica")
      env.wait_for(function() return master() ~= old end, 30, "the failover")
      -- B is granted the same token on the promoted master, and writes first
      local deadline = mqlease.now() + 20
      repeat
        seen.action_b = policy_b({ id = id, consumer = cb }, lease_b, function(_, lb)
          seen.fence_b, seen.b = lb.fence, write(lb.fence)
          return seen.b == 1, "stale fence"
        end)
        if not seen.fence_b then mqlease.sleep(0.3) end
      until seen.fence_b or mqlease.now() > deadline
      env.sh(HA .. "thaw " .. seen.frozen)   -- two masters, until the sentinels demote the old one
      seen.role_at_thaw = env.sh(HA .. "role " .. seen.frozen):gsub("%s+$", "")
      seen.fence_a, seen.a = lease.fence, write(lease.fence)
      -- a renewal of A's lock finds B's on the promoted master (or its TTL runs out
      -- first): wait for the loss rather than a fixed time, since a renewal may still
      -- reach the thawed old master, which holds A's lock until the sentinels demote it
      local lost_by = mqlease.now() + 3 * 3 + 2
      while lease:alive() and mqlease.now() < lost_by do mqlease.sleep(0.2) end
      return seen.a == 1, "stale fence"
    end)
    print(("\n  frozen master, lock not replicated: fences A %s, B %s; B's write %s, A's write %s; effects %s")
      :format(tostring(seen.fence_a), tostring(seen.fence_b), tostring(seen.b), tostring(seen.a),
        tostring(business:call("GET", "biz:" .. id))))
    assert.equal("master", seen.role_at_thaw, "the old master was demoted before A wrote: no two masters")
    assert.equal(seen.fence_a, seen.fence_b)   -- the failover handed out one token twice ...
    assert.equal(1, seen.b)                    -- ... the first write with it is applied ...
    assert.equal(0, seen.a)                    -- ... the old owner's, with the same token, is not
    assert.equal("1", business:call("GET", "biz:" .. id))
    assert.equal("ack", seen.action_b)
    assert.equal("nack", action_a)
    assert.is_false(lease_a:alive())
    assert.equal(1, counts_a.lock_lost)
    assert.is_nil(counts_b.lock_lost)
    business:close()
  end)
end)
