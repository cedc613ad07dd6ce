-- Trace context on the real RocketMQ 5.2.0: a W3C traceparent sent as
-- SystemProperties.trace_context (p:send's trace_context, `mqlease send
-- --trace-context` and the field of a --json line) arrives as exactly that
-- m.trace_context, apart from the user properties; a handler continues the
-- trace with mqlease.trace.child on the messages it sends onward.
local mqlease = require "mqlease"
local trace = require "mqlease.trace"
local env = require "support.env"

local CMD = "env -u LD_PRELOAD lua5.4 bin/mqlease"   -- as integration/cli_spec: the command as a user runs it

local TP1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
local TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"

-- Receives until every id in `ids` came (acking each); returns them by id.
local function receive_ids(c, ids, timeout)
  local want, by_id = {}, {}
  for _, id in ipairs(ids) do want[id] = true end
  env.collect(c, timeout or 30, function(m)
    if want[m.id] then by_id[m.id] = m end
    assert(m:ack())
  end, function()
    for id in pairs(want) do if not by_id[id] then return false end end
    return true
  end)
  for _, id in ipairs(ids) do assert.is_userdata(by_id[id], "message " .. id .. " never came") end
  return by_id
end

local function joined(topic, base)
  local c = env.consumer { group = env.name(base), topic = topic, invisible = 30, await = 5 }
  assert(c:receive(1, { await = 0 }))   -- a new group starts at the queue's end: join first
  return c
end

describe("trace context on RocketMQ 5.2.0", function()
  local topic, onward
  setup(function() topic, onward = env.topics("trace_a", "trace_b") end)

  it("delivers the trace_context a producer sent as exactly that m.trace_context", function()
    local c = joined(topic, "g_trace_a")
    local p = env.producer { topics = { topic } }
    local id1 = assert(p:send(topic, "one", { trace_context = TP1, properties = { a = "b" } }))
    local id2 = assert(p:send(topic, "two", { trace_context = TP2, tag = "t2", keys = "k2" }))
    local id3 = assert(p:send(topic, "three"))
    p:close()
    local got = receive_ids(c, { id1, id2, id3 })
    c:close()
    assert.equal(TP1, got[id1].trace_context)
    assert.equal(TP2, got[id2].trace_context)
    assert.equal(TP2, got[id2]:totable().trace_context)
    assert.is_nil(got[id3].trace_context)
    -- the proxy stores it as the message property TRACE_CONTEXT, and 5.2.0 lists
    -- that property among the user properties it delivers too
    assert.same({ a = "b", TRACE_CONTEXT = TP1 }, got[id1].properties)
    assert.same({ TRACE_CONTEXT = TP2 }, got[id2].properties)
    assert.same({}, got[id3].properties)
  end)

  it("takes a TRACE_CONTEXT user property as the trace context, unless trace_context is given", function()
    -- what a handler that copies m.properties onward sends: the old trace context
    local c = joined(topic, "g_trace_e")
    local p = env.producer { topics = { topic } }
    local copied = assert(p:send(topic, "copied", { properties = { TRACE_CONTEXT = TP2 } }))
    local both = assert(p:send(topic, "both", { properties = { TRACE_CONTEXT = TP2 }, trace_context = TP1 }))
    p:close()
    local got = receive_ids(c, { copied, both })
    c:close()
    assert.equal(TP2, got[copied].trace_context)
    assert.equal(TP1, got[both].trace_context)
    assert.same({ TRACE_CONTEXT = TP1 }, got[both].properties)
  end)

  it("lets a handler continue the trace: the onward message has the trace-id and the handler's span id", function()
    local c = joined(topic, "g_trace_b")
    local c2 = joined(onward, "g_trace_c")
    local p = env.producer { topics = { topic, onward } }
    local id = assert(p:send(topic, "start", { trace_context = TP1 }))
    local m = receive_ids(c, { id })[id]
    local child = trace.child(m.trace_context)
    local next_id = assert(p:send(onward, "next", { trace_context = child }))
    p:close()
    local n = receive_ids(c2, { next_id })[next_id]
    c:close()
    c2:close()
    assert.equal(child, n.trace_context)
    local parent, got = trace.parse(TP1), trace.parse(n.trace_context)
    assert.equal(parent.trace_id, got.trace_id)
    assert.equal(parent.flags, got.flags)
    assert.not_equal(parent.parent_id, got.parent_id)
  end)

  it("sends --trace-context and a --json line's trace_context from the command, and refuses a bad one", function()
    local c = joined(topic, "g_trace_d")
    local out = env.sh(("%s send --topic %s --quiet --trace-context %s flagged"):format(CMD, topic, TP1))
    local flagged = out:match("^(%x+)\n$")
    assert.is_string(flagged, out)
    local line = ('{"body":"json","trace_context":"%s"}'):format(TP2)
    out = env.sh(("echo '%s' | %s send --topic %s --quiet --json --trace-context %s"):format(line, CMD, topic, TP1))
    local from_json = out:match('"id":"(%x+)"')
    assert.is_string(from_json, out)
    local got = receive_ids(c, { flagged, from_json })
    c:close()
    assert.equal(TP1, got[flagged].trace_context)
    assert.equal("flagged", got[flagged].body)
    assert.equal(TP2, got[from_json].trace_context, "the line's field wins over the flag")

    local p = assert(io.popen(("%s send --topic %s --trace-context %s x 2>&1; echo rc=$?"):format(CMD, topic, TP1:upper())))
    local text = p:read("a")
    p:close()
    assert.matches("option '--trace-context': option 'trace_context' must be a W3C traceparent", text, 1, true)
    assert.matches("rc=2", text, 1, true)
  end)
end)
