-- examples/consumer/worker.lua -- the smallest useful mqlease worker.
--
--   lua5.4 worker.lua [ENDPOINTS [GROUP [TOPIC [SECONDS]]]]
--   (defaults: 127.0.0.1:8081 worker tasks 60, where `mqlease devbroker` listens)
--
-- Receives messages and handles each one; while a handler runs, the C core
-- renews the message's lease, so a slow task is never handed to a second
-- worker. Ack on success, nack (give back with a delay) on failure. On
-- SIGTERM or SIGINT it finishes the message in hand and closes, which gives
-- back what it still holds (mqlease.signals: past 25 s, or at a second
-- signal, the core does that and ends the process).
local mqlease = require "mqlease"

local endpoints, group, topic = arg[1] or "127.0.0.1:8081", arg[2] or "worker", arg[3] or "tasks"
local run_for = tonumber(arg[4] or "60")

local consumer = assert(mqlease.consumer {
  endpoints = endpoints, group = group, topic = topic,
  invisible = 10,  -- short: a crashed worker's messages come back within 10 s
  await = 5,       -- long-poll seconds per receive
})

local function handle(m)
  -- the "work": the body says how many seconds it takes
  local seconds = tonumber(m.body:match("sleep=(%d+%.?%d*)")) or 0
  mqlease.sleep(seconds)
  return true
end

io.stdout:setvbuf("line")   -- each line as it happens, into a pipe or a file too
local stop = mqlease.signals { consumers = { consumer }, grace = 25 }
local stop_at = mqlease.now() + run_for
while mqlease.now() < stop_at and not stop:received() do
  local msgs, err, code = consumer:receive()
  if not msgs then
    io.stderr:write(("receive failed: %s (%s)\n"):format(err, code))
    mqlease.sleep(1)
  end
  for _, m in ipairs(msgs or {}) do
    -- a message received after the signal is not started: close gives it back
    if stop:received() then break end
    print(("%s received, attempt %d"):format(m.id, m.delivery_attempt))
    local started = mqlease.now()
    local ok, why = pcall(handle, m)
    if ok and why then
      local acked, aerr, acode = m:ack()
      print(("%s %-22s attempt %d, %.1f s, %d renewals, ack: %s"):format(m.id, ("%q"):format(m.body), m.delivery_attempt,
        mqlease.now() - started, m.lease.renewals, acked and "ok" or (aerr .. " " .. acode)))
    else
      local nacked, nerr, ncode = m:nack(5)   -- comes back in 5 s, as the next attempt
      print(("%s failed (%s), nack: %s"):format(m.id, tostring(why), nacked and "ok" or (nerr .. " " .. ncode)))
    end
  end
end
consumer:close()   -- nacks what it still holds: another worker takes it at once
if stop:received() then print("stopped by signal " .. stop:received()) end
stop:close()
