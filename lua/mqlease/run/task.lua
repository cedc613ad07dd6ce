-- mqlease.run.task: a message's own task in mqlease.run, the one owner of
-- its end. It asks the policy, turns the answer into one verb (decide), and
-- moves the message through mqlease.run.life until it settles, whatever
-- happens on the way: a handler error, a raising policy, a lease that ends
-- (death, budget, a lost lock), a failed release, a stop.
--
-- Ordered messages. A failed ordered message is never nacked: a nack lets
-- the broker hand the group's next message on, or redeliver the ones after
-- it. It is retried in place, its lease renewed meanwhile, after the delay
-- of the retry policy, until the attempts run out; then it goes to
-- %DLQ%<group>, and only then may the next of its group run (as Java's
-- ProcessQueueImpl.eraseFifoMessage does). If its lease ends first, the
-- sequencer gives back what waits behind it (see mqlease.run.sequencer).
--
-- Deferring. A policy may answer "defer": keep the lease and ask again after
-- a delay, spending no delivery attempt. A "nack" without an error (a
-- deferral past its budget) gives the message back: it spends no attempt of
-- ours, and never goes to the dead-letter queue without having run.

local life_mod = require "mqlease.run.life"
local sequencer = require "mqlease.run.sequencer"
local lease_mod = require "mqlease.lease"
local text = require "mqlease.text"

local pcall, error, tostring = pcall, error, tostring

local _M = {}

-- A message id as a log line may print it: the producer chooses ids.
function _M.printable(s)
  return text.escape(tostring(s))
end

-- The verb for the policy's answer: "ack", "dead_letter", "nack" (arg: the
-- delay), "retry" (in place, arg: the delay), "hold" (arg: the delay) or
-- "skip" (the policy ended the message itself). refused: the message had no
-- attempt left, so its handler refused to run.
-- A delay in seconds, the policy's or nack_delay's: one that is no number
-- (NaN among them: a NaN deadline stopped every timed wait of the scheduler,
-- not only this one) raises, and the message is given back, as when the
-- policy raises.
local function seconds(action, delay)
  if type(delay) ~= "number" or delay ~= delay then
    error(("mqlease.run: a delay of %s for %s (want a number of seconds)"):format(
      tostring(delay), tostring(action)), 0)
  end
  return delay
end

function _M.decide(ctx, m, action, delay, err, refused)
  if action == "ack" then return "ack" end
  if action == "skip" then return "skip" end
  if action == "defer" then return "hold", seconds(action, delay or ctx.release_delay) end
  if action ~= "nack" then
    error(("mqlease.run: the policy answered %s (want \"ack\", \"nack\", \"defer\" or \"skip\")"):format(
      tostring(action)), 0)
  end
  local attempt = m.delivery_attempt or 1
  if refused then return "dead_letter" end
  if err == nil then return "nack", seconds(action, delay or ctx.nack_delay(attempt)) end
  if sequencer.ordered(m) then
    if attempt >= ctx.ordered_max_attempts then return "dead_letter" end
    return "retry", seconds(action, delay or ctx.nack_delay(attempt))
  end
  if ctx.max_attempts and attempt >= ctx.max_attempts then return "dead_letter" end
  return "nack", seconds(action, delay or ctx.nack_delay(attempt))
end
local decide = _M.decide

-- A release that failed for good leaves the lease to expire (the core stops
-- renewing it): the message comes back by itself at its deadline. Said once
-- on stderr; the core counts it (acks/nacks{result="fail"},
-- dead_letter_fail, errors{op,code}).
local function release_failed(m, what, err, code)
  local lease = m.lease
  if lease.state ~= "expiring" then return end   -- lost, or released after all
  io.stderr:write(("mqlease: %s of %s failed: %s (%s); it comes back when its lease ends\n"):format(
    what, _M.printable(m.id), tostring(err), tostring(code)))
end

-- Ends m by verb (not "hold"/"retry"): the outcome for life:settle.
local function release(ctx, m, verb, arg)
  local st = ctx.st
  if verb == "skip" then
    st.skipped = st.skipped + 1
    return life_mod.ended_as(m)
  end
  local kind = verb
  if verb == "dead_letter" then arg = "max_attempts" end
  local ok, err, code = ctx.releaser:release(m, kind, arg)
  if ok then
    if verb == "ack" then st.acked = st.acked + 1; return "acked" end
    if verb == "dead_letter" then st.dead_lettered = st.dead_lettered + 1; return "dead_lettered" end
    st.nacked = st.nacked + 1
    return "nacked"
  end
  release_failed(m, verb == "dead_letter" and "dead letter" or verb, err, code)
  return life_mod.ended_as(m)
end

-- Gives m back at once: the outcome. drained: the stop's drain gives it back
-- (counted as drained); an ordered message given back behind one that may
-- come back is counted as given_back by its caller, not here.
function _M.give_back(ctx, m, drained)
  if lease_mod.held(m.lease) and m:nack(ctx.release_delay) then
    if drained then ctx.st.drained = ctx.st.drained + 1 end
    return "nacked"
  end
  return life_mod.ended_as(m)
end

-- Tells on_error of m's failure. on_error is the user's logging hook: one
-- that raises changes nothing of what becomes of the message (its raise
-- counted a second failure and turned a retry in place into a nack).
local function report(ctx, m, err)
  local ok, raised = pcall(ctx.on_error, m, err)
  if not ok then
    io.stderr:write(("mqlease: on_error raised for %s: %s\n"):format(_M.printable(m.id), tostring(raised)))
  end
end

-- The handler a message past its last attempt gets: it refuses, so a policy
-- that knows the message is done (the exactly-once done marker) still acks
-- it instead of dead-lettering it.
local function refusing(flag)
  return function()
    flag.refused = true
    return nil, "no attempts left"
  end
end

-- The run's handler behind a gate: once the run stops, no handler starts.
-- A policy may yield before it calls the handler (the exactly-once policy's
-- lock call), and a task may run a turn after the stop was asked for: the
-- handler would then start during the drain, where grace may cut it off
-- (its effects half done, the message given back and run again). It
-- refuses instead, as a handler that failed, so the policy lets go of what
-- it took (a lock), and the task gives the message back (stopped[m]). One
-- gate a run, not a closure a message.
local function gate(ctx)
  local handler, st = ctx.handler, ctx.st
  local stopped = setmetatable({}, { __mode = "k" })
  local function gated(m, lease)
    if st.stopping then
      stopped[m] = true
      return nil, "the run stopped before the handler started"
    end
    return handler(m, lease)
  end
  ctx.gated_handler, ctx.stopped_unstarted = gated, stopped
  return gated
end

-- Runs m from queued to settled (in a task of its own).
function _M.run(ctx, m)
  local life, st = ctx.life, ctx.st
  local outcome
  local flag = { refused = false }
  local exhausted = ctx.max_attempts and (m.delivery_attempt or 1) > ctx.max_attempts
  local gated = ctx.gated_handler or gate(ctx)
  local handler = exhausted and refusing(flag) or gated
  local unstarted = ctx.stopped_unstarted
  life:move(m, "running")
  -- this attempt's failure is counted (once, whatever raises after it)
  local counted
  -- while it waits, the task holds no handler slot; it ends holding one
  local without_slot = false
  local ok, raised = pcall(function()
    while true do
      counted = false
      -- no handler starts on a lease that has ended: the broker may have
      -- handed the message to someone else already
      if not lease_mod.held(m.lease) then
        life:move(m, "releasing")
        outcome = life_mod.ended_as(m)
        return
      end
      local action, delay, err, after = ctx.policy(m, m.lease, handler)
      if unstarted[m] then
        -- the gate kept its handler from starting (the run stopped): back to
        -- the broker, whatever the policy made of the refusal, and no failure
        unstarted[m] = nil
        life:move(m, "releasing")
        outcome = _M.give_back(ctx, m, true)
        if after then after() end
        return
      end
      if err ~= nil and not flag.refused then
        st.failed = st.failed + 1
        counted = true
        report(ctx, m, err)
      end
      local verb, arg = decide(ctx, m, action, delay, err, flag.refused)
      if verb == "hold" or verb == "retry" then
        if after then after() end
        if verb == "retry" then
          st.retried = st.retried + 1
          ctx.consumer:count("fifo_retries")
          m.delivery_attempt = (m.delivery_attempt or 1) + 1
        else
          st.held = st.held + 1
        end
        life:move(m, "waiting")
        -- no handler slot is held while it waits (mqlease.run.worker)
        ctx.leave_slot()
        without_slot = true
        local why = ctx.waiter:hold(m, arg)
        if why == "again" then why = ctx.take_slot(m) else ctx.hold_slot() end
        without_slot = false
        if why ~= "again" then
          life:move(m, "releasing")
          outcome = why == "stopping" and _M.give_back(ctx, m, true) or life_mod.ended_as(m)
          return
        end
        life:move(m, "running")
      else
        life:move(m, "releasing")
        outcome = release(ctx, m, verb, arg)
        if after then after() end
        return
      end
    end
  end)
  if without_slot then ctx.hold_slot() end
  if not ok then
    -- a raising policy, nack_delay or after() costs no slot and strands no
    -- message: if nothing released it, it is given back
    if not counted then st.failed = st.failed + 1 end
    report(ctx, m, raised)
    if life:state_of(m) ~= "releasing" then life:move(m, "releasing") end
    if not outcome then
      if lease_mod.held(m.lease) and m:nack(ctx.release_delay) then
        st.nacked = st.nacked + 1
        outcome = "nacked"
      else
        outcome = life_mod.ended_as(m)
      end
    end
  end
  life:settle(m, outcome)
end

return _M
