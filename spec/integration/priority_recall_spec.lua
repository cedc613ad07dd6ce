-- What RocketMQ 5.3.2+ and 5.4+ added for producers, on the real broker: priority
-- messages (RIP-80, 5.4+: a PRIORITY topic, queue n holds priority n, a pop reads the
-- highest queue first) and RecallMessage (5.3.2+: a delay message taken back before its
-- time). On an older version each spec proves what that version does instead.
-- The suite runs this file on its first version (5.2.0) and its second (5.5.0).
local env = require "support.env"

local VERSION, at_least = env.rocketmq_version, env.rocketmq_at_least

-- The mqlease command from the checkout (it loads build/mqlease/core.so, not the
-- sanitizer build the specs preload for): exit code, stdout, stderr.
local function cli(args)
  local out, err = os.tmpname(), os.tmpname()
  local p = assert(io.popen(("env -u LD_PRELOAD MQLEASE_ENDPOINTS=%s lua5.4 bin/mqlease %s </dev/null >%s 2>%s; echo $?")
    :format(env.endpoints, args, out, err)))
  local rc = tonumber(p:read("a"):match("%d+"))
  p:close()
  local o, e = env.read(out), env.read(err)
  os.remove(out); os.remove(err)
  return rc, o, e
end

-- A subscribed consumer (a new group may start at the queue's end: poll once first).
local function subscribed(group, topic)
  local c = env.consumer { group = group, topic = topic, invisible = 20, await = 2 }
  assert(c:receive(1, { await = 0 }))
  return c
end

describe("priority messages on RocketMQ " .. VERSION, function()
  if at_least("5.4.0") then
    it("receives a backlog of mixed priorities highest first, each with its priority", function()
      local topic, group = env.name("prio"), env.name("g_prio")
      env.sh(("bash mk/rocketmq.sh topics %s:PRIORITY"):format(topic))
      local c = subscribed(group, topic)
      local p = env.producer { topics = { topic } }
      -- 99 is above the topic's 4 queues: it shares the top queue with 3
      local sent = { 0, 2, 99, 1, 3, 0, 2, 1, 3, 0 }
      local by_id = {}
      for i, prio in ipairs(sent) do
        local id = assert(p:send(topic, "m" .. i, { priority = prio }))
        by_id[id] = prio
      end
      -- and one from the command line
      local rc, out, err = cli(("send --topic %s --priority 2 --quiet from-cli"):format(topic))
      assert.equal(0, rc, err)
      by_id[out:match("^(%S+)\n$")] = 2
      sent[#sent + 1] = 2
      local got = env.collect(c, 30, function(m) assert(m:ack()) end,
        function(all) return #all >= #sent end)
      assert.equal(#sent, #got)
      local last = 3
      for _, m in ipairs(got) do
        assert.equal(by_id[m.id], m.priority)
        -- the 5.4.0 proxy reports PRIORITY messages as NORMAL ones, 5.5.0 as PRIORITY
        assert.equal(at_least("5.5.0") and "PRIORITY" or "NORMAL", m.message_type)
        local rank = math.min(m.priority, 3)
        assert.is_true(rank <= last, ("priority %d received after %d"):format(m.priority, last))
        last = rank
      end
      -- the proxy checks the message type against the topic's, both ways
      local id, err, code = p:send(topic, "none", {})
      assert.is_nil(id)
      assert.equal("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", code, err)
      id, err, code = p:send(env.topic("prio_normal"), "x", { priority = 1 })
      assert.is_nil(id)
      assert.equal("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", code, err)
      p:close()
      c:close()
    end)
  else
    it("has no PRIORITY topic type, and takes a priority message as a NORMAL one without its priority", function()
      local ok, out = pcall(env.sh, ("bash mk/rocketmq.sh topics %s:PRIORITY")
        :format(env.name("prio")))
      assert.is_false(ok)
      assert.matches("unknown type PRIORITY", out)
      local topic = env.topic("prio_normal")
      local c = subscribed(env.name("g_prio_normal"), topic)
      local p = env.producer { topics = { topic } }
      local id = assert(p:send(topic, "x", { priority = 1 }))
      local got = env.collect(c, 30, function(m) assert(m:ack()) end, function(all) return #all >= 1 end)
      assert.equal(1, #got)
      assert.equal(id, got[1].id)
      assert.is_nil(got[1].priority)   -- an apis 2.0.x proxy skips field 22
      assert.equal("NORMAL", got[1].message_type)
      p:close()
      c:close()
    end)
  end
end)

describe("recall on RocketMQ " .. VERSION, function()
  if at_least("5.3.2") then
    it("withdraws a delay message before its time; one not recalled is delivered", function()
      local topic, group = env.name("recall"), env.name("g_recall")
      env.sh(("bash mk/rocketmq.sh topics %s:DELAY"):format(topic))
      local c = subscribed(group, topic)
      local p = env.producer { topics = { topic } }
      local recalled, _, handle = assert(p:send(topic, "recalled", { delay = 3 }))
      assert.is_string(handle)
      assert.equal(recalled, assert(p:recall(topic, handle)))
      -- a second recall of the same handle is answered the same (another delete marker)
      assert.equal(recalled, assert(p:recall(topic, handle)))
      -- due after the recalled one: once it is here, the recalled one had its turn
      local kept, _, kept_handle = assert(p:send(topic, "kept", { delay = 4 }))
      local got = env.collect(c, 60, function(m) assert(m:ack()) end, function(all)
        for _, m in ipairs(all) do if m.id == kept then return true end end
      end)
      local ids = {}
      for _, m in ipairs(got) do ids[m.id] = true end
      assert.is_true(ids[kept], "the message not recalled never came")
      assert.is_nil(ids[recalled], "the recalled message was delivered")
      local id, err, code = p:recall(topic, kept_handle)
      assert.is_nil(id)
      assert.equal("RECALL_TOO_LATE", code, err)
      id, err, code = p:recall(topic, "bm90IGEgaGFuZGxl")
      assert.is_nil(id)
      assert.equal("INVALID_RECALL_HANDLE", code, err)
      -- the command line: send prints the id and the handle, recall takes the handle
      local rc, out, e = cli(("send --topic %s --delay 60 --quiet from-cli"):format(topic))
      assert.equal(0, rc, e)
      local cli_id, cli_handle = out:match("^(%S+)\t(%S+)\n$")
      assert.is_string(cli_handle, out)
      rc, out, e = cli(("recall --topic %s %s"):format(topic, cli_handle))
      assert.equal(0, rc, e)
      assert.equal(cli_id .. "\n", out)
      rc, out, e = cli(("recall --topic %s bm90IGEgaGFuZGxl"):format(topic))
      assert.equal(1, rc)
      assert.matches("INVALID_RECALL_HANDLE", e)
      p:close()
      c:close()
    end)

    -- The harness starts the broker with recallMessageEnable=true; RecallMessageProcessor
    -- reads BrokerConfig.isRecallMessageEnable() per request, so updateBrokerConfig turns it
    -- off (and on again) without a restart.
    it("answers RECALL_DISABLED while the broker's recallMessageEnable is false", function()
      local topic = env.name("recall_off")
      env.sh(("bash mk/rocketmq.sh topics %s:DELAY"):format(topic))
      local p = env.producer { topics = { topic } }
      local sent, _, handle = assert(p:send(topic, "off", { delay = 600 }))
      assert.is_string(handle)
      env.sh("bash mk/rocketmq.sh broker-config recallMessageEnable=false")
      local ok, id, err, code = pcall(p.recall, p, topic, handle)
      env.sh("bash mk/rocketmq.sh broker-config recallMessageEnable=true")
      assert.is_true(ok, id)
      assert.is_nil(id)
      assert.equal("RECALL_DISABLED", code, err)
      -- on again: the same handle recalls the message
      assert.equal(sent, assert(p:recall(topic, handle)))
      p:close()
    end)
  else
    it("gives no recall handle, and a recall fails UNSUPPORTED", function()
      local topic = env.name("recall")
      env.sh(("bash mk/rocketmq.sh topics %s:DELAY"):format(topic))
      local p = env.producer { topics = { topic } }
      local id, offset, handle = p:send(topic, "d", { delay = 1 })
      assert.is_string(id, offset)
      assert.is_nil(handle)
      local rid, err, code = p:recall(topic, "bm90IGEgaGFuZGxl")
      assert.is_nil(rid)
      assert.equal("UNSUPPORTED", code, err)
      local rc, out, e = cli(("send --topic %s --delay 1 --quiet from-cli"):format(topic))
      assert.equal(0, rc, e)
      assert.matches("^%S+\n$", out)   -- the id alone: no handle
      rc, out, e = cli(("recall --topic %s bm90IGEgaGFuZGxl"):format(topic))
      assert.equal(1, rc)
      assert.matches("UNSUPPORTED", e)
      p:close()
    end)
  end
end)
