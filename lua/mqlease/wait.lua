-- mqlease.wait: the one way mqlease waits for its core.
--
-- The core never blocks; it makes a descriptor readable when results wait.
-- Waiting for it is chosen per call, from where the caller runs:
--   * inside a coroutine of mqlease's own scheduler: yield to the scheduler;
--   * inside a cqueues controller: cqueues.poll (the "pollable" convention);
--   * anywhere else: block in poll(2) with a timeout (core.wait).
-- A scheduler registers itself with set_scheduler; adapters stay out of the core.

local core = require "mqlease.core"

local coroutine_running, coroutine_yield = coroutine.running, coroutine.yield

local _M = {}

local scheduler -- the running mqlease.scheduler, which answers scheduler:owns(co)

-- Installs the running scheduler (nil for none); returns the previous one.
function _M.set_scheduler(s)
  local previous = scheduler
  scheduler = s
  return previous
end

-- A pollable object for cqueues and for the scheduler.
local pollable_mt = {
  __index = {
    pollfd = function(self) return self.fd end,
    events = function() return "r" end,
    timeout = function(self)
      if not self.deadline then return nil end
      local left = self.deadline - core.now()
      return left > 0 and left or 0
    end,
  },
}

function _M.pollable(fd, deadline)
  return setmetatable({ fd = fd, deadline = deadline }, pollable_mt)
end

-- Waits until fd is readable or deadline (core.now() seconds; nil = forever) passes.
function _M.wait(fd, deadline)
  local co, main = coroutine_running()
  if co and not main and scheduler and scheduler:owns(co) then
    coroutine_yield(_M.pollable(fd, deadline))
    return
  end
  local cq = package.loaded.cqueues
  if co and not main and cq and cq.running and cq.running() then
    local left = deadline and deadline - core.now()
    if left and left < 0 then left = 0 end
    cq.poll(_M.pollable(fd, deadline), left)
    return
  end
  local left = deadline and deadline - core.now() or -1
  if deadline and left < 0 then left = 0 end
  core.wait(fd, left)
end

-- Sleeps s seconds: yields inside a scheduler or cqueues coroutine, blocks outside.
function _M.sleep(s)
  local co, main = coroutine_running()
  local deadline = core.now() + s
  if co and not main and scheduler and scheduler:owns(co) then
    while core.now() < deadline do coroutine_yield(_M.pollable(nil, deadline)) end
    return
  end
  local cq = package.loaded.cqueues
  if co and not main and cq and cq.running and cq.running() then
    cq.sleep(s)
    return
  end
  core.sleep(s)
end

return _M
