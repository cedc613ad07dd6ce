-- mqlease.scheduler: a small coroutine scheduler over poll(2).
--
-- Each task is a coroutine. When it must wait it yields what it waits for
-- (see mqlease/loop/scheduler.lua): a table { fd =, deadline = }, a descriptor
-- and/or a deadline; a deadline alone (a number); or the token PARK, to sleep
-- until another task calls wake() (park() does the last two). One loop turn
-- polls every descriptor that tasks wait on, with the nearest deadline as
-- timeout, then resumes every task whose descriptor is readable or whose
-- deadline passed -- all waiters of one descriptor together, since the first
-- to run may drain results meant for the others.

local core = require "mqlease.core"
local run_adapter = require "mqlease.loop.scheduler"

local coroutine_create, coroutine_resume, coroutine_status = coroutine.create, coroutine.resume, coroutine.status
local coroutine_yield = coroutine.yield
local coroutine_close = coroutine.close   -- nil on LuaJIT
local setmetatable, pairs, ipairs, type, select, tostring = setmetatable, pairs, ipairs, type, select, tostring
local unpack = table.unpack or unpack   -- LuaJIT

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.scheduler" }

local PARK = setmetatable({}, { __name = "mqlease.scheduler.PARK" })
_M.PARK = PARK

function _M.new(on_error)
  local self = setmetatable({
    tasks = {},       -- co -> what it waits for: false (ready), PARK, a deadline, or { fd =, deadline = }
    fd_waits = {},    -- co -> { fd = } of the tasks waiting for a descriptor
    deadlines = {},   -- co -> deadline of the tasks waiting for one
    next_deadline = nil,   -- at most the earliest of deadlines (see expire)
    ready = {},       -- the tasks made ready since the last round, in order
    queued = {},      -- co -> true while it is in ready
    count = 0,
    on_error = on_error or function(_, err) io.stderr:write("mqlease: task failed: ", tostring(err), "\n") end,
    extra = {},       -- fd -> callback, for descriptors the loop itself watches (signals)
  }, mt)
  return self
end

function methods:owns(co)
  return self.tasks[co] ~= nil
end

-- A round resumes the ready queue, not every task: with hundreds of tasks
-- parked or waiting, a round costs what is ready, not what exists.
local function make_ready(self, co)
  self.tasks[co] = false
  self.fd_waits[co], self.deadlines[co] = nil, nil
  if not self.queued[co] then
    self.queued[co] = true
    local ready = self.ready
    ready[#ready + 1] = co
  end
end

-- Starts fn(...) as a task; it first runs on the next loop turn.
function methods:spawn(fn, ...)
  local args = { n = select("#", ...), ... }
  local co = coroutine_create(function() return fn(unpack(args, 1, args.n)) end)
  make_ready(self, co)
  self.count = self.count + 1
  return co
end

-- Makes a waiting task runnable now (parked, or waiting for a descriptor or a
-- deadline). Every wait in mqlease re-checks its condition in a loop, so an
-- early wake-up only costs one more check.
function methods:wake(co)
  if self.tasks[co] then make_ready(self, co) end
end

-- The running task sleeps until wake(), or until deadline (core.now()
-- seconds) when one is given.
function methods:park(deadline)
  coroutine_yield(deadline or PARK)
end

-- Calls cb() whenever fd is readable (the loop's own descriptors, and the
-- routers' of the clients its tasks wait on).
function methods:watch(fd, cb)
  self.extra[fd] = cb
end

-- Stops watching fd (before it is closed: poll must never see a closed one).
function methods:unwatch(fd)
  self.extra[fd] = nil
end

local function finish(self, co)
  self.tasks[co] = nil
  self.fd_waits[co], self.deadlines[co] = nil, nil
  self.count = self.count - 1
  if coroutine_close then coroutine_close(co) end
end

-- Files a waiting task under what it waits for. next_deadline only ever
-- moves earlier here; a task that leaves before its deadline leaves it
-- early, which costs one early scan of deadlines, not a missed wake-up.
local function wait_for(self, co, what)
  local deadline = what
  if type(what) == "table" then
    if what.fd then self.fd_waits[co] = what end
    deadline = what.deadline
  end
  if deadline then
    self.deadlines[co] = deadline
    local nd = self.next_deadline
    if not nd or deadline < nd then self.next_deadline = deadline end
  end
end

-- Makes ready the tasks whose deadline passed, and finds the next one. Most
-- waits end long before their deadline (a result waited for with a second's
-- bound comes in a millisecond), so this runs about once per such bound, not
-- once per turn.
local function expire(self, now)
  local nd
  for co, deadline in pairs(self.deadlines) do   -- make_ready clears the entry: allowed
    if deadline <= now then make_ready(self, co)
    elseif not nd or deadline < nd then nd = deadline end
  end
  self.next_deadline = nd
end

-- Why what, yielded by a task, is no wait the scheduler can file, or nil.
-- A deadline must be a number and not NaN: a NaN never passes, and once
-- it was the earliest one known, no later deadline ever looked earlier than
-- it, so every timed wait of every task stopped waking. A table is { fd =
-- a descriptor, deadline = }, either optional.
local function unwaitable(what)
  if what == PARK then return nil end
  local fd, deadline = nil, what
  if type(what) == "table" then fd, deadline = what.fd, what.deadline
  elseif type(what) ~= "number" then return "a " .. type(what) end
  if fd ~= nil and type(fd) ~= "number" then return "a descriptor of " .. tostring(fd) end
  if deadline ~= nil and (type(deadline) ~= "number" or deadline ~= deadline) then
    return "a deadline of " .. (deadline ~= deadline and "NaN" or tostring(deadline))
  end
  return nil
end

local function resume(self, co)
  local ok, what = coroutine_resume(co)
  -- (the task's return values are no wait: asked only of a live task, and
  -- only once what it gave looks wrong, off the path of every park)
  local bad = ok and what and unwaitable(what)
  if bad and coroutine_status(co) ~= "dead" then
    -- the task's error, as a raise would be: filed, it broke the whole loop
    -- (a comparison or a poll that raised) or silenced every timed wait
    ok, what = false, "mqlease.scheduler: a task yielded " .. bad .. " (want a deadline, { fd =, deadline = } or park)"
  end
  if not ok then
    finish(self, co)
    self.on_error(co, what)
  elseif coroutine_status(co) == "dead" then
    finish(self, co)
  elseif what then
    self.tasks[co] = what
    if what ~= PARK then wait_for(self, co, what) end
  else
    make_ready(self, co)
  end
end

-- Resumes every task that is ready to run; those it makes ready run in the
-- next round.
function methods:run_ready()
  local ready, queued, tasks = self.ready, self.queued, self.tasks
  self.ready = {}
  for i = 1, #ready do
    local co = ready[i]
    queued[co] = nil
    if tasks[co] == false then resume(self, co) end
  end
end

-- Waits at most max_wait seconds for a descriptor or a deadline, and marks
-- the tasks it frees as ready. It looks only at the tasks that wait for a
-- descriptor, and at deadlines when the earliest may have passed: a parked
-- task waits for wake(), and a ready one is in the ready queue (with hundreds
-- of tasks mostly waiting for results, a scan of them all was most of a turn).
function methods:poll(max_wait)
  local fd_waits = self.fd_waits
  local fds, seen, timeout = {}, {}, max_wait
  local now = core.now()
  if #self.ready > 0 then timeout = 0 end
  local nd = self.next_deadline
  if nd then
    local left = nd - now
    if left < 0 then left = 0 end
    if not timeout or left < timeout then timeout = left end
  end
  for _, w in pairs(fd_waits) do
    local fd = w.fd
    if not seen[fd] then
      seen[fd] = true
      fds[#fds + 1] = fd
    end
  end
  for fd in pairs(self.extra) do
    if not seen[fd] then
      seen[fd] = true
      fds[#fds + 1] = fd
    end
  end
  local readable = {}
  for _, fd in ipairs(core.poll(fds, timeout or -1)) do readable[fd] = true end
  for fd in pairs(readable) do
    local cb = self.extra[fd]
    if cb then cb() end
  end
  for co, w in pairs(fd_waits) do   -- make_ready clears the entry: allowed while traversing
    if readable[w.fd] then make_ready(self, co) end
  end
  now = core.now()
  nd = self.next_deadline
  if nd and nd <= now then expire(self, now) end
end

-- Runs until every task has finished, or until stop() returns true; stop is
-- asked after every round of tasks, so it is never late by a poll.
function methods:loop(stop)
  local previous = run_adapter.set_scheduler(self)
  while self.count > 0 do
    self:run_ready()
    if (stop and stop()) or self.count == 0 then break end
    self:poll(1)
  end
  run_adapter.set_scheduler(previous)
end

return _M
