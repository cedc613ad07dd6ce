-- mqlease.launch's servers and the lab's workers do not outlive the process
-- that launched them when it is killed with SIGKILL (or dies any other way
-- that runs no cleanup). Before, launch.spawn ran `cmd & echo $!` in a shell
-- that exited at once: the server was init's child from the start, and a
-- killed lab left its dev broker, its redis-server and its workers running,
-- holding their ports and their leases. Only what is asked to be detached
-- (bench/servers.lua, launch.redis_start) stays.
local mqlease = require "mqlease"
local launch = require "mqlease.launch"

local function lua_program()
  local i, exe = -1, nil
  while arg and arg[i] do exe = arg[i]; i = i - 1 end
  if exe and exe:match("lua") then return exe end
  return "lua5.4"
end

-- A launcher process: it spawns `sleep 600` through mqlease.launch (detached
-- or not), writes the sleep's pid to its output and waits.
local LAUNCHER = [[
package.path = %q
package.cpath = %q
local launch = require "mqlease.launch"
local pid = launch.spawn("sleep 600", "/dev/null", %s)
io.stdout:write(tostring(pid), "\n")
io.stdout:flush()
require("mqlease").sleep(600)
]]

-- Starts a launcher, kills it with SIGKILL once its child runs; returns
-- whether that child was still running `seconds` later, and its pid.
local function kill_launcher(detached, seconds)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. launch.shell_quote(dir)))
  local script, out = dir .. "/launcher.lua", dir .. "/launcher.out"
  local f = assert(io.open(script, "w"))
  f:write(LAUNCHER:format(package.path, package.cpath, detached and "{ detached = true }" or "nil"))
  f:close()
  local launcher = launch.spawn(launch.shell_quote(lua_program()) .. " " .. launch.shell_quote(script), out)
  local child
  finally(function()
    launch.stop_pid(launcher, 1)
    if child then launch.stop_pid(child, 1) end
    os.execute("rm -rf " .. launch.shell_quote(dir))
  end)
  local deadline = mqlease.now() + 30
  repeat
    mqlease.sleep(0.05)
    child = tonumber((launch.read_file(out) or ""):match("^(%d+)\n"))
  until child or mqlease.now() > deadline or not launch.alive(launcher)
  assert(child, "the launcher did not start its child: " .. tostring(launch.read_file(out)))
  assert.is_true(launch.alive(child))
  os.execute("kill -KILL " .. launcher)
  deadline = mqlease.now() + seconds
  while launch.alive(child) and mqlease.now() < deadline do mqlease.sleep(0.05) end
  return launch.alive(child), child
end

describe("a server mqlease.launch started", function()
  it("dies with the process that launched it, even one killed with SIGKILL", function()
    local running, pid = kill_launcher(false, 10)
    assert.is_false(running, ("pid %d outlived its launcher"):format(pid))
  end)

  it("outlives it when it was asked to be detached", function()
    local running = kill_launcher(true, 3)
    assert.is_true(running)
  end)
  -- a command that execs itself already ("exec lua5.4 bin/mqlease ...", as a
  -- spec of the devbroker command spawns it) runs as given: "exec exec x"
  -- looked for a program named exec, and nothing started
  it("runs a command that execs itself already", function()
    local out = os.tmpname()
    local pid = assert(launch.spawn("exec sleep 30", out))
    local deadline = mqlease.now() + 5
    while not launch.alive(pid) and mqlease.now() < deadline do mqlease.sleep(0.05) end
    mqlease.sleep(0.2)
    assert.is_true(launch.alive(pid), "exec sleep 30 is not running")
    launch.stop_pid(pid, 2)
    os.remove(out)
  end)
end)
