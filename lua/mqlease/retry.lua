-- mqlease.retry: how long a failed message waits before its next attempt.
--
-- The proxy sends every consumer its group's retry policy in the Telemetry
-- Settings (GrpcClientSettingsManager.mergeSubscriptionData); c:metrics()
-- shows it as `retry_policy`:
--
--   { max_attempts = 17, steps = { 1, 5, 10, 30, 60, ... } }          CUSTOMIZED
--   { max_attempts = n, initial = s, max = s, multiplier = x }         EXPONENTIAL
--
-- max_attempts is the group's retryMaxTimes + 1. The delay after a failed
-- attempt n is read as the official clients read it
-- (CustomizedBackoffRetryPolicy, ExponentialBackoffRetryPolicy):
-- steps[min(n, #steps)], or min(initial * multiplier^(n-1), max), a max of
-- 0 included (the Java client's min takes it as it is: no wait). Never past
-- MAX_DELAY, the longest nack m:nack takes (the proxy's longest invisible
-- duration): a longer step, or a policy growing with no max, would make the
-- nack raise, and the run give the message back after its release_delay.

local min, floor = math.min, math.floor
local MAX_DELAY = 43200

local _M = {}

-- Without a policy from the server (an old proxy, the dev broker without one).
local function fallback(attempt)
  return min(2 ^ (attempt - 1), 60)
end

-- Seconds to wait after attempt `attempt` (from 1) failed.
function _M.delay(policy, attempt)
  attempt = attempt or 1
  if attempt < 1 then attempt = 1 end
  attempt = floor(attempt)
  if type(policy) ~= "table" then return fallback(attempt) end
  local steps = policy.steps
  if steps then
    if #steps == 0 then return fallback(attempt) end
    return min(steps[min(attempt, #steps)], MAX_DELAY)
  end
  local initial, max, mul = policy.initial, policy.max, policy.multiplier or 1
  if not initial then return fallback(attempt) end
  local d = initial * mul ^ (attempt - 1)
  if max and d > max then d = max end
  return min(d, MAX_DELAY)
end

-- Attempts the policy allows in all (nil when there is no policy).
function _M.max_attempts(policy)
  return type(policy) == "table" and policy.max_attempts or nil
end

return _M
