-- Several brokers: RocketMQ's own cluster -- namesrv, broker-a and broker-b
-- (one cluster, DefaultCluster) and two proxies in cluster mode, started once
-- by this file on ports of its own (rocketmq.sh with MQLEASE_CLUSTER=1
-- MQLEASE_BROKERS=2) and always stopped in teardown. Every topic has 4 queues
-- on each broker. A message tells its broker by m.store_host (the broker's
-- address, SystemProperties.store_host); its receipt handle names the broker
-- too, and the proxy sends its renewals and its ack there.
local mqlease = require "mqlease"
local env = require "support.env"
local read, wait_for, count = env.read, env.wait_for, env.count

-- Its ports and run dir follow the suite's (MQLEASE_GRPC_PORT, MQLEASE_RUN), at
-- offsets of their own (cluster_spec takes +599..+602, +1600, +2600), so two
-- suites side by side each start and stop only their own cluster.
local RUN = (os.getenv("MQLEASE_RUN") or "/tmp/mqlease") .. "-brokers-rmq-" .. env.run_id
local BASE = tonumber(os.getenv("MQLEASE_GRPC_PORT") or "18081")
local GRPC1, GRPC2 = BASE + 700, BASE + 702
local BROKER_A, BROKER_B = BASE + 2700, BASE + 2710
local ENDPOINTS = ("127.0.0.1:%d;127.0.0.1:%d"):format(GRPC1, GRPC2)
local HOST_A, HOST_B = "127.0.0.1:" .. BROKER_A, "127.0.0.1:" .. BROKER_B
local RMQ = ("MQLEASE_CLUSTER=1 MQLEASE_BROKERS=2 MQLEASE_RUN=%s MQLEASE_GRPC_PORT=%d MQLEASE_GRPC_PORT2=%d " ..
  "MQLEASE_REMOTING_PORT=%d MQLEASE_REMOTING_PORT2=%d MQLEASE_NAMESRV_PORT=%d " ..
  "MQLEASE_BROKER_PORT=%d MQLEASE_BROKER_B_PORT=%d MQLEASE_STOP_GRACE=5 "):format(RUN, GRPC1, GRPC2,
    BASE + 699, BASE + 701, BASE + 1700, BROKER_A, BROKER_B)
local function rmq(args) return env.sh(RMQ .. "bash mk/rocketmq.sh " .. args) end

-- The lock store of the exactly-once part: a Redis Cluster (spec/support/redis-ha.sh) on
-- ports of its own beside the suite's Redis, so a full run's redis_cluster_spec never meets it.
local REDIS_CLUSTER = (tonumber(os.getenv("MQLEASE_REDIS_PORT") or "16379")) + 150
local HA = ("MQLEASE_REDIS_CLUSTER_PORT=%d MQLEASE_REDIS_HA_RUN=%s-redis-ha bash spec/support/redis-ha.sh ")
  :format(REDIS_CLUSTER, RUN)
local CLUSTER_NODES = ("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d"):format(REDIS_CLUSTER, REDIS_CLUSTER + 1,
  REDIS_CLUSTER + 2)

local function consumer(group, topic)
  return assert(mqlease.consumer { endpoints = ENDPOINTS, group = group, topic = topic, invisible = 10,
    await = 2, request_timeout = 3 })
end

-- Sends n messages (both proxies), retrying the failed ones; returns their ids.
local function send(producer, topic, n, label)
  local ids, deadline = {}, mqlease.now() + 60
  while #ids < n do
    local list = {}
    for i = 1, n - #ids do list[i] = ("%s %d"):format(label, #ids + i) end
    for _, r in ipairs((producer:send_many(topic, list))) do
      if r.ok then ids[#ids + 1] = r.message_id end
    end
    if #ids < n then
      assert(mqlease.now() < deadline, "the producer could not send")
      mqlease.sleep(0.2)
    end
  end
  return ids
end

-- Receives until want(held) says enough (or the deadline), keeping every message by id.
local function receive_until(c, held, want, timeout, what)
  local deadline = mqlease.now() + timeout
  while not want(held) do
    assert(mqlease.now() < deadline, "timed out receiving " .. what)
    local ms = c:receive(16)
    if not ms then mqlease.sleep(0.2) end   -- e.g. the receive named the broker that is down
    for _, m in ipairs(ms or {}) do
      held[m.id] = held[m.id] or {}
      table.insert(held[m.id], m)
    end
  end
  return held
end

local function size(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- The messages held, split by broker (m.store_host).
local function by_broker(held)
  local a, b, other = {}, {}, {}
  for id, ms in pairs(held) do
    local h = ms[#ms].store_host
    if h == HOST_A then a[id] = ms[#ms] elseif h == HOST_B then b[id] = ms[#ms] else other[id] = h end
  end
  return a, b, other
end

describe("two brokers behind two proxies in cluster mode", function()
  local T = {}
  setup(function()
    T.hold, T.eo = env.name("brokers_hold"), env.name("brokers_eo")
    T.g_hold, T.g_eo = env.name("g_brokers_hold"), env.name("g_brokers_eo")
    env.start_rocketmq(rmq)
    rmq(("topics %s %s --group %s --group %s"):format(T.hold, T.eo, T.g_hold, T.g_eo))
  end)
  teardown(function()
    os.execute(HA .. "stop >/dev/null 2>&1")
    rmq("stop")
    os.execute("rm -rf " .. RUN .. " " .. RUN .. "-redis-ha")
  end)

  it("receives from both brokers, renews each lease past its invisible and acks it with its own broker", function()
    local producer = assert(mqlease.producer { endpoints = ENDPOINTS })
    local ids = send(producer, T.hold, 32, "both")
    producer:close()
    local c = consumer(T.g_hold, T.hold)
    local held = receive_until(c, {}, function(h) return size(h) == #ids end, 60, "the 32 messages")
    local a, b, other = by_broker(held)
    print(("\n  two brokers: %d received, %d from broker-a (%s), %d from broker-b (%s), %d from elsewhere")
      :format(size(held), size(a), HOST_A, size(b), HOST_B, size(other)))
    assert.equal(0, size(other))
    assert.is_true(size(a) > 0, "nothing came from broker-a")
    assert.is_true(size(b) > 0, "nothing came from broker-b")
    -- held past the 10 s invisible: only the renewals keep them hidden
    mqlease.sleep(13)
    for _, m in pairs(held) do
      local lease = m[1].lease
      assert.is_true(lease:alive(), "a lease was lost while held")
      assert.is_true(lease.renewals >= 1, "a lease held 13 s was never renewed")
    end
    for id, ms in pairs(held) do assert(ms[1]:ack(), "ack of " .. id) end
    -- nothing comes back, from either broker, well past another invisible
    local again = {}
    local deadline = mqlease.now() + 13
    while mqlease.now() < deadline do
      for _, m in ipairs(c:receive(16) or {}) do again[#again + 1] = m.id; m:ack() end
    end
    local mt = c:metrics()
    c:close()
    print(("  after the acks: %d redelivered; renew_success=%d renew_fail=%d expire_while_alive=%d")
      :format(#again, mt.renew_success or -1, mt.renew_fail or -1, mt.expire_while_alive or -1))
    assert.equal(0, #again)
    for _, id in ipairs(ids) do assert.equal(1, #held[id]) end
    assert.equal(0, mt.expire_while_alive)
  end)

  it("SIGKILL broker-b mid-run: broker-a's leases renew on, broker-b's messages come back after its restart, none lost or run twice under exactly-once", function()
    env.sh(HA .. "start-cluster")
    local producer = assert(mqlease.producer { endpoints = ENDPOINTS })
    -- exactly-once: two workers on both proxies, the locks in the Redis Cluster, the effect a
    -- fence-checked write in the suite's Redis (spec/support/eo_worker.lua)
    local logs, pids = {}, {}
    local stop_file = os.tmpname()
    os.remove(stop_file)
    for i = 1, 2 do
      logs[i] = os.tmpname()
      local vars = ("EO_FENCED=1 EO_WORK=0.3 EO_SLOW_SHARE=0.1 EO_SLOW=12 EO_CONCURRENCY=8 EO_RUN_FOR=170 " ..
        "EO_GRACE=10 EO_STOP_FILE=%s EO_CLUSTER=%s"):format(stop_file, CLUSTER_NODES)
      pids[i] = tonumber(env.sh(("env %s lua5.4 spec/support/eo_worker.lua '%s' %s %s %d %s >%s.out 2>&1 & echo $!")
        :format(vars, ENDPOINTS, T.g_eo, T.eo, env.redis_port, logs[i], logs[i])):match("%d+"))
    end
    local function effects() local n = 0; for _, l in ipairs(logs) do n = n + count(read(l), "effect ") end; return n end
    local res = table.pack(pcall(function()
      for _, l in ipairs(logs) do wait_for(function() return read(l):match("ready") end, 30, "an eo worker") end
      local eo_ids = send(producer, T.eo, 120, "eo")
      -- leases of both brokers, held by this process across the kill
      local hold_ids = send(producer, T.hold, 24, "hold")
      local c = consumer(T.g_hold, T.hold)
      local held = receive_until(c, {}, function(h) return size(h) == #hold_ids end, 60, "the 24 held messages")
      local a, b = by_broker(held)
      assert.is_true(size(a) > 0 and size(b) > 0, ("held %d from broker-a, %d from broker-b"):format(size(a), size(b)))
      wait_for(function() return effects() >= 30 end, 90, "30 effects before the kill")
      local renewals_a = {}
      for id, m in pairs(a) do renewals_a[id] = m.lease.renewals end
      rmq("kill-broker b")
      local killed_at = mqlease.now()
      -- an ack for broker-b while it is down must fail, never be reported done
      local b_id, b_msg = next(b)
      local acked, aerr, acode = b_msg:ack()
      print(("\n  ack of a broker-b message while broker-b is down: %s %s %s")
        :format(tostring(acked), tostring(acode), tostring(aerr)))
      assert.is_nil(acked)
      -- past a whole invisible (10 s) with broker-b down: only renewals keep broker-a's
      -- leases; broker-b's cannot be renewed
      mqlease.sleep(14)
      local a_alive, a_renewed = 0, 0
      for id, m in pairs(a) do
        local state = m.lease.state
        if m.lease:alive() and (state == "held" or state == "renewing") then a_alive = a_alive + 1 end
        if m.lease.renewals > renewals_a[id] then a_renewed = a_renewed + 1 end
      end
      local b_alive = 0
      for _, m in pairs(b) do if m.lease:alive() then b_alive = b_alive + 1 end end
      local mt = c:metrics()
      print(("  %.0f s after the kill: broker-a %d of %d leases alive, %d renewed since; broker-b %d of %d alive; renew_fail=%d")
        :format(mqlease.now() - killed_at, a_alive, size(a), a_renewed, b_alive, size(b), mt.renew_fail or -1))
      assert.equal(size(a), a_alive)
      assert.equal(size(a), a_renewed)
      assert.equal(0, b_alive)
      -- a consumer started while broker-b is down: its first route has broker-a alone, and it
      -- finds broker-b again by asking for the route anew (every 30 s)
      local c2 = consumer(T.g_hold, T.hold)
      rmq("restart-broker b")
      print(("  broker-b back %.0f s after the kill"):format(mqlease.now() - killed_at))
      for id, m in pairs(a) do assert(m:ack(), "ack of broker-a's " .. id) end
      -- broker-b's messages come back (the one whose ack failed too), none of broker-a's. Each
      -- is acked as it comes; right after the restart a proxy may not know broker-b yet ("cannot
      -- find broker broker-b"): that ack fails, is never taken as done, and the message comes
      -- back once more
      local back, done, ack_failed = {}, {}, 0
      local deadline = mqlease.now() + 180
      local function all_done()
        for id in pairs(b) do if not done[id] then return false end end
        return true
      end
      while not all_done() do
        assert(mqlease.now() < deadline, ("broker-b's messages after its restart, by the consumer started " ..
          "while it was down: %d of %d acked"):format(size(done), size(b)))
        local ms = c2:receive(16)
        if not ms then mqlease.sleep(0.2) end
        for _, m in ipairs(ms or {}) do
          back[m.id] = (back[m.id] or 0) + 1
          if m:ack() then done[m.id] = true else ack_failed = ack_failed + 1 end
        end
      end
      assert.is_truthy(back[b_id])
      for id in pairs(back) do
        assert.is_nil(a[id], "broker-a's message " .. id .. " came back although it was renewed and acked")
      end
      print(("  broker-b's %d messages back and acked %.0f s after the kill, through the consumer started while " ..
        "it was down (%d deliveries, %d acks failed as broker-b rejoined)")
        :format(size(b), mqlease.now() - killed_at, (function() local n = 0; for _, k in pairs(back) do n = n + k end; return n end)(), ack_failed))
      c2:close()
      c:close()
      -- exactly-once: every effect applied once
      local business = mqlease.redis("127.0.0.1:" .. env.redis_port)
      local function applied(id) return tonumber(business:call("GET", "biz:" .. id)) or 0 end
      local ok = pcall(wait_for, function()
        for _, id in ipairs(eo_ids) do if applied(id) == 0 then return false end end
        return true
      end, 120, "")
      local once, more, none = 0, 0, 0
      for _, id in ipairs(eo_ids) do
        local n = applied(id)
        if n == 1 then once = once + 1 elseif n > 1 then more = more + 1 else none = none + 1 end
      end
      business:close()
      assert(io.open(stop_file, "w")):close()
      for _, l in ipairs(logs) do wait_for(function() return read(l):match("metrics [^\n]*\n") end, 60, "an eo worker's drain") end
      local text = read(logs[1]) .. read(logs[2])
      print(("  exactly-once over both brokers: %d messages, effects once %d, more than once %d, never %d (all in: %s); " ..
        "handler runs %d, stale writes refused %d; %s | %s"):format(#eo_ids, once, more, none, tostring(ok),
        count(text, "run "), count(text, "stale "), read(logs[1]):match("metrics ([^\n]*)") or "?",
        read(logs[2]):match("metrics ([^\n]*)") or "?"))
      assert.equal(#eo_ids, once)
      assert.equal(0, more)
      assert.equal(0, none)
    end))
    producer:close()
    os.remove(stop_file)
    local outs = {}
    for i, pid in ipairs(pids) do
      env.stop_pid(pid, 10)
      outs[#outs + 1] = read(logs[i] .. ".out"):sub(-800)
      os.remove(logs[i]); os.remove(logs[i] .. ".out")
    end
    os.execute(HA .. "stop >/dev/null 2>&1")
    assert(res[1], tostring(res[2]) .. "\nworker output:\n" .. table.concat(outs, "\n"))
  end)
end)
