-- mqlease.run.life: where each message of a run is, and the one place that
-- moves it on.
--
--   queued ──▶ running ──▶ releasing ──▶ settled
--      │         ▲  │          ▲
--      │         │  ▼          │
--      │       waiting ────────┤
--      └───────────────────────┘   (given back without running)
--
--   queued     received, waiting for a handler slot (or behind an earlier
--              message of its group); its lease is renewed meanwhile
--   running    the policy runs (and through it the handler)
--   waiting    kept, lease renewed, to be tried again: a failed ordered
--              message retried in place, or a "defer" of the policy
--   releasing  its end is under way: ack, nack, dead letter, or nothing left
--              to do because the lease already ended
--   settled    gone from the run; outcome says how it ended:
--                acked, dead_lettered   the broker has forgotten it
--                nacked                 given back on purpose, comes back later
--                expired                its lease ended unreleased (death,
--                                       budget, lock loss, a failed release):
--                                       the broker will hand it out again
--
-- Every move goes through move(); a move the table below does not allow is a
-- bug and raises. settle() tells the run's parts (the sequencer, the flow
-- control, the drain) once per message, whatever the path that ended it.

local setmetatable, error, tostring = setmetatable, error, tostring

local _M = {}

local MOVES = {
  queued = { running = true, releasing = true },
  running = { waiting = true, releasing = true },
  waiting = { running = true, releasing = true },
  releasing = { settled = true },
}

-- How a lease that the run did not (or could not) release ended, from the
-- state its lease reports: released by someone (the drain, the policy
-- itself) or not at all.
local ENDED_AS = { acked = "acked", dead_lettered = "dead_lettered", nacked = "nacked" }
function _M.ended_as(m)
  local lease = m.lease
  local state = lease and lease.state
  return ENDED_AS[state] or "expired"
end

local methods = {}
local mt = { __index = methods, __name = "mqlease.run.life" }

-- on_settled(m, outcome): called once per message when it settles.
function _M.new(on_settled)
  return setmetatable({
    state = {},       -- message -> its state, until settled
    count = { queued = 0, running = 0, waiting = 0, releasing = 0 },
    on_settled = on_settled,
  }, mt)
end

local function refuse(m, from, to)
  error(("mqlease.run: message %s cannot move from %s to %s"):format(
    tostring(m.id), tostring(from), tostring(to)), 3)
end

-- A received message enters the run.
function methods:enter(m)
  if self.state[m] then refuse(m, self.state[m], "queued") end
  self.state[m] = "queued"
  self.count.queued = self.count.queued + 1
end

function methods:move(m, to)
  local from = self.state[m]
  local allowed = from and MOVES[from]
  if not (allowed and allowed[to]) or to == "settled" then refuse(m, from, to) end
  local count = self.count
  count[from] = count[from] - 1
  count[to] = count[to] + 1
  self.state[m] = to
end

-- m's end: outcome as in the table at the top of this file.
function methods:settle(m, outcome)
  local from = self.state[m]
  if from ~= "releasing" then refuse(m, from, "settled") end
  self.count.releasing = self.count.releasing - 1
  self.state[m] = nil
  self.on_settled(m, outcome)
end

function methods:state_of(m)
  return self.state[m]
end

-- Messages with a task of their own (running, waiting, releasing) -> true,
-- for the live view.
function methods:active()
  local out = {}
  for m, s in pairs(self.state) do
    if s ~= "queued" then out[m] = true end
  end
  return out
end

-- Every message not settled yet (the run's end stops their locks).
function methods:unsettled()
  local out = {}
  for m in pairs(self.state) do out[#out + 1] = m end
  return out
end

return _M
