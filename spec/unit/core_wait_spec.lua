-- core.wait and core.poll, the waits of a plain script and of the scheduler:
-- a timeout that is no number of seconds raises naming it. A NaN was cast to
-- an int (undefined behaviour; in practice a wait for ever).
local core = require "mqlease.core"

describe("core.wait and core.poll", function()
  -- a descriptor not open: poll answers it at once (POLLNVAL), whatever the timeout
  local NOT_OPEN = 987654

  it("core.wait raises on a NaN timeout", function()
    assert.has_error(function() core.wait(NOT_OPEN, 0 / 0) end)
    local ok, err = pcall(core.wait, NOT_OPEN, 0 / 0)
    assert.is_false(ok)
    assert.matches("timeout", tostring(err))
  end)

  it("core.poll raises on a NaN timeout", function()
    local ok, err = pcall(core.poll, { NOT_OPEN }, 0 / 0)
    assert.is_false(ok)
    assert.matches("timeout", tostring(err))
  end)

  it("takes a timeout past what an int holds, math.huge too, as no limit", function()
    assert.is_true(core.wait(NOT_OPEN, math.huge))
    assert.same({ NOT_OPEN }, core.poll({ NOT_OPEN }, 1e12))
  end)
end)

-- core.sleep and mqlease.sleep: seconds that are no number raise naming
-- them. A NaN was cast to a time_t (undefined behaviour: at once in practice,
-- outside mqlease.run; inside it, a scheduler error that named no sleep).
describe("core.sleep and mqlease.sleep", function()
  it("core.sleep raises on NaN and returns at once for 0 or less", function()
    local ok, err = pcall(core.sleep, 0 / 0)
    assert.is_false(ok)
    assert.matches("NaN", tostring(err))
    local t0 = core.now()
    core.sleep(-5)
    core.sleep(0)
    assert.is_true(core.now() - t0 < 0.5)
  end)

  it("mqlease.sleep names itself for NaN or no number, in a plain script and in mqlease's scheduler", function()
    local mqlease = require "mqlease"
    for _, bad in ipairs({ 0 / 0, "1", {} }) do
      local ok, err = pcall(mqlease.sleep, bad)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'sleep'", tostring(err))
    end
    local s = require("mqlease.scheduler").new()
    local raised
    s:spawn(function()
      local ok, err = pcall(mqlease.sleep, 0 / 0)
      raised = not ok and tostring(err)
    end)
    s:loop()
    assert.matches("bad argument #1 to 'sleep'", raised)
  end)
end)
