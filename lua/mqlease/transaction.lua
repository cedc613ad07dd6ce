-- mqlease.transaction: a producer's transactions -- the object producer:begin
-- returns, and the checks the proxy sends about half messages left open.
--
-- A transaction is one half message: SendMessage with the TRANSACTION type
-- stores it invisible, and EndTransaction commits it (the broker delivers it
-- then) or rolls it back (never delivered). A half message nobody ends (its
-- producer died between begin and commit) is found by the broker's check
-- service once it is older than transactionTimeOut (broker.conf), which asks
-- a producer of the topic (the proxy sends RecoverOrphanedTransactionCommand
-- over the Telemetry stream of a client that announced the topic in its
-- settings: ClientActivity.registerProducer). The producer's checker answers:
-- "commit" and "rollback" go back as EndTransaction (source SERVER_CHECK),
-- "unknown" (or a checker that raises) sends nothing, and the broker asks
-- again after transactionCheckInterval, up to transactionCheckMax times
-- (then it drops the message), as the official clients' TransactionChecker.
--
-- A check may come for a transaction its producer has ended. Each check
-- round of the broker puts a copy of every half message it checks back into
-- the half queue and asks about the copy
-- (TransactionalMessageServiceImpl.putBackHalfMsgQueue); an end that reaches
-- the broker after a round copied its half message ends the original, and
-- nothing ever links the copy to it: the copy is checked again every round,
-- and a "commit" for it makes the broker write the message a second time
-- (EndTransactionProcessor has no "already ended"; apache/rocketmq#8158,
-- #5574). A round copies a half message once it is older than the broker's
-- transactionTimeOut (6 s by default) and no op message marks it ended; op
-- messages are written in batches (transactionOpBatchInterval, 3 s by
-- default). So an end the proxy answered within COMMIT_WITHIN seconds of
-- the half message's send (the broker had it by then; one started in time
-- and answered later may have travelled past the round) never meets a
-- copy, and a check of it that comes later
-- than ENDED_QUIET seconds after the end means the end never reached the
-- broker (a proxy in cluster mode passes EndTransaction on one-way and
-- answers OK before the broker has it): the producer sends the same end
-- again, once, without asking its checker -- or asks its checker, for a
-- transaction mqlease.policy.transaction_checker began (_ask_checker): its
-- checks may come to another producer of the group, whose checker must be
-- the one that decides, so that only one of them commits. Any other end of
-- this producer -- one answered later than COMMIT_WITHIN, one of a half message
-- with check immunity (begin's recovery: RocketMQ 5.2's check copies a half
-- message it meets within its immunity, however young,
-- TransactionalMessageServiceImpl.checkPrepareQueueOffset), or an answer to
-- a check, the resend included, which may have left copies of its own (a CI
-- run saw a transaction checked again 10 s and 29 s after the commit that
-- answered its check, and committed twice by the resend) -- gets nothing for
-- a later check: a copy is most likely, and the broker drops it after
-- transactionCheckMax checks. A producer remembers the last ENDED_KEPT
-- transactions it ended. A check that comes while the producer's own end of
-- it is in flight is answered with nothing too.
--
-- A checker's answer whose EndTransaction provably never left (the producer
-- was closed while the checker waited, for Redis say: nothing is sent on a
-- closed producer) is not an end: the broker asks again, and the checker,
-- when it has a method unsent(view, answer), is told, so that what it
-- recorded of the answer is taken back (mqlease.policy.transaction_checker
-- had recorded a commit, and read it at every later check as "committed
-- already: a copy", so the half message was never committed). An end that
-- started and failed may have reached the broker, and stays recorded.
--
-- The checker never runs inside the core or inside the router's pump: a
-- check waits in the producer's queue until producer:poll runs it in the
-- caller's coroutine, so it may wait for Redis or anything else in the
-- caller's loop.

local core = require "mqlease.core"
local loop = require "mqlease.loop"
local message = require "mqlease.message"

local setmetatable, rawget, type, error, pcall, tostring, pairs, ipairs =
  setmetatable, rawget, type, error, pcall, tostring, pairs, ipairs
local remove = table.remove
local now = core.now

local _M = {}

local tx_methods = {}
local tx_mt = { __name = "mqlease.transaction", __index = tx_methods }

local ANSWERS = { commit = true, rollback = true, unknown = true }
local ENDED_KEPT = 4096
local ENDED_QUIET = 6
-- Seconds from a half message's send within which its end cannot meet a
-- check's copy (above): the broker's defaults (transactionTimeOut 6 s,
-- transactionOpBatchInterval 3 s) leave 3 s, the test harness's (3 s, 0.5 s)
-- 2.5 s; 1 s of it is left for the end's trip and clock skew.
local COMMIT_WITHIN = 2
_M.COMMIT_WITHIN = COMMIT_WITHIN

-- The counters of one producer (mqlease.metrics reads them by name).
local function new_counters()
  return { tx_begun = 0, tx_commit_ok = 0, tx_commit_fail = 0, tx_rollback_ok = 0, tx_rollback_fail = 0,
    tx_check_commit = 0, tx_check_rollback = 0, tx_check_unknown = 0, tx_check_error = 0,
    tx_check_end_fail = 0, tx_check_already_ended = 0, tx_check_resent = 0 }
end

-- Gives producer p its transaction state, from its checked options o.
function _M.attach(p, o)
  local topics = {}
  for _, t in pairs(o.topics or {}) do topics[t] = true end
  p._tx_topics = topics
  p._checker = o.checker
  p._checks = {}
  p._tx = new_counters()
  p._ended, p._ended_ring, p._ended_at = {}, {}, 0
  p._ending = {}   -- transaction id -> true while its EndTransaction is in flight
  -- transaction id -> its transaction object while the caller keeps it: a
  -- check's end is noted on it (_check_end), for as long as it lives, where
  -- the ring of ends keeps the last ENDED_KEPT only
  p._open = setmetatable({}, { __mode = "v" })
  p._router.on_orphan = function(ev)
    local q = p._checks
    q[#q + 1] = ev
  end
  -- (a check that came with the session's start, before this handler)
  if p._router.take_early_orphans then
    for _, ev in ipairs(p._router:take_early_orphans()) do p._router.on_orphan(ev) end
  end
end

-- Raises when p cannot begin a transaction on topic (wrong use).
function _M.check_can_begin(p, topic)
  if not p._checker then
    error("mqlease.producer: begin needs option 'checker' (it answers the broker's checks of half messages left open)", 3)
  end
  if not p._tx_topics[topic] then
    error(("mqlease.producer: begin on topic '%s', which is not in option 'topics' (the proxy sends its checks only to producers that announced the topic)"):format(topic), 3)
  end
end

-- The transaction of a half message the send answered (ev); sent_at is the
-- time (mqlease.now) just before its send; recovery its check immunity
-- (seconds), nil without.
function _M.begun(p, topic, ev, trace_context, sent_at, recovery)
  p._tx.tx_begun = p._tx.tx_begun + 1
  if not ev.transaction_id then
    -- the proxy answers every half message with one (SendMessageActivity)
    return nil, "SendMessage: the proxy sent no transaction id for a half message", "PROTOCOL"
  end
  local tx = setmetatable({ producer = p, topic = topic, message_id = ev.message_id, offset = ev.offset,
    transaction_id = ev.transaction_id, _trace = trace_context, state = "open", _sent_at = sent_at or now(),
    _recovery = recovery }, tx_mt)
  p._open[ev.transaction_id] = tx
  return tx
end

-- Remembers that p ended transaction_id with commit (a boolean), and when
-- (the last ENDED_KEPT of them); resend: a later check may be answered with
-- the same end (a direct end answered within COMMIT_WITHIN, see the header), or
-- "ask": by the checker.
local function remember_ended(p, transaction_id, commit, resend)
  local known = p._ended[transaction_id]
  if known then
    known.at = now()
    known.resend = known.resend and resend
    return
  end
  local at = p._ended_at % ENDED_KEPT + 1
  local ring = p._ended_ring
  if ring[at] then p._ended[ring[at]] = nil end
  ring[at] = transaction_id
  p._ended[transaction_id] = { commit = commit, at = now(), resend = resend }
  p._ended_at = at
end

-- EndTransaction for message_id of topic, waited for; true, or nil, message,
-- code, unsent: unsent is true when the call provably never left -- the
-- producer was closed first, or the core refused it at its door (NOT_READY:
-- mql_client.c's refuses(), before any call starts). Any other failure
-- (CLOSED while in flight, a deadline, an error) may follow an end the
-- broker got. resend_by: a direct end is remembered with resend only when
-- its reply came before this time (mqlease.now). The broker had the end
-- by the time its OK came, and no earlier bound is known: an end started
-- in time may travel for up to request_timeout, and reach the broker after
-- its check copied the half message (the header).
local function end_tx(p, topic, message_id, transaction_id, commit, from_check, trace, resend, resend_by)
  if rawget(p, "_closed") then return nil, "the producer is closed", "CLOSED", true end
  local router = p._router
  p._ending[transaction_id] = true
  local ok, err, code = router:call(router.client:end_transaction(topic, message_id, transaction_id,
    commit, from_check, trace))
  p._ending[transaction_id] = nil
  if not ok then return nil, err, code, code == "NOT_READY" end
  if resend and not (resend_by and now() < resend_by) then resend = false end
  remember_ended(p, transaction_id, commit, resend)
  return true
end

local function finish(self, commit)
  local what = commit and "commit" or "rollback"
  local state = self.state
  if state ~= "open" then
    error(("mqlease.transaction: %s after %s (message %s)"):format(what,
      state == "committed" and "commit" or "rollback", tostring(self.message_id)), 3)
  end
  local p = self.producer
  local tid = self.transaction_id
  -- the broker's check ended it here meanwhile (its end is remembered), or
  -- is ending it now: a second end would deliver it twice (header)
  local ended = self._check_end
  if ended == nil and p._ended[tid] then ended = p._ended[tid].commit end
  if ended ~= nil then
    self.state = ended and "committed" or "rolled_back"
    if ended == commit then return true end
    return nil, ("the broker's check already %s it"):format(ended and "committed" or "rolled back"),
      "ALREADY_ENDED"
  end
  if p._ending[tid] then return nil, "a check of the broker's is ending it now", "ENDING" end
  -- answered in time, it met no copy: a later check means it was lost
  -- (header); not with check immunity, where the broker copies it however young
  local resend = not self._recovery and (self._ask_checker and "ask" or true)
  local ok, err, code = end_tx(p, self.topic, self.message_id, self.transaction_id, commit, false, self._trace,
    resend, self._sent_at + COMMIT_WITHIN)
  local c = p._tx
  if ok then
    self.state = commit and "committed" or "rolled_back"
    if commit then c.tx_commit_ok = c.tx_commit_ok + 1 else c.tx_rollback_ok = c.tx_rollback_ok + 1 end
    return true
  end
  -- still open: the caller may end it again, or the broker's check will ask
  if commit then c.tx_commit_fail = c.tx_commit_fail + 1 else c.tx_rollback_fail = c.tx_rollback_fail + 1 end
  return nil, err, code
end

-- Commits the half message: the broker delivers it. true, or nil, message,
-- code (the transaction stays open: end it again, or let the checker answer).
function tx_methods:commit()
  return finish(self, true)
end

-- Rolls the half message back: it is never delivered.
function tx_methods:rollback()
  return finish(self, false)
end

-- Seconds since the half message's send began. An end sent (or answered)
-- later than mqlease.transaction.COMMIT_WITHIN may meet a copy the broker's
-- check made of it (see the header): a commit then may be delivered twice.
function tx_methods:age()
  return now() - self._sent_at
end

tx_mt.__tostring = function(self)
  return ("mqlease.transaction(%s, %s, %s)"):format(self.topic, tostring(self.message_id), self.state)
end

-- The half message of a check as the checker sees it: a plain table with the
-- fields of a received message (mqlease.message's names) and transaction_id.
local function check_view(ev)
  local m, shape = ev.message, ev.shape or {}
  local S = message.SLOTS
  return { id = m[S.id], body = m[S.body], born_at = m[S.born_at], store_at = m[S.store_at],
    topic = shape.topic, tag = shape.tag, born_host = shape.born_host, store_host = shape.store_host,
    message_type = shape.message_type, keys = m.keys or {}, properties = m.properties or {},
    trace_context = m.trace_context, transaction_id = ev.transaction_id }
end

-- The checker's answer to a check was never sent (end_tx's unsent: the
-- producer closed while the checker waited, as for Redis): a checker with a
-- method unsent(view, answer) is told, so that a record it made of the
-- answer (mqlease.policy.transaction_checker's claim) does not stand for an
-- end the broker never got, and the next check, here or in another
-- producer of the group, is answered afresh. nil, or the error.
local function checker_unsent(p, view, answer)
  local checker = p._checker
  local unsent = type(checker) == "table" and checker.unsent
  if not unsent then return nil end
  local ok, done, err = pcall(unsent, checker, view, answer)
  if ok and done then return nil end
  return ("mqlease.producer: the checker's %s of message %s was never sent, and the checker could not take it back: %s")
    :format(answer, tostring(view.id), tostring(ok and err or done))
end

-- Runs p's checker for one check; nil, or the error it raised (or the
-- checker's, taking back an answer never sent).
local function run_check(p, ev)
  local c = p._tx
  local ended = p._ended[ev.transaction_id]
  if p._ending[ev.transaction_id] or (ended and (not ended.resend or now() - ended.at < ENDED_QUIET)) then
    -- being ended here right now, just ended, or ended where a check may
    -- have left a copy of it (the header): a second end would deliver it twice
    c.tx_check_already_ended = c.tx_check_already_ended + 1
    return nil
  end
  local view = check_view(ev)
  if ended and ended.resend ~= "ask" then
    -- a direct end in time, long enough ago that the broker should know: it
    -- did not hear. Sent once: the resend answers a check, and a later check
    -- is most likely of a copy it left (header)
    c.tx_check_resent = c.tx_check_resent + 1
    if not end_tx(p, view.topic, view.id, view.transaction_id, ended.commit, true, view.trace_context, false) then
      c.tx_check_end_fail = c.tx_check_end_fail + 1
    end
    return nil
  end
  -- (ended "ask": its checker decides, as another producer's would)
  local ended_at = ended and ended.at
  local ok, answer = pcall(p._checker, view)
  if not ok then
    c.tx_check_error = c.tx_check_error + 1
    return tostring(answer)
  end
  if not ANSWERS[answer] then
    c.tx_check_error = c.tx_check_error + 1
    error(("mqlease.producer: the checker answered %s for message %s: it must return \"commit\", \"rollback\" or \"unknown\""):format(
      type(answer) == "string" and ("%q"):format(answer) or tostring(answer), tostring(view.id)), 4)
  end
  c["tx_check_" .. answer] = c["tx_check_" .. answer] + 1
  if answer == "unknown" then return nil end
  -- the checker may yield (Redis, a database): an end of the producer's own,
  -- or of another poller's check, may have gone out meanwhile
  local again = p._ended[ev.transaction_id]
  if p._ending[ev.transaction_id] or (again and (again ~= ended or again.at ~= ended_at)) then
    c.tx_check_already_ended = c.tx_check_already_ended + 1
    return nil
  end
  local done, _, _, unsent = end_tx(p, view.topic, view.id, view.transaction_id, answer == "commit", true,
    view.trace_context)
  if not done then
    c.tx_check_end_fail = c.tx_check_end_fail + 1
    if unsent then return checker_unsent(p, view, answer) end
  else
    local tx = p._open[ev.transaction_id]
    if tx then tx._check_end = answer == "commit" end
  end
  return nil
end

-- producer:poll (see mqlease.producer).
function _M.poll(p, timeout)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
    error(("bad argument #1 to 'poll' (timeout: seconds expected, got %s)"):format(tostring(timeout)), 3)
  end
  if rawget(p, "_closed") then return 0 end
  local router, q = p._router, p._checks
  local deadline = now() + (timeout or 0)
  router:pump()
  while #q == 0 and now() < deadline and not rawget(p, "_closed") do
    loop.wait(router.client:fd(), deadline)
    router:pump()
  end
  local n, last_err = 0, nil
  while #q > 0 and not rawget(p, "_closed") do
    local ev = remove(q, 1)
    n = n + 1
    if not p._checker then
      p._tx.tx_check_error = p._tx.tx_check_error + 1
      last_err = "mqlease.producer: the proxy asked about a half message and the producer has no checker"
    else
      last_err = run_check(p, ev) or last_err
    end
  end
  return n, last_err
end

-- The raw metrics table m of producer p with its transaction counters added.
function _M.metrics(p, m)
  for k, v in pairs(p._tx) do m[k] = v end
  m.tx_checks_waiting = #p._checks
  return m
end

return _M
