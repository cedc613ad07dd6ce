-- mqlease.run.receiver: the task that receives for mqlease.run, while the
-- in-flight limits allow (messages and body bytes held), and hands what it
-- receives to the run (w.arrived). It parks while the run holds its limit (a
-- settling message wakes it) and ends once the run stops or the consumer is
-- closed.

local metrics = require "mqlease.metrics"
local wait = require "mqlease.loop"

local min, tostring, pcall = math.min, tostring, pcall

local _M = {}

-- w: the run's wiring: consumer, client, o (options), st (inflight, bytes),
-- sched, stopping(), stop(reason), arrived(msgs) (each message counted in
-- st at once, then admitted or, after the stop, given back), ended().
function _M.run(w)
  local consumer, client, o, st, sched = w.consumer, w.client, w.o, w.st, w.sched
  local batch = consumer.options.batch
  while not w.stopping() do
    if st.inflight >= o.max_inflight or st.bytes >= o.max_inflight_bytes then
      sched:park()   -- a settling message wakes us
    else
      -- the byte budget holds per receive too: the core gives back what would pass it.
      -- A receive that raises (a consumer of the caller's own, a defect) is
      -- a failed receive: reported and tried again, where it ended this task
      -- and the run received nothing more until its stop.
      local called, msgs, err, code = pcall(consumer.receive, consumer, min(batch, o.max_inflight - st.inflight),
        { max_bytes = o.max_inflight_bytes - st.bytes })
      if not called then msgs, err, code = nil, msgs, "INTERNAL" end
      if msgs then
        metrics.received(consumer, msgs)
        w.arrived(msgs)
      elseif code == "CLOSED" or (client.closed and client:closed()) then
        -- closed under the run (its receive in flight fails CANCELLED) or
        -- before it: nothing can come any more
        w.stop("closed")
      elseif not w.stopping() then
        io.stderr:write(("mqlease: receive failed: %s (%s)\n"):format(tostring(err), tostring(code)))
        wait.sleep(1)
      end
    end
  end
  w.ended()
end

return _M
