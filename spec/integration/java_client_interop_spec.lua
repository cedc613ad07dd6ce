-- Interop with the official Java client of today, rocketmq-client-java 5.2.0 (apis 2.1.x), on
-- the real broker: it reads what mqlease sends -- priority (5.4+), delay and FIFO messages --
-- with every field equal, and mqlease reads what it sends the same way. The Java peer is
-- spec/support/java/Client52Interop.java (one JVM per direction). The suite runs this file
-- on its first version (5.2.0: no PRIORITY topics, so no priority messages) and its second
-- (5.5.0); wire_spec does the same with the Java clients people migrate from (5.0.7, 4.x).
local cjson = require "cjson"
local mqlease = require "mqlease"
local env = require "support.env"

local VERSION = env.rocketmq_version
local PRIORITY = env.rocketmq_at_least("5.4.0")
-- the message type a PRIORITY message is received with: NORMAL from the 5.4.x proxy
local PRIORITY_TYPE = (PRIORITY and not env.rocketmq_at_least("5.5.0")) and "NORMAL" or "PRIORITY"

local function java(args)
  return assert(io.popen("bash spec/support/java-peer.sh client52 " .. table.concat(args, " ") .. " 2>/dev/null"))
end

local decode_lines, sorted = env.json_lines, env.sorted

local function null(v)
  if v == cjson.null then return nil end
  return v
end

-- What each side reports of a message, as one table (the Java peer's JSON fields).
local function seen(m)
  return { id = m.id, topic = m.topic, tag = m.tag, keys = sorted(m.keys), properties = m.properties,
    message_group = m.message_group, priority = m.priority, body = m.body,
    delivery_ms = m.delivery_timestamp and math.floor(m.delivery_timestamp * 1000 + 0.5) or nil }
end

-- What a reader sees of what a sender gave: a message group is stored as the sharding-key
-- property, which the proxy hands on among the user properties too (5.2.0 and 5.5.0 alike;
-- the Java client shows it as well, see wire_spec).
local function as_read(t)
  if t.message_group then t.properties.__SHARDINGKEY = t.message_group end
  return t
end

local function from_java(j)
  local props = {}
  for k, v in pairs(j.properties) do props[k] = v end
  return { id = j.id, topic = j.topic, tag = null(j.tag), keys = sorted(j.keys), properties = props,
    message_group = null(j.message_group), priority = null(j.priority), body = j.body,
    delivery_ms = null(j.delivery_ms) }
end

-- For each base: a PRIORITY topic (or "-" where the version has none), a DELAY one, and a
-- FIFO one with its orderly group; all made by one admin JVM (each costs seconds).
local made = {}
local GROUPS = { "g_j52_in_p", "g_j52_in_d", "g_j52_out" }
local function make_topics(bases)
  local args = {}
  for _, base in ipairs(bases) do
    local t = { prio = PRIORITY and env.name(base .. "_p") or "-", delay = env.name(base .. "_d"),
      fifo = env.name(base .. "_f"), orderly = env.name("g_" .. base .. "_f") }
    if PRIORITY then args[#args + 1] = t.prio .. ":PRIORITY" end
    args[#args + 1] = t.delay .. ":DELAY"
    args[#args + 1] = t.fifo .. ":FIFO --orderly-group " .. t.orderly
    made[base] = t
  end
  -- the plain groups too (RocketMQ 5.5 wants them made before use, env.group)
  for _, g in ipairs(GROUPS) do args[#args + 1] = "--group " .. env.name(g) end
  env.sh("bash mk/rocketmq.sh topics " .. table.concat(args, " "))
end

local function topics(base)
  local t = made[base]
  return t.prio, t.delay, t.fifo, t.orderly
end

describe("interop with rocketmq-client-java 5.2.0 on RocketMQ " .. VERSION, function()
  setup(function() make_topics { "j52_in", "j52_out" } end)

  it("reads the priority, delay and FIFO messages the Java client sends, every field equal", function()
    local prio, delay, fifo, orderly = topics("j52_in")
    local consumers = {}
    local function listen(topic, group)
      -- its group was made with the topics: no env.consumer (which would make it again)
      local c = assert(mqlease.consumer { endpoints = env.endpoints, group = group, topic = topic,
        invisible = 20, await = 2 })
      assert(c:receive(1, { await = 0 }))
      consumers[#consumers + 1] = c
      return c
    end
    local pc = PRIORITY and listen(prio, env.name("g_j52_in_p"))
    local dc = listen(delay, env.name("g_j52_in_d"))
    local fc = listen(fifo, orderly)
    local sent = decode_lines(env.sh(("bash spec/support/java-peer.sh client52 produce %s %s %s %s")
      :format(env.endpoints, prio, delay, fifo)))
    assert.equal(PRIORITY and 11 or 7, #sent)
    local by_id, want = {}, { [prio] = 0, [delay] = 0, [fifo] = 0 }
    for _, j in ipairs(sent) do
      by_id[j.id] = as_read(from_java(j))
      want[j.topic] = want[j.topic] + 1
    end
    local function read(c, topic)
      local got = env.collect(c, 60, function(m) assert(m:ack()) end,
        function(all) return #all >= want[topic] end)
      assert.equal(want[topic], #got)
      for _, m in ipairs(got) do
        assert.same(by_id[m.id], seen(m))
        assert.equal(1, m.delivery_attempt)
      end
      return got
    end
    if PRIORITY then
      local order = {}
      for i, m in ipairs(read(pc, prio)) do
        order[i] = m.priority
        assert.equal(PRIORITY_TYPE, m.message_type)
      end
      assert.same({ 3, 2, 1, 0 }, order)   -- a backlog, highest first
    end
    for _, m in ipairs(read(dc, delay)) do assert.equal("DELAY", m.message_type) end
    local bodies = {}
    for i, m in ipairs(read(fc, fifo)) do
      bodies[i] = m.properties.case
      assert.equal("FIFO", m.message_type)
    end
    assert.same({ "fifo1", "fifo2", "fifo3", "fifo4", "fifo5" }, bodies)
    for _, c in ipairs(consumers) do c:close() end
  end)

  it("writes priority, delay and FIFO messages the Java client reads back, every field equal", function()
    local prio, delay, fifo, orderly = topics("j52_out")
    local group = env.name("g_j52_out")
    local p = java { "consume", env.endpoints, group, orderly, prio, delay, fifo, PRIORITY and 11 or 7 }
    local lines = {}
    repeat
      local line = p:read("l")
      lines[#lines + 1] = line
    until line == nil or line == "READY"
    assert.equal("READY", lines[#lines], table.concat(lines, "\n"))

    local producer = env.producer {}
    local sent, want = {}, {}
    local function send(topic, kase, opts)
      opts.tag, opts.keys = "Tag" .. kase, { "key-" .. kase, "mqlease" }
      opts.properties = { case = kase, city = "東京" }
      local body = "mqlease " .. kase .. " – Zürich"
      local id = assert(producer:send(topic, body, opts))
      local props = {}
      for k, v in pairs(opts.properties) do props[k] = v end
      sent[id] = as_read { id = id, topic = topic, tag = opts.tag, keys = sorted(opts.keys), properties = props,
        message_group = opts.message_group, priority = opts.priority, body = body,
        delivery_ms = opts.deliver_at and math.floor(opts.deliver_at * 1000 + 0.5) or nil }
      want[#want + 1] = id
    end
    if PRIORITY then
      for _, pr in ipairs { 0, 3, 1, 2 } do send(prio, "prio" .. pr, { priority = pr }) end
    end
    -- whole milliseconds, so both sides name the same instant
    local at = math.floor(mqlease.now() * 1000) / 1000
    send(delay, "delay3", { deliver_at = at + 3 })
    send(delay, "delay4", { deliver_at = at + 4 })
    for i = 1, 5 do send(fifo, "fifo" .. i, { message_group = "mqlease-order" }) end
    producer:close()

    local rest = p:read("a")
    assert(p:close(), "the Java consumer failed:\n" .. table.concat(lines, "\n") .. rest)
    assert.matches("DONE", rest)
    local got, fifo_order = {}, {}
    for _, j in ipairs(decode_lines(rest)) do
      assert.is_nil(got[j.id], "read twice: " .. j.id)
      got[j.id] = true
      assert.same(sent[j.id], from_java(j))
      assert.equal(1, j.attempt)
      if j.topic == fifo then fifo_order[#fifo_order + 1] = j.properties.case end
    end
    for _, id in ipairs(want) do assert.is_true(got[id], "never read: " .. sent[id].body) end
    assert.same({ "fifo1", "fifo2", "fifo3", "fifo4", "fifo5" }, fifo_order)
  end)
end)
