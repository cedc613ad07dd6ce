-- bench/eo_onekey.lua: a probe of a leaner key layout for the exactly-once
-- policy, for the benchmarks only (no worker runs it): one key a message that
-- holds the lock (its owner, with the lock's PX) and then the done marker (an
-- empty string, with done_ttl's EX) in its place, and fences from one counter
-- a key prefix, taken by one INCRBY for a whole batch. Against the policy's
-- layout (lock, fence and done keys; EXISTS, SET NX PX, INCR, PEXPIRE to
-- acquire; SET EX, GET, DEL to finish) that is three commands a message where
-- the policy runs seven, and one key where it keeps three (two of them for
-- done_ttl). Each message's part still runs in a pcall, as the policy's do.
--
-- What the probe leaves out, and a real layout would need: a migration path
-- (workers of the current layout on the same Redis would not see this one's
-- locks), the policy's answer for a lock another owner holds, and a Cluster
-- form (the counter's slot is not the messages'). bench/eo_parts.lua prices
-- it ("onekey"), and bench/eo_load.lua sends it with LAYOUT=onekey.
local common = require "bench.common"

local _M = {}

-- KEYS: the fence counter, then each message's key; ARGV: the lock's TTL in
-- ms, then each message's owner. -> two elements a message: 1 and its fence,
-- 2 and '' (done before), or 0 and the holder.
_M.acquire_many = [[
local n, ttl, out = #KEYS - 1, ARGV[1], {}
local base = redis.call('incrby', KEYS[1], n) - n
local function one(key, owner, fence)
  if redis.call('set', key, owner, 'NX', 'PX', ttl) then return 1, fence end
  local v = redis.call('get', key)
  if v == '' then return 2, '' end
  return 0, v or ''
end
for i = 1, n do
  local ok, code, value = pcall(one, KEYS[i + 1], ARGV[i + 1], base + i)
  if ok then out[2 * i - 1], out[2 * i] = code, value
  else out[2 * i - 1], out[2 * i] = tostring(code), '' end
end
return out
]]

-- KEYS: each message's key; ARGV: the marker's TTL in seconds, then each
-- message's owner. -> one element a message: 1 (the lock was ours) or 0.
_M.finish_many = [[
local ttl, out = ARGV[1], {}
local function one(key, owner)
  local ours = redis.call('get', key) == owner
  redis.call('set', key, '', 'EX', ttl)
  return ours and 1 or 0
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
  return common.one_key_calls(_M.acquire_many, _M.finish_many, prefix, ids, owners, { prefix .. "fence" },
    { ttl_ms }, { done_ttl })
end

return _M
