-- bench/servers.lua: the servers of bench/all.sh, started by mqlease.launch and
-- left running in the background; prints shell assignments to eval.
--   eval "$(lua5.4 bench/servers.lua devbroker [FLAGS...])"  -> DV_PID, DV (gRPC address), DV_CONTROL
--   eval "$(lua5.4 bench/servers.lua redis)"                 -> REDIS_PID, REDIS (address)
-- Their output goes to a file named by DV_OUT / REDIS_OUT. The caller stops them
-- (kill "$DV_PID"). A server that does not start: a message on stderr, exit 1.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local launch = require "mqlease.launch"

local what = arg[1]
if what == "devbroker" then
  local flags = { table.unpack(arg, 2) }
  local out = os.tmpname()
  local dv, err = launch.devbroker { root = ".", flags = flags, out = out, detached = true }
  if not dv then io.stderr:write("bench/servers.lua: ", err, "\n"); os.exit(1) end
  print(("DV_PID=%d DV=%s DV_CONTROL=%d DV_OUT=%s"):format(dv.pid, dv.endpoints, dv.control_port,
    launch.shell_quote(out)))
elseif what == "redis" then
  local out = os.tmpname()
  local r, err = launch.redis { out = out, detached = true }
  if not r then io.stderr:write("bench/servers.lua: ", err, "\n"); os.exit(1) end
  print(("REDIS_PID=%d REDIS=%s REDIS_OUT=%s"):format(r.pid, r.address, launch.shell_quote(out)))
else
  io.stderr:write("usage: lua5.4 bench/servers.lua devbroker [FLAGS...] | redis\n")
  os.exit(2)
end
