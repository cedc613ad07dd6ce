-- mqlease.policy.transaction_checker: consume-transform-produce exactly once.
--
-- A handler under mqlease.policy.exactly_once that sends what its message
-- caused (topic A in, topic B out) sends it as a transaction, and the
-- transaction commits only once the message's effect is recorded: its done
-- marker (see mqlease.policy). Three pieces, one object:
--
--   local t = mqlease.policy.transaction_checker { redis = R }
--   local p = mqlease.producer { endpoints = E, topics = { "B" }, checker = t }
--   mqlease.run(consumer_of_A, function(m, lease)
--     assert(t:begin(p, m, "B", transform(m.body)))   -- half message(s): invisible
--     return true
--   end, { policy = t:policy(mqlease.policy.exactly_once { redis = R }) })
--
-- t:begin sends a half message that names its source message and the run of
-- the handler that sent it (the exactly-once lock's owner, unique per run),
-- in properties mqlease.source and mqlease.run. After the exactly-once policy
-- wrote the done marker and answers "ack", t:policy claims the source's
-- output for that run -- SET <prefix>{<id>}:tx <kind>:<run> NX, in one script
-- with a look at the done marker -- and commits the run's transactions
-- itself (kind P) if the claim is the run's and they were sent less than
-- mqlease.transaction.COMMIT_WITHIN seconds ago, or rolls them back if
-- another run's claim is there. A run later than that (a slow handler, a
-- slow Redis) claims with kind L and commits nothing: the broker's check
-- may have made a copy of its half messages already, and a commit of the
-- original would leave the copy to be committed too (mqlease.transaction's
-- header); the check commits instead. A handler that fails rolls its
-- transactions back at once. Everything else (the process dies after begin,
-- or after the done marker, or a commit fails) is left to the broker's
-- checks, which t answers as the producer's checker from the same keys:
--   the claim is another run's -> "rollback";
--   P (this run's policy) -> "unknown" while it is younger than claim_grace
--     (the policy is committing it), then "commit" (its commit failed, or
--     never reached the broker), and the claim becomes C;
--   L (left to the checks) -> "commit", and the claim becomes C;
--   C (a check committed this run's output) -> "unknown": what is checked is
--     a copy of a half message already committed (the broker keeps checking
--     copies after a commit, and drops them after transactionCheckMax);
--   no claim but the done marker (the run died between the marker and its
--     claim, or is slow) -> the check claims it (C) and commits, and the
--     run's own claim then sees it and commits nothing;
--   no done marker yet -> "unknown" (the run may still finish; if it never
--     does the broker drops the half message after transactionCheckMax
--     checks, and the redelivered message's run sends its own).
-- A check's "commit" that provably never left the producer (closed while
-- the check waited for Redis) is taken back (t:unsent, which the producer
-- calls): the half message's id leaves the set of those committed, and a C
-- of nothing else becomes L again, so the next check commits it.
-- So of all the runs a message gets, exactly one run's messages are
-- committed, once the message is done, and each of them once.
--
-- The producer's checks are answered by p:poll(). Under mqlease.run in plain
-- Lua (mqlease's own scheduler), t:policy starts a task beside the handlers
-- that polls the producer for as long as the run lasts; in every loop it also
-- calls p:poll(0) (without waiting) after each message it ends. In another
-- loop (nginx, cqueues) a worker that may sit idle for longer than the
-- broker's checks last (transactionCheckMax × transactionCheckInterval)
-- polls p from a light thread or coroutine of its own as well. A check that
-- raises (a checker's answer that is none of the three) is said on stderr
-- and stops neither the message nor the task.

local redis_mod = require "mqlease.redis"
local policy = require "mqlease.policy"
local scheduler_adapter = require "mqlease.loop.scheduler"
local loop = require "mqlease.loop"
local transaction = require "mqlease.transaction"

local type, error, tostring, pcall, pairs, ipairs, setmetatable, rawget =
  type, error, tostring, pcall, pairs, ipairs, setmetatable, rawget
local floor = math.floor
local COMMIT_WITHIN = transaction.COMMIT_WITHIN

local _M = {}

local methods = {}
local mt = { __name = "mqlease.policy.transaction_checker", __index = methods }

-- The property names a half message carries (user properties, so every
-- client sees them).
local SOURCE, RUN = "mqlease.source", "mqlease.run"
_M.SOURCE, _M.RUN = SOURCE, RUN

-- Claims the output of a source message for run ARGV[1] when its done marker
-- (KEYS[1]) is there, unless a run has it already. The claim (KEYS[2], kept
-- ARGV[2] seconds) is "<kind>:<run>", kind P (the run's policy commits), L
-- (the run's policy was late: a check commits) or C (a check committed).
-- ARGV[4] says who asks: "P" or "L" the policy, "C" a check. One claim gets
-- one commit, since every commit makes the broker write the message
-- (EndTransactionProcessor):
--   -> 1 commit: the policy's claim, taken now (or before, by this kind); a
--        check's of a claim L, or of a claim P older than ARGV[3] seconds
--        (its age is what its TTL lost: the policy's commit never came); a
--        check's of no claim; the last three leave the claim C
--   -> 2 roll back: another run's claim
--   -> 3 (a check) unknown: P younger than ARGV[3] (the policy is
--        committing it), or C (a check committed it: this is a copy)
--   -> 4 (the policy) nothing: a check has it (C) and committed
--   -> 0 no done marker and no claim: the run may still finish
--
-- A check commits each half message of the run once (KEYS[3], the set of
-- the ids of those a check, or the policy itself with check immunity or a
-- late reply (NOTE_COMMITTED), committed, kept at least as long as the claim; ARGV[5]
-- the checked half message's id): a half message the set
-- holds is a copy (3); one it does not is another half message of the same
-- run, which the run's other outputs do not stand for. A claim C without
-- the set is one a check made before the set was kept: every half message
-- then counts as a copy (3), as it did.
-- The done marker names the run that wrote it when the exactly-once policy
-- marks runs (mqlease.policy.mark_runs, which t:policy asks): before any
-- claim, a run that is not the marker's, asked about by a check or claiming
-- for itself, finds the message completed by another run (2: its handler
-- failed or died, or, both having run, the other's marker came last), where
-- a marker '1' cannot tell. Once a claim is there, it decides.
local CLAIM = [[
local claim = redis.call('get', KEYS[2])
local run, who, ttl = ARGV[1], ARGV[4], ARGV[2]
local function committed_by_check()
  redis.call('sadd', KEYS[3], ARGV[5])
  redis.call('expire', KEYS[3], ttl)
  return 1
end
if claim then
  local kind = string.sub(claim, 1, 1)
  if string.sub(claim, 3) ~= run then return 2 end
  if who ~= 'C' then
    if kind == who then return 1 end
    return 4
  end
  if kind == 'P' and tonumber(ttl) - redis.call('ttl', KEYS[2]) < tonumber(ARGV[3]) then return 3 end
  -- committed already (by a check, or by the policy: NOTE_COMMITTED): a copy
  if redis.call('sismember', KEYS[3], ARGV[5]) == 1 then return 3 end
  if kind == 'C' then
    if redis.call('exists', KEYS[3]) == 0 then return 3 end
  else
    redis.call('set', KEYS[2], 'C:' .. run, 'EX', ttl)
  end
  return committed_by_check()
end
local done = redis.call('get', KEYS[1])
if not done then return 0 end
if done ~= '1' and done ~= run then return 2 end
redis.call('set', KEYS[2], who .. ':' .. run, 'EX', ttl)
if who == 'C' then return committed_by_check() end
return 1
]]
_M.script = CLAIM

-- The ids of half messages with check immunity (recovery), or whose commit
-- the proxy answered COMMIT_WITHIN or more after their send, that the
-- policy committed itself (claim P), added to the set a check reads
-- (KEYS[1], CLAIM's KEYS[3]; ARGV[1] its TTL, then the ids): a check of a
-- copy of one (the broker copies a half message it checks within its
-- immunity, or one whose commit came after its round) then answers
-- unknown, where it committed the copy once claim_grace had passed. Not
-- the others: the broker copies none of them younger than its
-- transactionTimeOut, and had their commit in time, so a check of one
-- means the commit never reached the broker, and the check (here, or in
-- another worker) commits it, once.
local NOTE_COMMITTED = [[
for i = 2, #ARGV do redis.call('sadd', KEYS[1], ARGV[i]) end
redis.call('expire', KEYS[1], ARGV[1])
return 1
]]
_M.note_script = NOTE_COMMITTED

-- Takes back a check's commit (CLAIM's 1 for who C) of half message ARGV[2]
-- of run ARGV[1] that provably never left its producer (methods:unsent):
-- its id leaves the set (KEYS[2]), and a claim C of the run (KEYS[1]) that
-- no other half message's commit stands behind becomes L again, kept
-- ARGV[3] seconds. The next check then commits it, as the record says it
-- must: L for the run, or C without this half message. A claim that is no
-- longer C of the run, or a set without the id, is left as it is (0).
local UNSENT = [[
if redis.call('get', KEYS[1]) ~= 'C:' .. ARGV[1] then return 0 end
if redis.call('srem', KEYS[2], ARGV[2]) == 0 then return 0 end
if redis.call('exists', KEYS[2]) == 0 then
  redis.call('set', KEYS[1], 'L:' .. ARGV[1], 'EX', ARGV[3])
end
return 1
]]
_M.unsent_script = UNSENT

local defaults = { redis = "127.0.0.1:6379", prefix = "mqlease:", claim_ttl = 7 * 86400, claim_grace = 15,
  recovery = false }

local function check_options(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("mqlease.policy.transaction_checker: options table expected", 3) end
  local o = {}
  for k, v in pairs(opts) do
    if defaults[k] == nil then
      error(("mqlease.policy.transaction_checker: unknown option '%s'"):format(tostring(k)), 3)
    end
    o[k] = v
  end
  for k, v in pairs(defaults) do if o[k] == nil then o[k] = v end end
  local bad_prefix = policy.prefix_problem(o.prefix)
  if bad_prefix then
    error("mqlease.policy.transaction_checker: option 'prefix' " .. bad_prefix .. " (the exactly-once policy's)", 3)
  end
  -- at most 2^31 - 1 seconds (68 years), as the exactly-once policy's times:
  -- past it SET ... EX is refused (or the number is sent as "1e+20"), every
  -- claim fails, and nothing is ever committed
  if type(o.claim_ttl) ~= "number" or o.claim_ttl ~= o.claim_ttl or o.claim_ttl < 1 or o.claim_ttl > 2147483647 then
    error("mqlease.policy.transaction_checker: option 'claim_ttl' must be from 1 to 2147483647 seconds", 3)
  end
  if o.recovery ~= false and (type(o.recovery) ~= "number" or o.recovery ~= o.recovery or o.recovery < 1
    or o.recovery > 3600 or o.recovery ~= math.floor(o.recovery)) then
    error("mqlease.policy.transaction_checker: option 'recovery' must be whole seconds from 1 to 3600", 3)
  end
  if type(o.claim_grace) ~= "number" or o.claim_grace ~= o.claim_grace or o.claim_grace < 0 or o.claim_grace >= o.claim_ttl then
    error("mqlease.policy.transaction_checker: option 'claim_grace' must be 0 or more seconds, less than 'claim_ttl'", 3)
  end
  if not (type(o.redis) == "table" and o.redis.call) then
    local ok, err = pcall(redis_mod.check, o.redis)
    if not ok then
      error("mqlease.policy.transaction_checker: option 'redis': " .. tostring(err):gsub("^[^:]*:%d+: ", ""), 3)
    end
  end
  return o
end

function _M.new(opts)
  local o = check_options(opts)
  return setmetatable({
    _o = o,
    _r = type(o.redis) == "table" and o.redis.call and o.redis or nil,
    _claim_ttl = tostring(floor(o.claim_ttl)),
    _runs = setmetatable({}, { __mode = "k" }),   -- message -> { producer =, txs = { tx, ... } }
    _pollers = setmetatable({}, { __mode = "k" }), -- scheduler -> { [producer] = true }: a poll task runs
  }, mt)
end

local function client(self)
  local r = rawget(self, "_r")
  if not r then
    r = redis_mod.new(self._o.redis)
    self._r = r
  end
  return r
end

-- CLAIM for source id and run, asked by who ("P" or "L" the policy, "C" a
-- check of half message half_id): 0 to 4 (above), or nil, err.
local function claim(self, id, run, who, half_id)
  -- the exactly-once policy's done marker, and the claim beside it (same hash tag)
  local base = policy.key_base(id, self._o.prefix)
  local got, err = client(self):eval(CLAIM, { base .. "done", base .. "tx", base .. "txc" },
    { run, self._claim_ttl, tostring(self._o.claim_grace), who, half_id or "" })
  if got == nil then return nil, err end
  return got
end

-- Notes the half messages of entry that the policy committed and the
-- broker may have copied first (see NOTE_COMMITTED): those with check
-- immunity, and those whose commit the proxy answered COMMIT_WITHIN or more
-- after their send (end_all). Not answered (Redis down): a copy of one may
-- be committed by a check, as before the note was kept.
local function note_committed(self, id, entry)
  local ids = { self._claim_ttl }
  for _, tx in ipairs(entry.txs) do
    local half_id = tx.message_id or tx.id
    if entry.copied[tx] and tx.state == "committed" and type(half_id) == "string" then ids[#ids + 1] = half_id end
  end
  if #ids == 1 then return end
  client(self):eval(NOTE_COMMITTED, { policy.key_base(id, self._o.prefix) .. "txc" }, ids)
end

-- Sends body to topic through producer p as a half message caused by m (a
-- message a handler under the exactly-once policy runs). opts: p:begin's;
-- its properties get mqlease.source and mqlease.run. Returns the transaction,
-- or nil, err, code. Raises outside the exactly-once policy (no lock owner).
function methods:begin(p, m, topic, body, opts)
  -- what is copied here before p:begin checks it is checked first: a bad
  -- one raised from inside this file, naming no argument
  if type(p) ~= "table" or type(p.begin) ~= "function" then
    error(("bad argument #1 to 'begin' (a producer expected, got %s)"):format(type(p)), 2)
  end
  if m == nil then error("bad argument #2 to 'begin' (the message the handler runs expected, got nil)", 2) end
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #5 to 'begin' (options table expected, got %s)"):format(type(opts)), 2)
  end
  if opts and opts.properties ~= nil and type(opts.properties) ~= "table" then
    error(("mqlease.policy.transaction_checker: begin's option 'properties' must be a table of strings (got %s)")
      :format(type(opts.properties)), 2)
  end
  local lease = m.lease
  local run = lease and rawget(lease, "lock_owner")
  if type(run) ~= "string" then
    error("mqlease.policy.transaction_checker: begin needs a message run under mqlease.policy.exactly_once (its lock owner names the run)", 2)
  end
  local o, props = {}, {}
  for k, v in pairs(opts or {}) do o[k] = v end
  for k, v in pairs(o.properties or {}) do props[k] = v end
  props[SOURCE], props[RUN] = m.id, run
  o.properties = props
  -- recovery (check immunity), when given: RocketMQ 5.2's check puts a copy of
  -- every half message it meets within its immunity back into the half queue,
  -- and a commit then leaves that copy to be checked again (a second
  -- delivery when answered "commit"); without it the check leaves half
  -- messages younger than transactionTimeOut alone, so a run that commits
  -- within transactionTimeOut never meets a check
  if o.recovery == nil and self._o.recovery then o.recovery = self._o.recovery end
  local tx, err, code = p:begin(topic, body, o)
  if not tx then return nil, err, code end
  -- a later check of it, after the policy's own end, goes to this checker
  -- (as it would in another worker), not straight to a resend of that end:
  -- one commit, recorded in the claim, whichever producer is asked
  -- (mqlease.transaction's header)
  if type(tx) == "table" then tx._ask_checker = true end
  local entry = self._runs[m]
  if not entry or entry.run ~= run then
    -- copied: the half messages the broker may copy before their commit
    -- reaches it (note_committed)
    entry = { producer = p, run = run, txs = {}, copied = {} }
    self._runs[m] = entry
  end
  entry.txs[#entry.txs + 1] = tx
  if o.recovery then entry.copied[tx] = true end
  return tx
end

-- Seconds since tx's send began; a transaction that cannot tell (not
-- mqlease.producer's) counts as late, the side that never commits twice.
local function age(tx)
  return tx.age and tx:age() or math.huge
end

-- Ends every open transaction of entry: commit (true) or rollback (false).
-- in_time_only: a commit goes only while the transaction is younger than
-- COMMIT_WITHIN; one that is not is left to the checks (claim P: after
-- claim_grace, a check commits it). A commit started in time whose reply
-- came later may have reached the broker after a check round copied the
-- half message: it is noted (entry.copied), as its producer notes it
-- (mqlease.transaction's end_tx), so that a check of the copy, in any
-- worker, commits nothing.
local function end_all(entry, commit, in_time_only)
  for _, tx in ipairs(entry.txs) do
    if tx.state == "open" then
      if not commit then tx:rollback()
      elseif not in_time_only or age(tx) < COMMIT_WITHIN then
        if tx:commit() and age(tx) >= COMMIT_WITHIN then entry.copied[tx] = true end
      end
    end
  end
end

-- Whether every transaction of entry may still be committed here (see the
-- header): each was sent less than COMMIT_WITHIN seconds ago.
local function in_time(entry)
  for _, tx in ipairs(entry.txs) do
    if age(tx) >= COMMIT_WITHIN then return false end
  end
  return true
end

-- p:poll(timeout), its raise (a checker's answer that is none of the three
-- raises there, the check consumed and counted in tx_check_error) said on
-- stderr: true, or false after a raise. The caller's message, or the poll
-- task, goes on: a raise here nacked a message whose run was done, and ended
-- the poll task without a word (the checks then waited for messages to come).
local function poll_saying(p, timeout)
  local ok, err = pcall(p.poll, p, timeout)
  if not ok then io.stderr:write(("mqlease.policy.transaction_checker: a check failed: %s\n"):format(tostring(err))) end
  return ok
end

-- How long the poll task waits after a poll that raised before it polls
-- again (seconds): a producer whose poll raises at once must not spin.
local POLL_AFTER_RAISE = 1

-- Under mqlease's own scheduler (mqlease.run in plain Lua), a task of it that
-- polls producer p while p is open: checks are answered when no message comes.
-- The run ends without waiting for it (its loop stops when the run is done).
local function ensure_poller(self, p)
  local sched = scheduler_adapter.current()
  if not sched or not sched.spawn then return end
  local polled = self._pollers[sched]
  if not polled then
    polled = setmetatable({}, { __mode = "k" })
    self._pollers[sched] = polled
  end
  if polled[p] then return end
  polled[p] = true
  sched:spawn(function()
    while not rawget(p, "_closed") do
      if not poll_saying(p, 1) then loop.sleep(POLL_AFTER_RAISE) end
    end
    polled[p] = nil
  end)
end

-- Wraps a policy (mqlease.policy.exactly_once's): after it, the message's
-- transactions end as the header of this file says, and the producer's
-- checks that came meanwhile are answered.
function methods:policy(inner)
  if type(inner) ~= "function" then
    error("bad argument #1 to 'policy' (the exactly-once policy expected, got " .. type(inner) .. ")", 2)
  end
  -- its done markers name the run that wrote them, so that a check tells
  -- the run that completed a message from one that failed or died (a
  -- wrapper of the caller's own around it cannot be asked: its markers
  -- stay '1', and a check of no claim commits whichever run it asks about)
  policy.mark_runs(inner)
  return function(m, lease, handler)
    local handler_ok
    local function run_handler(hm, hl)
      local ok, res, err = pcall(handler, hm, hl)
      handler_ok = ok and res and true or false
      if not ok then error(res, 0) end
      return res, err
    end
    local action, delay, err, after = inner(m, lease, run_handler)
    local entry = self._runs[m]
    if entry then
      self._runs[m] = nil
      if handler_ok == false then
        -- the handler failed: its output is not the message's
        end_all(entry, false)
      elseif action == "ack" then
        -- the done marker is written: claim the output for this run, to
        -- commit it here if there is time (see the header), else for the checks
        local kind = in_time(entry) and "P" or "L"
        local got = claim(self, m.id, entry.run, kind)
        if got == 1 and kind == "P" then
          end_all(entry, true, true)
          note_committed(self, m.id, entry)
        elseif got == 2 then end_all(entry, false) end
        -- L: the checks commit them; 4: a check committed them; nil: Redis
        -- did not answer, the checks decide
      end
      poll_saying(entry.producer, 0)
      ensure_poller(self, entry.producer)
    end
    return action, delay, err, after
  end
end

-- The producer's checker: the answer for a half message this helper sent
-- (see the header); "unknown" for one without mqlease.source/mqlease.run, or
-- when Redis does not answer (the broker asks again).
function methods:check(m)
  local props = m.properties or {}
  local source, run = props[SOURCE], props[RUN]
  if type(source) ~= "string" or type(run) ~= "string" then return "unknown" end
  -- (a view without an id, which no check of the broker's gives, counts as
  -- one half message)
  local half_id = type(m.id) == "string" and m.id or ""
  local got = claim(self, source, run, "C", half_id)
  if got == 1 then return "commit" end
  if got == 2 then return "rollback" end
  return "unknown"
end

-- The producer's word that its EndTransaction of answer for the half
-- message m (the view check got) never left (mqlease.transaction: it was
-- closed while check waited for Redis): a "commit" check recorded is taken
-- back (UNSENT), so that the broker's next check, in this worker or another,
-- commits it. Without this the record read "committed by a check" at every
-- later check, which answered unknown until the broker dropped the half
-- message. Nothing to take back for "rollback" (check records none). true,
-- or nil, err (Redis did not answer: the commit is lost, as before).
function methods:unsent(m, answer)
  if answer ~= "commit" then return true end
  local props = m.properties or {}
  local source, run = props[SOURCE], props[RUN]
  if type(source) ~= "string" or type(run) ~= "string" then return true end
  local half_id = type(m.id) == "string" and m.id or ""
  local base = policy.key_base(source, self._o.prefix)
  local got, err = client(self):eval(UNSENT, { base .. "tx", base .. "txc" }, { run, half_id, self._claim_ttl })
  if got == nil then return nil, err end
  return true
end

mt.__call = function(self, m) return self:check(m) end

return _M
