-- mqlease.run.worker: mqlease.run put together from its parts, in one
-- scheduler (the caller's event loop, or a simulated one in the fault model
-- of spec/unit/run_model_spec.lua).
--
--   receiver   receives while the in-flight limits allow;  (run/receiver.lua)
--              with the exactly-once policy's prefetch,
--              each batch's locks are taken as it arrives
--   sequencer  which message may start next; FIFO groups   (run/sequencer.lua)
--   task       one per started message: policy, verb,      (run/task.lua)
--              release; the one owner of its end
--   waiter     keeps a message to be tried again           (run/waiter.lua)
--   releaser   acks in batches; failed releases retried    (run/releaser.lua)
--   drain      the stop                                    (run/drain.lua)
--   life       the states every part moves a message       (run/life.lua)
--              through, and the settle every end reaches
--
-- Every message ends exactly once: acked, dead-lettered, nacked, or -- if its
-- lease ends first, or the process is killed -- left to the broker, which
-- hands it out again.

local core = require "mqlease.core"
local metrics = require "mqlease.metrics"
local live = require "mqlease.live"
local retry = require "mqlease.retry"
local policy_mod = require "mqlease.policy"
local lease_mod = require "mqlease.lease"
local message = require "mqlease.message"
local life_mod = require "mqlease.run.life"
local sequencer = require "mqlease.run.sequencer"
local waiter_mod = require "mqlease.run.waiter"
local releaser_mod = require "mqlease.run.releaser"
local task = require "mqlease.run.task"
local receiver = require "mqlease.run.receiver"
local drain = require "mqlease.run.drain"

local pcall, type, pairs, ipairs, error, tostring, rawget = pcall, type, pairs, ipairs, error, tostring, rawget

local _M = {}

local function log_error(m, err)
  io.stderr:write(("mqlease: handler failed for %s (attempt %d): %s\n"):format(
    task.printable(m.id), m.delivery_attempt or 0, tostring(err)))
end

-- The run's nack delay for an attempt: the run's own (a number or a
-- function), else the group's retry policy as the proxy sent it.
local function nack_delay_of(o, server_policy)
  local d = o.nack_delay
  if type(d) == "number" then return function() return d end end
  return d or function(attempt) return retry.delay(server_policy, attempt) end
end

-- Runs handler over consumer's messages in sched until a stop; o: checked
-- options (mqlease.config.run_options). probe, for the fault model: called
-- with the run's life once it is made.
function _M.run(consumer, handler, o, sched, probe)
  local settings = consumer:metrics()
  local server_policy, fifo = settings.retry_policy, settings.fifo == true
  local client = consumer._router.client
  local release_delay = consumer.options.release_delay
  local st = {
    stopping = false, done = false, reason = nil, inflight = 0, bytes = 0, nrunning = 0,
    received = 0, acked = 0, nacked = 0, failed = 0, drained = 0, skipped = 0, dead_lettered = 0,
    retried = 0, held = 0, given_back = 0,
  }
  local receiver_co, drainer_co
  local seq = sequencer.new()
  local waiter = waiter_mod.new(sched, function() return st.stopping end)
  local start_handlers, stop

  local ctx = {
    consumer = consumer, st = st, release_delay = release_delay,
    -- await and process time, as the official clients record them
    handler = metrics.timed(consumer, handler),
    policy = o.policy or policy_mod.plain,
    on_error = o.on_error or log_error,
    nack_delay = nack_delay_of(o, server_policy),
    -- max_attempts: a message past its last attempt goes to the DLQ without
    -- running, and a failure on its last attempt sends it there instead of
    -- back to the queue. Unordered messages leave the server's limit to the
    -- proxy (it forwards a message past it at receive time); ordered ones
    -- are retried here, so here is where their limit is kept.
    max_attempts = o.max_attempts,
    ordered_max_attempts = o.max_attempts or retry.max_attempts(server_policy) or 17,
    waiter = waiter,
    releaser = releaser_mod.new(consumer, sched),
  }

  -- The policy's lock prefetch (mqlease.policy.exactly_once): the locks of a
  -- received batch taken as it arrives, in a task of its own. A grant its
  -- message never used (given back, its lease ended, refused at the stop) is
  -- released when the message settles: its keepalive stopped at once, its
  -- lock deleted by a task the drain waits for (unlocking).
  local prefetcher = policy_mod.prefetcher(ctx.policy)
  local prefetching = {}   -- message -> true until its batch's locks are taken or released
  local arriving = {}      -- batch -> true while its locks are taken (see arrived)
  local unlocking = 0
  -- batches enter the run in the order they arrived, whichever's locks come
  -- first (an ordered group's messages must reach the sequencer in order)
  local arrivals, admitted_upto, by_turn = 0, 0, {}   -- by_turn: turn -> its batch, until it enters
  local function spawn_unlock(fn)
    unlocking = unlocking + 1
    sched:spawn(function()
      pcall(fn)
      unlocking = unlocking - 1
      if drainer_co then sched:wake(drainer_co) end
    end)
  end

  -- A message given back unrun: after the stop, or held behind an ordered
  -- message that ended unreleased. It is queued (give_back) or already
  -- moved to releasing (settle_given_back); it settles here.
  -- drained: the stop's drain gives it back (counted so); else it is an
  -- ordered message given back behind one that may come back (given_back)
  local function settle_given_back(m, drained)
    -- an unused prefetched lock deleted before the nack: a redelivery must
    -- not find it held (and defer)
    if prefetcher then prefetcher.release(m, function(unlock) pcall(unlock) end) end
    ctx.life:settle(m, task.give_back(ctx, m, drained))
  end
  local function give_back(m)
    ctx.life:move(m, "releasing")
    settle_given_back(m, true)
  end

  local function wake_receiver()
    if receiver_co then sched:wake(receiver_co) end
  end

  local function on_settled(m, outcome)
    if prefetcher then prefetcher.release(m, spawn_unlock) end
    st.inflight = st.inflight - 1
    st.bytes = st.bytes - #m.body
    local back = seq:settled(m, outcome == "acked" or outcome == "dead_lettered")
    if back and #back > 0 then
      -- it may come back: what waited behind it must not run before it
      for _, b in ipairs(back) do
        st.given_back = st.given_back + 1
        consumer:count("fifo_given_back")
        -- releasing from now, not from when its task first runs: a drain
        -- that looks before then must see it ending and wait for its nack
        -- (it ended the run and closed the consumer with the lease held)
        ctx.life:move(b, "releasing")
        sched:spawn(settle_given_back, b, false)
      end
    end
    wake_receiver()
    if drainer_co then sched:wake(drainer_co) end
  end
  local life = life_mod.new(on_settled)
  ctx.life = life
  if probe then probe(life) end

  -- Handler slots (o.concurrency): a task holds one while its message runs
  -- or is released, not while it waits to be tried again (a retry in place,
  -- a policy's defer): Java's FifoConsumeService schedules a retry without
  -- holding a consume thread, and a waiting head of one group held every
  -- other group back when the slots were few. A message back from waiting
  -- gets the next free slot before a new message does.
  local slot_waiters = {}   -- { co =, given = } of tasks waiting for a slot, oldest first
  local function free_slot()
    st.nrunning = st.nrunning - 1
    if drainer_co then sched:wake(drainer_co) end
    -- (one taken past concurrency, by a message that only ended, frees
    -- none; after the stop nothing runs again, and the stop woke the waiters)
    if st.stopping or st.nrunning >= o.concurrency then return end
    local w = table.remove(slot_waiters, 1)
    if w then
      st.nrunning = st.nrunning + 1
      w.given = true
      sched:wake(w.co)
    else
      start_handlers()
    end
  end
  ctx.leave_slot = free_slot
  -- A slot again for m, whose wait ended with "again": -> "again" once the
  -- calling task holds one, "stopping" once the run stops first, "ended"
  -- once m's lease ends first (looked at every second, as the waiter does).
  -- Either of the last two also leaves the task holding one, as one more
  -- than concurrency if need be: its message only ends now, which runs no
  -- handler, and the task's end frees it.
  function ctx.take_slot(m)
    if not st.stopping and st.nrunning < o.concurrency and #slot_waiters == 0 then
      st.nrunning = st.nrunning + 1
      return "again"
    end
    local w = { co = coroutine.running(), given = false }
    slot_waiters[#slot_waiters + 1] = w
    local why = "again"
    while not w.given do
      if st.stopping then why = "stopping" break end
      if not lease_mod.held(m.lease) then why = "ended" break end
      sched:park(core.now() + 1)   -- a freed slot, the stop or the second wakes it
    end
    for i = #slot_waiters, 1, -1 do
      if slot_waiters[i] == w then table.remove(slot_waiters, i) end
    end
    if not w.given then st.nrunning = st.nrunning + 1 end
    -- a slot given as the stop came: the message is given back all the same
    if st.stopping then return "stopping" end
    return why
  end
  -- A slot at once, as one more than concurrency if need be, for a task
  -- whose message only ends now (see take_slot).
  function ctx.hold_slot()
    st.nrunning = st.nrunning + 1
  end

  local function message_task(m)
    task.run(ctx, m)
    free_slot()
  end

  function start_handlers()
    while not st.stopping and st.nrunning < o.concurrency do
      local m = seq:next()
      if not m then break end
      st.nrunning = st.nrunning + 1
      sched:spawn(message_task, m)
    end
  end

  -- A received message enters the run; one that arrived after the stop
  -- never ran: it goes straight back.
  local function refuse(m)
    -- its unused lock deleted here, before the nack: whoever waits for this
    -- refusal (the drain, through its batch) waits for the delete too
    if prefetcher then prefetcher.release(m, function(unlock) pcall(unlock) end) end
    if m:nack(release_delay) then st.drained = st.drained + 1 end
  end
  local function admit(m)
    st.received = st.received + 1
    if st.stopping then return refuse(m) end
    life:enter(m)
    seq:admit(m)
    st.inflight = st.inflight + 1
    st.bytes = st.bytes + #m.body
  end

  -- What a receive brought. With a prefetch its messages count against the
  -- in-flight limits at once, and enter the run once their locks are taken
  -- (or the call failed: each then acquires its own at its turn), in the
  -- order they arrived. A stop does not wait for a batch's call (up to
  -- Redis's timeout): the drain takes every batch not yet in the run
  -- (take_arriving) and gives its messages back, grants released; a call
  -- that returns after that only releases what it granted.
  local function arrived(msgs)
    if not prefetcher or #msgs == 0 or st.stopping then
      for _, m in ipairs(msgs) do admit(m) end
      start_handlers()
      return
    end
    local batch = { msgs = msgs }
    arriving[batch] = true
    for _, m in ipairs(msgs) do
      prefetching[m] = true
      st.inflight = st.inflight + 1
      st.bytes = st.bytes + #m.body
    end
    arrivals = arrivals + 1
    local turn = arrivals
    sched:spawn(function()
      if not st.stopping then pcall(prefetcher.prefetch, msgs, spawn_unlock) end
      while not batch.taken and not st.stopping and admitted_upto ~= turn - 1 do
        batch.co = coroutine.running()
        sched:park()   -- the batch before it, or the drain, wakes it
        batch.co = nil
      end
      if batch.taken then
        for _, m in ipairs(msgs) do
          prefetcher.release(m, spawn_unlock)
          prefetching[m] = nil
        end
        return
      end
      -- stopping: the drain takes it (it has not run yet, or it would have)
      if st.stopping then return end
      arriving[batch] = nil
      for _, m in ipairs(msgs) do
        prefetching[m] = nil
        st.inflight = st.inflight - 1
        st.bytes = st.bytes - #m.body
        admit(m)
      end
      admitted_upto = turn
      by_turn[turn] = nil
      local next_batch = by_turn[turn + 1]
      if next_batch and next_batch.co then sched:wake(next_batch.co) end
      start_handlers()
      wake_receiver()
    end)
    by_turn[turn] = batch
  end

  -- The drain's: the messages of every batch not yet in the run, taken out
  -- of the run's counts, for the drain to give back at once (refuse, which
  -- releases what their call granted so far). Their tasks release the rest
  -- when the calls return.
  local function take_arriving()
    local out = {}
    for batch in pairs(arriving) do
      arriving[batch] = nil
      batch.taken = true
      if batch.co then sched:wake(batch.co) end
      for _, m in ipairs(batch.msgs) do
        st.inflight = st.inflight - 1
        st.bytes = st.bytes - #m.body
        st.received = st.received + 1
        out[#out + 1] = m
      end
    end
    by_turn = {}
    return out
  end

  receiver_co = sched:spawn(receiver.run, {
    consumer = consumer, client = client, o = o, st = st, sched = sched,
    stopping = function() return st.stopping end,
    stop = function(reason) stop(reason) end,
    arrived = arrived,
    ended = function()
      receiver_co = nil
      if drainer_co then sched:wake(drainer_co) end
    end,
  })

  local watcher
  -- What the rest of a live drain may take once grace is over: the nacks of
  -- running handlers (one request timeout, two if a renewal is in flight
  -- first), up to 2 s for the cancelled receive, and consumer:close() -- one
  -- request timeout for its nack of what the drain could not give back (a
  -- proxy that stops answering fails every nack), one for the goodbye.
  -- A frozen proxy with a renewal in flight at grace takes all of it.
  local drain_extension = 4 * consumer.options.request_timeout + 2.5

  function stop(reason)
    if st.stopping then return end
    st.stopping = true
    st.reason = reason
    -- a message waiting for a slot gives itself back (ctx.take_slot)
    for _, w in ipairs(slot_waiters) do sched:wake(w.co) end
    drainer_co = sched:spawn(drain.run, {
      o = o, st = st, sched = sched, seq = seq, waiter = waiter, client = client, release_delay = release_delay,
      watcher = watcher, drain_extension = drain_extension, wake_receiver = wake_receiver,
      receiving = function() return receiver_co ~= nil or unlocking > 0 end,
      take_arriving = take_arriving, refuse = refuse,
      give_back = give_back,
      nrunning = function() return st.nrunning end,
      ending = function() return life.count.waiting + life.count.releasing + unlocking end,
      running = function()
        local out = {}
        for m, s in pairs(life.state) do
          if s == "running" then out[m] = true end
        end
        return out
      end,
      done = function() st.done = true end,
    })
  end

  if o.signals then
    -- The C watcher enforces grace even if a handler never yields; a drain
    -- that is alive past grace says so (drain_extension), and a second signal
    -- ends the wait at once.
    watcher = core.watch_signals({ "TERM", "INT" }, { client }, o.grace + 0.5, release_delay)
    sched:watch(watcher:fd(), function()
      local sig = watcher:signal()
      -- a signal during a drain that run_for or stop began is the reason
      -- from now on: the caller (one that runs mqlease.run again and again)
      -- learns that the process is asked to end; the drain goes on as it was
      if sig and st.stopping then st.reason = "signal " .. sig
      elseif sig then stop("signal " .. sig) end
    end)
  end
  local stop_at = o.run_for and core.now() + o.run_for
  -- the official clients' cached messages and bytes: what this run holds
  metrics.holding(consumer, function() return st.inflight, st.bytes end)
  -- /leases and the live page: the oldest of what this run holds
  live.track(consumer, function(cap)
    local active = life:active()
    return live.select(active, seq.queue, seq.qhead, seq.qtail, cap), st.inflight, active
  end)

  local ok, err = pcall(sched.loop, sched, function()
    if not st.stopping then
      if stop_at and core.now() >= stop_at then stop("run_for")
      elseif o.stop and o.stop() then stop("stop") end
    end
    return st.done
  end)
  metrics.holding(consumer, nil)
  live.track(consumer, nil)
  -- no lock keepalive outlives the run: a handler cut off by grace keeps
  -- its lock only until the lock's TTL (the policy unlocks it if the
  -- handler ever ends)
  for _, m in ipairs(life:unsettled()) do
    local lease = message.made_lease(m)
    if type(lease) == "table" then lease_mod.drop_lock(lease) end
    if prefetcher then prefetcher.release(m) end
  end
  for m in pairs(prefetching) do prefetcher.release(m) end
  consumer:close()
  if watcher then
    watcher:done()
    watcher:close()
  end
  if not ok then error(err, 0) end
  return {
    reason = st.reason, received = st.received, acked = st.acked, nacked = st.nacked,
    failed = st.failed, drained = st.drained, skipped = st.skipped, dead_lettered = st.dead_lettered,
    retried = st.retried, held = st.held, given_back = st.given_back, fifo = fifo,
  }
end

return _M
