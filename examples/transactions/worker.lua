-- examples/transactions/worker.lua -- consume-transform-produce exactly once:
-- every message of topic IN becomes exactly one message of topic OUT, even
-- when this worker is killed at any moment and another one (or this one,
-- restarted) receives the message again.
--
--   lua5.4 worker.lua ENDPOINTS GROUP IN OUT REDIS_ADDRESS
--
-- OUT must be a TRANSACTION topic (mqlease's checks: docs/exactly-once.md).
-- Without a JVM, the dev broker speaks transactions too:
--   build/mqlease-devbroker --listen 127.0.0.1:8081 --topic orders --topic orders-priced &
--   lua5.4 examples/transactions/worker.lua 127.0.0.1:8081 transform orders orders-priced 127.0.0.1:6379
-- The handler sends its output as a half message (invisible); the
-- exactly-once policy writes the input's done marker; then the output's
-- transaction commits, claimed for this run in Redis. A worker killed in
-- between leaves the half message to the broker's check, which the next
-- worker's producer answers from the same Redis keys. RUN_FOR (seconds)
-- bounds the run; WORK (seconds) is how long each transform takes; LOG (a
-- file) gets one line per message sent.
local mqlease = require "mqlease"

local endpoints, group = arg[1] or "127.0.0.1:8081", arg[2] or "transform"
local input, output = arg[3] or "orders", arg[4] or "orders-priced"
local redis = arg[5] or "127.0.0.1:6379"
local work = tonumber(os.getenv("WORK") or "") or 0
local log = os.getenv("LOG") and assert(io.open(os.getenv("LOG"), "a"))
if log then log:setvbuf("line") end

local t = mqlease.policy.transaction_checker { redis = redis, prefix = "transform:" }
-- t is also the checker: it answers the broker's checks of this worker's half messages
local producer = assert(mqlease.producer { endpoints = endpoints, topics = { output }, checker = t })
local consumer = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = input, invisible = 10 })
if log then log:write("ready\n") end

local summary = mqlease.run(consumer, function(m)
  if work > 0 then mqlease.sleep(work) end
  -- the transform; its output names its input (a key) so a reader can tell
  local tx, err = t:begin(producer, m, output, m.body:upper(), { keys = m.id, tag = m.tag })
  if not tx then return nil, err end
  if log then log:write(("sent %s %s\n"):format(m.id, tx.message_id)) end
  return true
end, {
  concurrency = 16, signals = true,   -- this script is the process: drain on SIGTERM/SIGINT
  policy = t:policy(mqlease.policy.exactly_once { redis = redis, prefix = "transform:" }),
  run_for = tonumber(os.getenv("RUN_FOR") or ""),
})
-- the checks that came after the last message
producer:poll(0)
print(("received %d, acked %d, duplicates skipped %d"):format(summary.received, summary.acked,
  consumer:metrics().duplicate_skipped or 0))
consumer:close()
producer:close()
