-- mqlease.redis and the exactly-once policy on a Redis Cluster
-- (spec/support/redis-ha.sh: 3 masters and 3 replicas on loopback).
local mqlease = require "mqlease"
local env = require "support.env"
local workload = require "support.redis_ha_workload"

local HA = workload.HA
local NODES = { "127.0.0.1:16420", "127.0.0.1:16421", "127.0.0.1:16422" }

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

-- MOVED replies the masters sent so far (Redis 7 counts errors by prefix).
local function moved_replies()
  local n = 0
  for _, node in ipairs(NODES) do
    local port = node:match(":(%d+)$")
    n = n + (tonumber(env.sh("redis-cli -p " .. port .. " info errorstats"):match("errorstat_MOVED:count=(%d+)")) or 0)
  end
  return n
end

local function cluster_client()
  return mqlease.redis { cluster = { NODES[1] }, timeout = 0.5 }
end

describe("mqlease.redis with Cluster", function()
  setup(function() env.sh(HA .. "start-cluster") end)
  teardown(function() os.execute(HA .. "stop >/dev/null") end)

  it("routes keys and scripts by slot, as CLUSTER KEYSLOT says", function()
    local r = cluster_client()
    local slots = {}
    for i = 1, 60 do
      local key = env.name("cluster_key_" .. i)
      assert.equal("OK", r:call("SET", key, tostring(i)))
      assert.equal(tostring(i), r:call("GET", key))
      slots[r:call("CLUSTER", "KEYSLOT", key)] = true
    end
    local n = 0
    for _ in pairs(slots) do n = n + 1 end
    assert.is_true(n > 3)   -- the keys spread over slots, so over the three masters
    assert.equal(0, moved_replies(), "a command went to a node that does not own its slot")
    -- one message's keys share a slot, so the lock script runs
    local keys = mqlease.policy.keys("m-" .. env.run_id)
    local got = r:eval(mqlease.policy.scripts.acquire, { keys.lock, keys.fence, keys.done }, { "me", 5000, 60000 })
    assert.same({ 1, 1 }, got)
    assert.equal(r:call("CLUSTER", "KEYSLOT", keys.lock), r:call("CLUSTER", "KEYSLOT", keys.done))
    local v, err, code = r:eval("return 1", { "{a}x", "{b}y" }, {})
    assert.is_nil(v)
    assert.equal("REDIS_ERROR", code)
    assert.matches("CROSSSLOT", err)
    r:close()
  end)

  it("follows MOVED and ASK while slots migrate under it", function()
    local r = cluster_client()
    local keys = {}
    for i = 1, 300 do
      keys[i] = env.name("migrate_" .. i)
      assert.equal("OK", r:call("SET", keys[i], "0"))
    end
    -- move slots away in the background while incrementing every key
    local marker = os.tmpname()
    os.remove(marker)
    os.execute(("(%s reshard 800 >/dev/null 2>&1; touch %s) &"):format(HA, marker))
    local rounds, deadline = 0, mqlease.now() + 60
    repeat
      for i = 1, #keys do assert(r:call("INCR", keys[i])) end
      rounds = rounds + 1
    until rounds >= 5 and (exists(marker) or mqlease.now() > deadline)
    assert.is_true(exists(marker), "the reshard did not finish")
    os.remove(marker)
    for i = 1, #keys do assert.equal(tostring(rounds), r:call("GET", keys[i])) end
    assert.is_true(moved_replies() >= 1, "no MOVED was followed: the migration was not exercised")
    r:close()
  end)
end)

describe("mqlease.policy.exactly_once with Cluster", function()
  before_each(function() env.sh(HA .. "start-cluster") end)
  after_each(function() os.execute(HA .. "stop >/dev/null") end)

  local function check(name, out)
    local once, more, none = workload.report(name, out)
    assert.equal(0, none, "messages never applied")
    assert.equal(0, more, "effects applied more than once")
    assert.equal(#out.ids, once)
  end

  it("keeps 300 messages at one effect each with 3 workers while slots migrate mid-run", function()
    check("cluster slot migration", workload.run {
      name = "eo_cluster_migrate", messages = 300, fault_after = 60,
      worker_env = { EO_CLUSTER = table.concat(NODES, ",") },
      fault = function() env.sh(HA .. "reshard 2000") end,
    })
  end)

  it("keeps 300 messages at one effect each with 3 workers while a master is killed mid-run", function()
    local out = workload.run {
      name = "eo_cluster_failover", messages = 300, fault_after = 90,
      worker_env = { EO_CLUSTER = table.concat(NODES, ",") },
      fault = function() env.sh(HA .. "kill-node 16422") end,
    }
    check("cluster master failover", out)
    assert.is_true(out.unavailable >= 1, "no worker noticed the failover: the fault was not exercised")
  end)
end)
