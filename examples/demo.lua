-- examples/demo.lua ENDPOINTS TOPIC -- what `make demo` runs.
--
-- One worker takes five tasks, two of them much longer than the 10 s
-- invisible duration, and works through them one after another; the others
-- wait in its queue, still held. A second worker process of the same group
-- polls the whole time. Without lease renewal the broker would hand it the
-- long tasks (and the waiting ones) again: duplicate runs. With mqlease it
-- gets nothing.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

if arg[1] == "rival" then
  -- the second worker: receive for a while, report anything that arrives
  local endpoints, topic, seconds = arg[2], arg[3], tonumber(arg[4])
  local c = assert(mqlease.consumer { endpoints = endpoints, group = "demo_" .. topic, topic = topic,
    invisible = 10, await = 5 })
  print("rival    polling for " .. seconds .. " s")
  io.stdout:flush()
  local stop = mqlease.now() + seconds
  while mqlease.now() < stop do
    for _, m in ipairs(assert(c:receive(32))) do
      print(("DUPLICATE %s reached the second worker (attempt %d)"):format(m.body, m.delivery_attempt))
      io.stdout:flush()
      m:release()
    end
  end
  c:close()
  return
end

local endpoints, topic = arg[1], arg[2]
local producer = assert(mqlease.producer { endpoints = endpoints })
local worker = assert(mqlease.consumer { endpoints = endpoints, group = "demo_" .. topic, topic = topic,
  invisible = 10, await = 5 })
assert(worker:receive(1, { await = 0 }))   -- a new group: subscribe before producing

local tasks = { 0.5, 14, 1, 25, 2 }   -- seconds of work
for i, seconds in ipairs(tasks) do
  local id = assert(producer:send(topic, ("task %d (%s s)"):format(i, seconds), { keys = { "task-" .. i } }))
  print(("sent     task %d, %4.1f s of work, id %s"):format(i, seconds, id))
end
producer:close()

local held = {}
while #held < #tasks do
  for _, m in ipairs(assert(worker:receive(#tasks - #held))) do held[#held + 1] = m end
end
print(("worker   holds all %d tasks (invisible duration 10 s); working through them one by one"):format(#held))
io.stdout:flush()

local rival = io.popen(("lua5.4 examples/demo.lua rival %s %s 50"):format(endpoints, topic), "r")
local t0 = mqlease.now()
for _, m in ipairs(held) do
  local seconds = tonumber(m.body:match("%((.-) s%)"))
  mqlease.sleep(seconds)   -- blocks this Lua VM; the C core keeps renewing every lease
  local ok, err = m:ack()
  print(("handled  %-14s at %5.1f s: %d renewals, lease %s, ack %s"):format(m.body, mqlease.now() - t0,
    m.lease.renewals, m.lease.state, ok and "ok" or err))
  io.stdout:flush()
end
local m = worker:metrics()
worker:close()

local duplicates = 0
for line in rival:lines() do
  print(line)
  if line:match("^DUPLICATE") then duplicates = duplicates + 1 end
end
rival:close()
print(("\nsummary: %d tasks handled, %d received, %d renewals (%d failed), %d expired while alive, %d duplicate runs")
  :format(#held, m.received, m.renew_success, m.renew_fail, m.expire_while_alive, duplicates))
os.exit(duplicates == 0 and m.acks_ok == #tasks and 0 or 1)
