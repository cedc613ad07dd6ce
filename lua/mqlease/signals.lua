-- mqlease.signals: a graceful stop on SIGTERM and SIGINT for a loop of the
-- caller's own. mqlease.run has this built in (signals = true); a worker
-- that receives and handles in a loop of its own had no way to learn of the
-- signal but to install a handler itself, and none to bound the drain.
--
--   local stop = mqlease.signals { consumers = { c }, grace = 25 }
--   while not stop:received() do ... c:receive() ... end
--   c:close()      -- gives back what it still holds
--   stop:close()   -- the process's own handling of the signals again
--
-- From the first signal the caller has `grace` seconds to end its work and
-- close: past them, or at a second signal (the operator saying "now"), a C
-- thread gives back every lease the listed consumers hold (a nack each, so
-- none waits a whole invisible duration) and exits the process with 128 +
-- the signal's number. That thread keeps going while Lua is busy in a
-- handler that never yields.
--
-- One watcher at a time in a process (mqlease.run's among them): the signal
-- handlers are the process's.

local core = require "mqlease.core"
local config = require "mqlease.config"
local wait = require "mqlease.loop"

local setmetatable, getmetatable, type, ipairs, tostring, error, rawget, pcall = setmetatable, getmetatable, type, ipairs,
  tostring, error, rawget, pcall
local newproxy = rawget(_G, "newproxy")   -- LuaJIT's; nil on Lua 5.4

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.signals" }

-- the signals the core can watch
local KNOWN = { TERM = true, INT = true, HUP = true, QUIT = true }

local SPECS = {
  signals = { kind = "strings", doc = "the signals to watch: `TERM`, `INT`, `HUP`, `QUIT`" },
  consumers = { kind = "table", doc = "the consumers whose leases are given back at the emergency exit" },
  grace = { kind = "number", default = 25, min = 0, max = 3600, unit = "s",
    doc = "seconds from the first signal until the emergency exit" },
}

local function option_error(msg)
  error("mqlease.signals: " .. msg, 3)
end

-- The core clients of the listed consumers (mqlease.consumer's).
local function clients_of(consumers)
  local out = {}
  for i, c in ipairs(consumers) do
    local router = type(c) == "table" and c._router
    local client = router and router.client
    if type(client) ~= "userdata" then
      option_error(("option 'consumers' must list mqlease consumers (entry %d is %s)"):format(i, tostring(c)))
    end
    out[#out + 1] = client
  end
  if #out > 16 then option_error(("option 'consumers' lists %d consumers (at most 16)"):format(#out)) end
  return out
end

-- opts: signals (default { "TERM", "INT" }), consumers (default none), grace.
function _M.new(opts)
  -- an nginx worker's signals are nginx's (its graceful stop is
  -- ngx.worker.exiting(), which mqlease.ngx.start follows)
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.worker) == "table" then
    error("mqlease.signals: not inside nginx: nginx owns its workers' signals (see ngx.worker.exiting)", 2)
  end
  local o = config.check("mqlease.signals", SPECS, opts or {})
  local names = o.signals or { "TERM", "INT" }
  if #names == 0 or #names > 4 then
    option_error("option 'signals' must name 1 to 4 signals (got " .. #names .. ")")
  end
  for _, name in ipairs(names) do
    if not KNOWN[name] then
      option_error(("option 'signals' names '%s' (known: HUP, INT, QUIT, TERM)"):format(tostring(name)))
    end
  end
  local consumers = o.consumers or {}
  local clients = clients_of(consumers)
  local release_delay = consumers[1] and consumers[1].options.release_delay or 0
  local ok, watcher = pcall(core.watch_signals, names, clients, o.grace, release_delay)
  if not ok then error(tostring(watcher):gsub("^mqlease: ", "mqlease.signals: "), 2) end
  local self = setmetatable({ _watcher = watcher, _fd = watcher:fd(), _got = nil }, mt)
  -- dropped without close: the event loops forget its descriptor before the
  -- core closes it (cqueues fails on a closed descriptor it still polls).
  -- Lua 5.4 finalizes the table itself; LuaJIT only userdata, so a proxy.
  if newproxy then
    self._gc = newproxy(true)
    getmetatable(self._gc).__gc = function() pcall(methods.close, self) end
  end
  return self
end

-- The first signal that came ("TERM", "INT", ...), or nil: asked at once.
function methods:received()
  if self._got then return self._got end
  local w = self._watcher
  if not w then return nil end
  self._got = w:signal()
  return self._got
end

-- Waits until a signal comes or seconds pass (nil: for ever), yielding as
-- every wait of mqlease does (inside mqlease.run's scheduler, cqueues or
-- OpenResty). -> the signal's name, or nil once the time is up.
function methods:wait(seconds)
  if seconds ~= nil and (type(seconds) ~= "number" or seconds ~= seconds) then
    -- (NaN made a deadline no clock passes: it waited for ever, or raised
    -- from inside the event loop, naming no wait)
    error(("bad argument #1 to 'wait' (seconds or nil expected, got %s)"):format(
      seconds ~= seconds and "NaN" or type(seconds)), 2)
  end
  local deadline = seconds and wait.now() + seconds
  while true do
    local got = self:received()
    if got or not self._watcher then return got end
    if deadline and wait.now() >= deadline then return nil end
    wait.wait(self._watcher:fd(), deadline)
  end
end

-- A descriptor that turns readable once a signal came, for an event loop of
-- the caller's own (read it with received()).
function methods:fd()
  if not self._watcher then error("mqlease.signals: the watcher is closed", 2) end
  return self._watcher:fd()
end

-- Ends the watch: the process's own handling of the signals comes back, and
-- no emergency exit comes any more. A signal that came and was never read
-- by received() goes back to the process, which then handles it as it did
-- before (by default: it ends). Safe to call twice.
function methods:close()
  local w = self._watcher
  if not w then return true end
  self._watcher = nil
  wait.forget(self._fd)
  -- (a finalizer's close may come after the watcher's own, which closed it)
  pcall(w.done, w)
  pcall(w.close, w)
  return true
end

mt.__close = function(self) self:close() end
mt.__gc = function(self) pcall(methods.close, self) end

return _M
