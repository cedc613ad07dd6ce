-- mqlease.cli.devbroker: `mqlease devbroker [FLAGS...]` -- runs
-- mqlease-devbroker (the checkout's build/, else the one on PATH, where the
-- rock and `make install` put it) with the
-- given flags, --listen 127.0.0.1:8081 unless one is given, and exits with its
-- status. For a service manager, start mqlease-devbroker itself: this command
-- waits for it, and a SIGTERM sent to this process alone does not reach it.

local options = require "mqlease.cli.options"

local ipairs, tostring, type = ipairs, tostring, type
local concat = table.concat
local EXIT = options.EXIT

local _M = {}

_M.DEFAULT_LISTEN = "127.0.0.1:8081"

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- os.execute's result as an exit code, on Lua 5.4 (ok, how, n) and on
-- LuaJIT / Lua 5.1 (a wait status).
local function exit_code(ok, how, n)
  if type(ok) == "number" then
    if ok % 256 == 0 then return math.floor(ok / 256) end
    return 128 + ok % 128
  end
  if how == "signal" then return 128 + n end
  return ok and 0 or (n or 1)
end
_M.exit_code = exit_code

local function executable(path)
  return exit_code(os.execute("test -x " .. shell_quote(path))) == 0
end

-- The path of mqlease-devbroker, or nil, message.
function _M.locate(root)
  if root and executable(root .. "/build/mqlease-devbroker") then return root .. "/build/mqlease-devbroker" end
  local p = io.popen("command -v mqlease-devbroker 2>/dev/null")
  local found = p and p:read("l")
  if p then p:close() end
  if found and found ~= "" then return found end
  return nil, "mqlease-devbroker not found on PATH: the rock installs it beside mqlease "
    .. "(the tree's bin/), `make install` in PREFIX/bin, `make` in a checkout as build/mqlease-devbroker"
end

-- The argument list: the user's flags, plus --listen when they gave none.
function _M.arguments(args)
  local out, listen = {}, false
  for i, a in ipairs(args) do
    out[i] = a
    if a == "--listen" then listen = true end
  end
  if not listen then
    out[#out + 1] = "--listen"
    out[#out + 1] = _M.DEFAULT_LISTEN
  end
  return out
end

function _M.main(opts, root)
  local path, err = _M.locate(root)
  if not path then
    io.stderr:write("mqlease devbroker: ", err, "\n")
    return EXIT.failure
  end
  local words = { "exec", shell_quote(path) }
  for _, a in ipairs(_M.arguments(opts.args)) do words[#words + 1] = shell_quote(a) end
  io.stdout:flush()
  return exit_code(os.execute(concat(words, " ")))
end

return _M
