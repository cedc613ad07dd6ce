-- mqlease.policy.batch without a server: the messages of one scheduler turn
-- share one script call and each still gets its own answer; what fails for
-- one message fails it alone; a call that fails, raises or is answered with
-- something no honest server sends fails every message of it, and none waits
-- for ever. The client is a stand-in that records its calls and answers as
-- the test says (after a turn of the scheduler, as a real reply comes).
local batch_mod = require "mqlease.policy.batch"
local scheduler = require "mqlease.scheduler"
local wait = require "mqlease.loop"

-- A client that answers each call with answer(call), after a short sleep.
-- With eval_cmd, it takes whole commands ({ "eval", script, numkeys, ... }),
-- as mqlease.redis does; else eval(script, keys, argv).
local function stand_in(answer, eval_cmd)
  local rc = { calls = {} }
  local function reply(call)
    rc.calls[#rc.calls + 1] = call
    wait.sleep(0.001)
    return answer(call)
  end
  if eval_cmd then
    function rc._eval_cmd(_, cmd) return reply({ cmd = cmd }) end
  else
    function rc.eval(_, script, keys, argv) return reply({ script = script, keys = keys, argv = argv }) end
  end
  return rc
end

-- Runs fn(i, sched) in n tasks that start in one scheduler turn; their results.
local function in_one_turn(n, fn)
  local sched, out = scheduler.new(function(_, err) error(err, 0) end), {}
  for i = 1, n do sched:spawn(function() out[i] = table.pack(fn(i, sched)) end) end
  sched:loop()
  return out
end

-- Answers each message with 1, <its argument> (two elements a message in
-- one flat list, as the policy's batch scripts answer), read from the call.
local function echo_args(shared)
  return function(call)
    local out = {}
    local argv = call.argv
    if call.cmd then
      local nk = call.cmd[3]
      argv = { table.unpack(call.cmd, 4 + nk) }
    end
    for i = shared + 1, #argv do
      out[#out + 1] = 1
      out[#out + 1] = argv[i]
    end
    return out
  end
end

describe("mqlease.policy.batch", function()
  it("sends the messages of one turn as one call, keys then shared then own arguments", function()
    local rc = stand_in(echo_args(2), true)
    local b = batch_mod.new(rc, "SCRIPT", 3, { "ttl", "fence_ttl" }, 2)
    local out = in_one_turn(5, function(i, sched)
      return b:call(sched, "owner" .. i, "l" .. i, "f" .. i, "d" .. i)
    end)
    assert.equal(1, #rc.calls)
    local cmd = rc.calls[1].cmd
    assert.same({ "eval", "SCRIPT", 15 }, { cmd[1], cmd[2], cmd[3] })
    assert.same({ "l1", "f1", "d1", "l2", "f2", "d2" }, { table.unpack(cmd, 4, 9) })
    assert.same({ "ttl", "fence_ttl", "owner1", "owner2", "owner3", "owner4", "owner5" }, { table.unpack(cmd, 19) })
    for i = 1, 5 do assert.same({ 1, "owner" .. i, n = 2 }, out[i]) end
  end)

  it("takes a client of the user's own through eval(script, keys, argv)", function()
    local rc = stand_in(echo_args(1), false)
    local b = batch_mod.new(rc, "SCRIPT", 2, { "ttl" }, 2)
    local out = in_one_turn(3, function(i, sched) return b:call(sched, "o" .. i, "l" .. i, "d" .. i) end)
    assert.equal(1, #rc.calls)
    assert.same({ "l1", "d1", "l2", "d2", "l3", "d3" }, rc.calls[1].keys)
    assert.same({ "ttl", "o1", "o2", "o3" }, rc.calls[1].argv)
    for i = 1, 3 do assert.same({ 1, "o" .. i, n = 2 }, out[i]) end
  end)

  it("answers one element a message for a script of width 1", function()
    local rc = stand_in(function() return { 1, 0, 1 } end, true)
    local b = batch_mod.new(rc, "SCRIPT", 2, { "ttl" }, 1)
    local out = in_one_turn(3, function(i, sched) return b:call(sched, "o" .. i, "l" .. i, "d" .. i) end)
    assert.same({ 1, n = 1 }, out[1])
    assert.same({ 0, n = 1 }, out[2])
    assert.same({ 1, n = 1 }, out[3])
  end)

  it("fails only the message whose own part failed", function()
    local rc = stand_in(function() return { 1, "a", "WRONGTYPE Operation against a key", "", 0, "b" } end, true)
    local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2)
    local out = in_one_turn(3, function(i, sched) return b:call(sched, "o", "l" .. i, "d" .. i) end)
    assert.same({ 1, "a", n = 2 }, out[1])
    assert.same({ nil, "WRONGTYPE Operation against a key", "REDIS_ERROR", n = 3 }, out[2])
    assert.same({ 0, "b", n = 2 }, out[3])
  end)

  it("fails every message of a call that fails whole, with its message and code", function()
    local rc = stand_in(function() return nil, "no reply within 1000 ms", "TIMEOUT" end, true)
    local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2)
    local out = in_one_turn(4, function(i, sched) return b:call(sched, "o", "l" .. i, "d" .. i) end)
    for i = 1, 4 do assert.same({ nil, "no reply within 1000 ms", "TIMEOUT", n = 3 }, out[i]) end
  end)

  it("fails every message when the reply is not one answer per message", function()
    -- short, surplus (a table a message, the old shape: 3 elements for 6), odd, not a list
    for _, bad in ipairs({ { 1, "a" }, { 1, "a", 1, "b", 1, "c", 1, "d" }, { { 1, "a" }, { 1, "b" }, { 1, "c" } },
        { 1, "a", 1, "b", 1 }, "OK", 7 }) do
      local rc = stand_in(function() return bad end, true)
      local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2)
      local out = in_one_turn(3, function(i, sched) return b:call(sched, "o", "l" .. i, "d" .. i) end)
      for i = 1, 3 do
        assert.is_nil(out[i][1])
        assert.matches("for a batch of 3", out[i][2], 1, true)
        -- not an error reply: the script may have run (the done marker's
        -- retry must not take its 0 for a lock another owner took)
        assert.equal("BAD_REPLY", out[i][3])
      end
    end
  end)

  it("fails a message whose answer does not start with an integer, and only that one", function()
    local rc = stand_in(function() return { 1, "a", { 1 }, "x", 0, "b" } end, true)
    local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2)
    local out = in_one_turn(3, function(i, sched) return b:call(sched, "o", "l" .. i, "d" .. i) end)
    assert.same({ 1, "a", n = 2 }, out[1])
    assert.same({ nil, "redis answered table for one message of a batch", "BAD_REPLY", n = 3 }, out[2])
    assert.same({ 0, "b", n = 2 }, out[3])
  end)

  it("fails every message with INTERNAL when the client raises, and none waits on", function()
    local rc = stand_in(function() error("the client broke") end, true)
    local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2)
    local out = in_one_turn(3, function(i, sched) return b:call(sched, "o", "l" .. i, "d" .. i) end)
    for i = 1, 3 do
      assert.is_nil(out[i][1])
      assert.matches("the client broke", out[i][2], 1, true)
      assert.equal("INTERNAL", out[i][3])
    end
  end)

  it("splits a turn of more messages than one call carries", function()
    local rc = stand_in(echo_args(0), true)
    local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2, 4)
    local out = in_one_turn(10, function(i, sched) return b:call(sched, "o" .. i, "l" .. i, "d" .. i) end)
    assert.equal(3, #rc.calls)   -- 4, 4 and 2
    for i = 1, 10 do assert.same({ 1, "o" .. i, n = 2 }, out[i]) end
  end)

  it("answers a call in a new scheduler after one stopped with its batch unsent", function()
    local rc = stand_in(echo_args(0), true)
    local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2)
    local first = scheduler.new()
    first:spawn(function() b:call(first, "never sent", "l", "d") end)
    first:loop(function() return true end)   -- stops after one round: its flush never runs
    local out = in_one_turn(1, function(_, sched) return b:call(sched, "next", "l", "d") end)
    assert.same({ 1, "next", n = 2 }, out[1])
    assert.equal(1, #rc.calls)
  end)
  it("with ids, sends each message's id for the core to write its keys, then shared and own arguments", function()
    local rc = stand_in(function(call)
      local cmd, out = call.cmd, {}
      for i = 1, cmd[5] do out[#out + 1] = 1; out[#out + 1] = cmd[5 + cmd[5] + 2 + i] end
      return out
    end, true)
    local ids = { prefix = "p:", suffixes = { "lock", "fence", "done" }, key_of = function() error("not here") end }
    local b = batch_mod.new(rc, "SCRIPT", 3, { "ttl", "fence_ttl" }, 2, nil, ids)
    local out = in_one_turn(3, function(i, sched) return b:call(sched, "owner" .. i, "id" .. i) end)
    assert.equal(1, #rc.calls)
    assert.same({ "eval_ids", "SCRIPT", "p:", "lock fence done", 3, "id1", "id2", "id3", "ttl", "fence_ttl",
      "owner1", "owner2", "owner3" }, rc.calls[1].cmd)
    for i = 1, 3 do assert.same({ 1, "owner" .. i, n = 2 }, out[i]) end
  end)

  it("with ids, writes the keys itself for a client of the user's own (key_of)", function()
    local rc = stand_in(echo_args(1), false)
    local ids = { prefix = "p:", suffixes = { "lock", "done" }, key_of = function(id, suffix) return "k" .. id .. suffix end }
    local b = batch_mod.new(rc, "SCRIPT", 2, { "ttl" }, 2, nil, ids)
    local out = in_one_turn(2, function(i, sched) return b:call(sched, "o" .. i, tostring(i)) end)
    assert.same({ "k1lock", "k1done", "k2lock", "k2done" }, rc.calls[1].keys)
    assert.same({ "ttl", "o1", "o2" }, rc.calls[1].argv)
    for i = 1, 2 do assert.same({ 1, "o" .. i, n = 2 }, out[i]) end
  end)
  -- The core refuses a whole pipeline whose eval_ids entry holds an id that is
  -- not a string (src/lua/lmql_redis.c): one message with a number id (a
  -- stand-in's, a user's own message table) must not fail the others of its
  -- call, among them done markers whose failure would see their handlers run
  -- again. The stand-in below refuses as the core does.
  it("with ids, writes a number id as a string and refuses a missing one in its own task alone", function()
    local rc = stand_in(function(call)
      local cmd, out = call.cmd, {}
      for i = 1, cmd[5] do
        if type(cmd[5 + i]) ~= "string" then error("eval_ids: ids must be strings") end
        out[#out + 1] = 1; out[#out + 1] = cmd[5 + i]
      end
      return out
    end, true)
    local ids = { prefix = "p:", suffixes = { "lock", "done" }, key_of = function() error("not here") end }
    local b = batch_mod.new(rc, "SCRIPT", 2, {}, 2, nil, ids)
    local given = { "a", 42, "c", false, 1.5 }
    local out = in_one_turn(5, function(i, sched)
      return pcall(b.call, b, sched, "o" .. i, given[i] or nil)
    end)
    assert.same({ true, 1, "a", n = 3 }, out[1])
    assert.same({ true, 1, "42", n = 3 }, out[2])
    assert.same({ true, 1, "c", n = 3 }, out[3])
    assert.is_false(out[4][1])
    assert.matches("a message id must be a string", out[4][2], 1, true)
    assert.same({ true, 1, "1.5", n = 3 }, out[5])
    assert.equal(1, #rc.calls)
  end)
end)

-- call_all: the lock prefetch's one call for a received batch, outside the
-- turn's batch (mqlease.policy's prefetcher).
describe("mqlease.policy.batch call_all", function()
  local ids = { prefix = "p:", suffixes = { "lock", "fence", "done" }, key_of = function() error("not here") end }

  it("sends the given messages now as one call and returns the flat reply", function()
    local rc = stand_in(function(call)
      local cmd, out = call.cmd, {}
      for i = 1, cmd[5] do out[#out + 1] = 1; out[#out + 1] = cmd[5 + cmd[5] + 2 + i] end
      return out
    end, true)
    local b = batch_mod.new(rc, "SCRIPT", 3, { "ttl", "fence_ttl" }, 2, nil, ids)
    local out = in_one_turn(1, function() return b:call_all({ "a", "b" }, { "oa", "ob" }) end)
    assert.same({ "eval_ids", "SCRIPT", "p:", "lock fence done", 2, "a", "b", "ttl", "fence_ttl", "oa", "ob" },
      rc.calls[1].cmd)
    assert.same({ 1, "oa", 1, "ob" }, out[1][1])
  end)

  it("fails whole, with a message and code, for a call that fails, raises or gets a malformed reply", function()
    for _, case in ipairs({
      { function() return nil, "no reply within the timeout", "TIMEOUT" end, "no reply", "TIMEOUT" },
      { function() error("boom") end, "boom", "INTERNAL" },
      { function() return { 1, "x" } end, "redis answered 2 elements for a batch of 2", "BAD_REPLY" },
      { function() return "OK" end, "redis answered string for a batch of 2", "BAD_REPLY" },
    }) do
      local b = batch_mod.new(stand_in(case[1], true), "SCRIPT", 3, {}, 2, nil, ids)
      local out = in_one_turn(1, function() return b:call_all({ "a", "b" }, { "oa", "ob" }) end)
      assert.is_nil(out[1][1])
      assert.matches(case[2], out[1][2], 1, true)
      assert.equal(case[3], out[1][3])
    end
  end)

  it("refuses more messages than one call carries, by name", function()
    local b = batch_mod.new(stand_in(function() return {} end, true), "SCRIPT", 3, {}, 2, 2, ids)
    local ok, err = pcall(b.call_all, b, { "a", "b", "c" }, { "1", "2", "3" })
    assert.is_false(ok)
    assert.matches("3 messages in one call (at most 2)", err, 1, true)
  end)
end)
