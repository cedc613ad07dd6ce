-- mqlease.run.drain: the end of a run, once a stop is asked for. It never
-- multiplies or loses a message:
--
--   1. stop receiving (the receive in flight is cancelled);
--   2. give back what never started (queued, or in a batch whose locks are
--      still being taken), and what waits behind an unfinished
--      message of its group (the broker keeps an ordered queue blocked while
--      that one's lease lives, so nothing after it is delivered before it);
--   3. wake what waits to be tried again: each gives itself back;
--   4. mode "wait": let running handlers finish until grace;
--   5. give back what still runs: its handler's later release fails, never
--      doubles (the core no longer holds the lease), and its task settles it;
--   6. wait for those nacks, for the messages that end by themselves (a
--      waiting one giving itself back, a release under way, an unused lock
--      deleted), and for the receiver's cancelled call, so no lease arrives
--      after the consumer is closed.
--
-- Every nack of the drain goes out at once: one at a time, n slow nacks
-- would outlast any deadline.

local core = require "mqlease.core"
local lease_mod = require "mqlease.lease"

local pairs, ipairs = pairs, ipairs

local _M = {}

-- w: the run's wiring (see mqlease.run.worker): o, st, sched, release_delay
-- (the consumer's: when what it gives back is due again), seq,
-- waiter, client, watcher, receiving() (the receiver, a batch refused at the
-- stop, or an unused lock being deleted), take_arriving() (the messages of
-- batches whose locks the policy is taking, out of the run: each goes back
-- through refuse(m)), give_back(m) (a queued message: back
-- to the broker, settled), running() (messages whose handler runs),
-- nrunning(), ending() (messages waiting or releasing, and the unlocks of
-- prefetched locks their messages never used), drain_extension,
-- and done() when it is over.
function _M.run(w)
  local o, st, sched = w.o, w.st, w.sched
  local me = coroutine.running()
  local grace_deadline = core.now() + o.grace
  -- the whole drain from here: the watcher's clock started at the signal,
  -- ours may start later (or without a signal: run_for, stop)
  if w.watcher then w.watcher:extend(o.grace + w.drain_extension) end
  -- a closed client has no receive left to cancel (and raises if asked)
  local client = w.client
  if not (client.closed and client:closed()) then client:cancel_receives() end
  w.wake_receiver()

  -- each give-back in a task of its own, all waited for below (pending)
  local pending = 0
  local function in_task(fn, m)
    pending = pending + 1
    sched:spawn(function()
      fn(m)
      pending = pending - 1
      if pending == 0 then sched:wake(me) end
    end)
  end
  local function nack_running(m)
    if m:nack(w.release_delay) then st.drained = st.drained + 1 end
  end

  -- a batch still taking its locks (the exactly-once prefetch) goes back
  -- at once: its call may take up to Redis's timeout
  for _, m in ipairs(w.take_arriving()) do in_task(w.refuse, m) end
  for _, m in ipairs(w.seq:take_all()) do in_task(w.give_back, m) end
  w.waiter:wake_all()
  if o.mode == "wait" then
    while w.nrunning() > 0 and core.now() < grace_deadline do
      sched:park(grace_deadline)   -- a finishing handler wakes us
    end
  end
  if w.watcher then w.watcher:extend(w.drain_extension) end
  for m in pairs(w.running()) do
    if lease_mod.held(m.lease) then in_task(nack_running, m) end
  end
  -- the nacks, and the messages that end by themselves now: those that
  -- waited and give themselves back, those whose release is under way
  local nack_deadline = core.now() + w.drain_extension
  while (pending > 0 or w.ending() > 0) and core.now() < nack_deadline do sched:park(nack_deadline) end
  local flush_deadline = core.now() + 2
  while w.receiving() and core.now() < flush_deadline do
    sched:park(flush_deadline)   -- the receiver wakes us when it ends
  end
  w.done()
end

return _M
