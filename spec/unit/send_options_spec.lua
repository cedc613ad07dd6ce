-- producer:send's options, without a server: a FIFO message (message_group) and a
-- DELAY message (delay or deliver_at) are checked by name, and the combinations no
-- broker accepts are refused before anything is sent.
local config = require "mqlease.config"

local function refused(opts, pattern)
  local ok, err = pcall(config.check_send, "t", "body", opts)
  assert.is_false(ok, "accepted: " .. pattern)
  assert.matches(pattern, err)
end

describe("send options", function()
  it("accepts a message group, a delay and a delivery time, each alone", function()
    assert.same({ message_group = "order-1" }, config.check_send("t", "x", { message_group = "order-1" }))
    assert.same({ delay = 2.5 }, config.check_send("t", "x", { delay = 2.5 }))
    assert.same({ deliver_at = 1.9e9 }, config.check_send("t", "x", { deliver_at = 1.9e9 }))
    assert.same({ message_group = ("g"):rep(64) }, config.check_send("t", "x", { message_group = ("g"):rep(64) }))
  end)

  it("refuses bad values, naming the option", function()
    refused({ message_group = "" }, "option 'message_group' must be a non%-blank string of at most 64 bytes")
    refused({ message_group = "   " }, "option 'message_group'")
    refused({ message_group = ("g"):rep(65) }, "option 'message_group'")
    refused({ message_group = 7 }, "option 'message_group'")
    refused({ delay = 0 }, "option 'delay' must be seconds, more than 0")
    refused({ delay = -1 }, "option 'delay'")
    refused({ delay = 0 / 0 }, "option 'delay'")
    refused({ delay = math.huge }, "option 'delay'")
    refused({ delay = "5" }, "option 'delay'")
    refused({ deliver_at = 0 }, "option 'deliver_at' must be epoch seconds")
    refused({ deliver_at = 1e300 }, "option 'deliver_at'")
  end)

  -- RocketMQ stores a message's keys joined by a space (MessageConst.KEY_SEPARATOR,
  -- Message.setKeys): a key holding whitespace would reach every other client as
  -- two keys, and a lookup by the whole key would find nothing
  it("refuses a key with whitespace in it, naming the option", function()
    assert.same({ keys = { "order-1", "k2" } }, config.check_send("t", "x", { keys = { "order-1", "k2" } }))
    refused({ keys = "order 1" }, "option 'keys' must hold keys without whitespace %(RocketMQ joins keys with a space")
    refused({ keys = { "ok", "a\tb" } }, "option 'keys' must hold keys without whitespace")
    refused({ keys = { "line\nbreak" } }, "option 'keys'")
    refused({ keys = { " " } }, "option 'keys'")
  end)

  it("refuses a message that would be FIFO and DELAY at once, or timed twice", function()
    refused({ message_group = "g", delay = 1 }, "options 'message_group' and 'delay' exclude each other")
    refused({ message_group = "g", deliver_at = 1.9e9 }, "options 'message_group' and 'deliver_at' exclude each other")
    refused({ delay = 1, deliver_at = 1.9e9 }, "options 'delay' and 'deliver_at' exclude each other")
  end)

  it("accepts a priority from 0 up alone, and refuses a bad one or one with a group or a delay", function()
    assert.same({ priority = 0 }, config.check_send("t", "x", { priority = 0 }))
    assert.same({ priority = 7, tag = "a" }, config.check_send("t", "x", { priority = 7, tag = "a" }))
    assert.same({ priority = 2147483647 }, config.check_send("t", "x", { priority = 2147483647 }))
    refused({ priority = -1 }, "option 'priority' must be an integer from 0 to 2147483647, higher first")
    refused({ priority = 1.5 }, "option 'priority'")
    refused({ priority = 2147483648 }, "option 'priority'")
    refused({ priority = "1" }, "option 'priority'")
    refused({ priority = 0 / 0 }, "option 'priority'")
    refused({ priority = 1, message_group = "g" }, "options 'priority' and 'message_group' exclude each other")
    refused({ priority = 1, delay = 1 }, "options 'priority' and 'delay' exclude each other")
    refused({ priority = 1, deliver_at = 1.9e9 }, "options 'priority' and 'deliver_at' exclude each other")
  end)

  it("checks recall's arguments, naming the bad one", function()
    assert.is_nil(config.check_recall("t", "aGFuZGxl"))
    assert.matches("bad argument #2 to 'recall' %(recall handle: a non%-blank string expected",
      select(2, pcall(config.check_recall, "t", " ")))
    assert.matches("bad argument #2 to 'recall'", select(2, pcall(config.check_recall, "t", nil)))
    assert.matches("bad argument #1 to 'recall' %(topic", select(2, pcall(config.check_recall, "a b", "h")))
  end)

  it("names the new options among the known ones", function()
    refused({ group = "g" }, "unknown option 'group' %(known: delay, deliver_at, keys, lite_topic, message_group, priority, properties, tag, trace_context%)")
  end)

  it("accepts a W3C traceparent as trace_context, with a message group or a delay too", function()
    local tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert.same({ trace_context = tp }, config.check_send("t", "x", { trace_context = tp }))
    assert.same({ trace_context = tp, message_group = "g" },
      config.check_send("t", "x", { trace_context = tp, message_group = "g" }))
    assert.same({ trace_context = tp:sub(1, -3) .. "00", delay = 1 },
      config.check_send("t", "x", { trace_context = tp:sub(1, -3) .. "00", delay = 1 }))
  end)

  it("refuses a trace_context that is not a version 00 traceparent, naming the option and the fault", function()
    local trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    local function tp(v, t, p, f) return ("%s-%s-%s-%s"):format(v, t, p, f) end
    local cases = {
      { 7, "a string is expected" },
      { "", "it is not four '%-'%-separated hex fields" },
      { "traceparent", "it is not four '%-'%-separated hex fields" },
      { tp("00", trace_id, parent_id, "01") .. "-x", "it is not four '%-'%-separated hex fields" },
      { tp("00", trace_id:gsub("b", "g"), parent_id, "01"), "it is not four '%-'%-separated hex fields" },
      { tp("01", trace_id, parent_id, "01"), "the version must be 00" },
      { tp("ff", trace_id, parent_id, "01"), "the version must be 00" },
      { tp("00", trace_id:sub(2), parent_id, "01"), "the trace%-id must be 32 hex digits" },
      { tp("00", trace_id, parent_id .. "0", "01"), "the parent%-id must be 16 hex digits" },
      { tp("00", trace_id:upper(), parent_id, "01"), "hex digits must be lowercase" },
      { tp("00", trace_id, parent_id, "0A"), "hex digits must be lowercase" },
      { tp("00", ("0"):rep(32), parent_id, "01"), "the trace%-id must not be all zeros" },
      { tp("00", trace_id, ("0"):rep(16), "01"), "the parent%-id must not be all zeros" },
    }
    for _, case in ipairs(cases) do
      refused({ trace_context = case[1] },
        "mqlease%.send: option 'trace_context' must be a W3C traceparent, 00%-<trace%-id: 32 hex>%-<parent%-id: 16 hex>%-<flags: 2 hex>: "
        .. case[2])
    end
  end)
end)

-- What producer:send hands the core for a deliver_at: the core (lmqlease.c l_send) sends a
-- DELAY message with delivery_timestamp = deliver_at_ms only when deliver_at_ms > 0
-- (mql_producer.c), and 0 is protobuf's default. A positive deliver_at under half a
-- millisecond rounded to 0 and went out as a NORMAL message with no delivery time (a DELAY
-- topic's proxy refuses or mis-files it). A time in the past means "deliver now" to RocketMQ,
-- so such a time goes out as one of at least 1 ms. A real mqlease.producer over a stand-in
-- core client and router; no server.
describe("producer:send's deliver_at as the core gets it", function()
  local producer_mod = require "mqlease.producer"
  local fakes = require "support.transaction_fakes"

  -- a real producer whose stand-in core records each send's arguments (calls[i]) and answers it at once
  local function stand_in()
    local p = fakes.real_producer(producer_mod)
    return p, p.sends
  end

  it("sends every positive deliver_at as a delivery time of at least 1 ms, never as 0 (no DELAY)", function()
    local p, calls = stand_in()
    local tiny = { 1e-3 / 2 - 1e-9, 4e-4, 1e-4, 1e-9, 5e-324 }
    for i, at in ipairs(tiny) do
      assert.equal("MID" .. i, (p:send("B", "x", { deliver_at = at })))
      assert.equal(1, calls[i].deliver_at_ms, ("deliver_at = %.17g went to the core as %s ms"):format(
        at, tostring(calls[i].deliver_at_ms)))
    end
    -- send_many's messages take the same path
    assert(p:send_many("B", { { body = "y", deliver_at = 1e-4 } }))
    assert.equal(1, calls[#calls].deliver_at_ms)
  end)

  it("keeps the rounding to the millisecond of every other deliver_at", function()
    local p, calls = stand_in()
    for i, case in ipairs({ { 0.0006, 1 }, { 0.0015, 2 }, { 1.5, 1500 }, { 1.9e9, 1.9e12 },
      { 1700000000.1234, 1700000000123 }, { 1700000000.9996, 1700000001000 } }) do
      assert(p:send("B", "x", { deliver_at = case[1] }))
      assert.equal(case[2], calls[i].deliver_at_ms, "deliver_at = " .. case[1])
      assert.is_nil(calls[i].delay_ms)
    end
    -- no deliver_at: no delivery time at all
    assert(p:send("B", "x"))
    assert.is_nil(calls[#calls].deliver_at_ms)
  end)
end)
