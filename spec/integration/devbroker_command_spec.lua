-- `mqlease devbroker` becomes the broker (core.exec): the pid its caller holds
-- is the broker's, so a SIGTERM to it stops the broker and leaves nothing
-- behind. Before core.exec the command ran the broker under a shell and
-- waited; a SIGTERM killed the waiter and left the broker running.
local launch = require "mqlease.launch"
local mqlease = require "mqlease"

local read = launch.read_file

describe("mqlease devbroker", function()
  it("replaces itself with the broker, so a SIGTERM to it stops the broker and no process is left", function()
    local out = os.tmpname()
    local pid = launch.spawn("exec lua5.4 bin/mqlease devbroker --listen 127.0.0.1:0 --control 127.0.0.1:0 --topic t", out)
    local line
    local deadline = mqlease.now() + 10
    repeat
      mqlease.sleep(0.05)
      line = (read(out) or ""):match("[^\n]*listening[^\n]*")
    until line or mqlease.now() > deadline
    assert.is_truthy(line, "the broker did not start: " .. tostring(read(out)))
    local cport = tonumber(line:match("control 127%.0%.0%.1:(%d+)"))
    -- the process the caller started is the broker itself, with no child
    local cmdline = (read("/proc/" .. pid .. "/cmdline") or ""):gsub("%z", " ")
    local children = {}
    for child in (read(("/proc/%d/task/%d/children"):format(pid, pid)) or ""):gmatch("%d+") do
      children[#children + 1] = tonumber(child)
    end
    local answer = launch.control(cport, "topic u")

    os.execute("kill -TERM " .. pid)
    deadline = mqlease.now() + 5
    while launch.alive(pid) and mqlease.now() < deadline do mqlease.sleep(0.05) end
    local left = launch.alive(pid)
    -- whatever is left (a broker under a waiter that died) is stopped, then reported
    for _, child in ipairs(children) do left = launch.alive(child) or left; launch.stop_pid(child, 2) end
    launch.stop_pid(pid, 2)
    os.remove(out)
    assert.matches("mqlease%-devbroker ", cmdline)
    assert.same({}, children)
    assert.matches("^ok", answer)
    assert.is_false(left, "a process outlived a SIGTERM to mqlease devbroker")
    -- nothing answers on its control port any more
    assert.is_nil(launch.control(cport, "topic v"))
  end)
end)
