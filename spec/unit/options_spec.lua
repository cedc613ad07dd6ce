-- Wrong options raise an error naming the option, before anything connects:
-- no server is needed (the endpoint below is never dialled).
local mqlease = require "mqlease"
local config = require "mqlease.config"

local function raises(pattern, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, err)
end

local function base(extra)
  local o = { endpoints = "127.0.0.1:1", group = "g", topic = "t" }
  for k, v in pairs(extra) do o[k] = v end
  return o
end

describe("consumer options", function()
  it("names an unknown option", function()
    raises("unknown option 'invisibel'", function() mqlease.consumer(base { invisibel = 30 }) end)
  end)

  it("names a missing required option", function()
    raises("option 'group' is required", function()
      mqlease.consumer { endpoints = "127.0.0.1:1", topic = "t" }
    end)
  end)

  it("names an option of the wrong type", function()
    raises("option 'invisible' must be a number", function() mqlease.consumer(base { invisible = "30" }) end)
    raises("option 'renew' must be a boolean", function() mqlease.consumer(base { renew = 1 }) end)
  end)

  it("names an option out of range, with the range", function()
    raises("option 'invisible' must be a number between 1 and 43200, or \"auto\"", function()
      mqlease.consumer(base { invisible = 0.5 })
    end)
    raises("option 'batch' must be a number between 1 and 32", function() mqlease.consumer(base { batch = 64 }) end)
    raises("option 'on_budget' must be one of \"expire\", \"nack\"", function()
      mqlease.consumer(base { on_budget = "drop" })
    end)
  end)

  it("checks options against each other", function()
    raises("'renew_every' %(30%) must be less than 'invisible' %(30%)", function()
      mqlease.consumer(base { invisible = 30, renew_every = 30 })
    end)
    raises("'max_lease' %(20%) must be at least 'invisible' %(30%)", function()
      mqlease.consumer(base { invisible = 30, max_lease = 20 })
    end)
  end)

  -- The core keeps whole milliseconds: 1.0001 s and 1.0005 s are both 1000 ms,
  -- a period as long as the window, which left no time to renew before the deadline.
  it("compares renew_every with the window in the milliseconds the core keeps", function()
    raises("'renew_every' %(1.0001%) must be less than 'invisible' %(1.0005%)", function()
      config.consumer_options(base { invisible = 1.0005, renew_every = 1.0001 })
    end)
    raises("'renew_every' %(1.0001%) must be less than 'auto_invisible.min' %(1.0005%)", function()
      config.consumer_options(base { invisible = "auto", auto_invisible = { min = 1.0005 }, renew_every = 1.0001 })
    end)
    assert.equal(1.0009, config.consumer_options(base { invisible = 1.002, renew_every = 1.0009 }).renew_every)
  end)

  it("takes invisible = \"auto\" with bounds, and names a bad bound", function()
    raises("option 'invisible' must be a number between 1 and 43200, or \"auto\"", function()
      mqlease.consumer(base { invisible = "automatic" })
    end)
    raises("option 'auto_invisible' must be a table {min=, max=, margin=, start=}", function()
      mqlease.consumer(base { invisible = "auto", auto_invisible = 60 })
    end)
    raises("option 'auto_invisible' must be a table whose field 'margin' is a number between 1 and 100", function()
      mqlease.consumer(base { invisible = "auto", auto_invisible = { margin = 0.5 } })
    end)
    raises("option 'auto_invisible' must be a table with only min, max, margin, start %(unknown field 'p99'%)", function()
      mqlease.consumer(base { invisible = "auto", auto_invisible = { p99 = 3 } })
    end)
    raises("option 'auto_invisible' must be a table whose 'min' is at most its 'max'", function()
      mqlease.consumer(base { invisible = "auto", auto_invisible = { min = 120, max = 60 } })
    end)
    raises("option 'auto_invisible' needs 'invisible' = \"auto\" %(got 30%)", function()
      mqlease.consumer(base { invisible = 30, auto_invisible = { min = 10 } })
    end)
    raises("'renew_every' %(15%) must be less than 'auto_invisible.min' %(10%)", function()
      mqlease.consumer(base { invisible = "auto", renew_every = 15 })
    end)
    raises("'max_lease' %(300%) must be at least 'auto_invisible.max' %(600%)", function()
      mqlease.consumer(base { invisible = "auto", max_lease = 300 })
    end)
  end)

  it("fills the bounds of invisible = \"auto\" it was not given", function()
    local o = config.consumer_options { endpoints = "127.0.0.1:1", group = "g", topic = "t",
      invisible = "auto", auto_invisible = { max = 120 } }
    assert.same({ min = 10, max = 120, margin = 2, start = 30 }, o.auto_invisible)
  end)

  it("rejects a malformed group or topic name", function()
    raises("option 'topic' must be a name", function() mqlease.consumer(base { topic = "a b" }) end)
  end)

end)

describe("an option the core takes as a C string, with a NUL byte inside", function()
  -- config.consumer_options is what mqlease.consumer checks before it dials
  local function consumer_raises(pattern, extra)
    raises(pattern, function() config.consumer_options(base(extra)) end)
  end

  it("raises naming it, where the core cut it at the NUL ('filter' \"TagA\\0x\" subscribed to TagA)", function()
    consumer_raises("option 'filter' must be a string without a NUL byte", { filter = "TagA\0 || TagB" })
    -- "\0TagA" reached the core as "", which it takes for "*": every tag
    consumer_raises("option 'filter' must be a string without a NUL byte", { filter = "\0TagA" })
    consumer_raises("option 'namespace' must be a string without a NUL byte", { namespace = "prod\0x" })
    consumer_raises("option 'endpoints' must be host:port", { endpoints = "127.0.0.1\0junk:8081" })
    consumer_raises("option 'tls' must be a table whose field 'server_name' is a non%-empty string without a NUL byte",
      { tls = { server_name = "proxy.example\0.evil" } })
    raises("option 'topics' must be an array of strings without a NUL byte", function()
      config.producer_options { endpoints = "127.0.0.1:1", topics = { "T\0x" } }
    end)
    assert.matches("without a NUL byte", config.problem(config.consumer, "filter", "a\0b"))
  end)

  it("still takes the same strings without one", function()
    assert.is_nil(config.problem(config.consumer, "filter", "TagA || TagB"))
    assert.is_nil(config.problem(config.consumer, "namespace", "prod"))
    assert.equal("TagA || TagB", config.consumer_options(base { filter = "TagA || TagB" }).filter)
  end)
end)

describe("exactly_once options", function()
  it("checks the redis option when the policy is made, not at the first message", function()
    raises("option 'redis': .*must be host:port", function()
      mqlease.policy.exactly_once { redis = "localhost" }
    end)
    assert.is_function(mqlease.policy.exactly_once { redis = "127.0.0.1:6379" })
  end)
end)

describe("redis options", function()
  local redis = require "mqlease.redis"

  it("refuses a port the core would wrap or truncate (70000 dialled 4464, 4294967297 dialled 1) or 0", function()
    for _, address in ipairs({ "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:4294967297", "127.0.0.1:99999999999999999999" }) do
      raises("option 'address' must be host:port", function() redis.check(address) end)
    end
    raises("option 'cluster' must be a list of \"host:port\" strings %(entry 2", function()
      redis.check { cluster = { "127.0.0.1:7000", "127.0.0.1:70000" } }
    end)
    raises("option 'sentinels' must be a list", function()
      redis.check { sentinels = { "127.0.0.1:0" }, master = "m" }
    end)
    redis.check("127.0.0.1:65535")
    redis.check("127.0.0.1:1")
  end)

  it("refuses a db the core's int cannot hold (2^32 + 1 selected db 1) and a NaN timeout", function()
    for _, db in ipairs({ 2 ^ 32 + 1, 2 ^ 31, math.huge, 0 / 0 }) do
      raises("option 'db' must be an integer", function() redis.check { address = "127.0.0.1:1", db = db } end)
    end
    redis.check { address = "127.0.0.1:1", db = 2 ^ 31 - 1 }
    raises("option 'timeout' must be seconds", function() redis.check { address = "127.0.0.1:1", timeout = 0 / 0 } end)
    redis.check { address = "127.0.0.1:1", timeout = 60 }
  end)

  it("refuses a timeout under a millisecond, which the core took as none given (1 s)", function()
    raises("option 'timeout' must be seconds", function() redis.check { address = "127.0.0.1:1", timeout = 0.0005 } end)
    redis.check { address = "127.0.0.1:1", timeout = 0.001 }
  end)
end)
