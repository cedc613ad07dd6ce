-- tx_worker.lua ENDPOINTS TOPIC LOGFILE BODY...
-- A producer that begins one transaction per BODY (keys: the body) and then
-- neither commits nor rolls back: it logs "begun <body> <message id>" for each,
-- then "ready", and sleeps until it is killed (spec/integration/transaction_spec.lua
-- SIGKILLs it, leaving the half messages open for another producer's checker).
-- Its own checker answers "unknown": while it lives it never resolves anything.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

local endpoints, topic, logfile = arg[1], arg[2], arg[3]
local log = assert(io.open(logfile, "w"))
log:setvbuf("line")

local p = assert(mqlease.producer { endpoints = endpoints, topics = { topic },
  checker = function() return "unknown" end })
for i = 4, #arg do
  local tx = assert(p:begin(topic, arg[i], { keys = arg[i] }))
  log:write(("begun %s %s\n"):format(arg[i], tx.message_id))
end
log:write("ready\n")
while true do p:poll(1) end
