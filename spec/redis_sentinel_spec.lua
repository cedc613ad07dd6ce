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
    local r = mqlease.redis { sentinels = SENTINELS, master = "mqmaster", timeout = 0.5 }
    local key = env.name("sentinel_counter")
    assert.equal(1, r:call("INCR", key))
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
    assert.is_true(out.unavailable >= 1, "no worker noticed the failover: the fault was not exercised")
  end)
end)
