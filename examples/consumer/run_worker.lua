-- examples/consumer/run_worker.lua -- a production-shaped worker under mqlease.run.
--
--   lua5.4 run_worker.lua [ENDPOINTS [GROUP [TOPIC]]]
--   (defaults: 127.0.0.1:8081 worker tasks, where `mqlease devbroker` listens)
--
-- Up to 32 handlers at once (coroutines). SIGTERM or SIGINT (Ctrl-C) drains it:
-- no new messages, running handlers get `grace` seconds to finish, what still
-- runs is given back to the broker (another instance gets it after 1 s), and
-- the process exits. A restart therefore never runs a message twice at once,
-- and loses none. Kubernetes sends SIGTERM and waits 30 s: grace = 25 fits.
local mqlease = require "mqlease"

local consumer = assert(mqlease.consumer {
  endpoints = arg[1] or "127.0.0.1:8081", group = arg[2] or "worker", topic = arg[3] or "tasks",
  invisible = 30,
})

local summary = mqlease.run(consumer, function(m, lease)
  -- the work; mqlease.sleep (and every mqlease call) yields to other handlers
  mqlease.sleep(tonumber(m.body:match("sleep=(%d+%.?%d*)")) or 0.1)
  if not lease:alive() then
    -- the lease ran out (budget or broker): someone else may have the message now
    return nil, "lease lost while working"
  end
  return true   -- ack
end, {
  concurrency = 32,
  grace = 25,
  signals = true,   -- this script is the process: drain on SIGTERM/SIGINT (a library leaves them alone)
  nack_delay = function(attempt) return math.min(2 ^ attempt, 60) end,
  on_error = function(m, err) io.stderr:write(("failed %s: %s\n"):format(m.id, err)) end,
})

print(("stopped (%s): %d received, %d acked, %d nacked, %d given back"):format(
  summary.reason, summary.received, summary.acked, summary.nacked, summary.drained))
print(mqlease.metrics.text(consumer))
