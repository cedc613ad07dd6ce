-- mqlease.run is a library call: by default it leaves the process's signals
-- alone (issue 22 item 4). Before, it installed SIGTERM/SIGINT handlers and a
-- watcher that could _exit the process, unless told signals = false; the
-- command line (mqlease run) asks for them. Read from /proc/self/status: the
-- set of signals the process catches (SigCgt), during the run and around it.
local mqlease = require "mqlease"
local env = require "support.env"

local SIGINT, SIGTERM = 2, 15

local caught = require "support.caught_signals"

-- Runs until one message was handled; returns what was caught then.
local function run_and_look(name, opts)
  local topic = env.topic(name)
  local c = env.consumer { group = env.name("g_" .. name), topic = topic }
  assert(c:receive(1, { await = 0 }))
  local producer = env.producer()
  assert(producer:send(topic, "look"))
  producer:close()
  local during
  opts.run_for = 30
  opts.stop = function() return during ~= nil end
  local summary = mqlease.run(c, function()
    during = caught()
    return true
  end, opts)
  return during, summary
end

describe("mqlease.run and the process's signals", function()
  it("installs no SIGTERM or SIGINT handler unless asked", function()
    local before = caught()
    local during, summary = run_and_look("issue22_signals_default", {})
    assert.equal("stop", summary.reason)
    assert.is_truthy(during, "the handler never ran")
    assert.equal(before[SIGTERM], during[SIGTERM], "SIGTERM is caught during the run")
    assert.equal(before[SIGINT], during[SIGINT], "SIGINT handling changed during the run")
  end)

  it("drains on SIGTERM when asked with signals = true, and gives the handlers back afterwards", function()
    local before = caught()
    assert.is_nil(before[SIGTERM], "something else catches SIGTERM in this process")
    local during = run_and_look("issue22_signals_asked", { signals = true })
    assert.is_true(during[SIGTERM])
    assert.is_nil(caught()[SIGTERM])
  end)
end)
