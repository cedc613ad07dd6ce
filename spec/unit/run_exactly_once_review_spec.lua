-- Where the exactly-once policy meets mqlease.run: defects found by a review,
-- each against the fault model's broker and Redis (spec/support/model/) in
-- simulated time, with the faults a spec sets and no other.
local run = require "mqlease.run"
local policy = require "mqlease.policy"
local core = require "mqlease.core"
local wait = require "mqlease.loop"
local eo_sim = require "spec.support.eo_sim"
local clock_mod = require "spec.support.model.clock"
local redis_model = require "spec.support.model.redis"
local broker_model = require "spec.support.model.broker"

-- Runs cfg.count unordered messages (or cfg.groups, FIFO) through mqlease.run
-- with the exactly-once policy (cfg.eo: its options over the model Redis)
-- until stop_at seconds. cfg.faults: the broker's and Redis's (a copy of
-- NO_FAULTS the spec may change while it runs); cfg.wrap(b, redis), if
-- given, runs before the run. -> summary, broker, redis
local function run_model(cfg)
  local summary, b, redis
  local faults = cfg.faults or eo_sim.NO_FAULTS
  local stderr = io.stderr
  io.stderr = { write = function() return io.stderr end }   -- the run's own reports
  local ok, err = pcall(clock_mod.simulate, 3600, function(clock)
    local rng = clock_mod.rng(cfg.seed or 5)
    redis = redis_model.new({ rng = rng, clock = clock, faults = faults })
    b = broker_model.new({ rng = rng, clock = clock, count = cfg.count, groups = cfg.groups, fifo = cfg.groups ~= nil,
      batch = cfg.batch or 4, invisible = 10, faults = faults, release_delay = 0.5, eo = redis })
    if cfg.wrap then cfg.wrap(b, redis) end
    local eo = { redis = redis }
    for k, v in pairs(cfg.eo or {}) do eo[k] = v end
    summary = run(b.consumer, cfg.handler or function() return true end, {
      policy = policy.exactly_once(eo), concurrency = cfg.concurrency or 2, grace = cfg.grace or 5,
      stop = function() return clock.t - 1000 >= cfg.stop_at end,
    })
  end)
  io.stderr = stderr
  assert(ok, err)
  return summary, b, redis
end

describe("mqlease.run with the exactly-once policy (a review)", function()
  -- The releaser retried a failed ack while lease:alive(), which is false
  -- once the message's Redis lock is known lost: an ack after a marker
  -- written past a lost lock (a failover, an eviction, max_hold spent in a
  -- long handler) was tried once, and the message, whose lease the broker
  -- still held for it, came back at its deadline (ordered: its group given
  -- back behind it). The ack needs the lease alone: the marker is written.
  it("retries a failed ack while the lease lives, though the message's lock was lost in its handler", function()
    local faults = eo_sim.copy(eo_sim.NO_FAULTS)
    local acks, model_redis = 0, nil
    local summary, b, redis = run_model({ count = 1, stop_at = 10, faults = faults,
      eo = { lock_ttl = 3 },
      wrap = function(b, r)
        model_redis = r
        local ack = b.consumer.ack
        b.consumer.ack = function(...)
          acks = acks + 1
          faults.ack_fail = acks == 1 and 1 or 0   -- the first ack gets no reply (not applied)
          return ack(...)
        end
      end,
      handler = function(m)
        model_redis.keys[policy.keys(m.id).lock] = nil   -- evicted, or lost in a failover
        wait.sleep(1.5)                            -- a renewal finds it gone
        assert(not m.lease:alive(), "the handler is told")
        return true
      end })
    assert.same({}, b.violations)
    assert.is_true(redis.done_of("u:1"))
    assert.equal(1, b.counts.lock_lost)
    assert.equal(2, acks, "the failed ack made again")
    assert.equal(1, summary.acked)
    assert.is_true(b.msgs[1].acked)
    assert.equal(1, b.msgs[1].deliveries, "acked on its first delivery, not after its lease ran out")
  end)
end)

describe("mqlease.policy.exactly_once lock prefetch (a review)", function()
  -- A client of the user's own may lack keepalive_lost: its keepalive's
  -- on_lost callback is all that tells of a lost lock (mqlease.lease), and
  -- for a prefetched lock it marked the message's lease while the message
  -- waited for its turn. The ask then held the lock on the lease
  -- (lease.hold_lock), which clears a loss marked before -- an earlier
  -- attempt's, it assumes -- and the handler ran on a lock another owner
  -- held, both at once.
  it("runs nothing on a grant whose loss only its keepalive's callback told (no keepalive_lost)", function()
    eo_sim.simulate(function(_, redis, sched)
      redis.keepalive_lost = nil   -- a client of the user's own: the callback alone tells
      local p = policy.exactly_once({ redis = redis, prefetch = true, lock_ttl = 3 })
      local m = eo_sim.message("a")
      policy.prefetcher(p).prefetch({ m })
      assert.equal(1, #redis.running())
      local keys = policy.keys("a")
      redis.keys[keys.lock] = nil   -- evicted, or lost in a failover
      wait.sleep(1.5)
      -- another instance takes the lock: its call brings our keepalive's news
      local got = redis:eval(policy.scripts.acquire, { keys.lock, keys.fence, keys.done }, { "other", "3000", "0" })
      assert.equal(1, got[1])
      assert.is_false(m.lease:alive(), "the callback told the lease")
      local action, ran = nil, false
      sched:spawn(function() action = p(m, m.lease, function() ran = true; return true end) end)
      while action == nil do wait.sleep(0.01) end
      assert.is_false(ran, "the handler ran while another owner held the lock")
      assert.equal("defer", action)
      assert.equal(1, m.counts.deferred_held)
      assert.equal("other", eo_sim.value(redis, keys.lock), "another owner's lock left alone")
      assert.same({}, redis.running())
    end)
  end)
end)
