-- Lite topics (RocketMQ 5.5) without a server: the send option lite_topic and the
-- consumer option lite_topics are checked by name before anything is sent.
local config = require "mqlease.config"

local function refused(opts, pattern)
  local ok, err = pcall(config.check_send, "t", "body", opts)
  assert.is_false(ok, "accepted: " .. pattern)
  assert.matches(pattern, err)
end

describe("lite topic options", function()
  it("accepts a lite topic name up to the proxy's 64 characters", function()
    assert.same({ lite_topic = "order-42" }, config.check_send("t", "x", { lite_topic = "order-42" }))
    assert.same({ lite_topic = ("l"):rep(64) }, config.check_send("t", "x", { lite_topic = ("l"):rep(64) }))
  end)

  it("refuses a bad lite topic, naming the option", function()
    refused({ lite_topic = "" }, "option 'lite_topic' must be a topic name of at most 64 characters")
    refused({ lite_topic = ("l"):rep(65) }, "option 'lite_topic'")
    refused({ lite_topic = "a b" }, "option 'lite_topic'")
    refused({ lite_topic = "a$b" }, "option 'lite_topic'")
    refused({ lite_topic = 7 }, "option 'lite_topic'")
  end)

  it("refuses a lite topic with a message group, a delay or a priority", function()
    refused({ lite_topic = "x", message_group = "g" }, "options 'lite_topic' and 'message_group' exclude each other")
    refused({ lite_topic = "x", delay = 1 }, "options 'lite_topic' and 'delay' exclude each other")
    refused({ lite_topic = "x", priority = 1 }, "options 'lite_topic' and 'priority' exclude each other")
  end)

  it("takes lite_topics on a consumer as an array of names", function()
    local base = { endpoints = "127.0.0.1:1", group = "g", topic = "t" }
    local function with(v)
      local o = {}
      for k, x in pairs(base) do o[k] = x end
      o.lite_topics = v
      return o
    end
    assert.same({ "a", "b" }, config.consumer_options(with({ "a", "b" })).lite_topics)
    assert.same({}, config.consumer_options(with({})).lite_topics)
    local ok, err = pcall(config.consumer_options, with("a"))
    assert.is_false(ok)
    assert.matches("lite_topics", err)
  end)
end)

describe("a lite consumer", function()
  it("raises on a bad name in lite_topics, naming the option", function()
    local mqlease = require "mqlease"
    local ok, err = pcall(mqlease.consumer, { endpoints = "127.0.0.1:1", group = "g", topic = "t",
      lite_topics = { "ok", "not ok" } })
    assert.is_false(ok)
    assert.matches("option 'lite_topics': option 'lite_topic' must be a topic name", err)
  end)
end)
