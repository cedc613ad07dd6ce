-- Lite topics (RIP-83, RocketMQ 5.5) on the real broker: a LITE parent topic, a group
-- bound to it (lite.bind.topic), a consumer that names the lite topics it wants
-- (SyncLiteSubscription) and holds each message as a lease like any other.
-- The suite runs this file on its second version (5.5.0); on an older one it is skipped.
--
-- In local mode (the suite's broker: the broker inside the proxy JVM) the 5.5.0 proxy has
-- no lite subscription service (LocalServiceManager.getLiteSubscriptionService returns
-- null: SyncLiteSubscription fails with a NullPointerException), so this file starts a
-- cluster-mode RocketMQ of its own (rocketmq.sh with MQLEASE_CLUSTER=1: namesrv, broker,
-- two proxies that reach the broker over remoting) and always stops it in teardown.
local env = require "support.env"
local mqlease = require "mqlease"

-- Ports at fixed offsets from the suite's (cluster_spec takes +599..+602, +1600, +2600).
local RUN = (os.getenv("MQLEASE_RUN") or "/tmp/mqlease") .. "-lite-rmq-" .. env.run_id
local BASE = tonumber(os.getenv("MQLEASE_GRPC_PORT") or "18081")
local GRPC = BASE + 700
local RMQ = ("MQLEASE_CLUSTER=1 MQLEASE_RUN=%s MQLEASE_GRPC_PORT=%d MQLEASE_GRPC_PORT2=%d " ..
  "MQLEASE_REMOTING_PORT=%d MQLEASE_REMOTING_PORT2=%d MQLEASE_NAMESRV_PORT=%d " ..
  "MQLEASE_BROKER_PORT=%d MQLEASE_STOP_GRACE=5 "):format(RUN, GRPC, BASE + 702, BASE + 699, BASE + 701,
    BASE + 1700, BASE + 2700)
local ENDPOINTS = ("127.0.0.1:%d"):format(GRPC)
local ENDPOINTS2 = ("127.0.0.1:%d"):format(BASE + 702)   -- the cluster's second proxy
local function rmq(args) return env.sh(RMQ .. "bash mk/rocketmq.sh " .. args) end

local VERSION, at_least = env.rocketmq_version, env.rocketmq_at_least

describe("lite topics on RocketMQ " .. VERSION, function()
  if not at_least("5.5.0") then
    pending("lite topics came with RocketMQ 5.5.0 (no LITE topic type, no SyncLiteSubscription before)")
    return
  end

  local parent, group, c, p
  local started = false
  local a, b = "lite_a", "lite_b"

  -- every message of this consumer until pred(all), each acked unless keep(m)
  local function collect(timeout, pred, keep)
    return env.collect(c, timeout, function(m)
      if not (keep and keep(m)) then assert(m:ack()) end
    end, pred, 2)
  end

  setup(function()
    parent, group = env.name("lite"), env.name("g_lite")
    started = true
    env.start_rocketmq(rmq)
    -- one admin JVM: the LITE topic and the group bound to it
    rmq(("topics %s:LITE --lite-group %s:%s"):format(parent, group, parent))
    c = assert(mqlease.consumer { endpoints = ENDPOINTS, group = group, topic = parent,
      lite_topics = { a, b }, invisible = 10, await = 2, request_timeout = 10, start_timeout = 60,
      lite_sync_every = 3 })
    p = env.producer { endpoints = ENDPOINTS, request_timeout = 10, start_timeout = 60 }
  end)

  teardown(function()
    if p then p:close() end
    if c then c:close() end
    if started then rmq("stop") end
  end)

  -- the message id once it comes (kept, not acked), acking every other message
  local function first_of(id, timeout)
    local got = collect(timeout or 30, function(all)
      for _, m in ipairs(all) do if m.id == id then return true end end
    end, function(m) return m.id == id end)
    for _, m in ipairs(got) do if m.id == id then return m end end
    error("never came: " .. id, 2)
  end

  it("delivers the messages of two lite topics, each with its lite topic", function()
    local want = {}
    for i = 1, 2 do
      want[assert(p:send(parent, "a" .. i, { lite_topic = a }))] = a
      want[assert(p:send(parent, "b" .. i, { lite_topic = b }))] = b
    end
    -- a message sent without a lite topic is refused on a LITE topic
    local id, err, code = p:send(parent, "none")
    assert.is_nil(id)
    assert.is_string(code, err)
    local got = collect(60, function(all)
      local n = 0
      for _, m in ipairs(all) do if want[m.id] then n = n + 1 end end
      return n >= 4
    end)
    local seen = {}
    for _, m in ipairs(got) do
      assert.equal(want[m.id], m.lite_topic, m.body)
      assert.equal(parent, m.topic)
      seen[m.id] = true
    end
    for sent in pairs(want) do assert.is_true(seen[sent], "never came: " .. sent) end
  end)

  it("keeps a lite message past its invisible duration through renewals; nack and dead letter", function()
    local held = assert(p:send(parent, "held", { lite_topic = a }))
    local m = first_of(held)
    -- 15 s > invisible (10 s): only the renewals keep it from coming back
    for _, x in ipairs(collect(15, nil)) do assert.are_not.equal(held, x.id, "redelivered while held") end
    assert.is_true(m.lease.renewals >= 1)
    assert(m:ack())
    -- a nack gives it back: the same message again, one attempt later
    local nacked = assert(p:send(parent, "nacked", { lite_topic = b }))
    m = first_of(nacked)
    local attempt = m.delivery_attempt
    assert(m:nack(0))
    m = first_of(nacked, 40)
    assert.equal(b, m.lite_topic)
    assert.is_true(m.delivery_attempt > attempt)
    assert(m:ack())
    local dl = assert(p:send(parent, "dl", { lite_topic = b }))
    assert(first_of(dl):dead_letter("lite_spec"))
  end)

  it("stops delivering a lite topic once unsubscribed, starts one once subscribed", function()
    local c_, d_ = "lite_c", "lite_d"
    assert(c:subscribe_lite({ c_ }))
    -- c has had no message yet (see docs/wire.md#lite-topics for one that had)
    assert(c:unsubscribe_lite(c_))
    local gone = assert(p:send(parent, "gone", { lite_topic = c_ }))
    local kept = assert(p:send(parent, "kept", { lite_topic = a }))
    local ids = {}
    for _, m in ipairs(collect(20, function(all)
      for _, m in ipairs(all) do if m.id == kept then return true end end
    end)) do ids[m.id] = m.lite_topic end
    assert.equal(a, ids[kept])
    -- a while longer: the unsubscribed one never comes
    for _, m in ipairs(collect(6, nil)) do ids[m.id] = m.lite_topic end
    assert.is_nil(ids[gone])
    assert(c:subscribe_lite(d_))
    local back = assert(p:send(parent, "new", { lite_topic = d_ }))
    assert.equal(d_, first_of(back).lite_topic)
  end)

  -- The harness's broker drops a lite subscription not sent again for 10 s
  -- (liteSubscriptionCheckTimeoutMills, checked every 2 s); c sends its set every 3 s.
  it("keeps its lite subscription past the broker's expiry of ones not sent again", function()
    for _, m in ipairs(collect(15, nil)) do assert.is_string(m.lite_topic) end
    local late = assert(p:send(parent, "late", { lite_topic = a }))
    assert.equal(a, first_of(late, 30).lite_topic)
  end)

  -- Last: it kills proxy 1, which c and p use. The broker ties a client's lite
  -- subscription to the proxy that sent it (LiteSubscriptionRegistryImpl
  -- .updateClientChannel): a consumer that moved says it again to the new one.
  it("keeps delivering its lite topics once its session moved to the other proxy", function()
    local e = "lite_e"
    local c2 = assert(mqlease.consumer { endpoints = ENDPOINTS .. ";" .. ENDPOINTS2, group = group,
      topic = parent, lite_topics = { e }, invisible = 10, await = 2, request_timeout = 10,
      start_timeout = 60, lite_sync_every = 3 })
    local p2 = env.producer { endpoints = ENDPOINTS2, request_timeout = 10, start_timeout = 60 }
    finally(function()
      p2:close()
      c2:close()
    end)
    -- receives until id came; a receive may fail while the session moves (the new
    -- proxy answers INTERNAL_SERVER_ERROR until it has our settings): it is tried again
    local function from_c2(id, timeout)
      local deadline = mqlease.now() + timeout
      while mqlease.now() < deadline do
        for _, m in ipairs(c2:receive(16, { await = 2 }) or {}) do
          assert(m:ack())
          if m.id == id then return m end
        end
      end
    end
    local before = assert(p2:send(parent, "before", { lite_topic = e }))
    assert.equal(e, assert(from_c2(before, 30), "never came before the kill").lite_topic)
    rmq("kill-proxy 1")
    -- the session moves once its stream breaks; then a lite message sent through proxy 2
    env.wait_for(function() return c2:metrics().reconnects >= 1 end, 30, "c2 to reconnect")
    local after = assert(p2:send(parent, "after", { lite_topic = e }))
    local m = from_c2(after, 60)
    assert.is_not_nil(m, "a lite message sent after the move never came")
    assert.equal(e, m.lite_topic)
  end)
end)
