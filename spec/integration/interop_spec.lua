-- Interop with the official RocketMQ 5 Node.js client (rocketmq-client-nodejs),
-- through the same real proxy: each side reads what the other wrote, intact.
local cjson = require "cjson"
local env = require "support.env"

local function hex(s)
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function unhex(h)
  return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

describe("mqlease interop with the official Node.js client", function()
  it("receives intact what the Node.js producer sends", function()
    local topic = env.topic("interop_from_node")
    local consumer = env.consumer { group = env.name("g_from_node"), topic = topic, invisible = 15, await = 5 }
    assert(consumer:receive(1, { await = 0 }))
    local out = env.sh(("bash spec/support/node.sh produce %s %s 20 nodetag"):format(env.endpoints, topic))
    local sent = cjson.decode(out:match("(%[.*%])%s*$"))
    assert.equal(20, #sent)
    local by_id = {}
    for _, s in ipairs(sent) do by_id[s.id] = s end

    local got = env.collect(consumer, 60, function(m) assert(m:ack()) end,
      function(all) return #all >= 20 end)
    assert.equal(20, #got)
    for _, m in ipairs(got) do
      local s = by_id[m.id]
      assert.is_table(s, "unexpected id " .. m.id)
      assert.equal(s.body_hex, hex(m.body))
      assert.matches("%z", m.body)   -- the Node side put NUL bytes in every body
      assert.equal(s.tag, m.tag)
      assert.same(s.keys, m.keys)
      assert.same(s.properties, m.properties)
      by_id[m.id] = nil
    end
    assert.is_nil(next(by_id))
    consumer:close()
  end)

  it("sends what the Node.js SimpleConsumer receives intact", function()
    local topic = env.topic("interop_to_node")
    local group = env.name("g_to_node")
    local outfile = os.tmpname()
    -- the Node consumer starts first: a brand-new group may begin at the queue's end
    env.sh(("(bash spec/support/node.sh consume %s %s %s 10 60 > %s 2>%s.err &)"):format(
      env.endpoints, group, topic, outfile, outfile))
    require("mqlease").sleep(3)
    local producer = env.producer()
    local sent = {}
    for i = 1, 10 do
      local body = ("lua->node %d \0\1\255 end"):format(i)
      local id = assert(producer:send(topic, body, { tag = "luatag", keys = { "lk" .. i }, properties = { n = tostring(i) } }))
      sent[id] = { body = body, i = i }
    end
    producer:close()

    local deadline = os.time() + 90
    local text
    repeat
      require("mqlease").sleep(0.5)
      local f = io.open(outfile)
      text = f and f:read("a")
      if f then f:close() end
    until (text and text:match("%]%s*$")) or os.time() > deadline
    assert.is_truthy(text and text:match("%]%s*$"), "the Node consumer printed nothing")
    local got = cjson.decode(text:match("(%[.*%])%s*$"))
    assert.equal(10, #got)
    for _, m in ipairs(got) do
      local s = sent[m.id]
      assert.is_table(s, "Node received an id we did not send: " .. tostring(m.id))
      assert.equal(s.body, unhex(m.body_hex))
      assert.equal("luatag", m.tag)
      assert.same({ "lk" .. s.i }, m.keys)
      assert.same({ n = tostring(s.i) }, m.properties)
      sent[m.id] = nil
    end
    assert.is_nil(next(sent))
    os.remove(outfile)
    os.remove(outfile .. ".err")
  end)
end)
