-- mqlease.loop.poll: the fallback adapter -- no event loop at all.
--
-- Plain scripts (and the main thread of anything) block the whole VM in
-- poll(2) until the descriptor is readable or the deadline passes. It owns
-- every coroutine, so mqlease.loop asks it last.

local core = require "mqlease.core"

local _M = { name = "poll" }

function _M.owns()
  return true
end

-- Blocks until fd is readable or deadline (core.now() seconds) passes; with no
-- fd it only sleeps until the deadline; with neither it returns at once.
function _M.wait(fd, deadline)
  local left = -1
  if deadline then
    left = deadline - core.now()
    if left < 0 then left = 0 end
  end
  if fd then
    core.wait(fd, left)
  elseif left > 0 then
    core.sleep(left)
  end
end

function _M.sleep(s)
  core.sleep(s)
end

-- Nothing is registered anywhere: nothing to forget.
function _M.forget()
end

return _M
