-- mqlease.run: a worker loop -- many handlers at once as coroutines, flow
-- control, and a shutdown that never multiplies or loses a message.
--
--   mqlease.run(consumer, function(m, lease) ... return true end, { concurrency = 64 })
--
-- Tasks: one receiver (receives while the in-flight limits allow), one task per
-- message (the policy runs the handler, then the message is acked or nacked),
-- and, once a stop is asked for, one drain task:
--   stop receiving -> give back what never started -> let running handlers
--   finish until grace -> give back what still runs -> close the consumer.
-- Every message ends exactly once: acked, nacked, or -- only if the
-- process is killed -- left to expire.
--
-- Order. When the group consumes in order (the `fifo` flag of the server's
-- Settings) or a message carries a message_group, the messages of one
-- message group run strictly one after another, in delivery order, and
-- different groups run in parallel up to concurrency -- what the official Java
-- PushConsumer's FifoConsumeService does with its accelerator on. A failed
-- ordered message is never nacked (ChangeInvisibleDuration would let the
-- broker hand the group's next message on, or redeliver those after it): it
-- is retried in place, its lease renewed meanwhile, after the delay of the
-- retry policy, until the attempts run out; then it goes to %DLQ%<group>, and
-- only then does the next message of its group run (as Java's
-- ProcessQueueImpl.eraseFifoMessage does).
--
-- Holding. A policy may answer "defer": keep the lease (renewed) and ask the
-- policy again after a delay, instead of a nack that spends a delivery attempt
-- (the exactly-once policy does so while another owner holds the lock or Redis
-- is unreachable).

local core = require "mqlease.core"
local config = require "mqlease.config"
local wait = require "mqlease.loop"
local policy_mod = require "mqlease.policy"
local metrics = require "mqlease.metrics"
local live = require "mqlease.live"
local retry = require "mqlease.retry"

local min, floor = math.min, math.floor
local coroutine_running = coroutine.running
local pcall, type, pairs, ipairs = pcall, type, pairs, ipairs

local ACK_BATCH = 32   -- entries per coalesced AckMessage

local function log_error(m, err)
  io.stderr:write(("mqlease: handler failed for %s (attempt %d): %s\n"):format(
    m.id, m.delivery_attempt or 0, tostring(err)))
end

return function(consumer, handler, opts)
  if type(handler) ~= "function" then
    error("bad argument #2 to 'run' (handler: function expected, got " .. type(handler) .. ")", 2)
  end
  local o = config.run_options(opts)
  -- await and process time, as the official clients record them
  handler = metrics.timed(consumer, handler)
  local policy = o.policy or policy_mod.plain
  local on_error = o.on_error or log_error

  -- A release that failed leaves the lease to expire (the core stops renewing
  -- it): the message comes back by itself at its deadline, nothing to retry
  -- here. Said once on stderr; the core counts it (acks/nacks{result="fail"},
  -- dead_letter_fail, errors{op,code}).
  local function release_failed(m, what, err, code)
    if m.lease.state ~= "expiring" then return end   -- lost, or released after all
    io.stderr:write(("mqlease: %s of %s failed: %s (%s); it comes back when its lease ends\n"):format(
      what, m.id, tostring(err), tostring(code)))
  end
  local release_delay = consumer.options.release_delay
  local batch = consumer.options.batch
  local client = consumer._router.client

  -- tasks in the caller's event loop (mqlease.scheduler in plain Lua)
  local sched = wait.scheduler()
  if o.signals and not sched.watch then
    error("mqlease.run: option 'signals' must be false in this event loop (it owns the signals; use 'stop')", 2)
  end
  -- the group's retry policy as the proxy sent it in the Settings; the run's
  -- own nack_delay and max_attempts override it
  local settings = consumer:metrics()
  local server_policy, fifo = settings.retry_policy, settings.fifo == true
  local nack_delay = o.nack_delay or function(attempt) return retry.delay(server_policy, attempt) end
  if type(nack_delay) == "number" then
    local fixed = nack_delay
    nack_delay = function() return fixed end
  end
  local st = {
    stopping = false, done = false, reason = nil,
    queue = {}, qhead = 1, qtail = 0,   -- ready to start, not started yet (still leases, renewed)
    groups = {},                       -- message group -> its messages in delivery order (see ordered())
    running = {},                      -- message -> true while its handler runs
    holding = {},                      -- message -> its task, while it waits to be tried again
    nrunning = 0, inflight = 0, bytes = 0,
    received = 0, acked = 0, nacked = 0, failed = 0, drained = 0, skipped = 0, dead_lettered = 0,
    retried = 0, held = 0,
  }
  local receiver, drainer
  local stop   -- stop(reason): begins the drain (defined below)

  local function ready(m)
    st.qtail = st.qtail + 1
    st.queue[st.qtail] = m
  end

  -- The key that orders a message, or nil: its message group. A FIFO group's
  -- message without one has nothing to keep it in order with (Java's
  -- accelerator runs such messages on their own too).
  local function ordered(m)
    return m.message_group
  end

  -- A received message waits behind the unfinished messages of its group;
  -- the first of a group (st.groups[g][head]) is the one ready or running.
  local function admit(m)
    local g = ordered(m)
    if not g then return ready(m) end
    local q = st.groups[g]
    if not q then
      st.groups[g] = { head = 1, tail = 1, m }
      return ready(m)
    end
    q.tail = q.tail + 1
    q[q.tail] = m
  end

  -- m finished (acked, dead-lettered, given back): the next of its group may run.
  local function next_of_group(m)
    local g = ordered(m)
    local q = g and st.groups[g]
    if not q or q[q.head] ~= m then return end
    q[q.head] = nil
    q.head = q.head + 1
    if q.head > q.tail then
      st.groups[g] = nil
    elseif not st.stopping then
      ready(q[q.head])
    end
  end

  local function settle(m)
    st.running[m] = nil
    st.nrunning = st.nrunning - 1
    st.inflight = st.inflight - 1
    st.bytes = st.bytes - #m.body
    next_of_group(m)
    if receiver then sched:wake(receiver) end
    if drainer then sched:wake(drainer) end
  end

  local start_handlers

  -- Acks coalesce: the handlers that finish within one scheduler tick share
  -- AckMessage requests of up to ACK_BATCH entries (sent on the next tick),
  -- and each handler still gets its own message's result.
  local ack_queue, ack_flush_queued = {}, false

  local function ack_chunk(chunk)
    local msgs = {}
    for i, e in ipairs(chunk) do msgs[i] = e.m end
    local called, ok, err, code, results = pcall(consumer.ack, consumer, msgs)
    if not called then ok, err, code, results = nil, tostring(ok), "INTERNAL", nil end
    for i, e in ipairs(chunk) do
      local r = results and results[i]
      if ok or r == true then e.ok = true
      elseif type(r) == "table" then e.err, e.code = r.err, r.code
      else e.err, e.code = err, code end
      e.done = true
      sched:wake(e.co)
    end
  end

  local function ack_flush()
    ack_flush_queued = false
    local queue = ack_queue
    ack_queue = {}
    for first = ACK_BATCH + 1, #queue, ACK_BATCH do
      local chunk = {}
      for i = first, min(first + ACK_BATCH - 1, #queue) do chunk[#chunk + 1] = queue[i] end
      sched:spawn(ack_chunk, chunk)
    end
    for i = ACK_BATCH + 1, #queue do queue[i] = nil end
    ack_chunk(queue)
  end

  -- m:ack() for a handler task: true, or nil, message, code. A message whose
  -- ack is queued is no longer the drain's to give back (it still counts as
  -- running until settle).
  local function ack(m)
    local e = { m = m, co = coroutine_running() }
    st.running[m] = nil
    ack_queue[#ack_queue + 1] = e
    if not ack_flush_queued then
      ack_flush_queued = true
      sched:spawn(ack_flush)
    end
    while not e.done do sched:park() end
    if e.ok then return true end
    return nil, e.err, e.code
  end

  -- max_attempts: a message past its last attempt goes to the DLQ without running,
  -- and a failure on its last attempt sends it there instead of back to the queue.
  -- Unordered messages leave the server's limit to the proxy (it forwards a
  -- message past it at receive time); ordered ones are retried here, so here
  -- is where their limit is kept.
  local max_attempts = o.max_attempts
  local ordered_max_attempts = o.max_attempts or retry.max_attempts(server_policy) or 17
  local function dead_letter(m)
    local done, err, code = m:dead_letter("max_attempts")
    if done then st.dead_lettered = st.dead_lettered + 1
    else release_failed(m, "dead letter", err, code) end
  end

  -- Keeps m's lease (the core renews it) for delay seconds, then true: try
  -- again. false when the lease ended meanwhile, or a stop came (the message
  -- is then given back here, at once).
  local function hold(m, delay)
    local deadline = core.now() + delay
    st.holding[m] = coroutine_running()
    while not st.stopping and core.now() < deadline and m.lease:alive() do
      sched:park(deadline)   -- the drain wakes us
    end
    st.holding[m] = nil
    if st.stopping then
      st.running[m] = nil   -- ours to give back, not the drain's
      if m.lease:alive() and m:nack(release_delay) then st.drained = st.drained + 1 end
      return false
    end
    return m.lease:alive()
  end

  local function handle(m)
    -- Past its last attempt it does not run: the policy is asked with a
    -- handler that refuses, so a policy that knows the message is done (the
    -- exactly-once done marker) still acks it instead of dead-lettering it.
    local refused = false
    local function refuse()
      refused = true
      return nil, "no attempts left"
    end
    local exhausted = max_attempts and (m.delivery_attempt or 1) > max_attempts
    -- A raising policy, on_error, nack_delay or after() must not cost a slot
    -- or strand the message: whatever happens, the message is settled, and
    -- if nothing released it, it is nacked (handled = its handler succeeded).
    local ok, raised = pcall(function()
      while true do
        -- action "ack" | "nack" | "defer" | "skip"; err set means the handler failed (logged, counted)
        local action, delay, err, after = policy(m, m.lease, exhausted and refuse or handler)
        local attempt = m.delivery_attempt or 1
        if err ~= nil and not refused then
          st.failed = st.failed + 1
          on_error(m, err)
        end
        local again = false
        if action == "ack" then
          -- an ack that failed may still have reached the broker: the core
          -- lets the lease expire, so the message comes back if it did not (a
          -- policy's done marker then turns that into a plain ack)
          local acked, aerr, acode = ack(m)
          if acked then st.acked = st.acked + 1
          else release_failed(m, "ack", aerr, acode) end
        elseif action == "defer" then
          if after then after() end
          after = nil
          st.held = st.held + 1
          again = hold(m, delay or release_delay)
        elseif action == "nack" and refused then
          dead_letter(m)
        elseif action == "nack" and ordered(m) then
          if after then after() end
          after = nil
          if err == nil then
            -- the policy gave it back without a failure (a deferral): hold it in
            -- place, no attempt spent
            st.held = st.held + 1
            again = hold(m, delay or release_delay)
          elseif attempt >= ordered_max_attempts then
            dead_letter(m)
          else
            -- in place: a nack would let the broker reorder the group
            st.retried = st.retried + 1
            consumer:count("fifo_retries")
            local wait_for = delay or nack_delay(attempt)
            m.delivery_attempt = attempt + 1
            again = hold(m, wait_for)
          end
        elseif action == "nack" and max_attempts and attempt >= max_attempts then
          dead_letter(m)
        elseif action == "nack" then
          local nacked, nerr, ncode = m:nack(delay or nack_delay(attempt))
          if nacked then st.nacked = st.nacked + 1
          else release_failed(m, "nack", nerr, ncode) end
        else
          st.skipped = st.skipped + 1
        end
        if after then after() end
        if not again then break end
      end
    end)
    if not ok then
      st.failed = st.failed + 1
      pcall(on_error, m, raised)
      if m.lease:alive() and m:nack(release_delay) then st.nacked = st.nacked + 1 end
    end
    settle(m)
    start_handlers()
  end

  function start_handlers()
    while not st.stopping and st.nrunning < o.concurrency and st.qhead <= st.qtail do
      local m = st.queue[st.qhead]
      st.queue[st.qhead] = nil
      st.qhead = st.qhead + 1
      st.running[m] = true
      st.nrunning = st.nrunning + 1
      sched:spawn(handle, m)
    end
  end

  receiver = sched:spawn(function()
    while not st.stopping do
      if st.inflight >= o.max_inflight or st.bytes >= o.max_inflight_bytes then
        sched:park()   -- a finishing handler wakes us
      else
        -- the byte budget holds per receive too: the core gives back what would pass it
        local msgs, err, code = consumer:receive(min(batch, o.max_inflight - st.inflight),
          { max_bytes = o.max_inflight_bytes - st.bytes })
        if msgs then
          metrics.received(consumer, msgs)
          for _, m in ipairs(msgs) do
            st.received = st.received + 1
            if st.stopping then
              -- arrived after the stop: it never ran, give it straight back
              if m:nack(release_delay) then st.drained = st.drained + 1 end
            else
              admit(m)
              st.inflight = st.inflight + 1
              st.bytes = st.bytes + #m.body
            end
          end
          start_handlers()
        elseif code == "CLOSED" or (client.closed and client:closed()) then
          -- closed under the run (its receive in flight fails CANCELLED) or
          -- before it: nothing can come any more
          stop("closed")
        elseif not st.stopping then
          io.stderr:write(("mqlease: receive failed: %s (%s)\n"):format(tostring(err), tostring(code)))
          wait.sleep(1)
        end
      end
    end
    receiver = nil
    if drainer then sched:wake(drainer) end
  end)

  local watcher
  -- What the rest of a live drain may take once grace is over: the nacks of
  -- running handlers (one request timeout, two if a renewal is in flight
  -- first), up to 2 s for the cancelled receive, and consumer:close() -- one
  -- request timeout for its nack of what the drain could not give back (a
  -- proxy that stops answering fails every nack), one for the goodbye.
  -- A frozen proxy with a renewal in flight at grace takes all of it.
  local drain_extension = 4 * consumer.options.request_timeout + 2.5

  local function drain()
    local grace_deadline = core.now() + o.grace
    -- the whole drain from here: the watcher's clock started at the signal,
    -- ours may start later (or without a signal: run_for, stop)
    if watcher then watcher:extend(o.grace + drain_extension) end
    -- a closed client has no receive left to cancel (and raises if asked)
    if not (client.closed and client:closed()) then client:cancel_receives() end
    if receiver then sched:wake(receiver) end
    -- Every nack of the drain goes out at once: one at a time, n slow nacks
    -- would outlast any deadline (issue 20 item 7).
    local pending = 0
    local function give_back(m)
      pending = pending + 1
      sched:spawn(function()
        if m:nack(release_delay) then st.drained = st.drained + 1 end
        pending = pending - 1
        if pending == 0 and drainer then sched:wake(drainer) end
      end)
    end
    -- 1. what never started goes back at once
    while st.qhead <= st.qtail do
      local m = st.queue[st.qhead]
      st.queue[st.qhead] = nil
      st.qhead = st.qhead + 1
      st.inflight = st.inflight - 1
      st.bytes = st.bytes - #m.body
      give_back(m)
    end
    -- ... and so does what waits behind an unfinished message of its group;
    -- the broker keeps an ordered queue blocked while that one's lease lives,
    -- so nothing after it is delivered before it is done
    for _, q in pairs(st.groups) do
      for i = q.head + 1, q.tail do
        local m = q[i]
        q[i] = nil
        st.inflight = st.inflight - 1
        st.bytes = st.bytes - #m.body
        give_back(m)
      end
      q.tail = q.head
    end
    -- what waits to be tried again is given back by its own task
    for _, co in pairs(st.holding) do sched:wake(co) end
    -- 2. running handlers may finish until grace (mode "wait")
    if o.mode == "wait" then
      while st.nrunning > 0 and core.now() < grace_deadline do
        sched:park(grace_deadline)   -- a finishing handler wakes us
      end
    end
    -- 3. what still runs is given back; its handler's later ack will fail, never double
    if watcher then watcher:extend(drain_extension) end
    for m in pairs(st.running) do
      if m.lease:alive() and not st.holding[m] then give_back(m) end
    end
    local nack_deadline = core.now() + drain_extension
    while pending > 0 and core.now() < nack_deadline do sched:park(nack_deadline) end
    -- 4. wait for the receiver's cancelled call, so no lease arrives after close
    local flush_deadline = core.now() + 2
    while receiver and core.now() < flush_deadline do
      sched:park(flush_deadline)   -- the receiver wakes us when it ends
    end
    st.done = true
  end

  function stop(reason)
    if st.stopping then return end
    st.stopping = true
    st.reason = reason
    drainer = sched:spawn(drain)
  end

  if o.signals then
    -- The C watcher enforces grace even if a handler never yields; a drain
    -- that is alive past grace says so (drain_extension), and a second signal
    -- ends the wait at once.
    watcher = core.watch_signals({ "TERM", "INT" }, { client }, o.grace + 0.5, release_delay)
    sched:watch(watcher:fd(), function()
      local sig = watcher:signal()
      if sig then stop("signal " .. sig) end
    end)
  end
  local stop_at = o.run_for and core.now() + o.run_for
  -- the official clients' cached messages and bytes: what this run holds
  metrics.holding(consumer, function() return st.inflight, st.bytes end)
  -- /leases and the live page: the oldest of what this run holds
  live.track(consumer, function(cap)
    return live.select(st.running, st.queue, st.qhead, st.qtail, cap), st.inflight, st.running
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
  consumer:close()
  if watcher then
    watcher:done()
    watcher:close()
  end
  if not ok then error(err, 0) end
  return {
    reason = st.reason, received = st.received, acked = st.acked, nacked = st.nacked,
    failed = st.failed, drained = st.drained, skipped = st.skipped, dead_lettered = st.dead_lettered,
    retried = st.retried, held = st.held, fifo = fifo,
  }
end
