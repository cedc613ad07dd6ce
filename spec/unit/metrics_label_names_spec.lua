-- Constant label names given to mqlease.metrics.text: Prometheus reserves
-- every label name that begins with "__" ("Label names beginning with __ (two
-- "_") are reserved for internal use", https://prometheus.io/docs/concepts/data_model/),
-- and __name__ is the metric name itself: a series labelled __name__="x"
-- carries that label twice, and the scrape that holds it is refused whole.
-- text() raises on such a name, as on any other name that is not a label's.
local mqlease = require "mqlease"

local function fake(raw)
  return { metrics = function() return raw end }
end

describe("mqlease.metrics.text's constant label names", function()
  local raw = { received = 1, inflight = 0, session_state = "ready" }

  it("refuses the names Prometheus reserves (two underscores first)", function()
    for _, name in ipairs({ "__name__", "__meta_x", "__", "___x" }) do
      local ok, err = pcall(mqlease.metrics.text, fake(raw), { [name] = "x" })
      assert.is_false(ok, name)
      assert.matches("mqlease.metrics.text: ", err, 1, true)
    end
  end)

  it("takes a name with one underscore first, or underscores inside", function()
    for _, name in ipairs({ "_x", "_", "a__b", "x_" }) do
      assert.truthy(mqlease.metrics.text(fake(raw), { [name] = "v" }):find(name .. '="v"', 1, true), name)
    end
  end)
end)
