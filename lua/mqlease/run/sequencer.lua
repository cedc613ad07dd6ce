-- mqlease.run.sequencer: which received message may start next.
--
-- Unordered messages start in the order they came. The messages of one
-- message group start strictly one after another, in delivery order (what
-- the official Java PushConsumer's FifoConsumeService does with its
-- accelerator on): the first of a group is the one ready or running, the
-- rest wait behind it here.
--
-- The group moves on only when its first message is gone from the broker for
-- good (acked or dead-lettered). Any other end -- its lease died, its budget
-- or its lock ran out, a release failed, it was given back -- means it may
-- come back, so the messages held behind it must not run before it: they are
-- handed back to the caller to give back to the broker unrun, and the group
-- starts afresh from the broker's redelivery, which keeps the group's order
-- (an orderly queue is redelivered from its first unacknowledged message).

local setmetatable = setmetatable

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.run.sequencer" }

function _M.new()
  return setmetatable({
    queue = {}, qhead = 1, qtail = 0,   -- ready to start, in order
    groups = {},                        -- message group -> { head =, tail =, [i] = message }
  }, mt)
end

-- The key that orders a message, or nil: its message group. A FIFO group's
-- message without one has nothing to keep it in order with (Java's
-- accelerator runs such messages on their own too).
local function ordered(m)
  return m.message_group
end
_M.ordered = ordered

local function ready(self, m)
  local t = self.qtail + 1
  self.qtail = t
  self.queue[t] = m
end

-- A received message: ready at once, or behind the unfinished messages of its group.
function methods:admit(m)
  local g = ordered(m)
  if not g then return ready(self, m) end
  local q = self.groups[g]
  if not q then
    self.groups[g] = { head = 1, tail = 1, m }
    return ready(self, m)
  end
  q.tail = q.tail + 1
  q[q.tail] = m
end

-- The next message to start, or nil.
function methods:next()
  local h = self.qhead
  if h > self.qtail then return nil end
  local m = self.queue[h]
  self.queue[h] = nil
  self.qhead = h + 1
  return m
end

-- m has settled. gone: it left the broker for good (acked, dead-lettered).
-- Returns the messages held behind it that must be given back unrun (an
-- array, or nil); with gone, the next of its group becomes ready instead.
function methods:settled(m, gone)
  local g = ordered(m)
  local q = g and self.groups[g]
  if not q or q[q.head] ~= m then return nil end
  q[q.head] = nil
  if gone then
    q.head = q.head + 1
    if q.head > q.tail then
      self.groups[g] = nil
    else
      ready(self, q[q.head])
    end
    return nil
  end
  local back = {}
  for i = q.head + 1, q.tail do
    back[#back + 1] = q[i]
    q[i] = nil
  end
  self.groups[g] = nil
  return back
end

-- Everything not started yet, ready or held behind its group (the drain
-- gives it all back). The first of each group stays: it runs or waits, and
-- ends through settled().
function methods:take_all()
  local out = {}
  while self.qhead <= self.qtail do out[#out + 1] = self:next() end
  for _, q in pairs(self.groups) do
    for i = q.head + 1, q.tail do
      out[#out + 1] = q[i]
      q[i] = nil
    end
    q.tail = q.head
  end
  return out
end

return _M
