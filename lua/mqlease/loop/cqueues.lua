-- mqlease.loop.cqueues: the adapter for a cqueues controller.
--
-- A coroutine running under a controller waits with cqueues.poll on a
-- "pollable" object (pollfd/events/timeout), the convention cqueues defines;
-- before a descriptor is closed, cqueues.cancel makes the controller forget
-- it (else its next update fails with EBADF).

local core = require "mqlease.core"

local _M = { name = "cqueues" }

local function cqueues()
  local cq = package.loaded.cqueues
  if type(cq) == "table" then return cq end
end

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

function _M.owns(co, main)
  local cq = cqueues()
  return co ~= nil and not main and cq ~= nil and cq.running ~= nil and cq.running() and true or false
end

function _M.wait(fd, deadline)
  local cq = cqueues()
  local left = deadline and deadline - core.now()
  if left and left < 0 then left = 0 end
  if fd then
    cq.poll(setmetatable({ fd = fd, deadline = deadline }, pollable_mt), left)
  elseif left then
    cq.sleep(left)
  end
end

function _M.sleep(s)
  cqueues().sleep(s)
end

function _M.forget(fd)
  local cq = cqueues()
  if cq and cq.cancel then pcall(cq.cancel, fd) end
end

return _M
