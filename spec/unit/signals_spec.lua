-- mqlease.signals: a graceful stop on SIGTERM and SIGINT for a loop of the
-- caller's own. Signals are sent to this very process (the shell's parent)
-- or to a child Lua; /proc/self/status says which signals are caught.
local mqlease = require "mqlease"

local SIGINT, SIGTERM = 2, 15

local caught = require "support.caught_signals"

-- Runs code in a child Lua (this one's interpreter and paths); -> its exit
-- status as the shell says it (128 + N for a death by signal N).
local function child(code)
  local lua = arg and arg[-1] or "lua5.4"
  local prelude = ("package.path = %q; package.cpath = %q; "):format(package.path, package.cpath)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(prelude, code)
  f:close()
  local cmd = ("%s %s >/dev/null 2>&1; echo $?"):format(lua:match("lua") and lua or "lua5.4", script)
  local p = assert(io.popen(cmd))
  local rc = tonumber(p:read("a"):match("%d+"))
  p:close()
  os.remove(script)
  return rc
end

describe("mqlease.signals", function()
  it("refuses options it cannot take, naming them", function()
    local function err(opts)
      local ok, e = pcall(mqlease.signals, opts)
      assert.is_false(ok)
      return e
    end
    assert.matches("unknown option 'grase'", err { grase = 1 }, 1, true)
    assert.matches("option 'signals' names 'KILL'", err { signals = { "KILL" } }, 1, true)
    assert.matches("option 'signals' must name 1 to 4 signals", err { signals = {} }, 1, true)
    assert.matches("option 'grace' must be", err { grace = -1 }, 1, true)
    assert.matches("option 'consumers' must list mqlease consumers (entry 1", err { consumers = { {} } }, 1, true)
    assert.matches("option 'consumers' must be", err { consumers = "c" }, 1, true)
  end)

  it("tells of a signal, and gives the process its own handling back at close", function()
    local before = caught()
    assert.is_nil(before[SIGTERM], "something else catches SIGTERM in this process")
    local w = mqlease.signals { grace = 60 }
    finally(function() w:close() end)
    assert.is_true(caught()[SIGTERM])
    assert.is_true(caught()[SIGINT])
    assert.is_nil(w:received())
    assert.is_nil(w:wait(0.05))
    assert(os.execute("kill -TERM $PPID"))   -- (the shell's parent is this process)
    assert.equal("TERM", w:wait(5))
    assert.equal("TERM", w:received())
    assert.is_true(w:close())
    assert.is_true(w:close())
    assert.is_nil(caught()[SIGTERM])
    -- (lua.c catches SIGINT itself while a script runs)
    assert.equal(before[SIGINT], caught()[SIGINT])
    assert.has_error(function() w:fd() end, "mqlease.signals: the watcher is closed")
  end)

  it("refuses a wait of NaN or no number of seconds, naming it, where NaN waited for ever", function()
    local w = mqlease.signals { grace = 60 }
    finally(function() w:close() end)
    for _, bad in ipairs({ 0 / 0, "1", {} }) do
      local ok, err = pcall(w.wait, w, bad)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'wait'", tostring(err))
    end
    assert.is_nil(w:wait(0))
    assert.is_nil(w:wait(-1))
  end)

  it("refuses to run inside nginx, whose workers' signals are nginx's", function()
    _G.ngx = { worker = {} }
    finally(function() _G.ngx = nil end)
    local ok, e = pcall(mqlease.signals, {})
    assert.is_false(ok)
    assert.matches("mqlease.signals: not inside nginx", e, 1, true)
  end)

  it("dropped without close, has the event loops forget its descriptor and gives the signals back", function()
    local forgot = {}
    require("mqlease.loop").use({ name = "signals_spec", owns = function() return false end,
      wait = function() end, sleep = function() end, forget = function(fd) forgot[fd] = true end })
    local w = mqlease.signals {}
    local fd = w:fd()
    assert.is_true(caught()[SIGTERM])
    w = nil   -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    assert.is_true(forgot[fd], "its descriptor was closed under the event loops")
    assert.is_nil(caught()[SIGTERM])
    -- the one watcher of the process is free again
    mqlease.signals({}):close()
  end)

  it("is one at a time in a process", function()
    local w = mqlease.signals { signals = { "HUP" } }
    finally(function() w:close() end)
    local ok, e = pcall(mqlease.signals, {})
    assert.is_false(ok)
    assert.matches("mqlease.signals: signals are already watched", e, 1, true)
  end)

  it("gives a signal nobody read back to the process at close", function()
    -- the child's TERM is held while the watcher watches; close raises it
    -- again under the default disposition, which ends the child (143)
    local rc = child([[
      local mqlease = require "mqlease"
      local w = mqlease.signals {}
      os.execute("kill -TERM $PPID")
      mqlease.sleep(0.3)
      io.stdout:write("still here\n")
      w:close()
      os.exit(0)
    ]])
    assert.equal(128 + SIGTERM, rc)
    -- read, it is the caller's: the child goes on and exits as it chooses
    rc = child([[
      local mqlease = require "mqlease"
      local w = mqlease.signals {}
      os.execute("kill -TERM $PPID")
      assert(w:wait(5) == "TERM")
      w:close()
      os.exit(7)
    ]])
    assert.equal(7, rc)
  end)

  it("exits the process past grace, or at a second signal, when the caller does not end", function()
    local t0 = mqlease.now()
    local rc = child([[
      local mqlease = require "mqlease"
      local w = mqlease.signals { grace = 0.5 }
      os.execute("kill -TERM $PPID")
      local t = os.clock() + 30
      while os.clock() < t do end   -- a handler that never yields
      os.exit(0)
    ]])
    assert.equal(128 + SIGTERM, rc)
    assert.is_true(mqlease.now() - t0 < 20, "the exit came after the grace")
    rc = child([[
      local mqlease = require "mqlease"
      local w = mqlease.signals { grace = 600 }
      -- (TERM: system(), under os.execute, ignores SIGINT in its caller)
      os.execute("kill -TERM $PPID")
      mqlease.sleep(0.3)
      os.execute("kill -TERM $PPID")
      local t = os.clock() + 30
      while os.clock() < t do end
      os.exit(0)
    ]])
    assert.equal(128 + SIGTERM, rc)
  end)
end)
