-- Regression: issue 20, item 11. The control port has no authentication (any
-- client may pause the broker or fail its calls), yet it bound whatever
-- address --control named, and the banner said 127.0.0.1 whatever was bound.
-- It binds loopback only unless --control-any asks for more, and the banner
-- prints the addresses really bound.
local mqlease = require "mqlease"

describe("dev broker control port (issue 20, loopback unless asked)", function()
  local function binary()
    local f = io.open("build/san/mqlease-devbroker")
    if f then f:close(); return "build/san/mqlease-devbroker" end
    return "build/mqlease-devbroker"
  end

  -- Runs the dev broker with args for at most 2 s; returns its first line of
  -- output (banner or complaint) and whether it was still running (then stopped).
  local function first_line(args)
    local out = os.tmpname()
    local p = assert(io.popen(("%s %s >%s 2>&1 & echo $!"):format(binary(), args, out)))
    local pid = tonumber(p:read("l"))
    p:close()
    local line
    local deadline = mqlease.now() + 5
    repeat
      mqlease.sleep(0.05)
      local f = io.open(out)
      line = f and f:read("l")
      if f then f:close() end
    until line or mqlease.now() > deadline
    mqlease.sleep(0.2)
    local r = os.execute(("kill -0 %d 2>/dev/null"):format(pid))
    local running = r == true or r == 0
    os.execute(("kill %d 2>/dev/null; sleep 0.3; kill -9 %d 2>/dev/null"):format(pid, pid))
    os.remove(out)
    return line, running
  end

  it("refuses a control address that is not loopback unless --control-any is given", function()
    -- it must exit by itself, with an error that names the way out
    local p = assert(io.popen(("timeout 10 %s --listen 127.0.0.1:0 --control 0.0.0.0:0 2>&1; echo \"exit=$?\"")
      :format(binary())))
    local out = p:read("a")
    p:close()
    local code = tonumber(out:match("exit=(%d+)"))
    assert.is_true(code ~= 0 and code ~= 124, "exit status " .. tostring(code) .. ":\n" .. out)
    assert.matches("%-%-control%-any", out)
    assert.is_nil(out:match("listening"))
  end)

  it("binds a wider control address with --control-any and says so in its banner", function()
    local line, running = first_line("--listen 127.0.0.1:0 --control 0.0.0.0:0 --control-any")
    assert.is_true(running)
    assert.matches("^mqlease%-devbroker listening on 127%.0%.0%.1:%d+ control 0%.0%.0%.0:%d+$", line or "")
  end)

  it("tells in its banner the gRPC address it listens on", function()
    local line, running = first_line("--listen 0.0.0.0:0 --control 127.0.0.2:0")
    assert.is_true(running)
    assert.matches("^mqlease%-devbroker listening on 0%.0%.0%.0:%d+ control 127%.0%.0%.2:%d+$", line or "")
  end)
end)
