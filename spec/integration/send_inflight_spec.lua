-- Sends in flight against the real RocketMQ: a batch of 2,000 (send_many) and
-- many coroutines sending at once each get one result per message, and every
-- message arrives exactly once under the id its result named.
local mqlease = require "mqlease"
local env = require "support.env"
local scheduler = require "mqlease.scheduler"

describe("sends in flight", function()
  local topic = env.topic("send_inflight")
  local group = env.name("g_send_inflight")
  local consumer, producer
  local sent = {}   -- message id -> body

  setup(function()
    consumer = env.consumer { group = group, topic = topic, invisible = 30, await = 5 }
    -- a brand-new group may start at the queue's end: subscribe (and poll once) before producing
    assert(consumer:receive(1, { await = 0 }))
    producer = env.producer { topics = { topic }, max_inflight = 64 }
  end)

  teardown(function()
    if consumer then consumer:close() end
    if producer then producer:close() end
  end)

  local function record(id, body)
    assert.is_string(id)
    assert.is_nil(sent[id], "one message id for two sends: " .. id)
    sent[id] = body
  end

  it("answers each of 2,000 messages of send_many in order with its id and offset", function()
    local list = {}
    for i = 1, 2000 do
      list[i] = i % 2 == 0 and ("many-" .. i) or { body = "many-" .. i, tag = "odd", keys = { "k" .. i } }
    end
    local results, failed = producer:send_many(topic, list)
    assert.equal(0, failed)
    assert.equal(2000, #results)
    for i, r in ipairs(results) do
      assert.is_true(r.ok, r.err)
      assert.is_number(r.offset)
      record(r.message_id, "many-" .. i)
    end
    assert.equal(0, producer:inflight())
  end)

  it("sends from 20 coroutines at once, 25 messages each", function()
    local s = scheduler.new(function(_, err) error(err) end)
    local done = 0
    for t = 1, 20 do
      s:spawn(function()
        for i = 1, 25 do
          local body = ("co-%d-%d"):format(t, i)
          local id, offset = producer:send(topic, body)
          assert.is_number(offset, id)
          record(id, body)
          done = done + 1
        end
      end)
    end
    s:loop()
    assert.equal(500, done)
  end)

  it("delivers every message sent in flight exactly once, under the id its send answered", function()
    local msgs = env.collect(consumer, 60, nil, function(all) return #all >= 2500 end)
    local seen = {}
    for _, m in ipairs(msgs) do
      assert.is_string(sent[m.id], "unknown message id " .. tostring(m.id))
      assert.is_nil(seen[m.id], "message delivered twice: " .. m.id)
      assert.equal(sent[m.id], m.body)
      seen[m.id] = true
    end
    assert.equal(2500, #msgs)
    for first = 1, #msgs, 32 do
      assert(consumer:ack({ (table.unpack or unpack)(msgs, first, math.min(first + 31, #msgs)) }))
    end
  end)

  it("raises naming max_inflight when it is out of range", function()
    local ok, err = pcall(mqlease.producer, { endpoints = env.endpoints, max_inflight = 0 })
    assert.is_false(ok)
    assert.matches("option 'max_inflight' must be a number between 1 and 65536", err)
  end)

  it("returns nil, message, code when the proxy cannot be reached", function()
    -- nothing listens on port 1: the session cannot start, so nothing is ever in flight
    local p, err, code = mqlease.producer { endpoints = "127.0.0.1:1", start_timeout = 2 }
    assert.is_nil(p)
    assert.is_string(err)
    assert.is_string(code)
  end)
end)
