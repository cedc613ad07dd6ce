-- examples/demo/demo.lua [ENDPOINTS [TOPIC [REDIS]]] -- what `make demo` runs (about 45 s).
-- Bare, it starts its own dev broker (the checkout's build/mqlease-devbroker, else the one on
-- PATH) and its own redis-server on loopback (mqlease.launch), and stops them at the end;
-- ENDPOINTS (with TOPIC, default demo) uses that broker, REDIS that Redis.
--
-- 24 tasks with heavy-tailed durations (most under a second, four of 12-18 s,
-- longer than the 10 s lease) go to two workers. Worker A is killed with
-- SIGKILL while it works; its leases run out and worker B takes the messages
-- over -- first finding them still locked in Redis (a handoff), then running
-- them once the dead owner's locks expire. Long tasks survive on renewals.
-- The summary counts business runs per task: every one must be exactly 1.
local mqlease = require "mqlease"

local launch = require "mqlease.launch"

local endpoints, topic, redis = arg[1], arg[2] or "demo", arg[3]
local here = arg[0]:match("^(.*)/[^/]*$") or "."   -- demo_worker.lua lives beside this file
local started = {}
local function stop_servers()
  for _, s in ipairs(started) do s.stop() end
end
if not endpoints then
  local dv = assert(launch.devbroker { root = here .. "/../..", topics = { topic } })
  started[#started + 1] = dv
  endpoints = dv.endpoints
  print("demo: mqlease-devbroker on " .. endpoints)
end
if not redis then
  local r, err = launch.redis()
  if not r then stop_servers(); error(err) end
  started[#started + 1] = r
  redis = r.address
  print("demo: redis-server on " .. redis)
end
local group = "demo_" .. topic
io.stdout:setvbuf("line")

local function spawn(name)
  local pid_file = os.tmpname()
  local h = io.popen(("lua5.4 %s/demo_worker.lua %s %s %s %s %s & echo $! > %s; wait"):format(
    here, name, endpoints, group, topic, redis, pid_file))
  mqlease.sleep(0.3)
  local f = io.open(pid_file)
  local pid = f and f:read("l")
  if f then f:close() end
  os.remove(pid_file)
  return h, tonumber(pid)
end

-- subscribe the group first (a brand-new group may start at the queue's end)
local first = assert(mqlease.consumer { endpoints = endpoints, group = group, topic = topic, await = 1 })
assert(first:receive(1, { await = 0 }))
first:close()

local a, a_pid = spawn("A")
local b, b_pid = spawn("B")
mqlease.sleep(1.5)

local producer = assert(mqlease.producer { endpoints = endpoints })
local ids = {}
math.randomseed(7)
for i = 1, 24 do
  local seconds = (i % 6 == 0) and (12 + (i % 4) * 2) or (0.2 + math.random() * 0.8)
  ids[i] = assert(producer:send(topic, ("task %02d, %.1f s"):format(i, seconds)))
end
producer:close()
print("demo: sent 24 tasks; worker A is killed (SIGKILL) in 4 s")

mqlease.sleep(4)
os.execute("kill -KILL " .. a_pid)
print("demo: *** worker A killed mid-task ***")
for line in a:lines() do print(line) end
a:close()

local r = mqlease.redis(redis)
local deadline = mqlease.now() + 60
local done
repeat
  mqlease.sleep(1)
  done = 0
  for _, id in ipairs(ids) do
    if r:call("EXISTS", mqlease.policy.keys(id, "demo:").done) == 1 then done = done + 1 end
  end
until done == #ids or mqlease.now() > deadline
os.execute("kill -TERM " .. b_pid)
for line in b:lines() do print(line) end
b:close()

local runs, duplicates, missing = 0, 0, 0
for _, id in ipairs(ids) do
  local n = tonumber(r:call("GET", "runs:" .. id) ~= mqlease.null and r:call("GET", "runs:" .. id) or "0")
  runs = runs + n
  if n > 1 then duplicates = duplicates + n - 1 end
  if n == 0 then missing = missing + 1 end
end
r:close()
stop_servers()
print(("\nsummary: %d tasks, %d done, %d business runs, %d duplicate business runs, %d never run")
  :format(#ids, done, runs, duplicates, missing))
os.exit(done == #ids and duplicates == 0 and missing == 0 and 0 or 1)
