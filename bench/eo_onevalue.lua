-- bench/eo_onevalue.lua: a second probe of a leaner key layout for the
-- exactly-once policy, for the benchmarks only (no worker runs it), with a
-- Redis Cluster form: bench/eo_onekey.lua takes its fences from one counter a
-- prefix, a key in a slot of its own, which a script over one message's keys
-- may not touch under Cluster (CROSSSLOT). Here everything a message has
-- lives in one key, in its own slot: the key's value says what the message
-- is, and the key's TTL is done_ttl's, whatever the value:
--
--   L <deadline ms> <fence> <owner>   locked by owner until the deadline
--                                     (Redis's clock: TIME in the script)
--   F <fence>                         unlocked unfinished (a handler failed)
--   D <fence>                         done
--
-- The fence survives a lapsed lock (the key outlives it), so the next owner's
-- is greater, as the policy's fence key guarantees. Two commands a message to
-- acquire (GET, SET) and two to finish (GET, SET), and one key, where the
-- policy runs seven and keeps three.
--
-- What the probe leaves out, and a real layout would need: the keepalive's
-- own script (compare the owner in the value, then SET a later deadline with
-- KEEPTTL, Redis 6.0+), the unlock (F), and a migration path (workers of the
-- current layout on the same Redis would not see this one's locks). TIME
-- before a write needs effects replication: the default from Redis 5, the only
-- mode from 7; redis.replicate_commands() asks for it on 5 and 6.
local common = require "bench.common"

local _M = {}

local NOW = [[
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
]]

-- KEYS: each message's key; ARGV: the lock's TTL in ms, done_ttl in ms (the
-- key's own TTL), then each message's owner. -> two elements a message: 1 and
-- its fence, 2 and '' (done before), or 0 and the holder.
_M.acquire_many = NOW .. [[
local ttl, keep, out = tonumber(ARGV[1]), ARGV[2], {}
local function one(key, owner)
  local v = redis.call('get', key)
  local fence = 0
  if v then
    local kind = string.sub(v, 1, 1)
    if kind == 'D' then return 2, '' end
    if kind == 'L' then
      local deadline, f, holder = string.match(v, '^L (%d+) (%d+) (.*)$')
      if tonumber(deadline) > now then return 0, holder end
      fence = tonumber(f)
    else fence = tonumber(string.match(v, '^F (%d+)')) or 0 end
  end
  fence = fence + 1
  redis.call('set', key, 'L ' .. (now + ttl) .. ' ' .. fence .. ' ' .. owner, 'PX', keep)
  return 1, fence
end
for i = 1, #KEYS do
  local ok, code, value = pcall(one, KEYS[i], ARGV[i + 2])
  if ok then out[2 * i - 1], out[2 * i] = code, value
  else out[2 * i - 1], out[2 * i] = tostring(code), '' end
end
return out
]]

-- KEYS: each message's key; ARGV: done_ttl in seconds, then each message's
-- owner. -> one element a message: 1 (the lock was ours, and live) or 0.
_M.finish_many = NOW .. [[
local keep, out = ARGV[1], {}
local function one(key, owner)
  local v = redis.call('get', key) or ''
  local deadline, f, holder = string.match(v, '^L (%d+) (%d+) (.*)$')
  if not f then f = string.match(v, '^[FD] (%d+)') or '0' end
  redis.call('set', key, 'D ' .. f, 'EX', keep)
  return (holder == owner and tonumber(deadline) > now) and 1 or 0
end
for i = 1, #KEYS do
  local ok, res = pcall(one, KEYS[i], ARGV[i + 1])
  out[i] = ok and res or tostring(res)
end
return out
]]

-- The two calls of a batch of ids, as { "eval", ... } tables for
-- redis:_eval_cmd: acquire and finish. owners[i] is ids[i]'s owner.
function _M.calls(prefix, ids, owners, ttl_ms, done_ttl)
  return common.one_key_calls(_M.acquire_many, _M.finish_many, prefix, ids, owners, {},
    { ttl_ms, tostring(tonumber(done_ttl) * 1000) }, { done_ttl })
end

return _M
