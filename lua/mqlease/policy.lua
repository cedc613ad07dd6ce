-- mqlease.policy: what happens around a handler.
--
-- A policy is a plain function:
--
--   policy(m, lease, handler) -> action [, delay [, err [, after]]]
--
--   action  "ack"   ack the message
--           "nack"  give it back; it comes back after delay seconds
--                   (nil: the run's nack_delay for m.delivery_attempt)
--           "defer" keep the lease (renewed) and ask the policy again after
--                   delay seconds: no delivery attempt is spent, as every
--                   nack spends one and the broker dead-letters a message
--                   after the group's last
--           "skip"  do nothing: the policy settled the message itself
--   err     non-nil when the handler failed: logged through on_error and counted
--   after   a function run once the ack or nack is done (e.g. to unlock a Redis lock)
--
-- The policy decides whether and how to call handler(m, lease), which returns
-- truthy on success or false/nil, err (or raises) on failure. Write your own
-- from these two; examples/exactly-once/custom_policy.lua is one.

local redis_mod = require "mqlease.redis"
local core = require "mqlease.core"
local lease_mod = require "mqlease.lease"
local wait = require "mqlease.loop"
local batch_mod = require "mqlease.policy.batch"
local sched_adapter = require "mqlease.loop.scheduler"

local pcall, tostring, type, error, pairs, ipairs, rawget, rawset, setmetatable, getmetatable =
  pcall, tostring, type, error, pairs, ipairs, rawget, rawset, setmetatable, getmetatable
local floor, random, min = math.floor, math.random, math.min
local eo_key = core.eo_key

-- A done marker that could not be written is tried again after these
-- seconds, doubled up to the most.
local FINISH_BACKOFF, FINISH_MAX_BACKOFF = 0.1, 2

local _M = {}

-- The index of a plain-table lease of the caller's own under fence =
-- "on_read": lease.fence is issued on read, as mqlease.lease's index does.
local FENCE_ON_READ = { __index = function(lease, k)
  if k == "fence" then return lease_mod.fence_of(lease) end
end }

-- Runs the handler; ack on success, nack on failure (the default policy).
function _M.plain(m, lease, handler)
  local ok, res, err = pcall(handler, m, lease)
  if not ok then return "nack", nil, tostring(res) end
  if res then return "ack" end
  return "nack", nil, err ~= nil and tostring(err) or "handler returned false"
end

-- One atomic step: refuse when the done marker exists, else SET lock NX PX ttl
-- and INCR the fence. -> {1, fence} | {0, owner} | {2, ''} (done before).
-- Checking the marker in its own round trip would let an owner finish (mark,
-- ack, unlock) in between, and this caller would run the handler again.
-- ARGV[3], the fence's TTL, is '0' when the token is issued on read (FENCE,
-- fence = "on_read"): then no fence key is touched and the answer is {1, ''}.
local ACQUIRE = [[
if redis.call('exists', KEYS[3]) == 1 then return {2, ''} end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] == '0' then return {1, ''} end
  local fence = redis.call('incr', KEYS[2])
  redis.call('pexpire', KEYS[2], ARGV[3])
  return {1, fence}
end
return {0, redis.call('get', KEYS[1]) or ''}
]]

-- The fencing token of a lock still held by its owner, issued when the
-- handler first reads lease.fence (fence = "on_read"): compare owner, then
-- INCR and PEXPIRE the fence. -> {1, fence}, or 0 when the lock is not the
-- caller's (lapsed, or another owner's): no token then. A token read later
-- than another owner's grant is never issued, so each is greater than the
-- token of every owner before it, as a token issued at each grant was.
local FENCE = [[
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local fence = redis.call('incr', KEYS[2])
redis.call('pexpire', KEYS[2], ARGV[2])
return {1, fence}
]]

-- compare owner, then DEL
local UNLOCK = [[
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
]]

-- The done marker, then the unlock (compare owner, DEL), in one step: one
-- script where there were two round trips. Unlocking before the ack is safe
-- because ACQUIRE checks the done marker before the lock: from this script on,
-- every acquire answers "done before", whoever holds the lock. -> the unlock's
-- 1 or 0 (the lock had lapsed or been taken; the marker is written anyway).
local FINISH = [[
redis.call('set', KEYS[2], '1', 'EX', ARGV[2])
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
]]

-- FINISH with the run's owner as the marker's value, where it is '1': for a
-- policy whose runs send transactions (mqlease.policy.transaction_checker
-- asks for it, see mark_runs), whose checks must tell the run that
-- completed the message from one that did not.
local FINISH_RUN = [[
redis.call('set', KEYS[2], ARGV[1], 'EX', ARGV[2])
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
]]

-- ACQUIRE and FINISH for the messages of one scheduler turn at once (see
-- mqlease.policy.batch): each message's part as its own script does it, in a
-- pcall, so one message's error is its answer alone (its message, a string,
-- where its code would be). The answers come back as one flat list, not a
-- table a message. Except READONLY: a demoted master (a Sentinel failover)
-- ran no write of the script, and only as the reply's own error does the
-- client see it and run the script again on the new master. (Redis 7 gives
-- it as { err = "READONLY ..." }; Redis 6 as "@user_script: N: -READONLY ...".)
-- KEYS: lock, fence, done of each message; ARGV: the lock's TTL in ms, the
-- fence's TTL in ms ('0': no token at the grant, as ACQUIRE), then each
-- message's owner. -> two elements per message: 1, fence (or '') | 0, owner
-- | 2, '' | error, ''.
-- The batch scripts' part error: its message, and the READONLY in it if any.
local PART_ERROR = [[
local function part_error(e)
  local err = type(e) == 'table' and e.err or tostring(e)
  return err, string.match(err, '^%-?(READONLY[^\r\n]*)') or string.match(err, ': %-(READONLY[^\r\n]*)')
end
]]
local ACQUIRE_MANY = PART_ERROR .. [[
local out, ttl, fence_ttl = {}, ARGV[1], ARGV[2]
local function one(lock, fence, done, owner)
  if redis.call('exists', done) == 1 then return 2, '' end
  if redis.call('set', lock, owner, 'NX', 'PX', ttl) then
    if fence_ttl == '0' then return 1, '' end
    local f = redis.call('incr', fence)
    redis.call('pexpire', fence, fence_ttl)
    return 1, f
  end
  return 0, redis.call('get', lock) or ''
end
for i = 1, #ARGV - 2 do
  local ok, code, value = pcall(one, KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i + 2])
  if ok then out[2 * i - 1], out[2 * i] = code, value
  else
    local err, ro = part_error(code)
    if ro then return redis.error_reply(ro) end
    out[2 * i - 1], out[2 * i] = err, ''
  end
end
return out
]]

-- KEYS: lock, done of each message; ARGV: the marker's TTL in seconds, then
-- each message's owner. -> one element per message: the unlock's 1 or 0, or
-- the message's error (a string). FINISH_RUN_MANY: the same, each marker's
-- value its run's owner (FINISH_RUN).
local function finish_many(value)
  return PART_ERROR .. [[
local out, ttl = {}, ARGV[1]
local function one(lock, done, owner)
  redis.call('set', done, ]] .. value .. [[, 'EX', ttl)
  if redis.call('get', lock) == owner then return redis.call('del', lock) end
  return 0
end
for i = 1, #ARGV - 1 do
  local ok, res = pcall(one, KEYS[2 * i - 1], KEYS[2 * i], ARGV[i + 1])
  if ok then out[i] = res
  else
    local err, ro = part_error(res)
    if ro then return redis.error_reply(ro) end
    out[i] = err
  end
end
return out
]]
end
local FINISH_MANY, FINISH_RUN_MANY = finish_many("'1'"), finish_many("owner")

_M.scripts = { acquire = ACQUIRE, unlock = UNLOCK, finish = FINISH, acquire_many = ACQUIRE_MANY,
  finish_many = FINISH_MANY, fence = FENCE, finish_run = FINISH_RUN, finish_run_many = FINISH_RUN_MANY }

-- What a message's keys start with: prefix{<id>}: and then lock, fence,
-- done (docs/exactly-once.md "Key layout"). The braces are a Redis Cluster
-- hash tag, so the three keys share one slot and the lock script, which
-- touches all three, can run there. Redis hashes what lies between the first
-- '{' and the first '}' after it, and the whole key when that is empty: the
-- keys of an empty id, or of one that starts with '}', would land in
-- different slots, and every script over them would fail CROSSSLOT, for good.
-- Those ids are written '%' and their bytes in hex, and their keys end in
-- }%: where every other id's end in }: -- no other id's keys can be theirs,
-- and every other id keeps the keys it always had. The core writes them
-- (core.eo_key, src/redis/mql_redis_keys.c), here as for the batches'
-- calls and the lock keepalives, so one writer names a message's keys.
local function key_base(id, prefix)
  local t = type(id)
  if t ~= "string" and t ~= "number" then
    error(("mqlease.policy: a message id must be a string (got %s)"):format(t), 2)
  end
  return eo_key(prefix, id, "")
end
_M.key_base = key_base

local function key_strings(id, prefix)
  local base = key_base(id, prefix)
  return base .. "lock", base .. "fence", base .. "done"
end

-- One key of id, for the batches' clients of the user's own (the core writes
-- them for mqlease.redis: see mqlease.policy.batch's ids).
local function key_of(prefix)
  return function(id, suffix) return key_base(id, prefix) .. suffix end
end

-- Why a prefix cannot name a message's keys, or nil. Redis hashes the text
-- between a key's first '{' and the first '}' after it, and the whole key
-- when that is empty (keyHashSlot, Redis' src/cluster.c): a prefix whose
-- first '{' has a '}' right after it ("a{}:") makes that empty tag, so a
-- message's lock, fence and done land in different slots, and under Cluster
-- every script over them fails CROSSSLOT. Any other prefix keeps them in one.
function _M.prefix_problem(prefix)
  if type(prefix) ~= "string" then return "must be a string" end
  local open = prefix:find("{", 1, true)
  if open and prefix:byte(open + 1) == 0x7d then
    return "must not have '}' right after its first '{' (Redis Cluster would hash each key whole, "
      .. "and one message's keys would land in different slots)"
  end
end

function _M.keys(id, prefix)
  local lock, fence, done = key_strings(id, prefix or "mqlease:")
  return { done = done, lock = lock, fence = fence }
end

local defaults = {
  redis = "127.0.0.1:6379", prefix = "mqlease:", done_ttl = 7 * 86400, lock_ttl = 30,
  on_locked = "defer", fail = "closed", defer_delay = 5, fail_delay = 5, max_hold = 3600,
  max_defer = 600, batch = true, prefetch = false, fence = "on_read",
}

-- The least each number may be, and why: a TTL is whole seconds on the wire
-- (EX) or a lock that must outlive a round trip, and a delay or budget of 0
-- would spin (defer again at once) or drop the lock at its first renewal.
local LOWEST = {
  done_ttl = { min = 1, says = "at least 1 second (the done marker's EX)" },
  lock_ttl = { min = 1, says = "at least 1 second" },
  defer_delay = { min = 0, above = 0, says = "more than 0 seconds" },
  fail_delay = { min = 0, above = 0, says = "more than 0 seconds" },
  max_hold = { min = 0, above = 0, says = "more than 0 seconds" },
  max_defer = { min = 0, says = "0 or more seconds" },
}

-- The most any time may be: 2^31 - 1 seconds (68 years). Past it the
-- milliseconds sent to Redis overflow an integer or are refused as an
-- invalid expire time; math.maxinteger as a "keep forever" done_ttl wrote
-- no done marker at all and deleted the fence (PEXPIRE with a negative TTL).
local MOST_SECONDS = 2147483647

local function check_options(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("mqlease.policy.exactly_once: options table expected", 3) end
  local o = {}
  for k, v in pairs(opts) do
    if defaults[k] == nil then
      error(("mqlease.policy.exactly_once: unknown option '%s'"):format(tostring(k)), 3)
    end
    o[k] = v
  end
  for k, v in pairs(defaults) do if o[k] == nil then o[k] = v end end
  if o.on_locked ~= "defer" and o.on_locked ~= "ack" then
    error("mqlease.policy.exactly_once: option 'on_locked' must be \"defer\" or \"ack\"", 3)
  end
  if o.fail ~= "closed" and o.fail ~= "open" then
    error("mqlease.policy.exactly_once: option 'fail' must be \"closed\" or \"open\"", 3)
  end
  if o.fence ~= "on_read" and o.fence ~= "on_grant" then
    error("mqlease.policy.exactly_once: option 'fence' must be \"on_read\" or \"on_grant\"", 3)
  end
  for k, low in pairs(LOWEST) do
    local v = o[k]
    if type(v) ~= "number" or v ~= v or v == math.huge then
      error(("mqlease.policy.exactly_once: option '%s' must be a number of seconds"):format(k), 3)
    end
    if v < low.min or (low.above and v <= low.above) then
      error(("mqlease.policy.exactly_once: option '%s' must be %s (got %s)"):format(k, low.says, tostring(v)), 3)
    end
    if v > MOST_SECONDS then
      error(("mqlease.policy.exactly_once: option '%s' must be at most %d seconds (got %s)"):format(
        k, MOST_SECONDS, tostring(v)), 3)
    end
  end
  local bad_prefix = _M.prefix_problem(o.prefix)
  if bad_prefix then error("mqlease.policy.exactly_once: option 'prefix' " .. bad_prefix, 3) end
  if type(o.batch) ~= "boolean" then error("mqlease.policy.exactly_once: option 'batch' must be true or false", 3) end
  if type(o.prefetch) ~= "boolean" then error("mqlease.policy.exactly_once: option 'prefetch' must be true or false", 3) end
  -- a Redis address or options table: checked now, connected at the first message
  if not (type(o.redis) == "table" and o.redis.call) then
    local ok, err = pcall(redis_mod.check, o.redis)
    if not ok then error("mqlease.policy.exactly_once: option 'redis': " .. tostring(err):gsub("^[^:]*:%d+: ", ""), 3) end
  end
  return o
end

-- The lock owners of one policy: the consumer's id and a random token, made
-- once per consumer, then a count, so every acquire has an owner of its own
-- (an attempt whose lock lapsed must not unlock a later attempt's lock).
-- -> owner_of(m), and mine(m, owner): whether owner is one this policy gave
-- out for m's consumer.
local function owners()
  local bases, n = setmetatable({}, { __mode = "k" }), 0
  local function owner_of(m)
    local c = m.consumer
    local base = bases[c]
    if not base then
      base = ("%s/%08x%08x/"):format(c:id(), random(0, 0x7fffffff), random(0, 0x7fffffff))
      bases[c] = base
    end
    n = n + 1
    return base .. n
  end
  local function mine(m, owner)
    local base = bases[m.consumer]
    return base ~= nil and type(owner) == "string" and owner:sub(1, #base) == base
  end
  return owner_of, mine
end

-- A fencing token as Redis issues it: an integer of 1 or more (INCR's).
local function is_token(v)
  return type(v) == "number" and v >= 1 and v == floor(v) and v < math.huge
end

-- A done marker's answer: the unlock's 1 or 0; anything else (no honest
-- server's) is no proof that the marker was written.
local function is_marked(v)
  return v == 0 or v == 1
end

-- The lock prefetch of each exactly-once policy made with prefetch = true
-- (see exactly_once), for mqlease.run to find: policy function -> its prefetcher.
local prefetchers = setmetatable({}, { __mode = "k" })

-- Each exactly-once policy's settings that may change after it is made:
-- policy function -> { mark_runs = bool }.
local settings = setmetatable({}, { __mode = "k" })

-- Has the exactly-once policy pol write each done marker with the owner of
-- the run that completed the message (its value is '1' otherwise): for
-- mqlease.policy.transaction_checker, whose checks then tell that run's
-- half messages from those of a run that failed or died. true, or false
-- when pol is no policy made by exactly_once (a wrapper of the caller's own).
function _M.mark_runs(pol)
  local these = settings[pol]
  if not these then return false end
  these.mark_runs = true
  return true
end

-- The prefetcher of a policy made by exactly_once with prefetch = true, or
-- nil: { prefetch(msgs, spawn), release(m, spawn) }.
function _M.prefetcher(policy)
  return prefetchers[policy]
end

-- The handler's effect happens once per message id, even when a lease runs
-- out while its handler still works and the broker hands the message to
-- another instance. See README "Exactly once" for what that does and does not
-- cover.
function _M.exactly_once(opts)
  local o = check_options(opts)
  local r = type(o.redis) == "table" and o.redis.call and o.redis or nil
  -- the scripts' number arguments, as the strings they are sent as
  local ttl_ms = tostring(floor(o.lock_ttl * 1000))
  local done_ttl = tostring(floor(o.done_ttl))
  local done_ttl_ms = tostring(floor(o.done_ttl) * 1000)
  -- the fence's TTL as the acquire takes it: '0' when no token is issued at
  -- the grant (on_read: FENCE issues it when the handler first reads it)
  local grant_fence_ttl_ms = o.fence == "on_grant" and done_ttl_ms or "0"
  local prefix = o.prefix
  local owner_of, mine = owners()
  -- the keepalive renews every third of lock_ttl from the acquire; before
  -- its first renewal a lock can end only by the clock, so until then the
  -- keepalive has nothing else to tell and is not asked (two calls into the
  -- core a message)
  local ka_every = o.lock_ttl / 3
  -- the keepalive's times, in the milliseconds the core takes
  local ka_ttl_ms, ka_every_ms = floor(o.lock_ttl * 1000), floor(ka_every * 1000)
  local ka_max_ms = floor(o.max_hold * 1000)
  -- a grant read this late leaves its first renewal, due at once, less than
  -- a second (or a third of lock_ttl, if that is less) to land before the
  -- key lapses: a Redis call's default timeout (see the handler's start)
  local ka_late = o.lock_ttl - min(ka_every, 1)

  local function client()
    if not r then r = redis_mod.new(o.redis) end
    return r
  end

  -- The acquires and the done markers of one scheduler turn, one script
  -- call each (mqlease.policy.batch), for a client whose keys all live on
  -- one server; made at the first message, false when the client cannot
  -- (Redis Cluster, a client of the user's own) or batch = false (a proxy
  -- that shards keys by their hash tag: one script over many messages' keys
  -- would reach one shard).
  local acquires, finishes, finishes_run
  local tuned = { mark_runs = false }
  local function batches(rc)
    if acquires == nil then
      if o.batch and rc._one_server and rc:_one_server() then
        -- the keys of a batch are written by the core from the ids (no key
        -- strings a message in Lua)
        local k = key_of(prefix)
        acquires = batch_mod.new(rc, ACQUIRE_MANY, 3, { ttl_ms, grant_fence_ttl_ms }, 2, nil,
          { prefix = prefix, suffixes = { "lock", "fence", "done" }, key_of = k })
        finishes = batch_mod.new(rc, FINISH_MANY, 2, { done_ttl }, 1, nil,
          { prefix = prefix, suffixes = { "lock", "done" }, key_of = k })
        finishes_run = batch_mod.new(rc, FINISH_RUN_MANY, 2, { done_ttl }, 1, nil,
          { prefix = prefix, suffixes = { "lock", "done" }, key_of = k })
      else
        acquires, finishes, finishes_run = false, false, false
      end
    end
    return acquires and sched_adapter.current()
  end

  -- A message that may not run yet (another owner holds its lock, or Redis
  -- is unreachable) keeps its lease and is asked about again after delay,
  -- for up to max_defer seconds in all; a nack would spend a delivery attempt
  -- each time, and during a long Redis outage the group's last attempt would
  -- send messages that never ran to %DLQ%<group>. Past the budget it is
  -- nacked as before (counted as defer_budget_spent).
  local function defer(m, delay, what)
    local now = core.now()
    local since = m._deferred_since
    if not since then
      since = now
      m._deferred_since = now
    end
    if now - since < o.max_defer then
      m.consumer:count(what)
      return "defer", delay
    end
    -- counted once per message, however often it is asked again
    if not m._defer_spent then
      m._defer_spent = true
      m.consumer:count("defer_budget_spent")
    end
    return "nack", delay
  end

  -- Redis did not answer: fail closed (do not run, come back later) or open.
  local function unreachable(m, lease, handler, err)
    m.consumer:count("redis_unavailable")
    -- run with no lock, and so no token (not an earlier attempt's either)
    if o.fail == "open" then
      rawset(lease, "fence", nil)
      return _M.plain(m, lease, handler)
    end
    return defer(m, o.fail_delay, "fail_closed_held")
  end

  -- The done marker (and the unlock, see FINISH), made again while the
  -- message's lease lives or its lock is still ours: without the marker the
  -- ack must not go, or a redelivery would run the handler again with nothing
  -- to tell it was done. The lock keepalive stays on meanwhile, so no other
  -- instance takes the message over (even once the broker has redelivered
  -- it: the new owner finds the lock held and defers). -> true, or nil,
  -- message once neither is left.
  local function worth_trying(lease)
    if lease_mod.held(lease) then return true end
    -- the lock, while its keepalive runs (mqlease.run stops it when it returns)
    return rawget(lease, "_lock_client") ~= nil and lease_mod.lock_kept(lease)
  end
  -- The three scripts. A client of mqlease.redis takes each as one table
  -- (see redis:_eval_cmd); a client of the user's own, as eval(script, keys, args).
  local function acquire(rc, lock_key, fence_key, done_key, owner)
    if rc._eval_cmd then
      return rc:_eval_cmd({ "eval", ACQUIRE, 3, lock_key, fence_key, done_key, owner, ttl_ms, grant_fence_ttl_ms })
    end
    return rc:eval(ACQUIRE, { lock_key, fence_key, done_key }, { owner, ttl_ms, grant_fence_ttl_ms })
  end
  local function unlock(rc, lock_key, owner)
    if rc._eval_cmd then return rc:_eval_cmd({ "eval", UNLOCK, 1, lock_key, owner }) end
    return rc:eval(UNLOCK, { lock_key }, { owner })
  end
  local function mark_done(rc, lock_key, done_key, owner)
    local script = tuned.mark_runs and FINISH_RUN or FINISH
    if rc._eval_cmd then return rc:_eval_cmd({ "eval", script, 2, lock_key, done_key, owner, done_ttl }) end
    return rc:eval(script, { lock_key, done_key }, { owner, done_ttl })
  end

  -- Stops the lock's keepalive; one that found the lock lapsed or taken
  -- (a slow or failed-over Redis) while the handler ran, or while its marker
  -- was written, is counted: another instance may have run the message too,
  -- and its fence is the newer one. One question of the keepalive where
  -- asking whether it was lost and then stopping it were two.
  -- unlocked: the marker's script deleted the lock, finding it ours: a
  -- renewal between that and this stop finds the key gone, by our own doing,
  -- and says lost; the lock was ours to the end, so nothing is counted.
  -- taken: the marker's script found the lock another's (or none): lost,
  -- whether or not a renewal has noticed yet.
  local function let_lock_go(m, lease, unlocked, taken)
    -- no token once the lock is let go, nor one to be issued
    rawset(lease, "fence", nil)
    rawset(lease, "_fence_issue", nil)
    local mirror = rawget(lease, "_lock_mirror")
    if mirror then
      lease_mod.unmirror_lock(mirror, rawget(lease, "_lock_id"))
      rawset(lease, "_lock_mirror", nil)
    end
    if lease_mod.drop_lock(lease, unlocked) or taken then
      lease:_lock_lost()
      m.consumer:count("lock_lost")
    end
    rawset(lease, "lock_owner", nil)   -- the live view shows the lock only while it is held
  end

  -- sched: the scheduler whose turns batch the markers, or nil. -> true and
  -- what became of the lock: "unlocked" (the script deleted it, finding it
  -- ours, or an attempt before, unanswered, may have) or "taken" (the first
  -- attempt found it another's, or gone); or nil, message. A closed client
  -- writes nothing again: no retries then.
  -- An answer that is no 1 or 0 proves nothing was written: a failure, but
  -- one after which the script may have run (BAD_REPLY).
  local function marker_answer(marked, err, code)
    if marked ~= nil and not is_marked(marked) then
      return nil, ("redis answered %s for the done marker"):format(tostring(marked)), "BAD_REPLY"
    end
    return marked, err, code
  end
  local function finish(rc, sched, m, id, lease, owner)
    local marked, err, code
    local lock_key, done_key, _
    if sched then
      marked, err, code = marker_answer((tuned.mark_runs and finishes_run or finishes):call(sched, owner, id))
    else
      lock_key, _, done_key = key_strings(id, prefix)
      marked, err, code = marker_answer(mark_done(rc, lock_key, done_key, owner))
    end
    if marked ~= nil then return true, marked == 1 and "unlocked" or "taken" end
    if not lock_key then lock_key, _, done_key = key_strings(id, prefix) end
    -- whether an attempt so far may have run, and so deleted the lock: only
    -- an error reply (OOM, BUSY, READONLY: the script aborted before its
    -- DEL, its last step) proves one did not
    local may_have_run = code ~= "REDIS_ERROR"
    local backoff = FINISH_BACKOFF
    m.consumer:count("done_marker_failed")
    while code ~= "CLOSED" and worth_trying(lease) do
      wait.sleep(backoff)
      if not worth_trying(lease) then break end
      m.consumer:count("done_marker_retries")
      marked, err, code = marker_answer(mark_done(rc, lock_key, done_key, owner))
      -- a 0 now may be an earlier attempt's own delete; after error replies
      -- alone it is a lock another owner took
      if marked ~= nil then return true, (marked == 1 or may_have_run) and "unlocked" or "taken" end
      if code ~= "REDIS_ERROR" then may_have_run = true end
      backoff = min(backoff * 2, FINISH_MAX_BACKOFF)
    end
    return nil, err
  end

  -- The fencing token of the lock lease holds, issued when the handler first
  -- reads lease.fence (fence = "on_read": lease.lua's index calls this) and
  -- kept in the field from then on. Most handlers never read it, and a token
  -- at every grant was a third of what exactly-once cost Redis a message (an
  -- INCR, a PEXPIRE, and a key kept for done_ttl). A read that gets no token
  -- raises: the lock is no longer ours (another owner may hold it, and a
  -- write with no token or an old one is what fencing keeps out), or Redis
  -- did not answer; the handler then fails and its message is nacked, as it
  -- is when the handler raises.
  local NOT_HELD = "mqlease.policy.exactly_once: lease.fence is issued only while the handler holds the lock"
  local function fence_call(rc, id, owner)
    local lock_key, fence_key = key_strings(id, prefix)
    if rc._eval_cmd then return rc:_eval_cmd({ "eval", FENCE, 2, lock_key, fence_key, owner, done_ttl_ms }) end
    return rc:eval(FENCE, { lock_key, fence_key }, { owner, done_ttl_ms })
  end
  -- m: the lease's message (mqlease.lease keeps it; given for a lease of
  -- the caller's own, whose token is issued at the grant).
  local function issue_fence(lease, given_m)
    local m = given_m or rawget(lease, "_message")
    local owner, rc = rawget(lease, "lock_owner"), rawget(lease, "_lock_client")
    if not (owner and rc and m) then error(NOT_HELD, 2) end
    -- another task of the handler asked first: its answer is this one's too
    while rawget(lease, "_fence_reading") == owner do wait.sleep(0.005) end
    -- read through the index, after the handler ended meanwhile (its marker
    -- may be out, and deletes the lock): no token, as after the handler
    if given_m == nil and rawget(lease, "_fence_issue") == nil then return nil end
    local token = rawget(lease, "fence")
    if token ~= nil then return token end
    if rawget(lease, "lock_owner") ~= owner then error(NOT_HELD, 2) end
    rawset(lease, "_fence_reading", owner)
    local called, answer, err = pcall(fence_call, rc, m.id, owner)
    -- (a read of an attempt that ended meanwhile leaves a later one's mark)
    if rawget(lease, "_fence_reading") == owner then rawset(lease, "_fence_reading", nil) end
    -- the attempt ended while the call was out (a task of the handler's
    -- outliving it): nothing of it reaches the lease, which may hold a
    -- later attempt's lock by now
    if rawget(lease, "lock_owner") ~= owner then error(NOT_HELD, 2) end
    local issued = called and type(answer) == "table" and answer[1] == 1 and answer[2]
    if is_token(issued) then
      rawset(lease, "fence", issued)
      return issued
    end
    if called and answer == 0 then
      -- lapsed or taken: the keepalive may not have seen it yet; the lease
      -- learns it now, and the policy counts it when the handler ends
      rawset(lease, "_fence_refused", true)
      lease:_lock_lost()
      error("mqlease.policy.exactly_once: no fencing token: the lock of this message is no longer ours", 2)
    end
    m.consumer:count("redis_unavailable")
    error("mqlease.policy.exactly_once: no fencing token: " .. tostring(err or answer), 2)
  end
  local issue = o.fence == "on_read" and issue_fence or nil

  -- The lock's keepalive, registered as soon as the acquire's reply is read:
  -- for a client of mqlease.redis the core writes the key from the id; a
  -- client of the user's own gets the key and a callback for a lost lock.
  -- grant: a prefetched lock's (see prefetch), on which the callback notes
  -- a loss too, for its message's ask (hold_lock clears the lease's mark).
  local function keep_lock(rc, id, owner, acquired_at, lease, grant)
    if rc._keep_lock_of then
      return rc:_keep_lock_of(prefix, id, owner, ka_ttl_ms, ka_every_ms, ka_max_ms, floor(acquired_at * 1000))
    end
    return rc:keepalive((key_strings(id, prefix)), owner, o.lock_ttl, ka_every, o.max_hold,
      function()
        if grant then grant.lost = true end
        lease:_lock_lost()
      end, acquired_at)
  end

  -- The lock prefetch (prefetch = true). Under mqlease.run the locks of a
  -- received batch are taken in one call as it arrives, from a task of the
  -- run's own (the receiver receives again meanwhile), and each kept alive
  -- from then on: a message's policy then starts with its answer in hand,
  -- where each message waited for its own in the scheduler. Off by default:
  -- it gained less than the noise (bench/README "The lock prefetch,
  -- measured"), and it holds a lock from its message's arrival.
  -- Nothing about a lock changes: the same script, owner, TTL, keepalive.
  -- A grant is used by the message's first ask; a message that ends without
  -- one (given back, its lease ended, refused at a stop) has its grant
  -- released by the run (release: keepalive stopped, lock deleted if ours).
  -- Only what stays true while a message waits for its turn is kept: a lock
  -- taken (renewed meanwhile), "done before", and a message's own failed
  -- part (fail closed at its ask, as alone). A lock another owner held is
  -- asked about again at the message's turn; a call that failed, or a reply
  -- read late (the lock may lapse before its first renewal), leaves each
  -- message to its own acquire.
  local grants = setmetatable({}, { __mode = "k" })   -- message -> { got, fence, owner, at, ka, rc, lost }
  local prefetcher = {}

  -- spawn(fn), if given, runs fn in a task its caller waits for (the run's
  -- drain): the unlocks of a late reply go through it.
  function prefetcher.prefetch(msgs, spawn)
    local rc = client()
    local sched = batches(rc)
    if not sched then return end
    local items, owners, of = {}, {}, {}
    for _, m in ipairs(msgs) do
      local id = m.id
      local t = type(id)
      if t == "string" or t == "number" then
        local n = #items + 1
        items[n], owners[n], of[n] = tostring(id), owner_of(m), m
      end
    end
    if #items == 0 then return end
    local acquired_at = core.now()
    local reply = acquires:call_all(items, owners)
    if not reply then return end
    local late = core.now() - acquired_at >= ka_late
    for i = 1, #items do
      local got, value = reply[2 * i - 1], reply[2 * i]
      if got == 1 and late then
        -- each from a task of its own: one after another they would hold
        -- back this batch, and every batch behind it
        local key, owner = (key_strings(items[i], prefix)), owners[i]
        local fn = function() unlock(rc, key, owner) end
        if spawn then spawn(fn) else sched:spawn(fn) end
      elseif got == 1 then
        local m = of[i]
        local g = { got = 1, fence = value, owner = owners[i], at = acquired_at, rc = rc }
        g.ka = keep_lock(rc, items[i], owners[i], acquired_at, m.lease, g)
        grants[m] = g
      elseif got == 2 then
        grants[of[i]] = { got = 2 }
      elseif type(got) == "string" then
        -- this message's part failed (a key of the wrong type): its ask
        -- takes the path of an unreachable Redis (fail closed), counted, as
        -- its own acquire's failure would
        grants[of[i]] = { got = false, fence = got }
      end
    end
  end

  -- Ends m's unused grant, if it has one: the keepalive stopped, and (spawn
  -- given: spawn(fn) runs fn in a task) the lock deleted if still ours.
  function prefetcher.release(m, spawn)
    local g = grants[m]
    if not g then return end
    grants[m] = nil
    if g.got ~= 1 then return end
    g.rc:keepalive_stop(g.ka)
    if spawn then
      local rc, id, owner = g.rc, m.id, g.owner
      spawn(function() unlock(rc, (key_strings(id, prefix)), owner) end)
    end
  end

  local function policy(m, lease, handler)
    local rc = client()
    local id = m.id
    local sched = batches(rc)
    -- got: 1 (ours; fence), 0 (another owner's), 2 (done before)
    local got, fence, owner, acquired_at, keepalive
    local g = grants[m]
    if g then
      -- taken when the message arrived (see prefetch): its keepalive runs
      grants[m] = nil
      got, fence, owner, acquired_at, keepalive = g.got, g.fence, g.owner, g.at, g.ka
    else
      owner = owner_of(m)
      -- the lock's TTL runs from the acquire, not from when this coroutine resumes
      acquired_at = core.now()
      if sched then got, fence = acquires:call(sched, owner, id)
      else
        local lock_key, fence_key, done_key = key_strings(id, prefix)
        local answer, err = acquire(rc, lock_key, fence_key, done_key, owner)
        if type(answer) == "table" then got, fence = answer[1], answer[2] else fence = err end
      end
    end
    if got ~= 1 and got ~= 0 and got ~= 2 then
      -- no answer, or one no honest server gives (fence holds the message):
      -- the lock is not known to be ours, so the handler must not run
      return unreachable(m, lease, handler, fence)
    end
    if got == 2 then
      -- done before (a redelivery, or its owner just finished): a known duplicate
      m.consumer:count("duplicate_skipped")
      return "ack"
    end
    if got == 0 then
      -- another live owner holds it: the take-over race
      m.consumer:count("handoff")
      -- risky: lost if that owner fails. Never for a lock this policy gave
      -- out (fence holds its owner): one left behind (an acquire whose reply
      -- was lost, an unlock that got none) has no owner running the message.
      if o.on_locked == "ack" and not mine(m, fence) then return "ack" end
      return defer(m, o.defer_delay, "deferred_held")
    end
    if got == 1 and not issue and not is_token(fence) then
      -- a grant with no token an honest server gives (fence = "on_grant"):
      -- not run with it; the lock goes, as for an unreachable Redis
      if keepalive then rc:keepalive_stop(keepalive) end
      unlock(rc, key_strings(id, prefix), owner)
      return unreachable(m, lease, handler, ("redis answered %s for the fencing token"):format(tostring(fence)))
    end
    if not lease_mod.held(lease) then
      -- the broker's lease ended while the lock was taken: the message may be
      -- someone else's now, so the handler does not start; nothing to release
      if keepalive then rc:keepalive_stop(keepalive) end
      unlock(rc, key_strings(id, prefix), owner)
      return "nack"
    end
    -- the live view shows both while the lock is held (a fence issued on
    -- read, once the handler has read it)
    rawset(lease, "lock_owner", owner)
    -- A lease of the caller's own (not mqlease.lease's, which keeps its
    -- message): a plain table is given the index that issues lease.fence on
    -- read, and this message (a lease reused for the next message reads
    -- that one's token); one with a metatable of its own has no such index,
    -- and its token is issued before the handler runs, as at a grant.
    local lease_mt = getmetatable(lease)
    if issue and (lease_mt == FENCE_ON_READ or (lease_mt == nil and rawget(lease, "_message") == nil)) then
      rawset(lease, "_message", m)
      if lease_mt == nil then setmetatable(lease, FENCE_ON_READ) end
    end
    local own_lease = issue and rawget(lease, "_message") == nil
    if not issue then rawset(lease, "fence", fence)
    else
      -- (a retry in place runs the handler again on this lease: the token
      -- of its earlier run is not this lock's)
      rawset(lease, "fence", nil)
      rawset(lease, "_fence_refused", nil)
      if not own_lease then rawset(lease, "_fence_issue", issue) end
    end
    keepalive = keepalive or keep_lock(rc, id, owner, acquired_at, lease)
    -- alive() sees the lock; mqlease.run stops the keepalive of a handler it
    -- leaves behind (one cut off by grace) when it returns
    lease_mod.hold_lock(lease, rc, keepalive)
    -- a lease of the caller's own: the run finds the lock on the message's
    -- lease, to stop it for a handler it leaves behind (mqlease.lease's own
    -- lease of m, the usual one, is not asked for m.lease again)
    if rawget(lease, "_message") ~= m or getmetatable(lease) == FENCE_ON_READ then
      local of_m = m.lease
      if type(of_m) == "table" and of_m ~= lease then
        lease_mod.mirror_lock(of_m, rc, keepalive)
        rawset(lease, "_lock_mirror", of_m)
      end
    end
    local waited = core.now() - acquired_at
    -- (g.lost: a loss its keepalive's callback told while the message
    -- waited, all a client of the user's own without keepalive_lost tells,
    -- and its mark on the lease was just cleared by hold_lock)
    if (not g and waited >= ka_late) or (g and g.lost)
      or (waited >= ka_every and not lease_mod.lock_kept(lease)) then
      -- the reply came late (a stalled process, a long turn): the lock may
      -- lapse before its overdue renewal reaches Redis, or has lapsed, and
      -- another instance may hold it and run the message. Not ours to run:
      -- ask again later, as for a held lock. No lock is held meanwhile, so
      -- none is lost. (A little later than that, the renewal sent at once on
      -- registration keeps it: see spec/regress/redis-keepalive-from-acquire.)
      -- A prefetched lock's reply was read in time (its keepalive ran from
      -- then), so only a loss while its message waited counts.
      let_lock_go(m, lease, true)
      unlock(rc, key_strings(id, prefix), owner)
      return defer(m, o.defer_delay, "deferred_held")
    end
    if own_lease and not pcall(issue_fence, lease, m) then
      -- refused (the lock lapsed, counted lost) or no answer (counted): not
      -- ours to run now, asked again later, as for a held lock
      let_lock_go(m, lease, nil, rawget(lease, "_fence_refused"))
      unlock(rc, key_strings(id, prefix), owner)
      return defer(m, o.defer_delay, "deferred_held")
    end
    if own_lease and not lease_mod.held(lease) then
      -- the broker's lease ended during the token's call (a yield): as
      -- above, the handler does not start on a message that may be
      -- redelivered to another consumer by now
      let_lock_go(m, lease, true)
      unlock(rc, key_strings(id, prefix), owner)
      return "nack"
    end

    local ok, res, herr = pcall(handler, m, lease)
    if ok and res then
      -- the done marker before the ack: a redelivery from now on is acked
      -- without running; the unlock rides in the same script (see FINISH).
      -- The keepalive stays on until the marker is written.
      -- after: whether the lock went with the marker, or why no marker was
      -- written. A lock lost before the marker is counted, whatever the
      -- marker then found: the handler was told (alive() turned false).
      local kept = core.now() - acquired_at < ka_every or lease_mod.lock_kept(lease)
      -- the handler has ended: a task it left reading lease.fence while the
      -- marker is out gets none (the marker's script deletes the lock, and
      -- a token asked after it would be refused as a lost lock)
      rawset(lease, "_fence_issue", nil)
      local marked, after = finish(rc, sched, m, id, lease, owner)
      let_lock_go(m, lease, marked and kept and after == "unlocked",
        (marked and after == "taken") or rawget(lease, "_fence_refused"))
      if marked then return "ack" end
      -- the lease ended first: no ack; the lock lapses at its TTL, and the
      -- redelivery runs the handler again (the marker is all that could tell)
      return "nack", nil, "done marker not recorded: " .. tostring(after)
    end
    -- a fence read that found the lock gone: lost, whatever the keepalive saw
    let_lock_go(m, lease, nil, rawget(lease, "_fence_refused"))
    unlock(rc, key_strings(id, prefix), owner)
    if not ok then return "nack", nil, tostring(res) end
    return "nack", nil, herr ~= nil and tostring(herr) or "handler returned false"
  end
  if o.prefetch then prefetchers[policy] = prefetcher end
  settings[policy] = tuned
  return policy
end

-- consume-transform-produce exactly once (lua/mqlease/policy/transaction.lua)
_M.transaction_checker = function(opts) return require("mqlease.policy.transaction").new(opts) end

return _M
