-- mqlease.cli.devbroker: `mqlease devbroker [FLAGS...]` -- runs
-- mqlease-devbroker (the checkout's build/, else the one on PATH) with the
-- given flags, --listen 127.0.0.1:8081 unless one is given, and exits with its
-- status. For a service manager, start mqlease-devbroker itself: this command
-- waits for it, and a SIGTERM sent to this process alone does not reach it.

local options = require "mqlease.cli.options"

local ipairs, tostring = ipairs, tostring
local concat = table.concat
local EXIT = options.EXIT

local _M = {}

_M.DEFAULT_LISTEN = "127.0.0.1:8081"

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function executable(path)
  return os.execute("test -x " .. shell_quote(path)) == true
end

-- The path of mqlease-devbroker, or nil, message.
function _M.locate(root)
  if root and executable(root .. "/build/mqlease-devbroker") then return root .. "/build/mqlease-devbroker" end
  local p = io.popen("command -v mqlease-devbroker 2>/dev/null")
  local found = p and p:read("l")
  if p then p:close() end
  if found and found ~= "" then return found end
  return nil, "mqlease-devbroker not found: build it with `make devbroker` in a checkout "
    .. "(build/mqlease-devbroker) and put it on PATH"
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
  local ok, how, status = os.execute(concat(words, " "))
  if how == "signal" then return 128 + status end
  if ok then return EXIT.ok end
  return status or EXIT.failure
end

return _M
