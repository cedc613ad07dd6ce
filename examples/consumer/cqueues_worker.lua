-- examples/consumer/cqueues_worker.lua -- mqlease inside a cqueues controller.
--
--   lua5.4 cqueues_worker.lua [ENDPOINTS [GROUP [TOPIC]]]
--   (defaults: 127.0.0.1:8081 cq_worker tasks, where `mqlease devbroker` listens)
--
-- The consumer is a cqueues "pollable" (pollfd/events/timeout), so its waits
-- yield to the controller: here a worker loop and a heartbeat run side by
-- side in one thread, and the heartbeat keeps ticking during long polls.
-- SIGTERM or SIGINT ends both (mqlease.signals: its wait yields to the
-- controller too), and close gives back what is still held.
local cqueues = require "cqueues"
local mqlease = require "mqlease"

local consumer = assert(mqlease.consumer {
  endpoints = arg[1] or "127.0.0.1:8081", group = arg[2] or "cq_worker", topic = arg[3] or "tasks",
  invisible = 30, await = 10,
})

local cq = cqueues.new()
local running = true
local stop = mqlease.signals { consumers = { consumer }, grace = 25 }

cq:wrap(function()
  while running do
    if stop:wait(1) then running = false end   -- yields to the controller meanwhile
  end
end)

cq:wrap(function()
  while running do
    for _, m in ipairs(assert(consumer:receive())) do
      print("handling", m.id, #m.body .. " bytes")
      cqueues.sleep(0.1)   -- the work: yields to the controller, the core renews the lease
      assert(m:ack())
    end
  end
end)

cq:wrap(function()
  for i = 1, 6 do
    if not running then break end
    print(("heartbeat %d, %d leases held"):format(i, consumer:metrics().inflight))
    cqueues.sleep(5)
  end
  running = false
end)

assert(cq:loop())
consumer:close()   -- cancels the descriptor in cqueues before closing it
stop:close()
