-- poller.lua ENDPOINTS GROUP TOPIC SECONDS OUTFILE
-- A second consumer in another process: it receives from GROUP for SECONDS
-- and writes one line "id attempt" per message it got (it never acks, so it
-- cannot hide a redelivery), then "done". The lease specs run it beside a
-- consumer whose Lua VM is blocked.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"
local endpoints, group, topic, seconds, outfile = arg[1], arg[2], arg[3], tonumber(arg[4]), arg[5]
local out = assert(io.open(outfile, "w"))
out:setvbuf("line")
local c = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic,
  invisible = 10, renew = false, await = 5 })
out:write("ready\n")
local deadline = mqlease.now() + seconds
while mqlease.now() < deadline do
  local left = deadline - mqlease.now()
  local msgs = assert(c:receive(32, { await = math.max(0, math.min(5, left)) }))
  for _, m in ipairs(msgs) do
    out:write(("%s %d\n"):format(m.id, m.delivery_attempt))
    m:let_expire()
  end
end
c:close()
out:write("done\n")
out:close()
