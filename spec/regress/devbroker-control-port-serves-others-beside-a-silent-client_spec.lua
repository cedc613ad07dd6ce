-- Regression: issue 10, defect 9 (dev broker). The control port served one
-- connection at a time with a blocking read and no timeout: a client that
-- connected and said nothing locked every other client out, and SIGTERM hung
-- in the control thread's join.
local devbroker = require "support.devbroker"
local mqlease = require "mqlease"

describe("dev broker regression (issue 10, control port)", function()
  local dv, idle
  before_each(function() dv = devbroker.start({ "t1" }) end)
  after_each(function()
    if idle then os.execute(("kill %d 2>/dev/null"):format(idle)) end
    idle = nil
    dv.stop()
  end)

  it("answers a second client while another one stays connected and silent", function()
    idle = dv.idle_client(20)
    assert.matches("^ok calls=%d+", dv.control("stats") or "no answer from the control port")
    assert.matches("^ok paused=0", dv.control("set paused 0") or "no answer from the control port")
  end)

  it("stops on SIGTERM while a control client stays connected and silent", function()
    idle = dv.idle_client(20)
    assert.is_true(dv.stop(), "the dev broker did not exit within 5 s of SIGTERM")
  end)

  it("drops a control client that stays silent past the read timeout", function()
    assert.matches("^ok control_timeout_ms=500", dv.control("set control_timeout_ms 500"))
    -- a client that sends nothing: the broker closes the connection, so `cat` ends
    local p = assert(io.popen(("timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; cat <&3; echo closed'")
      :format(dv.control_port)))
    local t0 = mqlease.now()
    local out = p:read("a")
    p:close()
    assert.matches("closed", out)
    assert.is_true(mqlease.now() - t0 < 4, "the idle client was not dropped")
  end)
end)
