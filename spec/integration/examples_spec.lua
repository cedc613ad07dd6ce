-- The examples as a user runs them: from another directory, mqlease found on
-- LUA_PATH / LUA_CPATH (here the checkout's lua/ and build/, as after
-- luarocks make the tree's paths), against the real broker and Redis.
local env = require "support.env"

local ROOT = env.sh("pwd"):gsub("%s+$", "")

-- How an example starts, from /tmp: mqlease found on the paths, no sanitizer
-- preloaded; the command follows (with any VAR=value of its own first).
local IN_TMP = ("cd /tmp && env -u LD_PRELOAD LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;;' LUA_CPATH='%s/build/?.so;;'")
  :format(ROOT, ROOT, ROOT)

-- Runs an example from /tmp; returns its exit code and its output (stdout and stderr).
local function example(path, args, vars)
  local cmd = ("%s %s timeout 120 lua5.4 %s/examples/%s %s 2>&1; echo \"rc=$?\""):format(IN_TMP, vars or "", ROOT, path, args)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return tonumber(out:match("rc=(%d+)\n$")), (out:gsub("rc=%d+\n$", ""))
end

-- A fresh topic and group, the group subscribed first: a brand-new group may
-- start at the queue's end.
local function subscribed(name)
  local topic, group = env.topic(name), env.name("g_" .. name)
  local c = env.consumer { group = group, topic = topic }
  assert(c:receive(1, { await = 0 }))
  c:close()
  return topic, group
end

describe("the examples", function()
  it("send (producer/send.lua) and consume (consumer/worker.lua) from another directory", function()
    local topic, group = subscribed("ex_consumer")
    local rc, out = example("producer/send.lua", ("%s %s"):format(env.endpoints, topic))
    assert.equal(0, rc, out)
    local id = out:match("^sent\t(%x+)\n$")
    assert.is_string(id, out)
    rc, out = example("consumer/worker.lua", ("%s %s %s 6"):format(env.endpoints, group, topic))
    assert.equal(0, rc, out)
    assert.matches(id .. ' "sleep=0.5"', out, 1, true)
    assert.matches("ack: ok", out, 1, true)
  end)

  it("consumer/worker.lua finishes the message in hand on SIGTERM, and ends", function()
    local topic, group = subscribed("ex_consumer_term")
    local p = env.producer()
    local id = assert(p:send(topic, "sleep=3"))
    p:close()
    local log, pidfile = os.tmpname(), os.tmpname()
    env.sh(("(%s lua5.4 %s/examples/consumer/worker.lua %s %s %s 120 >%s 2>&1 & echo $! >%s; wait $!; echo \"rc=$?\" >>%s) >/dev/null 2>&1 &")
      :format(IN_TMP, ROOT, env.endpoints, group, topic, log, pidfile, log))
    local read, wait_for = env.read, env.wait_for
    wait_for(function() return read(log):find(id .. " received", 1, true) end, 60, "the message's handling")
    local pid = tonumber(read(pidfile):match("%d+"))
    assert(os.execute(("kill -TERM %d"):format(pid)))
    -- the 3 s handler ends, its message is acked, and the loop ends within a receive's await (5 s)
    wait_for(function() return read(log):find("rc=", 1, true) end, 30, "the worker's end")
    local out = read(log)
    assert.matches(id .. ' "sleep=3"%s+attempt 1, 3%.%d s, %d+ renewals, ack: ok', out)
    assert.matches("stopped by signal TERM\nrc=0\n$", out)
    os.remove(log)
    os.remove(pidfile)
  end)

  it("run the exactly-once worker (exactly-once/worker.lua): a fenced effect per message", function()
    local topic, group = subscribed("ex_once")
    local p = env.producer { topics = { topic } }
    for i = 1, 3 do assert(p:send(topic, tostring(i))) end
    p:close()
    local rc, out = example("exactly-once/worker.lua",
      ("%s %s %s 127.0.0.1:%d"):format(env.endpoints, group, topic, env.redis_port), "RUN_FOR=8")
    assert.equal(0, rc, out)
    assert.matches("received 3, acked 3, duplicates skipped 0", out, 1, true)
  end)
end)
