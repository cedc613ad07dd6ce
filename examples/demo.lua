-- examples/demo.lua ENDPOINTS TOPIC -- what `make demo` runs.
--
-- Sends five tasks, two of them longer than the 10 s invisible duration, and
-- consumes them with one worker while a second worker of the same group polls
-- the whole time. Without lease renewal the second worker would receive the
-- long tasks again (a duplicate run); with mqlease it receives nothing.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"

local endpoints, topic = arg[1], arg[2]
local group = "demo_" .. topic

local producer = assert(mqlease.producer { endpoints = endpoints })
local worker = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic,
  invisible = 10, await = 5 })
local rival = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic,
  invisible = 10, await = 5 })
assert(worker:receive(1, { await = 0 }))

local tasks = { 0.5, 14, 1, 25, 2 }   -- seconds of work; 14 and 25 outlive the lease
for i, seconds in ipairs(tasks) do
  local id = assert(producer:send(topic, ("task %d sleep=%s"):format(i, seconds), { tag = "demo", keys = { "task-" .. i } }))
  print(("sent     task %d (%4.1f s of work) as %s"):format(i, seconds, id))
end
producer:close()

local done, duplicates = 0, 0
local t0 = mqlease.now()
while done < #tasks and mqlease.now() - t0 < 120 do
  for _, m in ipairs(assert(worker:receive(1))) do
    local seconds = tonumber(m.body:match("sleep=(%d+%.?%d*)"))
    -- "work": sleep in slices, and let the rival poll between them, as a second
    -- process would; any message it gets is a duplicate run
    local finish = mqlease.now() + seconds
    while mqlease.now() < finish do
      mqlease.sleep(math.min(1, finish - mqlease.now()))
      for _, dup in ipairs(assert(rival:receive(32, { await = 0 }))) do
        duplicates = duplicates + 1
        print(("DUPLICATE %s went to the second worker"):format(dup.body))
        dup:release()
      end
    end
    local ok, err = m:ack()
    done = done + 1
    print(("handled  %-18s in %4.1f s: %d lease renewals, lease %s, ack %s"):format(m.body:match("task %d+"),
      seconds, m.lease.renewals, m.lease.state, ok and "ok" or err))
  end
end

local m = worker:metrics()
print(("\nsummary: %d tasks handled, %d received, %d renewals (%d failed), %d expired while alive, %d duplicate runs")
  :format(done, m.received, m.renew_success, m.renew_fail, m.expire_while_alive, duplicates))
worker:close()
rival:close()
os.exit(done == #tasks and duplicates == 0 and 0 or 1)
