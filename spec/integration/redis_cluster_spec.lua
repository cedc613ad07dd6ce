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

-- The MOVED (or ASK) replies the masters sent so far (Redis 7 counts errors by prefix).
local function redirect_replies(kind)
  local n = 0
  for _, node in ipairs(NODES) do
    local port = node:match(":(%d+)$")
    local stats = env.sh("redis-cli -p " .. port .. " info errorstats")
    n = n + (tonumber(stats:match("errorstat_" .. (kind or "MOVED") .. ":count=(%d+)")) or 0)
  end
  return n
end
local function moved_replies() return redirect_replies("MOVED") end

-- redis-cli against one node, by port.
local function node_cli(port, args)
  return (env.sh(("redis-cli -p %s %s"):format(port, args)):gsub("%s+$", ""))
end

-- The port of the master that owns slot (CLUSTER SLOTS: {first, last, {host, port, id}, ...}).
local function owner_port(r, slot)
  for _, range in ipairs(assert(r:call("CLUSTER", "SLOTS"))) do
    if slot >= range[1] and slot <= range[2] then return tostring(range[3][2]) end
  end
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
    -- so do the keys of ids that would make an empty hash tag (an empty id,
    -- one starting with '}'): their lock script ran into CROSSSLOT for good
    for _, id in ipairs({ "", "}" .. env.run_id, "}}" .. env.run_id }) do
      local k = mqlease.policy.keys(id)
      local slot = r:call("CLUSTER", "KEYSLOT", k.lock)
      assert.equal(slot, r:call("CLUSTER", "KEYSLOT", k.fence), ("id %q"):format(id))
      assert.equal(slot, r:call("CLUSTER", "KEYSLOT", k.done), ("id %q"):format(id))
      local answer, err = r:eval(mqlease.policy.scripts.acquire, { k.lock, k.fence, k.done }, { "me", 5000, 60000 })
      assert.is_table(answer, err)
      assert.equal(1, answer[1])
      r:call("DEL", k.lock)
    end
    local v, err, code = r:eval("return 1", { "{a}x", "{b}y" }, {})
    assert.is_nil(v)
    assert.equal("REDIS_ERROR", code)
    assert.matches("CROSSSLOT", err)
    r:close()
  end)

  -- One slot half migrated, by hand as redis-cli --cluster reshard does it: the key
  -- already moved is answered ASK by the old owner, and only a command that follows the
  -- ASK (ASKING first, on the importing node) finds it; once the slot is the new node's,
  -- the old owner answers MOVED.
  it("follows ASK to the importing node while a slot is half migrated, then MOVED", function()
    local r = cluster_client()
    local key, other = env.name("ask_key"), nil
    assert.equal("OK", r:call("SET", key, "before"))
    local slot = r:call("CLUSTER", "KEYSLOT", key)
    local src = owner_port(r, slot)
    for _, node in ipairs(NODES) do
      local port = node:match(":(%d+)$")
      if port ~= src then other = port break end
    end
    local src_id, dst_id = node_cli(src, "cluster myid"), node_cli(other, "cluster myid")
    local asks = redirect_replies("ASK")
    assert.equal("OK", node_cli(other, ("cluster setslot %d importing %s"):format(slot, src_id)))
    assert.equal("OK", node_cli(src, ("cluster setslot %d migrating %s"):format(slot, dst_id)))
    assert.equal("OK", node_cli(src, ("migrate 127.0.0.1 %s %s 0 5000"):format(other, key)))
    assert.equal("before", r:call("GET", key))
    assert.equal("OK", r:call("SET", key, "during"))
    assert.equal(asks + 2, redirect_replies("ASK"), "the old owner did not answer ASK twice")
    -- the slot is the importing node's: told to it first, as redis-cli --cluster does
    local moved = moved_replies()
    assert.equal("OK", node_cli(other, ("cluster setslot %d node %s"):format(slot, dst_id)))
    for _, node in ipairs(NODES) do
      local port = node:match(":(%d+)$")
      if port ~= other then node_cli(port, ("cluster setslot %d node %s"):format(slot, dst_id)) end
    end
    assert.equal("during", r:call("GET", key))
    assert.equal(moved + 1, moved_replies(), "the old owner did not answer MOVED")
    r:close()
  end)

  it("follows MOVED while slots migrate under it, every increment counted", function()
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
    -- the workers are the only clients of the cluster here: every MOVED or ASK a master
    -- sent went to one of them, on a command for a slot that had moved under it
    local redirects = redirect_replies("MOVED") + redirect_replies("ASK")
    local out = workload.run {
      name = "eo_cluster_migrate", messages = 300, fault_after = 60,
      worker_env = { EO_CLUSTER = table.concat(NODES, ",") },
      fault = function() env.sh(HA .. "reshard 2000") end,
    }
    check("cluster slot migration", out)
    redirects = redirect_replies("MOVED") + redirect_replies("ASK") - redirects
    io.stderr:write(("cluster slot migration: %d MOVED/ASK replies followed\n"):format(redirects))
    assert.is_true(redirects >= 1, "no worker was redirected: the migration was not exercised")
  end)

  it("keeps 300 messages at one effect each with 3 workers while a master is killed mid-run", function()
    local out = workload.run {
      name = "eo_cluster_failover", messages = 300, fault_after = 90,
      worker_env = { EO_CLUSTER = table.concat(NODES, ",") },
      fault = function() env.sh(HA .. "kill-node 16422") end,
    }
    check("cluster master failover", out)
    -- noticed by an acquire, or by a done marker written again until the
    -- promoted replica took it (the ack waits for it)
    assert.is_true(out.unavailable + out.done_marker_failed >= 1,
      "no worker noticed the failover: the fault was not exercised")
  end)
end)
