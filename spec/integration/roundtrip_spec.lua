-- Produce and consume against the real RocketMQ: every message arrives once,
-- byte for byte, and an acked message never comes back.
local mqlease = require "mqlease"
local env = require "support.env"

local function body_of(i)
  -- 1 B to 64 KiB, a 2.4 KiB one, and binary bytes with NULs everywhere
  local sizes = { 1, 7, 100, 2458, 4096, 65536 }
  local size = sizes[i % #sizes + 1]
  local seed = ("%d\0\255\1msg-%d|"):format(i, i)
  return (seed:rep(size // #seed + 1)):sub(1, size)
end

describe("mqlease roundtrip", function()
  local topic = env.topic("roundtrip")
  local group = env.name("g_roundtrip")
  local consumer, producer

  setup(function()
    consumer = env.consumer { group = group, topic = topic, invisible = 10, await = 5 }
    -- a brand-new group may start at the queue's end: subscribe (and poll once) before producing
    assert(consumer:receive(1, { await = 0 }))
    producer = env.producer { topics = { topic } }
  end)

  teardown(function()
    if consumer then consumer:close() end
    if producer then producer:close() end
  end)

  it("delivers 1,000 messages exactly once each, with body, tag, keys and properties intact", function()
    local sent = {}
    for i = 1, 1000 do
      local opts = { tag = "Tag" .. (i % 3), keys = { "k" .. i, "batch" }, properties = { idx = tostring(i), kind = "rt" } }
      local id, offset = producer:send(topic, body_of(i), opts)
      assert.is_string(id, offset)
      assert.is_nil(sent[id])
      sent[id] = i
    end

    local seen, count = {}, 0
    local msgs = env.collect(consumer, 120, nil, function(all) return #all >= 1000 end)
    for _, m in ipairs(msgs) do
      local i = sent[m.id]
      assert.is_number(i, "unknown message id " .. tostring(m.id))
      assert.is_nil(seen[m.id], "message delivered twice: " .. m.id)
      seen[m.id] = true
      count = count + 1
      assert.equal(body_of(i), m.body)
      assert.equal("Tag" .. (i % 3), m.tag)
      assert.same({ "k" .. i, "batch" }, m.keys)
      assert.equal(tostring(i), m.properties.idx)
      assert.equal("rt", m.properties.kind)
      assert.equal(topic, m.topic)
      assert.equal(1, m.delivery_attempt)
      assert.is_true(m.born_at > 0)
      assert.is_true(m.lease:alive())
    end
    assert.equal(1000, count)

    -- ack in batches, as a real worker would
    for first = 1, #msgs, 32 do
      local batch = {}
      for j = first, math.min(first + 31, #msgs) do batch[#batch + 1] = msgs[j] end
      assert(consumer:ack(batch))
    end
    for _, m in ipairs(msgs) do assert.equal("acked", m.lease.state) end
    local metrics = consumer:metrics()
    assert.equal(1000, metrics.received)
    assert.equal(1000, metrics.acks_ok)
    assert.equal(0, metrics.inflight)
  end)

  it("never redelivers an acked message within twice the invisible duration", function()
    local again = env.collect(consumer, 2 * 10 + 3)
    assert.same({}, again)
  end)

  it("reports what the real proxy answers to an empty body and to one over 4 MiB", function()
    local id, err, code = producer:send(topic, "", { tag = "edge" })
    -- RocketMQ 5.x refuses an empty body; whatever it says must come back as nil, err, code
    if id then
      assert.is_string(id)
    else
      assert.is_string(err)
      assert.is_string(code)
      assert.matches("SendMessage", err)
    end
    local big = ("x"):rep(4 * 1024 * 1024 + 1)
    id, err, code = producer:send(topic, big, { tag = "edge" })
    assert.is_nil(id)
    assert.equal("MESSAGE_BODY_TOO_LARGE", code)
    assert.matches("body", err)
  end)
end)
