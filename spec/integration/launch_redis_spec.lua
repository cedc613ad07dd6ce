-- mqlease.launch's kept Redis (redis_start, redis_stop), the one the specs
-- share through spec/support/redis.sh: it reuses whatever answers PING on the
-- port, stops only what it started, and fails loudly, with the server's words.
-- Each case has a port (above the shared Redis's) and a run dir of its own.
local launch = require "mqlease.launch"
local env = require "support.env"

local base = env.redis_port + 200

local function case(k)
  local port = base + k
  local run = ("/tmp/mqlease-launch-redis-%s-%d"):format(env.run_id, k)
  os.execute("rm -rf " .. launch.shell_quote(run))
  return port, run
end

local function cleanup(run, ...)
  for _, pid in ipairs { ... } do launch.stop_pid(pid, 2) end
  os.execute("rm -rf " .. launch.shell_quote(run))
end

-- Case k's port taken by a redis-server that answers every command but AUTH
-- with NOAUTH: something listens there, but not a Redis that answers PING.
-- Returns the port, the run dir and that server's pid.
local function guarded_case(k)
  local port, run = case(k)
  os.execute("mkdir -p " .. launch.shell_quote(run))
  local out = run .. "/guarded.out"
  local pid = launch.spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --requirepass guarded"):format(port), out)
  finally(function() cleanup(run, pid) end)
  env.wait_for(function() return (launch.read_file(out) or ""):find("Ready to accept connections", 1, true) end,
    10, "the guarded redis-server")
  return port, run, pid
end

describe("mqlease.launch's kept Redis", function()
  it("starts one that outlives its handle, reuses it, and stops it once", function()
    local port, run = case(1)
    local r = assert(launch.redis_start { port = port, run = run })
    finally(function() cleanup(run, r.pid) end)
    assert.is_false(r.reused)
    assert.equal("127.0.0.1:" .. port, r.address)
    assert.is_true(launch.redis_answers(port))
    assert.equal(tostring(r.pid), (launch.read_file(run .. "/redis.pid") or ""):match("^%d+"))
    assert.truthy(launch.read_file(run .. "/started-by-us"))

    local again = assert(launch.redis_start { port = port, run = run })
    assert.is_true(again.reused)
    assert.equal(r.pid, again.pid)

    assert.equal(("stopped redis-server (pid %d)"):format(r.pid), launch.redis_stop { port = port, run = run })
    assert.is_false(launch.alive(r.pid))
    assert.is_false(launch.redis_answers(port))
    assert.is_nil(launch.read_file(run .. "/started-by-us"))
    assert.is_nil(launch.read_file(run .. "/redis.pid"))
    assert.equal("nothing of ours is running on 127.0.0.1:" .. port, launch.redis_stop { port = port, run = run })
  end)

  it("uses a Redis somebody else started and leaves it running", function()
    local port, run = case(2)
    local theirs = assert(launch.redis { port = port })
    finally(function() theirs.stop(); cleanup(run) end)
    local r = assert(launch.redis_start { port = port, run = run })
    assert.is_true(r.reused)
    assert.is_nil(r.pid)
    assert.is_nil(launch.read_file(run .. "/started-by-us"))
    assert.equal("nothing of ours is running on 127.0.0.1:" .. port, launch.redis_stop { port = port, run = run })
    assert.is_true(theirs.alive())
    assert.is_true(launch.redis_answers(port))
  end)

  it("fails with the server's own words when the port is taken by what does not answer PING", function()
    local port, run, pid = guarded_case(3)
    assert.is_false(launch.redis_answers(port))
    local r, err = launch.redis_start { port = port, run = run }
    assert.is_nil(r)
    assert.matches("cannot start redis-server on 127.0.0.1:" .. port, err, 1, true)
    assert.matches("Address already in use", err, 1, true)
    assert.is_nil(launch.read_file(run .. "/started-by-us"))
    assert.is_true(launch.alive(pid))
  end)

  it("names its own server that runs but does not answer, and stops it; never a pid that is not its redis-server", function()
    local port, run, pid = guarded_case(4)
    -- a recycled pid: the mark says ours, the pid is this busted process
    local self = tonumber(launch.read_file("/proc/self/stat"):match("^%d+"))
    local f = assert(io.open(run .. "/redis.pid", "w")); f:write(self, "\n"); f:close()
    f = assert(io.open(run .. "/started-by-us", "w")); f:close()
    assert.equal("nothing of ours is running on 127.0.0.1:" .. port, launch.redis_stop { port = port, run = run })

    f = assert(io.open(run .. "/redis.pid", "w")); f:write(pid, "\n"); f:close()
    f = assert(io.open(run .. "/started-by-us", "w")); f:close()
    local r, err = launch.redis_start { port = port, run = run }
    assert.is_nil(r)
    assert.equal(("our redis-server (pid %d) runs but does not answer PING on 127.0.0.1:%d; see %s/redis.log")
      :format(pid, port, run), err)
    assert.equal(("stopped redis-server (pid %d)"):format(pid), launch.redis_stop { port = port, run = run })
    assert.is_false(launch.alive(pid))
  end)

  it("is what spec/support/redis.sh runs: start, status, stop, status", function()
    local port, run = case(5)
    finally(function()
      env.sh(("MQLEASE_REDIS_PORT=%d MQLEASE_REDIS_RUN=%s bash spec/support/redis.sh stop 2>&1"):format(port, run))
      cleanup(run)
    end)
    local function redis_sh(cmd)
      return env.sh(("MQLEASE_REDIS_PORT=%d MQLEASE_REDIS_RUN=%s bash spec/support/redis.sh %s 2>&1; echo rc=$?")
        :format(port, run, cmd))
    end
    assert.matches("started redis%-server on 127%.0%.0%.1:" .. port .. " %(pid %d+%).*rc=0", redis_sh("start"))
    assert.matches("reusing the Redis on 127.0.0.1:" .. port .. "\nrc=0", redis_sh("start"), 1, true)
    assert.matches("answering on 127.0.0.1:" .. port .. "\nrc=0", redis_sh("status"), 1, true)
    assert.matches("stopped redis%-server %(pid %d+%)\nrc=0", redis_sh("stop"))
    assert.matches("nothing answers on 127.0.0.1:" .. port .. "\nrc=1", redis_sh("status"), 1, true)
  end)
end)
