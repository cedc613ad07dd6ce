-- spec/support/model/redis.lua: the Redis half of the fault model -- what the
-- exactly-once policy asks of mqlease.redis (eval of its scripts, lock
-- keepalives), over simulated time, failing on purpose. Fencing tokens issued
-- on read are kept in issue order (fences) for the model to check.
--
-- Keys live with an expiry in simulated seconds. A script call fails (no
-- reply within the timeout) as the schedule says, sometimes after Redis ran
-- it. A keepalive renews its lock's TTL until the schedule breaks it (the key
-- is gone: a failover that lost it, an eviction), or until its max is
-- spent; either way it counts as lost from then on, as the C keepalive
-- reports it. The model checks that no keepalive is still running when
-- mqlease.run has returned, and learns which messages lost their lock (a
-- legitimate second run under exactly-once).

local policy = require "mqlease.policy"
local wait = require "mqlease.loop"

local _M = {}

-- cfg: rng, clock, faults = { eval_fail, applied, lock_break, lock_break_within }.
function _M.new(cfg)
  local rng, clock, faults = cfg.rng, cfg.clock, cfg.faults
  local r = { keys = {}, kas = {}, next_ka = 0, lock_lost_of = {}, released = {}, call = true, fences = {} }

  local function get(k)
    local e = r.keys[k]
    if e and e.expires <= clock.t then
      r.keys[k] = nil
      e = nil
    end
    return e and e.value
  end
  local function set(k, v, ttl) r.keys[k] = { value = v, expires = clock.t + ttl } end
  local function id_of(key) return key:match("{(.*)}") end

  -- Brings a keepalive's lock up to now: renewed while it runs, gone when
  -- it breaks, left to lapse once its max is spent.
  local function tick(ka)
    if not ka.active or ka.lost then return end
    local now = clock.t
    local ends = math.min(ka.breaks_at, ka["until"])
    local e = r.keys[ka.key]
    if not e and r.released[ka.key] == ka.owner then
      -- its owner deleted it (the marker's or the unlock's script): the
      -- renewal finds it gone as the C keepalive would, but nothing was lost
      ka.lost = true
      return
    end
    local ours = e and e.value == ka.owner and e.expires > math.min(now, ends)
    if ours and now < ends then
      e.expires = now + ka.ttl
      return
    end
    ka.lost = true
    r.lock_lost_of[id_of(ka.key)] = (r.lock_lost_of[id_of(ka.key)] or 0) + 1
    -- the lost event, as the next reply's pump of the real client brings it
    if ka.on_lost then ka.on_lost(ka.id) end
    if ours then
      if ka.breaks_at <= ka["until"] then r.keys[ka.key] = nil      -- broken: the key is gone
      else e.expires = ka["until"] + ka.ttl end                     -- spent: it lapses
    end
  end

  function r.done_of(id)
    return get(policy.keys(id, cfg.prefix or "mqlease:").done) ~= nil
  end

  local run_script
  function run_script(script, keys, args)
    if script == policy.scripts.acquire then
      if get(keys[3]) then return { 2, "" } end
      if not get(keys[1]) then
        set(keys[1], args[1], tonumber(args[2]) / 1000)
        if args[3] == "0" then return { 1, "" } end   -- the token is issued on read
        local fence = (tonumber(get(keys[2])) or 0) + 1
        set(keys[2], tostring(fence), tonumber(args[3]) / 1000)
        return { 1, fence }
      end
      return { 0, get(keys[1]) }
    elseif script == policy.scripts.finish or script == policy.scripts.finish_run then
      -- the marker's value: '1', or the run's owner (finish_run)
      set(keys[2], script == policy.scripts.finish_run and args[1] or "1", tonumber(args[2]))
      if get(keys[1]) == args[1] then
        r.keys[keys[1]] = nil
        r.released[keys[1]] = args[1]
        return 1
      end
      return 0
    elseif script == policy.scripts.acquire_many then
      -- each message's part as the single script does it, its two answers
      -- side by side in one flat list
      local out = {}
      for i = 1, #args - 2 do
        local one = run_script(policy.scripts.acquire, { keys[3 * i - 2], keys[3 * i - 1], keys[3 * i] },
          { args[i + 2], args[1], args[2] })
        out[2 * i - 1], out[2 * i] = one[1], one[2]
      end
      return out
    elseif script == policy.scripts.finish_many or script == policy.scripts.finish_run_many then
      local one = script == policy.scripts.finish_many and policy.scripts.finish or policy.scripts.finish_run
      local out = {}
      for i = 1, #args - 1 do
        out[i] = run_script(one, { keys[2 * i - 1], keys[2 * i] }, { args[i + 1], args[1] })
      end
      return out
    elseif script == policy.scripts.fence then
      if get(keys[1]) ~= args[1] then return 0 end
      local fence = (tonumber(get(keys[2])) or 0) + 1
      set(keys[2], tostring(fence), tonumber(args[2]) / 1000)
      r.fences[#r.fences + 1] = { id = id_of(keys[1]), fence = fence, owner = args[1] }
      return { 1, fence }
    elseif script == policy.scripts.unlock then
      if get(keys[1]) == args[1] then
        r.keys[keys[1]] = nil
        r.released[keys[1]] = args[1]
        return 1
      end
      return 0
    end
    error("model redis: a script it does not know")
  end

  -- one server: the policy sends the scripts of a scheduler turn's messages
  -- as one call (mqlease.policy.batch), and a fault fails or applies it whole
  function r._one_server() return true end

  function r.eval(_, script, keys, args)
    -- every live keepalive is brought up to the moment the script runs
    for _, ka in pairs(r.kas) do tick(ka) end
    wait.sleep(rng.range(0.001, 0.02))
    for _, ka in pairs(r.kas) do tick(ka) end
    if rng.chance(faults.eval_fail) then
      if rng.chance(faults.applied) then run_script(script, keys, args) end
      wait.sleep(1)   -- the client's timeout
      return nil, "no reply within the timeout", "TIMEOUT"
    end
    return run_script(script, keys, args)
  end

  function r.keepalive(_, key, owner, ttl, every, max, on_lost, since)
    r.next_ka = r.next_ka + 1
    local from = since or clock.t
    local breaks_at = math.huge
    if rng.chance(faults.lock_break) then breaks_at = clock.t + rng.range(0, faults.lock_break_within) end
    r.kas[r.next_ka] = { id = r.next_ka, key = key, owner = owner, ttl = ttl, every = every, ["until"] = from + (max or math.huge),
      breaks_at = breaks_at, active = true, lost = false, on_lost = on_lost }
    return r.next_ka
  end

  function r.keepalive_lost(_, id)
    local ka = r.kas[id]
    if not ka then return false end
    tick(ka)
    return ka.lost
  end

  function r.keepalive_stop(_, id)
    local ka = r.kas[id]
    if not ka then return false end
    tick(ka)
    ka.active = false
    r.kas[id] = nil
    return ka.lost
  end

  -- Keepalives still running: { key, ... }.
  function r.running()
    local out = {}
    for _, ka in pairs(r.kas) do
      if ka.active then out[#out + 1] = ka.key end
    end
    return out
  end

  return r
end

return _M
