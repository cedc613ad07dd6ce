-- mqlease.lease: the Lua face of one lease -- a received message's claim to
-- stay invisible to every other consumer of its group.
--
-- The lease itself lives in the C core: its record (receipt handle, deadline,
-- renewals, state) in src/lease/mql_lease.c, its renewal on a C thread in
-- src/rocketmq/mql_renew.c, its release (ack, nack, dead letter) in
-- src/rocketmq/mql_release.c. This object only asks the core and remembers
-- how the lease ended. Its state is one word:
--
--   held, renewing, expiring        alive: the broker hides the message for us
--   acked, nacked, dead_lettered    released by us (final)
--   lost                            the deadline passed or the broker refused
--                                   the handle: someone else may have it (final)
--
-- A lease is held by the million, so it costs nothing until it is asked for:
-- a message keeps its core lease id in its lease slot, the consumer's router
-- maps that id to the message (weakly), and the lease object is made the
-- first time m.lease is read (mqlease.run hands it to every handler) or a
-- lease event for it comes; then it is kept under its name beside the slot. It starts
-- with its id and its message (which it keeps alive: a message collected while
-- its lease is in use would be nacked) -- _renewals, _final and the rest
-- appear once known -- and finds its router and consumer in the metatable all
-- leases of one consumer share. A dropped message is nacked by the message's
-- finalizer (collect below), lease object or not.

local setmetatable, getmetatable, rawget, rawset = setmetatable, getmetatable, rawget, rawset
local floor = math.floor

local _M = {}

local FINAL = { acked = true, nacked = true, lost = true, dead_lettered = true }
local ALIVE = { held = true, renewing = true, expiring = true }

local methods = {}

local function index(self, k)
  if k == "state" then
    return (self:_info())
  elseif k == "renewals" then
    local _, _, renewals = self:_info()
    return renewals
  elseif k == "uncertain" then
    -- true once a renewal went unanswered: the message may come back once more
    local _, _, _, uncertain = self:_info()
    return uncertain
  elseif k == "fence" then
    return _M.fence_of(self)
  end
  return methods[k]
end

-- lease.fence when the field is not set: the exactly-once policy's token,
-- issued at the first read (fence = "on_read"; mqlease.policy) while the
-- handler holds the lock, else nil.
function _M.fence_of(lease)
  local issue = rawget(lease, "_fence_issue")
  if issue then return issue(lease) end
  return nil
end

local function tostring_lease(self)
  return ("mqlease.lease(%d, %s)"):format(rawget(self, "id"), self.state)
end

-- The router of the core client that holds the lease.
local function router_of(lease)
  return getmetatable(lease).router
end
_M.router = router_of

-- A lease whose message nobody references any more can never be acked: a
-- handler dropped it. Without this its core lease would be renewed until
-- max_lease (an hour by default). It is nacked instead (visible again after
-- release_delay) and counted as leases_dropped. id is the core's lease id,
-- lease the lease object if one was made.
function _M.collect(consumer, id, lease)
  -- let expire on purpose: the handler chose the deadline, not release_delay
  if lease and (rawget(lease, "_final") or rawget(lease, "_let_go")) then return end
  local router = rawget(consumer, "_router")
  if not router then return end
  local client = router.client
  if client:closed() or not client:lease(id) then return end
  router:forget(client:nack(id, floor(consumer.options.release_delay * 1000)))
  consumer:count("leases_dropped")
end

-- The lease object of message m, whose core lease id is id (the message
-- module calls it the first time m.lease is read).
function _M.new(router, consumer, id, m)
  local mt = router.lease_mt
  if not mt then
    mt = { __name = "mqlease.lease", __index = index, __tostring = tostring_lease,
      router = router, consumer = consumer }
    router.lease_mt = mt
  end
  return setmetatable({ id = id, _message = m }, mt)
end

-- state, remaining seconds, renewals, uncertain: from the core while it holds
-- the lease, else the final state the core reported when it let go.
function methods:_info()
  local final = rawget(self, "_final")
  if final then return final, 0, (rawget(self, "_renewals") or 0), rawget(self, "_uncertain") == true end
  local router = router_of(self)
  local client = router.client
  if not client:closed() then
    local state, remaining, renewals, _, uncertain = client:lease(rawget(self, "id"))
    if state then
      self._renewals = renewals
      if uncertain then self._uncertain = true end
      return state, remaining, renewals, uncertain
    end
    router:pump()   -- the event that ended it is waiting
    final = rawget(self, "_final")
    if final then return final, 0, (rawget(self, "_renewals") or 0), rawget(self, "_uncertain") == true end
  end
  return "lost", 0, (rawget(self, "_renewals") or 0), rawget(self, "_uncertain") == true
end

-- A lease event from the core (the router calls it).
function methods:_set_state(state, renewals)
  if renewals then self._renewals = renewals end
  if FINAL[state] and not rawget(self, "_final") then self._final = state end
end

-- false once the Redis lock that guards the lease (the exactly-once policy's,
-- see hold_lock) is known lost: from its keepalive's event, or asked of its
-- client now, so every event loop sees it, not only one that pumps Redis.
local function lock_kept(lease)
  if rawget(lease, "_lock_is_lost") then return false end
  local client = rawget(lease, "_lock_client")
  -- a client of the user's own may lack keepalive_lost: its keepalive's
  -- on_lost callback is then all that tells
  if client and client.keepalive_lost and client:keepalive_lost(rawget(lease, "_lock_id")) then
    rawset(lease, "_lock_is_lost", true)
    return false
  end
  return true
end
_M.lock_kept = lock_kept

-- true while the broker still hides the message for us (and, under the
-- exactly-once policy, while its Redis lock is still ours)
function methods:alive()
  if not lock_kept(self) then return false end
  return ALIVE[(self:_info())] == true
end

-- The Redis lock that guarded this lease could not be renewed.
function methods:_lock_lost()
  rawset(self, "_lock_is_lost", true)
end

-- true while the broker still hides the message for us, whatever became of
-- a Redis lock: whether a release can still be made. A stand-in lease
-- without a state (a test's) answers alive().
function _M.held(lease)
  local state = lease.state
  if state == nil then return lease:alive() end
  return ALIVE[state] == true
end

-- The policy keeps a Redis lock for the lease: keepalive id of client (a
-- mqlease.redis). alive() answers false once it is lost; drop_lock stops it.
-- These fields, as the policy's, are written raw, where they are read: a
-- lease of the caller's own may be a proxy whose __newindex sends writes
-- elsewhere.
function _M.hold_lock(lease, client, id)
  rawset(lease, "_lock_client", client)
  rawset(lease, "_lock_id", id)
  rawset(lease, "_lock_is_lost", nil)   -- a new lock: a lost one of an earlier attempt is gone with it
end

-- The lock a policy holds on a lease of its caller's own (a proxy, say),
-- noted on the message's own lease too: what mqlease.run stops for a handler
-- it leaves behind (drop_lock(m.lease)) is found there. unmirror_lock
-- clears the note once the policy has let the lock go itself.
function _M.mirror_lock(lease, client, id)
  rawset(lease, "_lock_client", client)
  rawset(lease, "_lock_id", id)
end
function _M.unmirror_lock(lease, id)
  if rawget(lease, "_lock_id") == id then
    rawset(lease, "_lock_client", nil)
    rawset(lease, "_lock_id", nil)
  end
end

-- Stops the lease's lock keepalive, if it has one (the lock then lapses at its
-- TTL unless its owner deletes it). true if the lock had been lost meanwhile.
-- released: its owner deleted the lock, finding it its own, so a loss the
-- keepalive saw since is that delete (false, the lock kept to the end).
-- Idempotent: the policy calls it when its handler ends, mqlease.run for
-- every message still unsettled when it returns.
function _M.drop_lock(lease, released)
  local client = rawget(lease, "_lock_client")
  if not client then return false end
  local id = rawget(lease, "_lock_id")
  rawset(lease, "_lock_client", nil)
  rawset(lease, "_lock_id", nil)
  local lost = client:keepalive_stop(id)
  if released then
    rawset(lease, "_lock_is_lost", nil)
    return false
  end
  if lost then rawset(lease, "_lock_is_lost", true) end
  return lost
end

-- seconds until the broker would hand the message to someone else (0 when gone)
function methods:remaining()
  local _, remaining = self:_info()
  return remaining > 0 and remaining or 0
end

-- A release the core could not make because it no longer holds the lease: why.
function _M.gone(lease, err, code)
  if code ~= "NO_LEASE" then return err, code end
  local final = rawget(lease, "_final")
  if final == "acked" then return "the message was already acked", "ALREADY_ACKED" end
  if final == "nacked" then return "the message was already nacked", "ALREADY_NACKED" end
  if final == "dead_lettered" then return "the message was already dead-lettered", "ALREADY_DEAD_LETTERED" end
  return "the lease was lost: the broker may have redelivered the message", "LEASE_LOST"
end

-- The end of a release (ev: the core's result for it): true with the lease
-- final, or nil, message, code.
function _M.released(lease, ev, final)
  if ev.ok then
    -- the core ends a dead-lettered lease as acked (the proxy acks it); say what happened
    if final == "dead_lettered" then lease._final = final end
    lease:_set_state(final)
    return true
  end
  -- A release that failed leaves the lease to expire (the core no longer
  -- renews it): when the message is collected it must not be nacked again
  -- and counted as dropped.
  local router = router_of(lease)
  if not router.client:closed() and router.client:lease(rawget(lease, "id")) == "expiring" then
    lease._let_go = true
  end
  local err, code = _M.gone(lease, ev.err, ev.code)
  return nil, err, code
end

-- The core stopped renewing on purpose: when the message is collected it must
-- not be nacked (the handler chose the deadline).
function _M.let_go(lease)
  lease._let_go = true
end

return _M
