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

  -- rejected_calls of one command in INFO commandstats (Redis 7 counts a command refused
  -- before it ran, such as one answered BUSY, there)
  local function rejected(r, command)
    local stats = assert(r:call("INFO", "commandstats"))
    return tonumber(stats:match("cmdstat_" .. command .. ":[^\r\n]*rejected_calls=(%d+)")) or 0
  end

  it("keeps an exactly-once lock through seconds of BUSY replies (a long script), renewing it after", function()
    -- An error reply does not prove the lock gone: only the renewal script's 0 does.
    -- Redis answers BUSY to every other command while a script runs past
    -- busy-reply-threshold (https://redis.io/docs/latest/develop/interact/programmability/eval-intro/);
    -- the key keeps its TTL meanwhile, so renewals must keep trying while the TTL allows.
    local r = mqlease.redis { address = "127.0.0.1:" .. port, password = "s3cret", timeout = 0.5 }
    local probe = mqlease.redis { address = "127.0.0.1:" .. port, password = "s3cret", timeout = 0.5 }
    local cli = ("redis-cli -p %d -a s3cret --no-auth-warning "):format(port)
    assert.equal("OK", r:call("CONFIG", "SET", "busy-reply-threshold", "100"))
    local id, prefix = "busy-" .. os.time(), "mqlease:busy:"
    local keys = mqlease.policy.keys(id, prefix)
    local counts = {}
    local m = { id = id, consumer = {
      count = function(_, name) counts[name] = (counts[name] or 0) + 1 end,
      id = function() return "busy-consumer" end } }
    local lease = { _lock_lost = function(self) self.lost = true end,
      alive = function(self) return not self.lost end }
    -- lock_ttl 4: renewals every 1.33 s, so at least one falls into 1.5 s of BUSY
    -- the token at the grant: the renewals through BUSY must leave it as it was
    local policy = mqlease.policy.exactly_once { redis = r, prefix = prefix, lock_ttl = 4, fence = "on_grant" }
    local seen = {}
    local rejected_before = rejected(probe, "evalsha")
    local action, _, err = policy(m, lease, function(_, l)
      seen.owner, seen.fence = probe:call("GET", keys.lock), l.fence
      local t0 = mqlease.now()
      env.sh(cli .. "EVAL 'while true do end' 0 >/dev/null 2>&1 &")
      env.wait_for(function()
        local _, perr = probe:call("PING")
        return perr and perr:match("^BUSY")
      end, 5, "BUSY replies")
      mqlease.sleep(1.5)
      env.sh(cli .. "SCRIPT KILL")
      env.wait_for(function() return probe:call("PING") == "PONG" end, 5, "the script's end")
      seen.busy_for = mqlease.now() - t0
      -- past the TTL the acquire gave: the key exists only if a renewal after the BUSY worked
      mqlease.sleep(math.max(0, 4.5 - (mqlease.now() - t0)))
      seen.owner_after = probe:call("GET", keys.lock)
      seen.fence_after = tonumber(probe:call("GET", keys.fence))
      seen.pttl_after = probe:call("PTTL", keys.lock)
      return true
    end)
    local refused = rejected(probe, "evalsha") - rejected_before
    assert.equal("OK", r:call("CONFIG", "SET", "busy-reply-threshold", "5000"))
    assert.is_true(refused >= 1, "no renewal was answered BUSY: the fault was not exercised")
    assert.equal("ack", action, err)
    assert.is_nil(counts.lock_lost, "a BUSY reply was taken as a lost lock")
    assert.is_true(lease:alive())
    assert.is_string(seen.owner)
    assert.equal(seen.owner, seen.owner_after)
    assert.is_number(seen.fence)
    assert.equal(seen.fence, seen.fence_after)
    assert.is_true(seen.pttl_after > 0, "the lock has no TTL left")
    -- the unlock rides in the done marker's script, before the ack: both are done
    assert.equal(mqlease.null, probe:call("GET", keys.lock), "the lock outlived the ack")
    assert.equal(1, probe:call("EXISTS", keys.done), "no done marker")
    probe:close()
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
