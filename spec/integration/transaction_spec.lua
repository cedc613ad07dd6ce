-- Transactional messages against the real RocketMQ: a committed half message is
-- delivered once, a rolled-back one never, and one left open by a producer
-- that died is resolved by the checker of the producer that comes after it
-- (the broker asks over Telemetry: RecoverOrphanedTransactionCommand). The
-- harness makes the broker check every 2 s for half messages older than 3 s
-- (mk/rocketmq.sh, docs/testing.md).
local mqlease = require "mqlease"
local env = require "support.env"
local read, wait_for = env.read, env.wait_for

-- A TRANSACTION topic of this run.
local function tx_topic(base)
  local name = env.name(base)
  env.sh(("bash mk/rocketmq.sh topics %s:TRANSACTION"):format(name))
  return name
end

-- Receives from consumer (acking everything) until a message with body
-- `last` came; returns the bodies seen, body -> times.
local function bodies_until(consumer, last, timeout)
  local seen = {}
  env.collect(consumer, timeout or 60, function(m)
    seen[m.body] = (seen[m.body] or 0) + 1
    assert(m:ack())
  end, function() return seen[last] ~= nil end, 2)
  return seen
end

-- Polls p until pred() or timeout seconds; fails the spec after. Returns the
-- last error a poll raised and the last error a checker raised (poll's second value).
local function poll_until(p, pred, timeout, what)
  local deadline = mqlease.now() + timeout
  local raised, checker_err
  while mqlease.now() < deadline do
    if pred() then return raised, checker_err end
    local ok, n, err = pcall(p.poll, p, 0.5)
    if not ok then raised = n else checker_err = err or checker_err end
  end
  error("timed out waiting for " .. what, 2)
end

-- The command as a user runs it from a checkout (cli_spec's way): exit code, stdout, stderr.
local function cli(args)
  local out, err = os.tmpname(), os.tmpname()
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = "'" .. a:gsub("'", "'\\''") .. "'" end
  local p = assert(io.popen(("env -u LD_PRELOAD lua5.4 bin/mqlease %s </dev/null >%s 2>%s; echo $?")
    :format(table.concat(quoted, " "), out, err)))
  local rc = tonumber(p:read("a"):match("%d+"))
  p:close()
  local o, e = read(out), read(err)
  os.remove(out); os.remove(err)
  return rc, o, e
end

describe("mqlease send --transaction", function()
  local topic = tx_topic("tx_cli")
  local group = env.name("g_tx_cli")

  it("commits, rolls back, or leaves open for the broker's check; peek shows the type", function()
    local c = env.consumer { group = group, topic = topic, invisible = 20, await = 2 }
    assert(c:receive(1, { await = 0 }))
    c:close()
    local rc, out, err = cli({ "send", "--topic", topic, "--transaction", "rollback", "--quiet", "rolled-back" })
    assert.equal(0, rc, err)
    local rolled = out:match("^(%x+)\n$")
    assert.is_string(rolled, out)
    rc, out, err = cli({ "send", "--topic", topic, "--transaction", "check", "--check-timeout", "60", "checked" })
    assert.equal(0, rc, err)
    local checked = out:match("^(%x+)\n$")
    assert.is_string(checked, out)
    assert.matches("the broker checked " .. checked .. ": commit", err, 1, true)
    rc, out, err = cli({ "send", "--topic", topic, "--transaction", "commit", "--quiet", "committed" })
    assert.equal(0, rc, err)
    local committed = out:match("^(%x+)\n$")
    assert.is_string(committed, out)

    rc, out, err = cli({ "peek", "--topic", topic, "--group", group, "-n", "2", "--wait", "10" })
    assert.equal(0, rc, err)
    assert.matches(checked .. "\tattempt=1\ttype=TRANSACTION\t", out, 1, true)
    assert.matches(committed .. "\tattempt=1\ttype=TRANSACTION\t", out, 1, true)
    assert.is_nil(out:find(rolled, 1, true))

    rc, _, err = cli({ "send", "--topic", topic, "--transaction", "commit", "--delay", "5", "x" })
    assert.equal(2, rc)
    assert.matches("option '--transaction' makes TRANSACTION messages: not with option '--delay'", err, 1, true)
  end)
end)

describe("transactional messages", function()
  local topic = tx_topic("tx")
  local plain = env.topic("tx_plain")
  local group = env.name("g_tx")
  local consumer, producer
  local asked = {}          -- body -> times the checker was asked
  local answers = {}        -- body -> what the checker answers (default "unknown")

  local function checker(m)
    asked[m.body] = (asked[m.body] or 0) + 1
    local a = answers[m.body]
    if type(a) == "function" then return a(m) end
    return a or "unknown"
  end

  setup(function()
    consumer = env.consumer { group = group, topic = topic, invisible = 20, await = 2 }
    -- a brand-new group may start at the queue's end: subscribe (and poll once) before producing
    assert(consumer:receive(1, { await = 0 }))
    producer = env.producer { topics = { topic, plain }, checker = checker }
  end)

  teardown(function()
    if consumer then consumer:close() end
    if producer then producer:close() end
  end)

  it("delivers a committed message once, as a TRANSACTION message with its options", function()
    local tx = assert(producer:begin(topic, "committed-1", { tag = "T1", keys = { "k1" }, properties = { a = "1" } }))
    assert.is_string(tx.transaction_id)
    assert.equal("open", tx.state)
    assert.is_true(tx:commit())
    assert.equal("committed", tx.state)
    local got = {}
    env.collect(consumer, 60, function(m)
      got[#got + 1] = m
      assert(m:ack())
    end, function() return #got >= 1 end, 2)
    assert.equal(1, #got)
    local m = got[1]
    assert.equal(tx.message_id, m.id)
    assert.equal("committed-1", m.body)
    assert.equal("T1", m.tag)
    assert.same({ "k1" }, m.keys)
    assert.equal("1", m.properties.a)
    assert.equal("TRANSACTION", m.message_type)
    -- past a check of the broker: the commit's op message is written, nothing comes again
    local again = assert(producer:begin(topic, "after-committed-1"))
    mqlease.sleep(4)
    assert(again:commit())
    local seen = bodies_until(consumer, "after-committed-1")
    assert.is_nil(seen["committed-1"])
    assert.is_nil(asked["committed-1"])
  end)

  it("never delivers a rolled-back message", function()
    local tx = assert(producer:begin(topic, "rolled-back-1"))
    assert.is_true(tx:rollback())
    assert.equal("rolled_back", tx.state)
    -- a message committed after a check of the broker has passed: the rolled-back one
    -- would have come before it if it came at all
    local later = assert(producer:begin(topic, "after-rollback-1"))
    mqlease.sleep(4)
    producer:poll(0)
    assert(later:commit())
    local seen = bodies_until(consumer, "after-rollback-1")
    assert.is_nil(seen["rolled-back-1"])
    assert.is_nil(asked["rolled-back-1"])
    assert.equal(1, seen["after-rollback-1"])
  end)

  it("resolves the half messages of a SIGKILLed producer with the checker of the next one", function()
    local logfile = os.tmpname()
    env.sh(("(exec lua5.4 spec/support/tx_worker.lua %s %s %s orphan-commit orphan-rollback orphan-unknown " ..
      ">%s.out 2>&1 & echo $! >%s.pid)"):format(env.endpoints, topic, logfile, logfile, logfile))
    local pid = tonumber(read(logfile .. ".pid"))
    wait_for(function() return read(logfile):match("ready") end, 60, "the worker's transactions")
    local ids = {}
    for body, id in read(logfile):gmatch("begun (%S+) (%S+)") do ids[body] = id end
    os.execute("kill -KILL " .. pid)
    wait_for(function() return not env.alive(pid) end, 10, "the worker's end")

    answers["orphan-commit"] = "commit"
    answers["orphan-rollback"] = "rollback"
    -- "unknown" twice, then rollback: the broker asks again after an unknown
    answers["orphan-unknown"] = function() return asked["orphan-unknown"] >= 3 and "rollback" or "unknown" end
    local before = producer:metrics()
    poll_until(producer, function()
      return asked["orphan-commit"] and asked["orphan-rollback"] and (asked["orphan-unknown"] or 0) >= 3
    end, 120, "the checks of the three half messages")
    local after = producer:metrics()
    assert.is_true(after.tx_check_unknown - before.tx_check_unknown >= 2)
    assert.is_true(after.tx_check_commit - before.tx_check_commit >= 1)
    assert.is_true(after.tx_check_rollback - before.tx_check_rollback >= 2)

    local last = assert(producer:begin(topic, "after-orphans"))
    mqlease.sleep(4)
    producer:poll(0)
    assert(last:commit())
    local got = {}
    env.collect(consumer, 60, function(m)
      got[m.body] = got[m.body] or {}
      table.insert(got[m.body], m.id)
      assert(m:ack())
    end, function() return got["after-orphans"] ~= nil end, 2)
    assert.same({ ids["orphan-commit"] }, got["orphan-commit"])
    assert.is_nil(got["orphan-rollback"])
    assert.is_nil(got["orphan-unknown"])
    os.remove(logfile)
    os.remove(logfile .. ".out")
    os.remove(logfile .. ".pid")
  end)

  it("raises on a checker's wrong answer, sends nothing for it, and is asked again", function()
    local tx = assert(producer:begin(topic, "wrong-answer"))
    assert.is_string(tx.message_id)
    local wrong = 0
    answers["wrong-answer"] = function()
      if wrong == 0 then
        wrong = 1
        return "yes"
      end
      return "rollback"
    end
    local raised = poll_until(producer, function() return (asked["wrong-answer"] or 0) >= 2 end,
      60, "the checks of the half message")
    assert.matches('the checker answered "yes" for message ' .. tx.message_id, raised, 1, true)
    assert.matches('must return "commit", "rollback" or "unknown"', raised, 1, true)
  end)

  it("lets a raising checker send nothing: the broker asks again", function()
    local tx = assert(producer:begin(topic, "raising"))
    assert.is_string(tx.message_id)
    answers["raising"] = function()
      if asked["raising"] == 1 then error("checker broke") end
      return "rollback"
    end
    local raised, last_err = poll_until(producer, function() return (asked["raising"] or 0) >= 2 end,
      60, "the second check")
    assert.is_nil(raised)
    assert.matches("checker broke", last_err)
  end)

  it("refuses wrong use, and a topic that is not a TRANSACTION topic", function()
    local tx = assert(producer:begin(topic, "wrong-use"))
    assert(tx:rollback())
    assert.has_error(function() tx:commit() end,
      "mqlease.transaction: commit after rollback (message " .. tx.message_id .. ")")
    assert.has_error(function() tx:rollback() end,
      "mqlease.transaction: rollback after rollback (message " .. tx.message_id .. ")")
    assert.error_matches(function() producer:begin(env.name("undeclared"), "x") end,
      "not in option 'topics'")
    assert.error_matches(function() producer:begin(topic, "x", { message_group = "g" }) end,
      "option 'message_group' makes a FIFO message")
    local no_checker = env.producer { topics = { topic } }
    assert.error_matches(function() no_checker:begin(topic, "x") end, "begin needs option 'checker'")
    no_checker:close()
    local none, err, code = producer:begin(plain, "on a plain topic")
    assert.is_nil(none)
    assert.equal("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", code)
    assert.matches("expected type is NORMAL", err)
  end)

  it("answers CLOSED on a closed producer, and leaves its open half message to the checks", function()
    local p = env.producer { topics = { topic }, checker = function() return "unknown" end }
    local tx = assert(p:begin(topic, "closed-producer"))
    p:close()
    local ok, err, code = tx:commit()
    assert.is_nil(ok)
    assert.equal("CLOSED", code)
    assert.matches("closed", err)
    assert.equal("open", tx.state)
    local none, _, code2 = p:begin(topic, "x")
    assert.is_nil(none)
    assert.equal("CLOSED", code2)
    answers["closed-producer"] = "rollback"
    poll_until(producer, function() return asked["closed-producer"] ~= nil end, 60, "its check")
  end)
end)
