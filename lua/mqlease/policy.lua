-- mqlease.policy: what happens around a handler.
--
-- A policy is a plain function:
--
--   policy(m, lease, handler) -> action [, delay [, err]]
--
--   action  "ack"   ack the message
--           "nack"  give it back; it comes back after delay seconds
--                   (nil: the run's nack_delay for m.delivery_attempt)
--           "skip"  do nothing: the policy settled the message itself
--   err     non-nil when the handler failed: logged through on_error and counted
--
-- The policy decides whether and how to call handler(m, lease), which returns
-- truthy on success or false/nil, err (or raises) on failure.

local pcall, tostring = pcall, tostring

local _M = {}

-- Runs the handler; ack on success, nack on failure (the default policy).
function _M.plain(m, lease, handler)
  local ok, res, err = pcall(handler, m, lease)
  if not ok then return "nack", nil, tostring(res) end
  if res then return "ack" end
  return "nack", nil, err ~= nil and tostring(err) or "handler returned false"
end

return _M
