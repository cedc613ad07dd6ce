-- Regression (issue 10, defect 1): exactly_once could run a handler twice.
-- The policy used to check the done marker and take the lock in two round
-- trips. When the owner finished (done marker, ack, unlock) between the two,
-- a second instance got the lock with a newer fence and ran the handler
-- again, and fencing could not catch it. The spec drives that interleaving
-- deterministically: the policy's Redis client is a wrapper that lets the
-- owner finish right before the lock script goes out.
local mqlease = require "mqlease"
local env = require "support.env"

local REDIS = "127.0.0.1:" .. env.redis_port

-- A consumer stand-in: the policy only counts and names itself through it.
local function fake_message(id)
  local counts = {}
  local consumer = {
    count = function(_, name) counts[name] = (counts[name] or 0) + 1 end,
    id = function() return "regress-consumer" end,
  }
  return { id = id, consumer = consumer }, counts
end

local function fake_lease()
  return { _lock_lost = function(self) self.lost = true end }
end

describe("mqlease regression: exactly_once and an owner that finishes mid-check", function()
  local real
  setup(function() real = mqlease.redis(REDIS) end)
  teardown(function() real:close() end)

  it("does not run the handler when the owner finished between the done check and the lock", function()
    local id = env.name("regress_eo_finished")
    local prefix = "mqlease:regress:"
    -- the owner (another instance) finishes (marks done, unlocks) just before our lock script
    local finished = false
    local wrapper = env.own_redis_client(real, {
      eval = function(_, script, keys, args)
        if not finished then
          finished = true
          assert(real:call("SET", mqlease.policy.keys(id, prefix).done, "1", "EX", 60))
        end
        return real:eval(script, keys, args)
      end,
      call = function(_, ...) return real:call(...) end,
    })
    local policy = mqlease.policy.exactly_once { redis = wrapper, prefix = prefix }
    local m, counts = fake_message(id)
    local runs = 0
    local action = policy(m, fake_lease(), function()
      runs = runs + 1
      return true
    end)
    assert.is_true(finished, "the lock script never went out: the interleaving was not driven")
    assert.equal(0, runs, "the handler ran again after its owner had finished")
    assert.equal("ack", action)
    assert.equal(1, counts.duplicate_skipped)
  end)
end)
