-- bench/brokers_load.lua ENDPOINTS TOPIC COUNT SIZE: pre-loads COUNT messages for bench/brokers.sh,
-- send_many in rounds of 500 with a long request timeout (a cold cluster on a loaded box answers
-- slowly: bench/lease.lua's 256 sends in flight at the default timeout ran out), the failed ones
-- sent again; prints {"count", "load_s"}.
package.path = "./?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mqlease = require "mqlease"
local endpoints, topic, count, size = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4] or "100")
local p = assert(mqlease.producer { endpoints = endpoints, request_timeout = 30 })
local body, t0, sent, failed_rounds = ("x"):rep(size), mqlease.now(), 0, 0
while sent < count do
  local list = {}
  for i = 1, math.min(500, count - sent) do list[i] = body end
  local ok = 0
  for _, r in ipairs((p:send_many(topic, list))) do if r.ok then ok = ok + 1 end end
  sent = sent + ok
  if ok < #list then
    failed_rounds = failed_rounds + 1
    assert(failed_rounds < 20, "too many failed sends")
    mqlease.sleep(0.5)
  end
end
p:close()
print(('{"count":%d,"load_s":%.3f}'):format(count, mqlease.now() - t0))
