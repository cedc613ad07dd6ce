-- mqlease.run.releaser: how a message of a run leaves -- ack, nack, dead
-- letter -- and what happens when that fails.
--
-- Acks coalesce: the messages acked within one scheduler turn share
-- AckMessage requests of up to ACK_BATCH entries (sent on the next turn),
-- and each still gets its own result.
--
-- An ack or a dead letter that fails is made again, with backoff, while the
-- lease lives: a failed release leaves the lease to expire (the core renews it
-- no more), so until its deadline the message is still ours to end, and a
-- message whose ack is lost runs again (and, ordered, holds its group back).
-- Once the lease has ended, or the consumer is closed, the failure is final:
-- the message comes back from the broker. A nack is made once: if it fails,
-- the message comes back at its deadline all the same.

local core = require "mqlease.core"
local lease_mod = require "mqlease.lease"

local setmetatable, ipairs, pcall, type, tostring = setmetatable, ipairs, pcall, type, tostring
local min = math.min
local coroutine_running = coroutine.running

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.run.releaser" }

local ACK_BATCH = 32        -- entries per coalesced AckMessage
local FIRST_BACKOFF = 0.2   -- seconds before the first retry, doubled up to MAX_BACKOFF
local MAX_BACKOFF = 2

-- Failures that no retry can mend: the lease is gone or the client is.
local FINAL = { NO_LEASE = true, LEASE_LOST = true, ALREADY_ACKED = true, ALREADY_NACKED = true,
  ALREADY_DEAD_LETTERED = true, CLOSED = true, INVALID_RECEIPT_HANDLE = true }

function _M.new(consumer, sched)
  return setmetatable({ consumer = consumer, sched = sched, queue = {}, flush_queued = false }, mt)
end

local function ack_chunk(self, chunk)
  local msgs = {}
  for i, e in ipairs(chunk) do msgs[i] = e.m end
  local called, ok, err, code, results = pcall(self.consumer.ack, self.consumer, msgs)
  if not called then ok, err, code, results = nil, tostring(ok), "INTERNAL", nil end
  for i, e in ipairs(chunk) do
    local r = results and results[i]
    if ok or r == true then e.ok = true
    elseif type(r) == "table" then e.err, e.code = r.err, r.code
    else e.err, e.code = err, code end
    e.done = true
    self.sched:wake(e.co)
  end
end

local function ack_flush(self)
  self.flush_queued = false
  local queue = self.queue
  self.queue = {}
  for first = ACK_BATCH + 1, #queue, ACK_BATCH do
    local chunk = {}
    for i = first, min(first + ACK_BATCH - 1, #queue) do chunk[#chunk + 1] = queue[i] end
    self.sched:spawn(ack_chunk, self, chunk)
  end
  for i = ACK_BATCH + 1, #queue do queue[i] = nil end
  ack_chunk(self, queue)
end

-- One ack of m, in this turn's batch: true, or nil, message, code.
function methods:ack_once(m)
  local e = { m = m, co = coroutine_running() }
  local queue = self.queue
  queue[#queue + 1] = e
  if not self.flush_queued then
    self.flush_queued = true
    self.sched:spawn(ack_flush, self)
  end
  while not e.done do self.sched:park() end
  if e.ok then return true end
  return nil, e.err, e.code
end

local function once(self, m, kind, arg)
  if kind == "ack" then return self:ack_once(m) end
  if kind == "dead_letter" then return m:dead_letter(arg) end
  return m:nack(arg)
end

-- Releases m (kind "ack", "dead_letter" with arg the reason, "nack" with arg
-- the delay): true, or nil, message, code once it can do no more.
-- Retried while the broker holds the lease for us (lease_mod.held), not
-- while lease:alive(): that is false too once an exactly-once lock is known
-- lost, and the release needs the lease alone (the ack of a message whose
-- done marker went out after its lock was lost was tried once, and the
-- message came back at its deadline, its ordered group given back with it).
function methods:release(m, kind, arg)
  local ok, err, code = once(self, m, kind, arg)
  if ok or kind == "nack" then return ok, err, code end
  local backoff, lease = FIRST_BACKOFF, m.lease
  while not FINAL[code] and lease_mod.held(lease) do
    local deadline = core.now() + backoff
    repeat self.sched:park(deadline) until core.now() >= deadline
    if not lease_mod.held(lease) then break end
    self.consumer:count("release_retries")
    ok, err, code = once(self, m, kind, arg)
    if ok then return true end
    backoff = min(backoff * 2, MAX_BACKOFF)
  end
  return nil, err, code
end

return _M
