-- mqlease.redis: the core's Redis client -- addresses, AUTH, SELECT, reconnects.
local mqlease = require "mqlease"
local env = require "support.env"

describe("mqlease.redis", function()
  local dir = os.tmpname()
  local sock = dir .. ".sock"
  local pidfile = dir .. ".pid"
  local port = 16401   -- this spec's own server (the Redis specs use 16400-16499)

  local function start_private()
    -- a second redis-server: unix socket plus a TCP port, with a password
    env.sh(("redis-server --port %d --bind 127.0.0.1 --unixsocket %s --requirepass s3cret --save '' " ..
      "--appendonly no --daemonize yes --pidfile %s --dir /tmp"):format(port, sock, pidfile))
    local deadline = mqlease.now() + 10
    while mqlease.now() < deadline do
      if env.execute("test -S " .. sock) then return end
      mqlease.sleep(0.05)
    end
    error("the private redis-server did not start")
  end

  local function stop_private()
    os.execute(("redis-cli -p %d -a s3cret --no-auth-warning shutdown nosave >/dev/null 2>&1"):format(port))
    local deadline = mqlease.now() + 10
    while env.execute("test -S " .. sock) and mqlease.now() < deadline do mqlease.sleep(0.05) end
  end

  setup(start_private)
  teardown(function()
    stop_private()
    os.remove(dir)
  end)

  it("speaks over a unix socket with AUTH, and keeps databases apart", function()
    local r0 = mqlease.redis { address = "unix:" .. sock, password = "s3cret" }
    local r3 = mqlease.redis { address = "127.0.0.1:" .. port, password = "s3cret", db = 3 }
    assert.equal("OK", r0:call("SET", "k", "zero"))
    assert.equal("OK", r3:call("SET", "k", "three"))
    assert.equal("zero", r0:call("GET", "k"))
    assert.equal("three", r3:call("GET", "k"))
    assert.equal(mqlease.null, r3:call("GET", "missing"))
    assert.same({ "three" }, r3:call("MGET", "k"))
    assert.equal(2, r0:call("INCRBY", "n", 2))
    r0:close()
    r3:close()
  end)

  it("returns errors as nil, message, code and raises on bad options", function()
    local bad = mqlease.redis { address = "unix:" .. sock, password = "wrong" }
    local v, err, code = bad:call("PING")
    assert.is_nil(v)
    assert.equal("REDIS_AUTH", code)
    assert.is_string(err)
    bad:close()
    local r = mqlease.redis { address = "unix:" .. sock, password = "s3cret" }
    r:call("SET", "str", "abc")
    v, err, code = r:call("INCR", "str")
    assert.is_nil(v)
    assert.equal("REDIS_ERROR", code)
    assert.matches("not an integer", err)
    r:close()
    local ok, msg = pcall(mqlease.redis, { address = "localhost" })
    assert.is_false(ok)
    assert.matches("option 'address' must be host:port or unix:/path", msg)
    ok, msg = pcall(mqlease.redis, { address = "127.0.0.1:1", dbb = 1 })
    assert.is_false(ok)
    assert.matches("unknown option 'dbb'", msg)
  end)

  it("authenticates as an ACL user with username and password", function()
    local admin = mqlease.redis { address = "unix:" .. sock, password = "s3cret" }
    assert.equal("OK", admin:call("ACL", "SETUSER", "app", "on", ">app-pass", "~app:*", "+@all"))
    local app = mqlease.redis { address = "127.0.0.1:" .. port, username = "app", password = "app-pass" }
    assert.equal("OK", app:call("SET", "app:k", "v"))
    local v, err, code = app:call("SET", "other:k", "v")   -- outside the user's key pattern
    assert.is_nil(v)
    assert.equal("REDIS_ERROR", code)
    assert.matches("NOPERM", err)
    app:close()
    local wrong = mqlease.redis { address = "127.0.0.1:" .. port, username = "app", password = "nope" }
    v, err, code = wrong:call("PING")
    assert.is_nil(v)
    assert.equal("REDIS_AUTH", code)
    wrong:close()
    admin:call("ACL", "DELUSER", "app")
    admin:close()
  end)

  it("reports a lock lost when Redis is unreachable for longer than its TTL (a partition)", function()
    local r = mqlease.redis { address = "127.0.0.1:" .. port, password = "s3cret", timeout = 0.3 }
    assert.equal("OK", r:call("SET", "plock", "me", "PX", 1000))
    local pid = assert(r:call("INFO", "server")):match("process_id:(%d+)")
    local lost = false
    local id = r:keepalive("plock", "me", 1.0, 0.3, nil, function() lost = true end)
    os.execute("kill -STOP " .. pid)   -- this spec's own server
    mqlease.sleep(2.5)   -- well past the 1 s TTL, whenever the keepalive thread last ran
    os.execute("kill -CONT " .. pid)
    r:call("PING")   -- events are read on the next call
    assert.is_true(lost, "no renewal reached Redis for longer than the TTL, and nobody was told")
    assert.is_true(r:keepalive_stop(id))
    r:close()
  end)

  it("reconnects after the server restarts, without re-sending a command", function()
    local r = mqlease.redis { address = "unix:" .. sock, password = "s3cret", timeout = 0.5 }
    assert.equal("PONG", r:call("PING"))
    stop_private()
    local v, _, code = r:call("PING")
    assert.is_nil(v)
    assert.is_truthy(code == "UNAVAILABLE" or code == "TIMEOUT", code)
    start_private()
    assert.equal("PONG", r:call("PING"))
    r:close()
  end)

  it("keeps a lock alive from the C thread and reports when it is taken", function()
    local r = mqlease.redis { address = "unix:" .. sock, password = "s3cret" }
    assert.equal("OK", r:call("SET", "lock", "me", "PX", 1500))
    local lost = false
    local id = r:keepalive("lock", "me", 1.5, 0.5, nil, function() lost = true end)
    mqlease.sleep(3)   -- twice the TTL: only renewals keep it
    assert.equal("me", r:call("GET", "lock"))
    r:call("SET", "lock", "thief")
    mqlease.sleep(1.2)   -- the next renewal (every 0.5 s) finds it taken
    r:call("PING")   -- events are read on the next call
    assert.is_true(lost)
    assert.is_true(r:keepalive_stop(id))
    r:close()
  end)
end)
