-- spec/support/model/clock.lua: simulated time for the fault model.
--
-- mqlease reads time through core.now() and waits through core.poll() (the
-- scheduler's one blocking call). While a simulation runs both are replaced:
-- now() reads the simulated clock and poll() moves it to the end of the wait
-- at once, so a run that lasts minutes of its own time takes milliseconds.
-- A run that has not ended by the clock's limit is stopped by an error from
-- poll (the model reports it as a run that never ends).

local core = require "mqlease.core"

local _M = {}

local START = 1000

-- A seeded generator that gives the same numbers on Lua 5.4 and LuaJIT
-- (Park and Miller's minimal standard: every product stays below 2^53).
function _M.rng(seed)
  -- spread nearby seeds apart (the generator's first numbers follow its
  -- state closely), then leave the first few numbers out
  local state = (seed * 2654435761) % 2147483646 + 1
  local r = {}
  -- a float in [0, 1)
  function r.float()
    state = (state * 48271) % 2147483647
    return (state - 1) / 2147483646
  end
  -- an integer in [lo, hi]
  function r.int(lo, hi)
    return lo + math.floor(r.float() * (hi - lo + 1))
  end
  -- a float in [lo, hi)
  function r.range(lo, hi)
    return lo + r.float() * (hi - lo)
  end
  function r.chance(p)
    return r.float() < p
  end
  for _ = 1, 4 do r.float() end
  return r
end

-- Runs fn(clock) with the clock in place of core.now and core.poll, then
-- puts the real ones back (raising what fn raised). clock.t is the time;
-- clock.limit the time past which a poll raises.
function _M.simulate(limit, fn)
  local clock = { t = START }
  clock.limit = START + limit
  local now, poll = core.now, core.poll
  core.now = function() return clock.t end
  core.poll = function(_, timeout)
    if timeout and timeout > 0 then clock.t = clock.t + timeout end
    if clock.t > clock.limit then error("model: the run did not end by its time limit", 0) end
    return {}
  end
  local ok, err = pcall(fn, clock)
  core.now, core.poll = now, poll
  if not ok then error(err, 0) end
end

-- Seconds since the simulation started.
function _M.elapsed(clock)
  return clock.t - START
end

return _M
