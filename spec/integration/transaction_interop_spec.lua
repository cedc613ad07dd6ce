-- Transactions with the official Java 5.x client (rocketmq-client-java) on the
-- same TRANSACTION topic: what a Java transactional producer commits mqlease
-- reads, what it rolls back never comes; what mqlease commits a Java
-- SimpleConsumer reads, and what mqlease rolls back it never gets.
local mqlease = require "mqlease"
local env = require "support.env"

local function java(args)
  return assert(io.popen("bash spec/support/java-peer.sh tx " .. table.concat(args, " ") .. " 2>/dev/null"))
end

-- Lines of p until one equals last (included); the rest stays unread.
local function lines_until(p, last)
  local out = {}
  for line in p:lines() do
    out[#out + 1] = line
    if line == last then break end
  end
  return out
end

describe("transactions with the official Java client", function()
  local topic = env.name("tx_java")
  env.sh(("bash mk/rocketmq.sh topics %s:TRANSACTION"):format(topic))
  local producer

  setup(function()
    producer = env.producer { topics = { topic }, checker = function() return "unknown" end }
  end)

  teardown(function()
    if producer then producer:close() end
  end)

  it("reads what a Java transactional producer commits, and never what it rolls back", function()
    local c = env.consumer { group = env.name("g_tx_java_read"), topic = topic, invisible = 20, await = 2 }
    assert(c:receive(1, { await = 0 }))
    local p = java({ "produce", env.endpoints, topic })
    local sent = {}
    for _, line in ipairs(lines_until(p, "DONE")) do
      local id, body = line:match("^sent (%S+) (%S+)$")
      if id then sent[body] = id end
    end
    p:close()
    assert.is_string(sent["java-commit-3"], "the Java producer's output")
    -- committed after a check of the broker has passed: the rolled-back one would come before
    local last = assert(producer:begin(topic, "mqlease-sentinel"))
    mqlease.sleep(4)
    assert(last:commit())
    local got = {}
    env.collect(c, 60, function(m)
      got[m.body] = m
      assert(m:ack())
    end, function() return got["mqlease-sentinel"] ~= nil end, 2)
    c:close()
    for i = 1, 3 do
      local body = "java-commit-" .. i
      assert.is_truthy(got[body], body)
      assert.equal(sent[body], got[body].id)
      assert.equal("TRANSACTION", got[body].message_type)
      assert.same({ body }, got[body].keys)
    end
    assert.is_nil(got["java-rollback"])
  end)

  it("is read by a Java SimpleConsumer: committed messages, not rolled-back ones", function()
    -- a topic of its own: the Java group reads nothing of the other test's
    local topic2 = env.name("tx_java2")
    env.sh(("bash mk/rocketmq.sh topics %s:TRANSACTION"):format(topic2))
    producer:close()
    producer = env.producer { topics = { topic2 }, checker = function() return "unknown" end }
    topic = topic2
    local p = java({ "consume", env.endpoints, topic, env.group(env.name("g_tx_java_sc")), "3" })
    local ready = lines_until(p, "READY")
    assert.equal("READY", ready[#ready])
    local rb = assert(producer:begin(topic, "lua-rollback"))
    assert(rb:rollback())
    local ids = {}
    for i = 1, 2 do
      local tx = assert(producer:begin(topic, "lua-commit-" .. i, { keys = "k" .. i }))
      assert(tx:commit())
      ids["lua-commit-" .. i] = tx.message_id
    end
    local last = assert(producer:begin(topic, "lua-sentinel"))
    mqlease.sleep(4)
    assert(last:commit())
    ids["lua-sentinel"] = last.message_id
    local got = {}
    for _, line in ipairs(lines_until(p, "DONE")) do
      local id, body = line:match("^got (%S+) (%S+)$")
      if id then got[body] = id end
    end
    p:close()
    assert.same(ids, got)
  end)
end)
