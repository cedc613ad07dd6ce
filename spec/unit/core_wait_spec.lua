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
