-- The producer's in-flight options and send_many's arguments, without a server:
-- a bad max_inflight names the option, and a bad message of a batch raises
-- naming its index before anything is sent.
local mqlease = require "mqlease"
local config = require "mqlease.config"

local function raises(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "accepted: " .. pattern)
  assert.matches(pattern, err)
end

describe("producer option max_inflight", function()
  it("is an integer from 1 to 65536, and a bad one raises naming it", function()
    for _, bad in ipairs({ 0, -1, 1.5, 65537, "8" }) do
      raises("mqlease.producer: option 'max_inflight' must be", mqlease.producer,
        { endpoints = "127.0.0.1:1", max_inflight = bad })
    end
  end)

  it("defaults to 128 and keeps a good value", function()
    assert.equal(128, config.producer_options({ endpoints = "127.0.0.1:1" }).max_inflight)
    assert.equal(1, config.producer_options({ endpoints = "127.0.0.1:1", max_inflight = 1 }).max_inflight)
  end)
end)

describe("send_many arguments", function()
  it("takes body strings and tables of a body with send's options", function()
    local list = { "plain", { body = "tagged", tag = "T", keys = { "k1" } }, { body = "", message_group = "g" } }
    assert.equal(list, config.check_send_many("topic", list))
    assert.same({}, config.check_send_many("topic", {}))
  end)

  it("raises naming the bad message by its index", function()
    raises("message 2: field 'body' must be a string", config.check_send_many, "t", { "a", { tag = "T" } })
    raises("message 3 must be a body string or a table", config.check_send_many, "t", { "a", "b", 42 })
    raises("message 2: option 'tag' must be a non%-blank string", config.check_send_many, "t",
      { "a", { body = "b", tag = "x|y" } })
    raises("message 1: options 'message_group' and 'delay' exclude each other", config.check_send_many, "t",
      { { body = "b", message_group = "g", delay = 5 } })
    raises("message 1: unknown option 'colour'", config.check_send_many, "t", { { body = "b", colour = "red" } })
  end)

  it("raises on a bad topic or a list that is not a table", function()
    raises("bad argument #1 to 'send_many'", config.check_send_many, "no such topic!", {})
    raises("bad argument #2 to 'send_many'", config.check_send_many, "t", "body")
  end)
end)
