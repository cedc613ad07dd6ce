-- mqlease.trace: the W3C traceparent a message carries as trace_context, and
-- the child span context a handler passes on to the messages it sends.
local trace = require "mqlease.trace"
local mqlease = require "mqlease"

local TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

describe("mqlease.trace", function()
  it("is mqlease.trace", function()
    assert.equal(trace, mqlease.trace)
  end)

  it("parses a traceparent into its four fields", function()
    assert.same({ version = "00", trace_id = "4bf92f3577b34da6a3ce929d0e0e4736",
      parent_id = "00f067aa0ba902b7", flags = "01" }, trace.parse(TP))
    local t, why = trace.parse(TP:upper())
    assert.is_nil(t)
    assert.equal("hex digits must be lowercase", why)
  end)

  it("gives a child the parent's trace-id and flags and a new, valid parent-id", function()
    local seen = {}
    for _, flags in ipairs({ "01", "00" }) do
      local parent = TP:sub(1, -3) .. flags
      for _ = 1, 50 do
        local child = trace.child(parent)
        local c = assert(trace.parse(child))
        assert.equal("4bf92f3577b34da6a3ce929d0e0e4736", c.trace_id)
        assert.equal(flags, c.flags)
        assert.not_equal("00f067aa0ba902b7", c.parent_id)
        assert.is_nil(seen[c.parent_id], "a span id came twice")
        seen[c.parent_id] = true
      end
    end
  end)

  it("takes the child's span id when given one, and refuses a bad one or a bad parent", function()
    assert.equal("00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01", trace.child(TP, "b7ad6b7169203331"))
    for _, bad in ipairs({ "B7AD6B7169203331", "b7ad6b716920333", ("0"):rep(16), 42 }) do
      local ok, err = pcall(trace.child, TP, bad)
      assert.is_false(ok)
      assert.matches("span_id must be 16 lowercase hex digits", err, 1, true)
    end
    local ok, err = pcall(trace.child, "00-abc-01")
    assert.is_false(ok)
    assert.matches("mqlease.trace.child: not a traceparent (it is not four '-'-separated hex fields): 00-abc-01", err, 1, true)
    ok, err = pcall(trace.child, nil)
    assert.is_false(ok)
    assert.matches("not a traceparent (a string is expected)", err, 1, true)
  end)

  it("starts a new trace, sampled unless told otherwise", function()
    local a, b = assert(trace.parse(trace.new())), assert(trace.parse(trace.new(false)))
    assert.equal("01", a.flags)
    assert.equal("00", b.flags)
    assert.not_equal(a.trace_id, b.trace_id)
  end)
end)
