-- mqlease.loop.scheduler: the adapter for mqlease's own scheduler
-- (mqlease.scheduler, the built-in loop mqlease.run drives in plain Lua 5.4
-- scripts and LuaJIT).
--
-- A task of the running scheduler waits by yielding what it waits for -- a
-- table { fd = descriptor or nil, deadline = core.now() seconds or nil } --
-- and the scheduler polls all of them at once.

local core = require "mqlease.core"

local coroutine_yield, coroutine_running = coroutine.yield, coroutine.running

local _M = { name = "scheduler" }

local scheduler -- the running mqlease.scheduler: it answers scheduler:owns(co)

-- Installs the running scheduler (nil for none); returns the previous one.
function _M.set_scheduler(s)
  local previous = scheduler
  scheduler = s
  return previous
end

function _M.owns(co, main)
  return co ~= nil and not main and scheduler ~= nil and scheduler:owns(co)
end

-- The running scheduler when it runs the calling coroutine, else nil (for
-- those who batch work per turn: mqlease.redis pipelines a turn's commands).
function _M.current()
  local s = scheduler
  if s == nil then return nil end
  local co, main = coroutine_running()
  if main or not s:owns(co) then return nil end
  return s
end

-- Wakes when fd is readable, the deadline passes, or a task calls wake().
function _M.wait(fd, deadline)
  coroutine_yield({ fd = fd, deadline = deadline })
end

function _M.sleep(s)
  local deadline = core.now() + s
  repeat coroutine_yield({ deadline = deadline }) until core.now() >= deadline
end

-- The scheduler collects descriptors anew on every turn: nothing to forget.
function _M.forget()
end

return _M
