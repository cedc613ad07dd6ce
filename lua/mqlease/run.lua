-- mqlease.run: a worker loop -- many handlers at once as coroutines, flow
-- control, and a shutdown that never multiplies or loses a message.
--
--   mqlease.run(consumer, function(m, lease) ... return true end, { concurrency = 64 })
--
-- This file checks the arguments and picks the caller's event loop; the run
-- itself is made of small parts in mqlease/run/ (see mqlease/run/worker.lua
-- for the map): a receiver, a sequencer that keeps message groups in order,
-- one task per message that owns its end, a waiter, a releaser and a drain.
-- docs/guarantees.md states what they promise together.

local config = require "mqlease.config"
local wait = require "mqlease.loop"
local worker = require "mqlease.run.worker"

local type, error = type, error

return function(consumer, handler, opts)
  if type(handler) ~= "function" then
    error("bad argument #2 to 'run' (handler: function expected, got " .. type(handler) .. ")", 2)
  end
  local o = config.run_options(opts)
  -- tasks in the caller's event loop (mqlease.scheduler in plain Lua)
  local sched = wait.scheduler()
  if o.signals and not sched.watch then
    error("mqlease.run: option 'signals' must be false in this event loop (it owns the signals; use 'stop')", 2)
  end
  -- (a consumer that could not be made is nil: assert-less code reached the
  -- run's insides, "attempt to index a nil value (local 'consumer')"). Last,
  -- as the options are checked before the consumer is touched.
  if type(consumer) ~= "table" or type(consumer.receive) ~= "function" then
    error("bad argument #1 to 'run' (consumer: an mqlease.consumer expected, got " .. type(consumer) .. ")", 2)
  end
  return worker.run(consumer, handler, o, sched)
end
