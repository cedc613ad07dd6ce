-- mqlease.redis: the arguments of r:call and r:eval, checked and written as
-- text before anything is sent, the same under Lua 5.4 and LuaJIT. Each spec
-- failed before its fix.
--
-- The client is the real one (mqlease.redis.new) over a stand-in for its
-- core client whose pipeline keeps what it was handed and raises "sent", so
-- a call ends there without a server.
local core = require "mqlease.core"
local redis = require "mqlease.redis"

-- A client and the list of commands its core was handed last (nil: none).
local function client_over_fake()
  local f = {}
  local make = core.redis
  core.redis = function()
    return {
      closed = function() return false end, close = function() end,
      fd = function() return -1 end, events = function() return {} end,
      pipeline = function(_, list) f.sent = list; error("sent", 0) end,
    }
  end
  local ok, r = pcall(redis.new, "127.0.0.1:1")
  core.redis = make
  assert(ok, r)
  return r, f
end

-- The arguments of the one command sent, after its kind ("command", "eval").
local function sent_args(f)
  local cmd = f.sent[1]
  local out = {}
  for i = 2, #cmd do out[#out + 1] = cmd[i] end
  return out
end

describe("mqlease.redis: r:eval(script, keys, args)", function()
  it("refuses keys given as a string instead of sending its length in keys named 'nil'", function()
    local r, f = client_over_fake()
    local ok, err = pcall(r.eval, r, "return 1", "mykey")
    assert.is_false(ok)
    assert.matches("bad argument #2 to 'eval' %(keys: an array", tostring(err))
    assert.is_nil(f.sent)
  end)

  it("refuses an array with a hole, under Lua 5.4 and LuaJIT alike", function()
    local r, f = client_over_fake()
    -- Lua 5.4 sent three keys ("a", "nil", "c"), LuaJIT one ("a"): # differs there
    local ok, err = pcall(r.eval, r, "return 1", { "a", nil, "c" })
    assert.is_false(ok)
    assert.matches("bad argument #2 to 'eval' %(keys: an array without holes", tostring(err))
    ok, err = pcall(r.eval, r, "return 1", { "a" }, { "x", nil, "z" })
    assert.is_false(ok)
    assert.matches("bad argument #3 to 'eval' %(args: an array without holes", tostring(err))
    assert.is_nil(f.sent)
  end)

  it("refuses a key or an argument that is neither a string nor a number, naming its place", function()
    local r, f = client_over_fake()
    local ok, err = pcall(r.eval, r, "return 1", { "a", {} })
    assert.is_false(ok)
    assert.matches("bad argument #2 to 'eval' %(keys%[2%]: string or number expected, got table%)", tostring(err))
    ok, err = pcall(r.eval, r, "return 1", { "a" }, { 0 / 0 })
    assert.is_false(ok)
    assert.matches("bad argument #3 to 'eval' %(args%[1%]: string or number expected, got NaN%)", tostring(err))
    ok, err = pcall(r.eval, r, "return 1", { "a" }, 5)
    assert.is_false(ok)
    assert.matches("bad argument #3 to 'eval' %(args: an array", tostring(err))
    assert.is_nil(f.sent)
  end)

  it("still sends its keys and arguments", function()
    local r, f = client_over_fake()
    assert.has_error(function() r:eval("return 1", { "k1", "k2" }, { "v", 3 }) end, "sent")
    assert.same({ "return 1", 2, "k1", "k2", "v", "3" }, sent_args(f))
    assert.has_error(function() r:eval("return 1") end, "sent")
    assert.same({ "return 1", 0 }, sent_args(f))
  end)
end)

describe("mqlease.redis: a number given to r:call or r:eval", function()
  it("goes as its exact digits when integral, whether an integer or a float, on both interpreters", function()
    local r, f = client_over_fake()
    -- LuaJIT sent 123456789012345 as "1.2345678901235e+14" (another number), and
    -- Lua 5.4 sent 30.0 as "30.0", which EXPIRE refuses
    assert.has_error(function() r:call("SET", "k", 123456789012345, 30.0, 2 ^ 53, -7) end, "sent")
    assert.same({ "SET", "k", "123456789012345", "30", "9007199254740992", "-7" }, sent_args(f))
    assert.has_error(function() r:eval("return 1", { "k" }, { 1733000000000123, 30.0 }) end, "sent")
    assert.same({ "return 1", 1, "k", "1733000000000123", "30" }, sent_args(f))
  end)

  it("goes as the fewest digits that read back as it when fractional", function()
    local r, f = client_over_fake()
    assert.has_error(function() r:call("ZADD", "z", 0.1, "a", 1 / 3, "b", 1733000000000.123, "c", math.huge, "d") end,
      "sent")
    local args = sent_args(f)
    assert.equal("0.1", args[3])
    assert.equal(1 / 3, tonumber(args[5]))
    assert.equal(1733000000000.123, tonumber(args[7]))
    assert.equal("inf", args[9])
  end)

  it("raises for NaN, which each C library wrote its own way", function()
    local r, f = client_over_fake()
    local ok, err = pcall(r.call, r, "SET", "k", 0 / 0)
    assert.is_false(ok)
    assert.matches("bad argument #3 to 'call' %(string or number expected, got NaN%)", tostring(err))
    assert.is_nil(f.sent)
  end)
end)

-- A client over a stand-in core client that records its keepalives and hands
-- out the events it is given (f.events), for r:keepalive and the event pump.
local function keepalive_client()
  local f = { kept = {}, events = {} }
  local make = core.redis
  core.redis = function()
    return {
      closed = function() return false end, close = function() end,
      fd = function() return -1 end,
      events = function() local e = f.events; f.events = {}; return e end,
      keepalive = function(_, ...) f.kept[#f.kept + 1] = { ... }; return #f.kept end,
    }
  end
  local ok, r = pcall(redis.new, "127.0.0.1:1")
  core.redis = make
  assert(ok, r)
  return r, f
end

describe("mqlease.redis: r:keepalive(key, owner, ttl, every, max, on_lost, since)", function()
  local function refused(pattern, ...)
    local r, f = keepalive_client()
    local ok, err = pcall(r.keepalive, r, ...)
    assert.is_false(ok, "accepted")
    assert.matches(pattern, tostring(err))
    assert.equal(0, #f.kept, "a keepalive was registered")
  end

  it("refuses a ttl under a millisecond, which went as PEXPIRE 0 and deleted the lock it kept", function()
    refused("bad argument #3 to 'keepalive' %(ttl", "k", "me", 0.0004, 0.0001)
  end)

  it("refuses a ttl or every that is no finite number, naming it", function()
    refused("bad argument #3 to 'keepalive' %(ttl", "k", "me", 0 / 0, 1)
    refused("bad argument #3 to 'keepalive' %(ttl", "k", "me", math.huge, 1)
    refused("bad argument #4 to 'keepalive' %(every", "k", "me", 30, 0 / 0)
    refused("bad argument #4 to 'keepalive' %(every", "k", "me", 30, "10")
  end)

  it("refuses an every not shorter than ttl: the lock would lapse between renewals", function()
    refused("bad argument #4 to 'keepalive' %(every", "k", "me", 30, 30)
    refused("bad argument #4 to 'keepalive' %(every", "k", "me", 30, 0)
  end)

  it("refuses a max the core's clock cannot add (it overflowed: the lock was lost at once)", function()
    refused("bad argument #5 to 'keepalive' %(max", "k", "me", 30, 10, 9.2e15)
    refused("bad argument #5 to 'keepalive' %(max", "k", "me", 30, 10, -1)
  end)

  it("refuses an on_lost that is no function, and a key or owner that is no string", function()
    refused("bad argument #6 to 'keepalive' %(on_lost", "k", "me", 30, 10, nil, "callback")
    refused("bad argument #1 to 'keepalive' %(key", 42, "me", 30, 10)
    refused("bad argument #2 to 'keepalive' %(owner", "k", nil, 30, 10)
  end)

  it("registers a good one in the core's milliseconds", function()
    local r, f = keepalive_client()
    assert.equal(1, r:keepalive("k", "me", 30, 10, 3600, nil, 5.5))
    assert.same({ "k", "me", 30000, 10000, 3600000, 5500 }, f.kept[1])
  end)
end)

describe("mqlease.redis: an on_lost that raises", function()
  it("costs no other event of the batch: a reply behind it still reaches its caller", function()
    local r, f = keepalive_client()
    local id = r:keepalive("k", "me", 30, 10, nil, function() error("the caller's callback broke") end)
    f.events = { { kind = "lock_lost", keepalive = id }, { kind = "op", op = 7, ok = true, reply = "OK" } }
    local stderr = io.stderr
    local said = {}
    io.stderr = { write = function(_, ...) for _, s in ipairs({ ... }) do said[#said + 1] = s end end }
    local ok, err = pcall(r._session.pump, r._session)
    io.stderr = stderr
    assert.is_true(ok, tostring(err))
    assert.is_table(r._session.results[7], "the reply behind the raising callback was lost")
    assert.matches("on_lost", table.concat(said))
    assert.is_true(r:keepalive_lost(id))
  end)
end)

describe("mqlease.redis: the core's keepalive takes only times it can keep", function()
  it("refuses a ttl of 0 ms and a max its clock cannot add, from mqlease.redis and the policy's path alike", function()
    local r = assert(redis.new("127.0.0.1:1"))
    local c = r._session.client
    local ok, err = pcall(c.keepalive, c, "k", "me", 0, 0)
    assert.is_false(ok)
    assert.matches("ttl_ms out of range", tostring(err))
    ok, err = pcall(c.keepalive_of, c, "p:", "id", "lock", "me", 30000, 10000, 2 ^ 62, 0)
    assert.is_false(ok)
    assert.matches("max_ms out of range", tostring(err))
    assert.is_number(c:keepalive("k", "me", 30000, 10000, 0, 0))
    r:close()
  end)
end)
