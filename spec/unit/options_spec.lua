-- Wrong options raise an error naming the option, before anything connects:
-- no server is needed (the endpoint below is never dialled).
local mqlease = require "mqlease"

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
    raises("option 'invisible' must be a number between 10 and 43200", function()
      mqlease.consumer(base { invisible = 5 })
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

  it("rejects a malformed group or topic name", function()
    raises("option 'topic' must be a name", function() mqlease.consumer(base { topic = "a b" }) end)
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
