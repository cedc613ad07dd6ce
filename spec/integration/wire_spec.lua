-- Wire fidelity against the real RocketMQ 5.2.0 and the Java clients people migrate from:
-- a remoting producer (rocketmq-client DefaultMQProducer, which compresses bodies over
-- 4 KiB) and the official 5.x Java client send small, 10 KiB compressible, 1 MiB and
-- 3.9 MiB bodies, a FIFO and a delayed message; mqlease must read each one byte for byte
-- with every field equal. Then the reverse: mqlease produces and both Java consumers read
-- every field back (the trace context too). The Java peers are spec/support/java/WireInterop.java (one JVM per
-- direction).
local cjson = require "cjson"
local mqlease = require "mqlease"
local env = require "support.env"

local NAMESRV = "127.0.0.1:" .. (os.getenv("MQLEASE_NAMESRV_PORT") or "19876")   -- as rocketmq.sh
-- run-specs.sh runs this file on a second broker version too
local VERSION = os.getenv("ROCKETMQ_VERSION") or "5.2.0"

-- MD5 of a string, as hex, through md5sum (Lua has none and the spec must not trust ours).
local function md5(s)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
  local p = assert(io.popen("md5sum " .. path))
  local out = p:read("a")
  p:close()
  os.remove(path)
  return (out:match("^(%x+)"))
end

local function create_topics(specs)
  local p = assert(io.popen("bash mk/rocketmq.sh topics " .. table.concat(specs, " ") .. " 2>&1"))
  local out = p:read("a")
  assert(p:close(), "creating topics failed:\n" .. out)
end

local function java(args)
  return assert(io.popen("bash spec/support/java-peer.sh wire " .. table.concat(args, " ") .. " 2>/dev/null"))
end

local decode_lines, sorted = env.json_lines, env.sorted

describe("wire fidelity with the Java clients on RocketMQ " .. VERSION, function()
  local run = env.run_id
  local topic, fifo, delay = env.name("wire_n"), env.name("wire_f"), env.name("wire_d")

  setup(function()
    create_topics { topic, fifo .. ":FIFO", delay .. ":DELAY" }
  end)

  it("reads what a remoting producer and the 5.x Java producer send, byte for byte, every field equal", function()
    local consumers, got = {}, {}
    for _, t in ipairs { topic, fifo, delay } do
      local c = env.consumer { group = env.name("wire_g") .. "_" .. t:sub(1, 6), topic = t, invisible = 30, await = 5 }
      assert(c:receive(1, { await = 0 }))   -- a new group starts at the queue's end: join first
      consumers[t] = c
    end
    local p = java { "produce", NAMESRV, env.endpoints, run, topic, fifo, delay }
    local lines = {}
    for line in p:lines() do lines[#lines + 1] = line end
    assert(p:close(), "the Java producers failed:\n" .. table.concat(lines, "\n"))
    local sent = decode_lines(lines)
    assert.equal(12, #sent)
    local want = { [topic] = 8, [fifo] = 2, [delay] = 2 }
    for t, c in pairs(consumers) do
      local msgs = env.collect(c, 60, function(m) got[m.id] = m end,
        function(all) return #all >= want[t] end)
      assert.equal(want[t], #msgs, "messages on " .. t)
    end

    for _, s in ipairs(sent) do
      local what = s.client .. "/" .. s.case
      local m = got[s.id]
      assert.is_userdata(m, what .. ": not received (id " .. s.id .. ")")
      assert.equal(s.topic, m.topic, what)
      assert.equal(s.length, #m.body, what .. ": body length")
      assert.equal(s.md5, md5(m.body), what .. ": body MD5")
      assert.equal(s.tag, m.tag, what)
      assert.same(sorted(s.keys), sorted(m.keys), what)
      local props = s.properties
      if s.message_group ~= cjson.null then
        -- a message group is stored as the sharding-key property; the 5.2.0 proxy hands it
        -- on among the user properties as well (the official 5.x client shows it too)
        props.__SHARDINGKEY = s.message_group
      end
      -- the remoting producer's trace context (the property TRACE_CONTEXT) is
      -- m.trace_context, and 5.2.0 lists it among the user properties as well
      local tp = s.trace_context ~= cjson.null and s.trace_context or nil
      props.TRACE_CONTEXT = tp
      assert.same(props, m.properties, what)
      assert.equal(tp, m.trace_context, what)
      if s.client == "remoting" then assert.is_string(tp, what) end
      assert.equal(s.message_group ~= cjson.null and s.message_group or nil, m.message_group, what)
      if s.delivery_ms ~= cjson.null then
        assert.is_number(m.delivery_timestamp, what .. ": delivery_timestamp")
        assert.is_true(math.abs(m.delivery_timestamp - s.delivery_ms / 1000) < 0.002, what)
        -- the timer re-stores the message when it fires: within one slot of the
        -- timer wheel (TimerMessageStore, timerPrecisionMs = 1 s) plus the re-put;
        -- 5.3.3 under load fired 1.05 s after the due time
        assert.is_true(m.store_at <= m.delivery_timestamp + 2,
          ("%s: stored at %.3f, to be delivered at %.3f, born at %.3f"):format(what, m.store_at, m.delivery_timestamp, m.born_at))
      else
        assert.is_nil(m.delivery_timestamp, what)
      end
      assert.equal(1, m.delivery_attempt, what)
      assert.is_string(m.born_host, what)
      assert.is_string(m.store_host, what)
      assert.is_true(m.born_at > 1.6e9 and m.store_at >= m.born_at - 1, what)
      assert.is_true(m.queue_id >= 0 and m.offset >= 0, what)
      assert.equal(s.message_group ~= cjson.null and "FIFO" or s.delivery_ms ~= cjson.null and "DELAY" or "NORMAL",
        m.message_type, what)
      assert(m:ack())
    end
    for _, c in pairs(consumers) do c:close() end
  end)

  it("sends FIFO messages (message_group) and DELAY messages (delay, deliver_at) the broker keeps as such", function()
    -- topics of its own: only what this test sends is on them
    local fifo, delay = env.name("wire_f2"), env.name("wire_d2")
    create_topics { fifo .. ":FIFO", delay .. ":DELAY" }
    local cf = env.consumer { group = env.name("wire_gf2"), topic = fifo, invisible = 30, await = 5 }
    local cd = env.consumer { group = env.name("wire_gd2"), topic = delay, invisible = 30, await = 5 }
    assert(cf:receive(1, { await = 0 }))
    assert(cd:receive(1, { await = 0 }))
    local producer = env.producer { topics = { fifo, delay, topic } }

    -- one group: the proxy hashes it to one queue, so the offsets follow the send order
    local fifo_sent, last_offset = {}, -1
    for i = 1, 3 do
      local id, offset = assert(producer:send(fifo, "step " .. i, { message_group = "order-42" }))
      assert.is_true(offset > last_offset, "offsets follow the send order")
      last_offset = offset
      fifo_sent[id] = i
    end
    local t_sent = mqlease.now()
    local at = os.time() + 6
    local delayed = assert(producer:send(delay, "in four seconds", { delay = 4 }))
    local at_id = assert(producer:send(delay, "at a wall-clock time", { deliver_at = at }))

    -- what no broker accepts comes back as nil, message, code
    local id, err, code = producer:send(topic, "a FIFO message on a NORMAL topic", { message_group = "g" })
    assert.is_nil(id)
    assert.equal("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", code, err)
    id, err, code = producer:send(delay, "two days out", { delay = 2 * 86400 })
    assert.is_nil(id)
    assert.equal("ILLEGAL_DELIVERY_TIME", code, err)
    producer:close()

    local got = env.collect(cf, 30, function(m) assert(m:ack()) end, function(all) return #all >= 3 end)
    assert.equal(3, #got)
    local queue
    for _, m in ipairs(got) do
      assert.is_number(fifo_sent[m.id], "an id we did not send")
      assert.equal("FIFO", m.message_type)
      assert.equal("order-42", m.message_group)
      assert.equal("step " .. fifo_sent[m.id], m.body)
      queue = queue or m.queue_id
      assert.equal(queue, m.queue_id, "one message group, one queue")
    end

    local when = {}
    env.collect(cd, 40, function(m)
      when[m.id] = { m = m, after = mqlease.now() - t_sent }
      assert(m:ack())
    end, function() return when[delayed] and when[at_id] end)
    assert.is_table(when[delayed], "the delayed message never came")
    assert.is_table(when[at_id], "the timed message never came")
    local m = when[delayed].m
    assert.equal("DELAY", m.message_type)
    assert.equal("in four seconds", m.body)
    assert.is_true(math.abs(m.delivery_timestamp - m.born_at - 4) < 0.05,
      ("asked 4 s after birth, stored %.3f"):format(m.delivery_timestamp - m.born_at))
    -- the broker's timer has a 1 s precision: never much before the time asked
    assert.is_true(when[delayed].after >= 3, ("delivered %.1f s after the send"):format(when[delayed].after))
    m = when[at_id].m
    assert.equal("DELAY", m.message_type)
    assert.equal(at, m.delivery_timestamp)
    cf:close()
    cd:close()
  end)

  it("writes what a remoting consumer and the 5.x Java consumer read back with every field equal", function()
    local rtopic = env.name("wire_r")
    create_topics { rtopic }
    env.group("wire_sc_" .. run)   -- the Java SimpleConsumer's (WireInterop.java)
    local p = java { "consume", NAMESRV, env.endpoints, run, rtopic, 4 }
    local lines = {}
    repeat
      local line = p:read("l")
      lines[#lines + 1] = line
    until line == nil or line == "READY"
    assert.equal("READY", lines[#lines], table.concat(lines, "\n"))

    math.randomseed(9)
    local function random_bytes(n)
      local t = {}
      for i = 1, n do t[i] = string.char(math.random(0, 255)) end
      return table.concat(t)
    end
    local cases = {
      small = "hello from mqlease \0 with a NUL",
      compressible = ("the quick brown fox jumps over the lazy dog "):rep(300):sub(1, 10240),
      random1m = random_bytes(1 << 20),
      random3_9m = random_bytes(3900 * 1024),
    }
    local producer = env.producer { topics = { rtopic } }
    local sent = {}
    for name, body in pairs(cases) do
      local props = { case = "mqlease/" .. name, city = "Zürich – 東京 \"quoted\" back\\slash", emoji = "🚀" }
      -- each with a trace context of its own: the proxy keeps it as the property
      -- TRACE_CONTEXT (MessageConst.PROPERTY_TRACE_CONTEXT), which both Java
      -- consumers list with the user properties (MessageView has no accessor for it)
      local tp = mqlease.trace.new()
      local id = assert(producer:send(rtopic, body, { tag = "Tag" .. name, keys = { "key-" .. name, "k2" }, properties = props,
        trace_context = tp }))
      local seen = { TRACE_CONTEXT = tp }
      for k, v in pairs(props) do seen[k] = v end
      sent[id] = { body = body, tag = "Tag" .. name, keys = { "key-" .. name, "k2" }, props = seen, name = name }
    end
    producer:close()

    for line in p:lines() do lines[#lines + 1] = line end
    assert(p:close(), "the Java consumers failed:\n" .. table.concat(lines, "\n"))
    local read = decode_lines(lines)
    local per_client = { remoting = 0, java5 = 0 }
    for _, r in ipairs(read) do
      local s = sent[r.id]
      local what = r.client .. " reading mqlease/" .. (s and s.name or "?")
      assert.is_table(s, what .. ": an id mqlease did not send: " .. tostring(r.id))
      per_client[r.client] = per_client[r.client] + 1
      assert.equal(rtopic, r.topic, what)
      assert.equal(#s.body, r.length, what)
      assert.equal(md5(s.body), r.md5, what)
      assert.equal(s.tag, r.tag, what)
      assert.same(sorted(s.keys), sorted(r.keys), what)
      assert.same(s.props, r.properties, what)
    end
    assert.same({ remoting = 4, java5 = 4 }, per_client)
  end)
end)

describe("dead letters on the real RocketMQ " .. VERSION, function()
  local topic = env.name("wire_dlq")
  local group = env.name("g_wire_dlq")

  setup(function()
    create_topics { topic }
  end)

  -- The proxy writes the message to %DLQ%<group> and acks the original: read it back there.
  local function read_dlq(want_ids, timeout)
    local dlq = env.consumer { group = env.name("g_wire_dlq_reader"), topic = "%DLQ%" .. group, invisible = 10, await = 2 }
    local found = {}
    local msgs = env.collect(dlq, timeout, function(m) found[m.id] = m; m:ack() end, function()
      for id in pairs(want_ids) do if not found[id] then return false end end
      return true
    end)
    dlq:close()
    return found, msgs
  end

  it("forwards a message with m:dead_letter(reason) and with run's max_attempts, counted, body intact", function()
    local c = env.consumer { group = group, topic = topic, invisible = 20, await = 5 }
    assert(c:receive(1, { await = 0 }))
    local producer = env.producer { topics = { topic } }
    local id1 = assert(producer:send(topic, "explicit dead letter", { tag = "dl" }))

    -- one explicit dead letter from a plain receive
    local dm
    env.collect(c, 30, function(m)
      if m.id == id1 then assert(m:dead_letter("bad_input")); dm = m end
    end, function() return dm ~= nil end)
    assert.is_userdata(dm)
    assert.equal(1, c:metrics().dead_lettered.bad_input)
    assert.equal("dead_lettered", dm.lease.state)
    local ok, _, code = dm:ack()
    assert.is_nil(ok)
    assert.equal("ALREADY_DEAD_LETTERED", code)
    local id2 = assert(producer:send(topic, "fails on every attempt", { tag = "dl" }))
    producer:close()

    -- the other one through run: two attempts, both fail, then the DLQ instead of a third
    local attempts = {}
    local stats = mqlease.run(c, function(m)
      if m.id == id2 then attempts[#attempts + 1] = m.delivery_attempt end
      error("always fails")
    end, { max_attempts = 2, nack_delay = 1, signals = false, run_for = 60, on_error = function() end,
           stop = function() return #attempts >= 2 and c._closed == false and c:metrics().dead_lettered.max_attempts == 1 end })
    assert.same({ 1, 2 }, attempts)
    assert.equal(1, stats.dead_lettered)

    local found = read_dlq({ [id1] = true, [id2] = true }, 60)
    assert.is_userdata(found[id1], "the explicit dead letter is in %DLQ%" .. group)
    assert.is_userdata(found[id2], "the max_attempts dead letter is in %DLQ%" .. group)
    assert.equal("explicit dead letter", found[id1].body)
    assert.equal("fails on every attempt", found[id2].body)
  end)
end)
