-- spec/support/command.lua: the mqlease command (bin/mqlease) as the specs
-- drive it, as a user runs it from a checkout: without the sanitizer runtime
-- the specs preload (it loads build/mqlease/core.so).
--   command.CMD, command.words(args) -> the args quoted for the shell
--   command.write_file(text) -> the path of a new temporary file holding text (a handler file)
--   local h = command.start(args)   -- in the background: h.pid (the lua process itself,
--     so signals reach it), h.stderr(), h.stdout(), h.rc() (nil while it runs), h.term(),
--     h.wait(timeout) -> its exit code, h.metrics_port(timeout) -> the port its
--     "metrics at" line names (--metrics 127.0.0.1:0), h.cleanup()
local launch = require "mqlease.launch"
local env = require "support.env"
local read, wait_for = env.read, env.wait_for

local _M = {}

_M.CMD = "env -u LD_PRELOAD lua5.4 bin/mqlease"

function _M.words(args)
  local out = {}
  for i, a in ipairs(args) do out[i] = launch.shell_quote(a) end
  return table.concat(out, " ")
end

function _M.write_file(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local METRICS_LINE = "metrics at http://127%.0%.0%.1:(%d+)/metrics"

function _M.start(args)
  local base = os.tmpname()
  local h = { out = base .. ".out", err = base .. ".err", rcfile = base .. ".rc", pidfile = base .. ".pid" }
  env.sh(("(sh -c 'echo $$ >%s; exec %s \"$@\"' mqlease %s >%s 2>%s; echo $? >%s) </dev/null >/dev/null 2>&1 &")
    :format(h.pidfile, _M.CMD, _M.words(args), h.out, h.err, h.rcfile))
  wait_for(function() return read(h.pidfile):match("%d+") ~= nil end, 10, "the command's pid")
  h.pid = tonumber(read(h.pidfile):match("%d+"))
  function h.stdout() return read(h.out) end
  function h.stderr() return read(h.err) end
  function h.rc() return tonumber(read(h.rcfile):match("%d+")) end
  function h.term() os.execute(("kill -TERM %d"):format(h.pid)) end
  function h.wait(timeout)
    wait_for(function() return h.rc() ~= nil end, timeout, "the command's exit")
    return h.rc()
  end
  function h.metrics_port(timeout)
    wait_for(function() return h.stderr():match(METRICS_LINE) or h.rc() ~= nil end, timeout or 20, "the metrics line")
    return tonumber(h.stderr():match(METRICS_LINE)) or error("mqlease exited before its metrics line:\n" .. h.stderr(), 2)
  end
  function h.cleanup()
    if not h.rc() then os.execute(("kill -KILL %d 2>/dev/null"):format(h.pid)) end
    for _, f in ipairs({ base, h.out, h.err, h.rcfile, h.pidfile }) do os.remove(f) end
  end
  return h
end

return _M
