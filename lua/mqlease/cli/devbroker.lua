-- mqlease.cli.devbroker: `mqlease devbroker [FLAGS...]` -- becomes
-- mqlease-devbroker (the checkout's build/, else the one on PATH, where the
-- rock and `make install` put it) with the given flags, --listen
-- 127.0.0.1:8081 unless one is given. It replaces this process (core.exec,
-- execvp), so its pid is the broker's: a SIGTERM to it, from a shell or a
-- service manager, stops the broker, and its exit status is the broker's.

local options = require "mqlease.cli.options"
local launch = require "mqlease.launch"

local ipairs = ipairs
local EXIT = options.EXIT

local _M = {}

_M.DEFAULT_LISTEN = "127.0.0.1:8081"

-- The path of mqlease-devbroker, or nil, message.
_M.locate = launch.devbroker_path

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
  local argv = { path }
  for _, a in ipairs(_M.arguments(opts.args)) do argv[#argv + 1] = a end
  io.stdout:flush()
  io.stderr:flush()
  local _, why = require("mqlease.core").exec(argv)   -- returns only when the exec failed
  io.stderr:write("mqlease devbroker: ", why, "\n")
  return EXIT.failure
end

return _M
