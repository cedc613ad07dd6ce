-- The mqlease command, driven as a subprocess against the real broker and
-- Redis: send from stdin, peek without consuming, run a handler file until
-- SIGTERM (counts, exit code, drain), /metrics as Prometheus text, bad flags.
local mqlease = require "mqlease"
local socket_http = require "socket.http"
local env = require "support.env"
local prom = require "support.prom"
local read, wait_for, count = env.read, env.wait_for, env.count

local command = require "support.command"
local CMD, words, start, write_file = command.CMD, command.words, command.start, command.write_file

-- Runs the command to its end; returns exit code, stdout, stderr.
local function cli(args, stdin, prefix)
  local out, err, input = os.tmpname(), os.tmpname(), os.tmpname()
  local f = assert(io.open(input, "w"))
  f:write(stdin or "")
  f:close()
  local p = assert(io.popen(("%s %s %s <%s >%s 2>%s; echo $?"):format(prefix or "", CMD, words(args), input, out, err)))
  local rc = tonumber(p:read("a"):match("%d+"))
  p:close()
  local o, e = read(out), read(err)
  os.remove(out); os.remove(err); os.remove(input)
  return rc, o, e
end

local function scrape(port, path)
  local body, status = socket_http.request(("http://127.0.0.1:%d%s"):format(port, path or "/metrics"))
  return body, status
end

-- The counts of the summary line.
local function summary_of(stderr)
  local line = stderr:match("mqlease run: stopped [^\n]*")
  if not line then return nil end
  local s = {}
  for k, v in line:gmatch("(%a+) (%d+)") do s[k] = tonumber(v) end
  return s, line
end

-- Subscribes the group, so that what is sent next is delivered to it.
local function subscribe(group, topic)
  local c = env.consumer { group = group, topic = topic }
  assert(c:receive(1, { await = 0 }))
  c:close()
end

describe("the mqlease command", function()
  local producer
  setup(function() producer = env.producer() end)
  teardown(function() producer:close() end)

  it("sends each line of stdin as one message, prints the ids, and a consumer receives exactly those", function()
    local topic = env.topic("cli_send")
    local group = env.name("g_cli_send")
    subscribe(group, topic)
    local rc, out, err = cli({ "send", "--topic", topic, "--tag", "cli", "--key", "k1", "--prop", "color=blue" },
      "one\ntwo\n\nthree\n")
    assert.equal(0, rc, err)
    local ids = {}
    for id in out:gmatch("(%x+)\n") do ids[#ids + 1] = id end
    assert.equal(3, #ids, out)
    assert.matches("3 sent to " .. topic, err, 1, true)

    local c = env.consumer { group = group, topic = topic }
    local got = env.collect(c, 30, function(m) m:ack() end, function(all) return #all >= 3 end)
    c:close()
    assert.equal(3, #got)
    local by_id = {}
    for _, m in ipairs(got) do by_id[m.id] = m end
    for i, body in ipairs({ "one", "two", "three" }) do
      local m = by_id[ids[i]]
      assert.is_truthy(m, "message " .. ids[i] .. " not received")
      assert.equal(body, m.body)
      assert.equal("cli", m.tag)
      assert.same({ "k1" }, m.keys)
      assert.equal("blue", m.properties.color)
    end
  end)

  it("sends BODY and --file as one message each, with a progress line when asked", function()
    local topic = env.topic("cli_send")
    local rc, out, err = cli({ "send", "--topic", topic, "--progress", "0.000001", "just this" })
    assert.equal(0, rc, err)
    assert.equal(1, count(out, "%x+\n"))
    assert.matches("mqlease send: 1 sent %(", err)
    local path = write_file("line 1\nline 2\n")
    rc, out, err = cli({ "send", "--topic", topic, "--file", path, "--quiet" })
    os.remove(path)
    assert.equal(0, rc, err)
    assert.equal(1, count(out, "%x+\n"))
    assert.equal("", err)
  end)

  it("peeks without consuming: prints the messages, and they are delivered again afterwards", function()
    local topic = env.topic("cli_peek")
    local group = env.name("g_cli_peek")
    subscribe(group, topic)
    local ids = {
      (assert(producer:send(topic, "first\tpeek", { tag = "p", keys = { "a", "b" } }))),
      (assert(producer:send(topic, "second peek"))),
    }
    local rc, out, err = cli({ "peek", "--topic", topic, "--group", group, "-n", "2", "--wait", "10" })
    assert.equal(0, rc, err)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.equal(2, #lines, out)
    local text = table.concat(lines, "\n")
    for _, id in ipairs(ids) do assert.matches(id .. "\tattempt=1\t", text, 1, true) end
    assert.matches('tag=p\tkeys=a,b\tprops=-\tbody="first\\tpeek"', text, 1, true)

    local c = env.consumer { group = group, topic = topic }
    local got = env.collect(c, 30, function(m) m:ack() end, function(all) return #all >= 2 end)
    c:close()
    local again = {}
    for _, m in ipairs(got) do again[m.id] = m.delivery_attempt end
    for _, id in ipairs(ids) do
      assert.equal(2, again[id], "peeked message " .. id .. " delivered again as attempt 2")
    end
  end)

  it("speaks newline-delimited JSON with --json: send reads objects and prints ids, peek prints every field", function()
    local cjson = require "cjson"
    local topic = env.topic("cli_json")
    local group = env.name("g_cli_json")
    subscribe(group, topic)
    local rc, out, err = cli({ "send", "--json", "--quiet", "--topic", topic, "--tag", "flag" },
      '{"body":"j1","keys":["a"],"properties":{"p":"1"}}\n{"body":"j2","tag":"own"}\n')
    assert.equal(0, rc, err)
    local sent = {}
    for line in out:gmatch("[^\n]+") do sent[#sent + 1] = cjson.decode(line) end
    assert.equal(2, #sent, out)
    assert.matches("^%x+$", sent[1].id)
    assert.is_number(sent[1].offset)

    rc, out, err = cli({ "peek", "--json", "--topic", topic, "--group", group, "-n", "2", "--wait", "10" })
    assert.equal(0, rc, err)
    local got = {}
    for line in out:gmatch("[^\n]+") do
      local m = cjson.decode(line)
      got[m.id] = m
    end
    local m1, m2 = got[sent[1].id], got[sent[2].id]
    assert.is_table(m1, out)
    assert.is_table(m2, out)
    assert.equal("j1", m1.body)
    assert.equal("flag", m1.tag)
    assert.same({ "a" }, m1.keys)
    assert.same({ p = "1" }, m1.properties)
    assert.equal(topic, m1.topic)
    assert.equal(1, m1.delivery_attempt)
    assert.equal("own", m2.tag)

    -- a bad line stops the send with exit code 2 and the library's message
    rc, out, err = cli({ "send", "--json", "--quiet", "--topic", topic }, '{"body":"ok"}\n{"body":"x","tag":"a|b"}\n')
    assert.equal(2, rc)
    assert.equal(1, count(out, "\n"))
    assert.matches("message 2: option 'tag' must be a non-blank string without '|'", err, 1, true)
  end)

  it("prints its version", function()
    local rc, out = cli({ "--version" })
    assert.equal(0, rc)
    assert.equal("mqlease " .. mqlease._VERSION .. " (Lua 5.4)\n", out)
  end)

  it("runs a handler file until SIGTERM: serves /metrics, logs each failure, drains the running handler, exits 0 with a summary", function()
    local topic = env.topic("cli_run")
    local group = env.name("g_cli_run")
    subscribe(group, topic)
    local log = os.tmpname()
    local handler = write_file(([[
local mqlease = require "mqlease"
local log = assert(io.open(%q, "a"))
log:setvbuf("line")
return function(m)
  log:write("start ", m.id, " ", m.body, "\n")
  if m.body == "slow" then mqlease.sleep(2) end
  log:write("done ", m.id, " ", m.body, "\n")
  if m.body == "fail" then return nil, "failing on purpose" end
  return true
end
]]):format(log))
    local h = start({ "run", handler, "--topic", topic, "--group", group, "--metrics", "127.0.0.1:0",
      "--grace", "10", "--concurrency", "4" })
    finally(function() h.cleanup(); os.remove(handler); os.remove(log) end)
    local port = h.metrics_port()

    assert(producer:send(topic, "ok 1"))
    assert(producer:send(topic, "ok 2"))
    local fail_id = assert(producer:send(topic, "fail"))
    wait_for(function() return count(read(log), "done %x+ ok") >= 2 end, 30, "both ok messages handled")
    wait_for(function() return h.stderr():find("handler failed for " .. fail_id, 1, true) end, 30, "the failure's log line")

    -- /metrics while it runs: valid Prometheus text with the acks and the nack in
    -- it. The failure's log line is written before its nack goes out, so the
    -- nack is waited for too, not read at the first scrape that shows the acks.
    local samples
    wait_for(function()
      local body, status = scrape(port)
      assert.equal(200, status)
      samples = select(2, prom.parse(body))
      return (prom.value(samples, "mqlease_acks_total", '{result="ok"}') or 0) >= 2
        and (prom.value(samples, "mqlease_nacks_total", '{result="ok"}') or 0) >= 1
    end, 10, "two acks and the nack in /metrics")
    assert.is_true(prom.value(samples, "mqlease_messages_received_total", "") >= 3)
    local _, status = scrape(port, "/other")
    assert.equal(404, status)

    -- a handler still running at SIGTERM finishes and is acked before the exit
    local slow_id = assert(producer:send(topic, "slow"))
    wait_for(function() return read(log):find("start " .. slow_id, 1, true) end, 30, "the slow handler's start")
    h.term()
    assert.equal(0, h.wait(20))
    assert.matches("done " .. slow_id .. " slow", read(log), 1, true)

    local s, line = summary_of(h.stderr())
    assert.is_truthy(s, h.stderr())
    assert.matches("stopped (signal TERM)", line, 1, true)
    assert.equal(3, s.acked, line)
    assert.equal(s.failed, count(h.stderr(), "handler failed for "), "one log line per failure")
    assert.is_true(s.failed >= 1)
    assert.equal(s.acked + s.nacked + s.drained + s.skipped, s.received, line)
  end)

  it("runs a handler file returning {handler=, policy=, on_error=}: its policy and on_error are used", function()
    local topic = env.topic("cli_run_table")
    local group = env.name("g_cli_run_table")
    subscribe(group, topic)
    local log = os.tmpname()
    local handler = write_file(([[
local mqlease = require "mqlease"
local log = assert(io.open(%q, "a"))
log:setvbuf("line")
return {
  handler = function(m)
    log:write("handled ", m.id, "\n")
    if m.body == "fail" then return nil, "no" end
    return true
  end,
  policy = function(m, lease, handler)
    log:write("policy ", m.id, "\n")
    return mqlease.policy.plain(m, lease, handler)
  end,
  on_error = function(m, err) log:write("on_error ", m.id, " ", tostring(err), "\n") end,
}
]]):format(log))
    local h = start({ "run", handler, "--topic", topic, "--group", group })
    finally(function() h.cleanup(); os.remove(handler); os.remove(log) end)
    local ok_id = assert(producer:send(topic, "ok"))
    local fail_id = assert(producer:send(topic, "fail"))
    wait_for(function() return read(log):find("on_error " .. fail_id .. " no", 1, true) end, 30, "on_error")
    wait_for(function() return read(log):find("handled " .. ok_id, 1, true) end, 30, "the ok message")
    h.term()
    assert.equal(0, h.wait(20))
    local text = read(log)
    assert.equal(count(text, "handled "), count(text, "policy "), "every message went through the file's policy")
    assert.is_nil(h.stderr():find("handler failed for", 1, true), "on_error replaces the default log line")
    local s = summary_of(h.stderr())
    assert.equal(1, s.acked)
    assert.equal(count(text, "on_error "), s.failed)
  end)

  it("runs with --policy exactly_once --redis: the done marker is set in Redis; --json writes the summary as an object", function()
    local topic = env.topic("cli_run_eo")
    local group = env.name("g_cli_run_eo")
    subscribe(group, topic)
    local log = os.tmpname()
    local handler = write_file(([[
local log = assert(io.open(%q, "a"))
log:setvbuf("line")
return function(m) log:write("handled ", m.id, "\n") return true end
]]):format(log))
    local h = start({ "run", handler, "--topic", topic, "--group", group, "--policy", "exactly_once",
      "--redis", "127.0.0.1:" .. env.redis_port, "--json" })
    finally(function() h.cleanup(); os.remove(handler); os.remove(log) end)
    local id = assert(producer:send(topic, "once"))
    wait_for(function() return read(log):find("handled " .. id, 1, true) end, 30, "the handler")
    local r = mqlease.redis("127.0.0.1:" .. env.redis_port)
    wait_for(function() return r:call("EXISTS", mqlease.policy.keys(id).done) == 1 end, 10, "the done marker")
    h.term()
    assert.equal(0, h.wait(20))
    assert.equal(1, summary_of(h.stderr()).acked)
    local out = read(h.out)
    assert.matches("^{.*}\n$", out)
    local s = require("cjson").decode(out)
    assert.equal(1, s.acked)
    assert.equal(1, s.received)
    assert.equal("signal TERM", s.reason)
    assert.is_number(s.seconds)
    r:close()
  end)

  it("exits 143 when a handler outlives --grace after SIGTERM, and its message is given back", function()
    local topic = env.topic("cli_run_stuck")
    local group = env.name("g_cli_run_stuck")
    subscribe(group, topic)
    local log = os.tmpname()
    local handler = write_file(([[
local core = require "mqlease.core"
local log = assert(io.open(%q, "a"))
log:setvbuf("line")
return function(m)
  log:write("start ", m.id, "\n")
  core.sleep(60)   -- blocks the whole process: only the core's watcher can end it
  return true
end
]]):format(log))
    local h = start({ "run", handler, "--topic", topic, "--group", group, "--grace", "1" })
    finally(function() h.cleanup(); os.remove(handler); os.remove(log) end)
    local id = assert(producer:send(topic, "stuck"))
    wait_for(function() return read(log):find("start " .. id, 1, true) end, 30, "the stuck handler")
    h.term()
    assert.equal(143, h.wait(15))
    assert.matches("ran past its deadline; nacking held leases and exiting", h.stderr(), 1, true)
    -- given back, not left to expire: within 15 s, while its 30 s lease would still hide it
    local c = env.consumer { group = group, topic = topic }
    local got = env.collect(c, 15, function(m) m:ack() end, function(all) return #all >= 1 end)
    c:close()
    assert.equal(1, #got)
    assert.equal(id, got[1].id)
  end)

  it("exits 1 naming --metrics when its port is taken", function()
    local taken = assert(require("socket").bind("127.0.0.1", 0))
    local _, port = taken:getsockname()
    local handler = write_file("return function() return true end\n")
    local rc, _, err = cli({ "run", handler, "--group", "g", "--topic", "t", "--metrics", "127.0.0.1:" .. port })
    taken:close()
    os.remove(handler)
    assert.equal(1, rc)
    assert.matches("option '--metrics': cannot listen on 127.0.0.1:" .. port, err, 1, true)
  end)

  it("rejects bad flags and variables with exit code 2 and a message naming them", function()
    local rc, out, err = cli({ "run", "h.lua", "--group", "g", "--topic", "t", "--bogus" })
    assert.equal(2, rc)
    assert.equal("", out)
    assert.matches("unknown option '--bogus'", err, 1, true)
    local _
    rc, _, err = cli({ "peek", "--topic", "t", "--group", "g", "-n", "zero" })
    assert.equal(2, rc)
    assert.matches("option '-n/--count' must be an integer", err, 1, true)
    rc, _, err = cli({ "run", "h.lua", "--group", "g", "--topic", "t" }, nil, "MQLEASE_INVISIBLE=0.5")
    assert.equal(2, rc)
    assert.matches("MQLEASE_INVISIBLE: option 'invisible' must be a number between 1 and 43200, or \"auto\" (got 0.5)", err, 1, true)
    rc, _, err = cli({ "run", "h.lua", "--group", "g", "--topic", "t", "--policy", "exactly_once" })
    assert.equal(2, rc)
    assert.matches("option '--redis' is required with --policy exactly_once", err, 1, true)
    rc, _, err = cli({ "send", "hello" }, nil, "env -u MQLEASE_TOPIC")
    assert.equal(2, rc)
    assert.matches("option '--topic' is required (or set MQLEASE_TOPIC)", err, 1, true)
    rc, _, err = cli({ "frobnicate" })
    assert.equal(2, rc)
    assert.matches("unknown command 'frobnicate'", err, 1, true)
  end)

  it("exits 3 for a handler file that does not return a handler, before connecting", function()
    local handler = write_file("return 42\n")
    local rc, _, err = cli({ "run", handler, "--group", "g", "--topic", "t", "--endpoints", "127.0.0.1:1" })
    os.remove(handler)
    assert.equal(3, rc)
    assert.matches("must return a function or a table", err, 1, true)
  end)

  it("exits 1 when the broker cannot be reached, saying why", function()
    local rc, out, err = cli({ "send", "--endpoints", "127.0.0.1:1", "--topic", "t", "hello" })
    assert.equal(1, rc)
    assert.equal("", out)
    assert.matches("cannot start the producer: .*%(UNAVAILABLE%)", err)
  end)

  it("prints help for each subcommand with exit code 0", function()
    for _, name in ipairs({ "run", "send", "peek", "devbroker" }) do
      local rc, out = cli({ name, "--help" })
      assert.equal(0, rc)
      assert.matches("Usage: mqlease " .. name, out, 1, true)
    end
  end)
end)
