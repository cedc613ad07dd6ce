-- mqlease.ngx's /metrics text merges the consumers of a worker into one
-- exposition: each metric family once, every consumer's samples under it.
-- Shown without nginx: a stand-in ngx and consumers with fixed counters.

describe("mqlease.ngx metrics_text", function()
  local NAMES = { "ngx", "ngx.semaphore", "mqlease.ngx", "mqlease.loop.ngx" }
  local saved

  before_each(function()
    saved = {}
    for _, name in ipairs(NAMES) do saved[name] = package.loaded[name]; package.loaded[name] = nil end
    package.loaded.ngx = { worker = { id = function() return 1 end } }
    package.loaded["ngx.semaphore"] = { new = function() return {} end }
  end)
  after_each(function()
    for _, name in ipairs(NAMES) do package.loaded[name] = saved[name] end
  end)

  local function consumer(group, received)
    return { group = group, topic = "t", metrics = function() return { received = received } end }
  end

  it("declares each family once and labels each consumer's samples", function()
    local text = require("mqlease.ngx").metrics_text({ consumer("a", 3), consumer("b", 5) })
    local types, helps = {}, {}
    for name in text:gmatch("# TYPE (%S+)") do
      assert.is_nil(types[name], "TYPE twice for " .. name)
      types[name] = true
    end
    for name in text:gmatch("# HELP (%S+)") do
      assert.is_nil(helps[name], "HELP twice for " .. name)
      helps[name] = true
    end
    assert.is_true(types.mqlease_messages_received_total)
    assert.truthy(text:find('mqlease_messages_received_total{group="a",topic="t",worker="1"} 3', 1, true))
    assert.truthy(text:find('mqlease_messages_received_total{group="b",topic="t",worker="1"} 5', 1, true))
    -- both samples follow their family's one TYPE line
    local family = text:match("# TYPE mqlease_messages_received_total counter\n(.-)\n#")
    assert.equal(2, select(2, family:gsub("\n", "")) + 1)
  end)

  it("is empty while the worker has no consumer", function()
    assert.equal("", require("mqlease.ngx").metrics_text({}))
  end)
end)
