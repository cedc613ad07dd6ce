-- mqlease.retry: the delay before a failed message's next attempt, read from
-- the group's retry policy as the official clients read it
-- (ExponentialBackoffRetryPolicy, CustomizedBackoffRetryPolicy), and never
-- past what a nack may ask (12 h, the proxy's longest invisible duration).
local retry = require "mqlease.retry"

describe("mqlease.retry.delay", function()
  it("reads steps, the last one repeated", function()
    local p = { max_attempts = 4, steps = { 1, 5, 10 } }
    assert.same({ 1, 5, 10, 10 }, { retry.delay(p, 1), retry.delay(p, 2), retry.delay(p, 3), retry.delay(p, 4) })
  end)

  it("grows an exponential policy up to its max", function()
    local p = { initial = 1, max = 30, multiplier = 2 }
    assert.same({ 1, 2, 4, 30 }, { retry.delay(p, 1), retry.delay(p, 2), retry.delay(p, 3), retry.delay(p, 9) })
  end)

  it("caps an exponential policy at a max of 0, as the Java client does (a delay of 0)", function()
    -- ExponentialBackoffRetryPolicy.getNextAttemptDelay: min(initial * multiplier^(n-1), max)
    assert.equal(0, retry.delay({ initial = 1, max = 0, multiplier = 2 }, 5))
  end)

  it("never answers past 43200 s, which m:nack refuses", function()
    for _, case in ipairs({
      { "a step of a day", { steps = { 86400 } }, 1 },
      { "an exponential policy without a max", { initial = 1, multiplier = 10 }, 30 },
      { "one whose max is a day", { initial = 60, max = 86400, multiplier = 2 }, 20 },
    }) do
      local d = retry.delay(case[2], case[3])
      assert.is_true(d >= 0 and d <= 43200, case[1] .. ": " .. tostring(d))
    end
  end)

  it("falls back to 1, 2, 4 … 60 s without a policy", function()
    assert.same({ 1, 2, 4, 60 }, { retry.delay(nil, 1), retry.delay(nil, 2), retry.delay(nil, 3), retry.delay(nil, 10) })
  end)
end)
