-- mqlease.launch without a server: what it says when a server cannot start,
-- and that a wrong option raises.
local launch = require "mqlease.launch"

describe("mqlease.launch", function()
  it("returns nil and the program's own words when the dev broker does not start", function()
    local dv, err = launch.devbroker { path = "/nonexistent/mqlease-devbroker" }
    assert.is_nil(dv)
    assert.matches("the dev broker did not start", err, 1, true)
    assert.matches("/nonexistent/mqlease-devbroker", err, 1, true)
  end)

  it("returns nil, message when no redis-server starts", function()
    local r, err = launch.redis { program = "/nonexistent/redis-server", port = 1 }
    assert.is_nil(r)
    assert.matches("cannot start redis-server", err, 1, true)
  end)

  it("raises on options that are not a table", function()
    assert.has_error(function() launch.devbroker("x") end, "mqlease.launch.devbroker: opts must be a table")
    assert.has_error(function() launch.redis(1) end, "mqlease.launch.redis: opts must be a table")
  end)

  it("tells a running process whose name holds ') Z ' from a zombie", function()
    -- /proc/PID/stat is "pid (name) state ...": a program named "x) Z (y" must not read as state Z
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. launch.shell_quote(dir)))
    local program = dir .. "/x) Z (y"
    assert(os.execute(("cp \"$(command -v sleep)\" %s"):format(launch.shell_quote(program))))
    local pid = launch.spawn(launch.shell_quote(program) .. " 30", "/dev/null")
    finally(function()
      launch.stop_pid(pid, 1)
      os.execute("rm -rf " .. launch.shell_quote(dir))
    end)
    local stat
    for _ = 1, 100 do   -- until the exec has named it
      stat = launch.read_file("/proc/" .. pid .. "/stat") or ""
      if stat:find("(x) Z (y)", 1, true) then break end
      require("mqlease").sleep(0.01)
    end
    assert.matches("(x) Z (y)", stat, 1, true)
    assert.is_true(launch.alive(pid))
  end)

  it("raises on a kept Redis without a port or a run dir, naming the option", function()
    assert.has_error(function() launch.redis_start() end, "mqlease.launch.redis_start: opts must be a table")
    assert.has_error(function() launch.redis_start { run = "/tmp/x" } end,
      "mqlease.launch.redis_start: opts.port must be a port number")
    assert.has_error(function() launch.redis_stop { port = 70000, run = "/tmp/x" } end,
      "mqlease.launch.redis_stop: opts.port must be a port number")
    assert.has_error(function() launch.redis_stop { port = 16379 } end,
      "mqlease.launch.redis_stop: opts.run must be a directory's path")
  end)

  it("raises on a redis port that is no port number: it is never handed to the shell", function()
    local marker = os.tmpname()
    os.remove(marker)
    for _, port in ipairs({ "1; touch " .. marker, 0, 70000, 1.5, 0 / 0 }) do
      assert.has_error(function()
        launch.redis { program = "/nonexistent/redis-server", port = port }
      end, "mqlease.launch.redis: opts.port must be a port number")
    end
    assert.is_nil(io.open(marker))
  end)

  it("says why redis-server did not start, in its own words", function()
    local r, err = launch.redis { program = "/nonexistent/redis-server", port = 1 }
    assert.is_nil(r)
    assert.matches("cannot start redis-server on 127.0.0.1:1", err, 1, true)
    assert.matches("/nonexistent/redis-server", err, 1, true)   -- the shell's "not found"
  end)

  it("tells a running process from a gone one, and quotes any word for the shell", function()
    local f = io.open("/proc/self/stat")
    local self = tonumber(f:read("l"):match("^%d+"))
    f:close()
    assert.is_true(launch.alive(self))
    assert.is_false(launch.alive(4194305))   -- above the largest pid_max Linux allows
    local p = io.popen("printf %s " .. launch.shell_quote("it's a $HOME `x`"))
    assert.equal("it's a $HOME `x`", p:read("a"))
    p:close()
  end)
end)
