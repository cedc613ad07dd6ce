-- producer:begin's options and the producer's checker option, without a server:
-- send's message options apply, the ones that make another message type are
-- refused by name, and recovery is whole seconds.
local config = require "mqlease.config"

local function refused(opts, pattern)
  local ok, err = pcall(config.check_begin, "t", "body", opts)
  assert.is_false(ok, "accepted: " .. pattern)
  assert.matches(pattern, err)
end

describe("begin options", function()
  it("accepts send's tag, keys, properties and trace context, and recovery", function()
    local opts = { tag = "T", keys = { "k" }, properties = { a = "1" }, recovery = 30,
      trace_context = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" }
    assert.equal(opts, config.check_begin("t", "x", opts))
    assert.same({}, config.check_begin("t", "x"))
  end)

  it("refuses what makes a FIFO or DELAY message, a bad recovery and unknown options", function()
    refused({ message_group = "g" }, "option 'message_group' makes a FIFO message")
    refused({ delay = 5 }, "option 'delay' makes a DELAY message")
    refused({ deliver_at = 1.9e9 }, "option 'deliver_at' makes a DELAY message")
    refused({ recovery = 0 }, "option 'recovery' must be whole seconds between 1 and 2592000")
    refused({ recovery = 1.5 }, "option 'recovery'")
    refused({ recovery = "10" }, "option 'recovery'")
    refused({ tag = "a|b" }, "option 'tag'")
    refused({ nope = 1 }, "unknown option 'nope' %(known: keys, properties, recovery, tag, trace_context%)")
  end)

  it("refuses a bad topic, body or options table, naming the argument", function()
    assert.error_matches(function() config.check_begin("bad topic", "x") end, "bad argument #1 to 'begin'")
    assert.error_matches(function() config.check_begin("t", 7) end, "bad argument #2 to 'begin'")
    assert.error_matches(function() config.check_begin("t", "x", "opts") end, "bad argument #3 to 'begin'")
  end)

  it("takes a function or a callable table as the producer's checker, nothing else", function()
    assert.is_function(config.producer_options({ endpoints = "h:1", checker = function() end }).checker)
    local callable = setmetatable({}, { __call = function() return "unknown" end })
    assert.equal(callable, config.producer_options({ endpoints = "h:1", checker = callable }).checker)
    assert.error_matches(function() config.producer_options({ endpoints = "h:1", checker = "commit" }) end,
      "option 'checker' must be a function")
  end)
end)
