-- mqlease.loop.ngx: the adapter for OpenResty (lua-nginx-module), where
-- nothing may block the worker's event loop.
--
-- One light thread per descriptor watches it; the others waiting for the same
-- descriptor sleep on a semaphore and are all woken when it turns readable
-- (the first to run drains the results meant for everyone). The watch itself:
--   * ngx.run_worker_thread(pool, "mqlease.core", "wait", fd, t): poll(2) on
--     a thread of nginx's `thread_pool <pool>` (lua-nginx-module >= 0.10.21;
--     Debian 12 ships 0.10.23); the worker sleeps in its event loop meanwhile;
--   * else (no such pool, older module) an adaptive ngx.sleep poll: 1 ms,
--     doubling up to 50 ms while nothing comes.
-- A watch lasts at most 1 s, so a quitting worker never waits long for it.
--
-- Once the worker is exiting (nginx -s quit, -s reload) nginx keeps it alive
-- only while a timer it may not cancel is pending: ngx.sleep's is one, a
-- wait on a worker thread has none. So from then on every wait is an
-- ngx.sleep of at most 10 ms and a check (the drain lasts seconds at most).
-- Also the task half of mqlease.run here: scheduler() (light threads).

local core = require "mqlease.core"

local ngx = require "ngx"   -- OpenResty registers its API as the module "ngx"
local semaphore = require "ngx.semaphore"

local max, min = math.max, math.min
local coroutine_running = coroutine.running
local pcall, select, unpack = pcall, select, table.unpack or unpack

local _M = { name = "ngx", pool = "mqlease", watch_max = 1 }

-- phases in which a light thread may yield (ngx.sleep, semaphores)
local YIELDABLE = { rewrite = true, access = true, content = true, timer = true }

function _M.owns(co, main)
  return co ~= nil and not main and YIELDABLE[ngx.get_phase()] == true
end

local use_threads = ngx.run_worker_thread ~= nil

-- ngx.sleep of at least 1 ms: ngx.sleep(0) without OpenResty's patches spins
-- the event loop, which then never sees the master's quit.
local function nap_for(t)
  ngx.sleep(max(t, 0.001))
end

local function poll_sleeping(fd, t)
  local deadline, step = core.now() + t, 0.001
  while not core.wait(fd, 0) do
    local left = deadline - core.now()
    if left <= 0 then return end
    nap_for(min(step, left))
    step = min(step * 2, 0.05)
  end
end

-- Returns once fd is readable or t seconds have passed.
local function watch(fd, t)
  if use_threads and not ngx.worker.exiting() then
    local ok, err = ngx.run_worker_thread(_M.pool, "mqlease.core", "wait", fd, t)
    if ok then return end
    use_threads = false
    ngx.log(ngx.WARN, "mqlease: ngx.run_worker_thread failed (", tostring(err), "); add `thread_pool ",
      _M.pool, " threads=4;` to nginx.conf -- polling with ngx.sleep instead")
  end
  poll_sleeping(fd, t)
end

local watches = {} -- fd -> { sema = semaphore, waiting = number of sleepers }

local EXITING_NAP = 0.01

-- Sleeps on sema up to t seconds; a short ngx.sleep once the worker exits.
local function nap(sema, t)
  if ngx.worker.exiting() then
    nap_for(min(t, EXITING_NAP))
  elseif t > 0 then
    sema:wait(t)
  end
end

function _M.wait(fd, deadline)
  local left = deadline and max(0, deadline - core.now()) or _M.watch_max
  if not fd then
    if left > 0 then nap_for(ngx.worker.exiting() and min(left, EXITING_NAP) or left) end
    return
  end
  if ngx.worker.exiting() then
    if not core.wait(fd, 0) then nap_for(min(left, EXITING_NAP)) end
    return
  end
  local w = watches[fd]
  if w then
    w.waiting = w.waiting + 1
    nap(w.sema, left)
    w.waiting = w.waiting - 1
    return
  end
  w = { sema = semaphore.new(0), waiting = 0 }
  watches[fd] = w
  watch(fd, min(left, _M.watch_max))
  if watches[fd] == w then watches[fd] = nil end
  if w.waiting > 0 then w.sema:post(w.waiting) end
end

function _M.sleep(s)
  nap_for(s)
end

-- The descriptor is about to close: wake whoever sleeps on it.
function _M.forget(fd)
  local w = watches[fd]
  if not w then return end
  watches[fd] = nil
  if w.waiting > 0 then w.sema:post(w.waiting) end
end

-- ---------------------------------------------------------------- tasks

-- The scheduler mqlease.run drives, on light threads: spawn(fn, ...) -> task,
-- park(deadline), wake(task), loop(stop). A task parks on its own semaphore.
local sched_methods = {}
local sched_mt = { __index = sched_methods }

-- mqlease.run passes none: without this, a raising task's light thread died
-- calling nil, and its error was never said
local function log_task_error(_, err)
  ngx.log(ngx.ERR, "mqlease: task failed: ", tostring(err))
end

function _M.scheduler(on_error)
  return setmetatable({ tasks = {}, count = 0, done = semaphore.new(0), on_error = on_error or log_task_error },
    sched_mt)
end

function sched_methods:spawn(fn, ...)
  local args = { n = select("#", ...), ... }
  self.count = self.count + 1
  local co
  co = ngx.thread.spawn(function()
    self.tasks[coroutine_running()] = semaphore.new(0)
    ngx.sleep(0.001) -- first run on a later turn, as in mqlease.scheduler
    local ok, err = pcall(fn, unpack(args, 1, args.n))
    self.tasks[coroutine_running()] = nil
    self.count = self.count - 1
    -- the loop learns of the end first: an on_error that raises must not hide it
    self.done:post(1)
    if not ok then self.on_error(co, err) end
  end)
  return co
end

-- Sleeps until wake(), or deadline (core.now() seconds; nil: at most 1 s).
-- A deadline already past still yields (for 1 ms at most), as in
-- mqlease.scheduler: a semaphore's wait of 0 s returns without yielding, and
-- the waiter's hold of 0 s or less relies on the yield, or a policy that
-- defers at once spins the worker and nothing else (nor the stop) runs.
function sched_methods:park(deadline)
  local sema = self.tasks[coroutine_running()]
  nap(sema, deadline and max(0.001, deadline - core.now()) or 1)
end

function sched_methods:wake(co)
  local sema = self.tasks[co]
  if sema and sema:count() <= 0 then sema:post(1) end
end

function sched_methods:owns(co)
  return self.tasks[co] ~= nil
end

-- Runs until every task has finished or stop() returns true (asked at least
-- every 0.1 s and whenever a task ends).
function sched_methods:loop(stop)
  while self.count > 0 do
    if stop and stop() then break end
    nap(self.done, 0.1)
  end
end

return _M
