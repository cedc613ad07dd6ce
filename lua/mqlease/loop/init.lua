-- mqlease.loop: the one way mqlease waits for its core, in whatever event
-- loop the caller runs.
--
-- In mqlease, to *wait* is always one thing: suspend the caller until a
-- descriptor is readable or a deadline passes (core.wait in C blocks in
-- poll(2) for it; the adapters below suspend a coroutine instead). Waiting
-- for the result of an operation is the router's result(op), built on it;
-- `await` is only the long-poll option of a receive.
--
-- The core never blocks: every operation returns at once and its result
-- arrives later, with the core's descriptor turning readable. How a caller
-- waits for that descriptor depends on the event loop it runs in; each loop
-- has a small adapter in mqlease/loop/, and this module picks the first one
-- that owns the running coroutine, asked in this order:
--
--   scheduler  a task of mqlease's own scheduler (mqlease.run in plain Lua)
--   ngx        a light thread inside nginx (OpenResty: timers, content, ...)
--   cqueues    a coroutine under a cqueues controller
--   poll       anything else: block in poll(2) (a plain script, a main thread)
--
-- The adapter contract (write one for luv, lua-ev, ... and pass it to use()):
--
--   adapter.name               a short name, for messages
--   adapter.owns(co, main)     true when adapter can suspend the running
--                              coroutine co (main: co is the main thread);
--                              must be cheap, it is asked on every wait
--   adapter.wait(fd, deadline) suspend until fd (an integer descriptor, or nil)
--                              is readable or deadline (core.now() seconds, or
--                              nil = no bound) passes. Returning early is
--                              allowed: every caller re-checks in a loop. Many
--                              coroutines may wait for one fd at once: wake
--                              them all, since the first to run drains the
--                              results of every one.
--   adapter.sleep(s)           suspend s seconds
--   adapter.forget(fd)         fd is about to be closed: drop any
--                              registration of it (called on every adapter
--                              that was loaded, whoever waited last)
--   adapter.scheduler(on_error) optional: the tasks mqlease.run uses in this
--                              loop (spawn, park, wake, owns, loop; see
--                              mqlease/loop/ngx.lua); without it mqlease.run
--                              uses mqlease.scheduler, which blocks in poll(2).
--
-- The descriptor is level-triggered and results stay queued until somebody
-- reads them, so a waiter never misses a wake-up that came before it waited.

local core = require "mqlease.core"

local coroutine_running = coroutine.running
local ipairs, pairs, type, error, require, tostring = ipairs, pairs, type, error, require, tostring

local _M = {}

local adapters = {}   -- in the order they are asked; "poll" always last
local loaded = {}     -- name -> adapter, every adapter ever picked or added

local function load(name)
  local a = require("mqlease.loop." .. name)
  loaded[name] = a
  return a
end

-- The built-in adapters, each loaded only when its loop is present.
local scheduler_adapter = load("scheduler")
local poll_adapter = load("poll")
local BUILTIN = {
  { name = "scheduler", present = function() return true end },
  { name = "ngx", present = function() return package.loaded.ngx ~= nil end },
  { name = "cqueues", present = function() return package.loaded.cqueues ~= nil end },
}

local function check(adapter)
  if type(adapter) ~= "table" then error("mqlease.loop.use: an adapter table expected", 3) end
  for _, f in ipairs({ "owns", "wait", "sleep", "forget" }) do
    if type(adapter[f]) ~= "function" then
      error(("mqlease.loop.use: the adapter lacks function '%s'"):format(f), 3)
    end
  end
end

-- Adds an adapter of your own; it is asked before the built-in ones.
function _M.use(adapter)
  check(adapter)
  table.insert(adapters, 1, adapter)
  loaded[adapter.name or tostring(adapter)] = adapter
end

-- The adapter that owns the running coroutine.
function _M.adapter()
  local co, main = coroutine_running()
  for _, a in ipairs(adapters) do
    if a.owns(co, main) then return a end
  end
  for _, b in ipairs(BUILTIN) do
    local a = loaded[b.name]
    if not a and b.present() then a = load(b.name) end
    if a and a.owns(co, main) then return a end
  end
  return poll_adapter
end

-- Waits until fd is readable or deadline (core.now() seconds; nil = forever)
-- passes; may return early.
function _M.wait(fd, deadline)
  return _M.adapter().wait(fd, deadline)
end

-- Sleeps s seconds without blocking the loop the caller runs in (0 or
-- less: yields once at most; math.huge: for ever). One that is no number,
-- NaN among them, raises here, for every loop alike (a NaN deadline stopped
-- every timed wait of mqlease's scheduler, and was undefined in C).
function _M.sleep(s)
  if type(s) ~= "number" or s ~= s then
    error(("bad argument #1 to 'sleep' (seconds expected, got %s)"):format(s ~= s and "NaN" or type(s)), 2)
  end
  return _M.adapter().sleep(s)
end

-- Call before closing fd.
function _M.forget(fd)
  for _, a in pairs(loaded) do a.forget(fd) end
end

-- The scheduler mqlease.run drives in the caller's loop.
function _M.scheduler(on_error)
  local a = _M.adapter()
  if a.scheduler then return a.scheduler(on_error) end
  return require("mqlease.scheduler").new(on_error)
end

-- The own scheduler registers itself here while it runs.
_M.set_scheduler = scheduler_adapter.set_scheduler

-- Deadlines are core.now() seconds.
_M.now = core.now

return _M
