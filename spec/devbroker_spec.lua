-- mqlease-devbroker: what a real broker cannot be told to do -- faults on
-- demand -- and the official Node.js client against it.
local cjson = require "cjson"
local mqlease = require "mqlease"
local env = require "support.env"
local devbroker = require "support.devbroker"

describe("mqlease-devbroker", function()
  local dv
  before_each(function() dv = devbroker.start({ "t1", "t2" }) end)
  after_each(function() dv.stop() end)

  local function pair(opts)
    opts = opts or {}
    opts.endpoints, opts.group, opts.topic = dv.endpoints, opts.group or "g", opts.topic or "t1"
    opts.await = opts.await or 5
    return assert(mqlease.consumer(opts)), assert(mqlease.producer { endpoints = dv.endpoints })
  end

  it("answers control commands and rejects unknown ones", function()
    assert.matches("^ok fail_change=0.25", dv.control("set fail_change 0.25"))
    assert.matches("^error unknown setting", dv.control("set nonsense 1"))
    assert.matches("^error unknown command", dv.control("explode"))
    assert.matches("^ok calls=%d+", dv.control("stats"))
  end)

  it("loses the lease when every renewal fails, and counts it", function()
    local c, p = pair { invisible = 10 }
    assert(p:send("t1", "doomed"))
    local m = assert(c:receive(1))[1]
    assert.matches("^ok", dv.control("set fail_change 1"))
    mqlease.sleep(11)
    assert.is_false(m.lease:alive())
    local metrics = c:metrics()
    assert.is_true(metrics.renew_fail >= 1)
    assert.equal(1, metrics.expire_while_alive)
    assert.equal(0, metrics.renew_success)
    c:close()
    p:close()
  end)

  it("caps renewals per delivery, as some deployments' brokers do", function()
    local c, p = pair { invisible = 10 }
    assert.matches("^ok", dv.control("set max_renewals 1"))
    assert(p:send("t1", "capped"))
    local m = assert(c:receive(1))[1]
    mqlease.sleep(14)   -- one renewal at ~3.3 s, then the deadline at ~13.3 s
    assert.equal(1, m.lease.renewals)
    assert.is_false(m.lease:alive())
    local again = assert(c:receive(1))
    assert.equal(1, #again)
    assert.equal(2, again[1].delivery_attempt)
    c:close()
    p:close()
  end)

  it("holds every answer while paused (a partition) and recovers after", function()
    local c, p = pair { invisible = 10, request_timeout = 1 }
    assert(p:send("t1", "partition"))
    local m = assert(c:receive(1))[1]
    assert.matches("^ok", dv.control("set paused 1"))
    local ok, _, code = m:ack()
    assert.is_nil(ok)
    assert.equal("TIMEOUT", code)
    assert.matches("^ok", dv.control("set paused 0"))
    assert.is_true(m:ack())
    c:close()
    p:close()
  end)

  it("delays renewals without losing the lease while the delay is short", function()
    local c, p = pair { invisible = 10 }
    assert.matches("^ok", dv.control("set delay_change_ms 800"))
    assert(p:send("t1", "slow renewals"))
    local m = assert(c:receive(1))[1]
    mqlease.sleep(8)
    assert.is_true(m.lease:alive())
    assert.is_true(m.lease.renewals >= 2)
    assert.is_true(c:metrics().renew_latency.sum >= 1.6)
    assert.is_true(m:ack())
    c:close()
    p:close()
  end)

  it("scales time so that long-lease scenarios run in seconds", function()
    assert.matches("^ok", dv.control("set time_scale 0.1"))
    local c, p = pair { invisible = 10, renew = false }
    assert(p:send("t1", "fast clock"))
    local m = assert(c:receive(1))[1]
    local t0 = mqlease.now()
    local again = env.collect(c, 8, nil, function(all) return #all >= 1 end)
    assert.equal(1, #again)
    assert.equal(m.id, again[1].id)
    assert.equal(2, again[1].delivery_attempt)
    assert.is_true(mqlease.now() - t0 < 3, "a 10 s lease at scale 0.1 should end in about 1 s")
    c:close()
    p:close()
  end)

  it("drops receive streams on demand", function()
    local c, p = pair { await = 20 }
    local t0 = mqlease.now()
    -- drop the long poll 1 s in, from another process
    env.sh(("(sleep 1; bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; echo drop_streams >&3; head -n1 <&3' >/dev/null) &")
      :format(dv.control_port))
    local msgs, _, code = c:receive(1)
    assert.is_nil(msgs)
    assert.equal("UNAVAILABLE", code)
    assert.is_true(mqlease.now() - t0 < 5)
    c:close()
    p:close()
  end)

  it("serves the official Node.js client both ways", function()
    local out = env.sh(("bash spec/support/node.sh produce %s t2 5 fromnode"):format(dv.endpoints))
    local sent = cjson.decode(out:match("(%[.*%])%s*$"))
    local c, p = pair { topic = "t2", group = "g_node" }
    local got = env.collect(c, 15, function(m) assert(m:ack()) end, function(all) return #all >= 5 end)
    assert.equal(5, #got)
    local ids = {}
    for _, s in ipairs(sent) do ids[s.id] = true end
    for _, m in ipairs(got) do assert.is_true(ids[m.id]) end
    c:close()
    for i = 1, 3 do assert(p:send("t2", "to node " .. i, { tag = "lua" })) end
    p:close()
    out = env.sh(("bash spec/support/node.sh consume %s g_node_in t2 8 20"):format(dv.endpoints))
    local received = cjson.decode(out:match("(%[.*%])%s*$"))
    -- a new group starts at the beginning: the 5 from Node and the 3 from Lua
    assert.equal(8, #received)
  end)
end)
