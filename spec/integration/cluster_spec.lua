-- Several proxies (issue 15): RocketMQ as it is deployed for real -- namesrv,
-- one broker and two proxies in cluster mode -- started once by this file on
-- ports of its own (rocketmq.sh with MQLEASE_CLUSTER=1) and always stopped in
-- teardown. A worker under mqlease.run is given both proxies
-- ("a:p;b:p"); the proxy it uses is killed (SIGKILL) mid-run: the session
-- moves to the other one, the leases it holds are renewed and acked through
-- it, and the killed proxy is restarted before the run ends.
local mqlease = require "mqlease"
local env = require "support.env"
local read, wait_for, count = env.read, env.wait_for, env.count

-- Its ports and run dir follow the suite's (MQLEASE_GRPC_PORT, MQLEASE_RUN), at
-- fixed offsets (18681... beside the default 18081), so two suites run side by
-- side each start and stop only their own cluster.
local RUN = (os.getenv("MQLEASE_RUN") or "/tmp/mqlease") .. "-cluster-rmq-" .. env.run_id
local BASE = tonumber(os.getenv("MQLEASE_GRPC_PORT") or "18081")
local GRPC1, GRPC2 = BASE + 600, BASE + 602
local ENDPOINTS = ("127.0.0.1:%d;127.0.0.1:%d"):format(GRPC1, GRPC2)
local RMQ = ("MQLEASE_CLUSTER=1 MQLEASE_RUN=%s MQLEASE_GRPC_PORT=%d MQLEASE_GRPC_PORT2=%d " ..
  "MQLEASE_REMOTING_PORT=%d MQLEASE_REMOTING_PORT2=%d MQLEASE_NAMESRV_PORT=%d " ..
  "MQLEASE_BROKER_PORT=%d MQLEASE_STOP_GRACE=5 "):format(RUN, GRPC1, GRPC2, BASE + 599, BASE + 601,
    BASE + 1600, BASE + 2600)
local function rmq(args) return env.sh(RMQ .. "bash mk/rocketmq.sh " .. args) end

local alive = env.alive

local stop_pid = env.stop_pid

-- spec/support/chaos_worker.lua on both proxies; vars are its CW_* settings.
local function start_worker(group, topic, logfile, vars)
  local prefix = {}
  for k, v in pairs(vars) do prefix[#prefix + 1] = ("%s=%s"):format(k, v) end
  local redis = "127.0.0.1:" .. env.redis_port
  return tonumber(env.sh(("env %s lua5.4 spec/support/chaos_worker.lua '%s' %s %s %s %s %s >>%s 2>&1 & echo $!")
    :format(table.concat(prefix, " "), ENDPOINTS, group, topic, redis, redis, logfile, logfile .. ".out"))
    :match("%d+"))
end

local function metric(text, name)
  return tonumber(text:match("metrics [^\n]*" .. name .. "=(%d+)") or "-1")
end

-- Sends n messages through both proxies, several in flight (one at a time
-- was slower than the workers on a loaded box), retrying the failed ones
-- while the session moves; appends their ids to ids.
local function send_all(producer, topic, ids, n)
  local deadline = mqlease.now() + 60
  while n > 0 do
    local list = {}
    for i = 1, n do list[i] = "cluster " .. (#ids + i) end
    for _, r in ipairs((producer:send_many(topic, list))) do
      if r.ok then ids[#ids + 1] = r.message_id; n = n - 1 end
    end
    if n > 0 then
      assert(mqlease.now() < deadline, "the producer never found a live proxy")
      mqlease.sleep(0.2)
    end
  end
end

-- The one run both tests read (JVM time is the cost here, so both workers
-- share it): a plain worker and an exactly-once worker, each on its own topic,
-- both given the two proxies. 200 messages each, sent in rounds a little
-- ahead of the workers; proxy 1 (the one both started on) is killed once 40 of
-- each are handled, and what is left of the 200 (at least 20 each) is sent
-- while it is down: those can only be received through proxy 2, and all of
-- them must be handled before proxy 1 comes back. Then 30 more each.
-- Returns, per worker, the ids, the log at the kill and the full log after a
-- drain.
--
-- Why the messages after the kill are fresh ones: on a loaded box sending all
-- 200 up front took longer than handling them, and a worker had handled 194 of
-- its 200 when the kill came -- "20 more handled after the kill" could never
-- happen, although the session had moved to proxy 2 in under a second.
local WORKERS = {
  plain = { CW_POLICY = "plain", CW_WORK = 0.3, CW_SLOW_SHARE = 0.05, CW_SLOW = 12, CW_CONCURRENCY = 16 },
  eo = { CW_EFFECT = "fenced", CW_WORK = 0.3, CW_SLOW_SHARE = 0.05, CW_SLOW = 12, CW_LOCK_TTL = 10,
    CW_GRACE = 2, CW_CONCURRENCY = 16, CW_PREFIX = "cluster:" .. env.run_id .. ":" },
}

-- proxy 2's pid, from the pid file rocketmq.sh keeps in our run dir
local function proxy2_pid()
  return tonumber(read(RUN .. "/proxy2.pid"):match("%d+"))
end

-- freeze: proxy 2 is stopped (SIGSTOP) for 6 s from just before the kill, as a
-- cold JVM on a loaded box answers: the session's first calls to it time out
-- while the other endpoint is the dead one.
local function kill_mid_run(freeze)
  local runs, producer = {}, nil
  local res = table.pack(pcall(function()
    producer = assert(mqlease.producer { endpoints = ENDPOINTS, request_timeout = 2 })
    for what, vars in pairs(WORKERS) do
      local kind = what .. (freeze and "_frozen" or "")
      local w = { topic = env.name("cluster_" .. kind), group = env.name("g_cluster_" .. kind),
        logfile = os.tmpname(), ids = {} }
      rmq(("topics %s --group %s"):format(w.topic, w.group))
      w.pid = start_worker(w.group, w.topic, w.logfile, vars)
      runs[what] = w
    end
    for _, w in pairs(runs) do
      wait_for(function() return read(w.logfile):match("ready") end, 30, "the worker")
    end
    local function handled(w) return count(read(w.logfile), "effect ") end
    local function all_handled(w, from)
      local text = read(w.logfile)
      for i = from or 1, #w.ids do
        if not text:find("effect " .. w.ids[i], 1, true) then return false end
      end
      return true
    end
    -- rounds of 10 each, up to 40 ahead of what is handled, until both have
    -- handled 40: the kill comes mid-run, with leases held and a backlog,
    -- however slowly the sends go
    local function both_at(n)
      for _, w in pairs(runs) do if handled(w) < n then return false end end
      return true
    end
    local deadline = mqlease.now() + 120
    while not both_at(40) do
      assert(mqlease.now() < deadline, "timed out waiting for 40 handled")
      local sent = false
      for _, w in pairs(runs) do
        if #w.ids < math.min(200 - 20, handled(w) + 40) then send_all(producer, w.topic, w.ids, 10); sent = true end
      end
      if not sent then mqlease.sleep(0.1) end
    end
    if freeze then
      local pid = assert(proxy2_pid(), "no pid file for proxy 2")
      env.sh(("kill -STOP %d; (sleep 6; kill -CONT %d) >/dev/null 2>&1 &"):format(pid, pid))
    end
    rmq("kill-proxy 1")
    for _, w in pairs(runs) do w.at_kill, w.sent_at_kill = read(w.logfile), #w.ids end
    -- the sessions move: these can only come through proxy 2 (proxy 1 stays dead until
    -- this wait ends; 120 s, as proxy 2's first calls are a cold JVM's on a shared box)
    for _, w in pairs(runs) do send_all(producer, w.topic, w.ids, 200 - #w.ids) end
    for _, w in pairs(runs) do
      wait_for(function() return all_handled(w, w.sent_at_kill + 1) end, 120,
        ("the %d messages sent after the kill handled through proxy 2 while proxy 1 is down")
          :format(#w.ids - w.sent_at_kill))
    end
    rmq("restart-proxy 1")
    for _, w in pairs(runs) do send_all(producer, w.topic, w.ids, 30) end
    for _, w in pairs(runs) do
      wait_for(function() return all_handled(w) end, 120, "every message handled")
    end
    for _, w in pairs(runs) do stop_pid(w.pid, 20) end
  end))
  local outs = {}
  for what, w in pairs(runs) do
    stop_pid(w.pid, 5)
    w.text = read(w.logfile)
    outs[#outs + 1] = what .. ": " .. read(w.logfile .. ".out")
    os.remove(w.logfile)
    os.remove(w.logfile .. ".out")
  end
  if producer then producer:close() end
  assert(res[1], tostring(res[2]) .. "\nworker output:\n" .. table.concat(outs, "\n"))
  return runs
end

local shared = {}   -- per kind of run, { ok, runs or error }: a failed run fails its tests, once
local function run_once(freeze)
  local k = freeze and "freeze" or "plain"
  shared[k] = shared[k] or table.pack(pcall(kill_mid_run, freeze))
  assert(shared[k][1], shared[k][2])
  return shared[k][2]
end

-- What the plain worker's run must show: nothing lost, a message run twice
-- only when its ack failed, the slow handlers' leases renewed through proxy 2.
local function check_plain(w, label, frozen)
  local ids, at_kill, text = w.ids, w.at_kill, w.text
  -- lost: never handled. A message whose ack failed (UNAVAILABLE: it went
  -- to the dying proxy) may have no "ack" line and still be done: the broker
  -- got the ack and never delivers it again.
  local missing, dups, unexplained, landed = 0, 0, 0, 0
  for _, id in ipairs(ids) do
    if not text:find("effect " .. id, 1, true) then missing = missing + 1 end
    local runs = count(text, "run " .. id)
    if runs == 1 and text:find("ackfail " .. id, 1, true) then landed = landed + 1 end
    if runs > 1 then
      dups = dups + runs - 1
      -- README: a message runs again only if its ack failed (sent to the
      -- dead proxy: the broker may or may not have it)
      if not text:find("ackfail " .. id, 1, true) then unexplained = unexplained + 1 end
    end
  end
  print(("\n  %s: %d sent (%d after the kill), %d handled and %d running at the kill, %d missing, %d duplicate runs (%d unexplained), " ..
    "%d failed acks the broker took all the same; reconnects=%d renew_fail=%d lost_expired=%d lost_rejected=%d acks_fail=%d")
    :format(label, #ids, #ids - w.sent_at_kill - 30, count(at_kill, "effect "),
      count(at_kill, "run ") - count(at_kill, "effect "), missing, dups, unexplained, landed, metric(text, "reconnects"),
      metric(text, "renew_fail"), metric(text, "lost_expired"), metric(text, "lost_rejected"),
      metric(text, "acks_fail")))
  assert.equal(0, missing)
  assert.equal(0, unexplained)
  assert.is_true(metric(text, "reconnects") >= 1, "the session never reconnected")
  -- the slow handlers' leases (received through proxy 1) were renewed, never lost
  -- while a handler held them; a lease whose ack failed (sent to the dying
  -- proxy) is let expire on purpose, so it may count as expired, no more
  assert.equal(0, metric(text, "lost_rejected"))
  if frozen then
    -- proxy 1 dead and proxy 2 frozen 6 s: a lease whose renewal fell due at
    -- the kill has 6.7 s of its 10 s left, about the freeze, so one may
    -- expire under its handler, but only after renewals that failed
    assert.is_true(metric(text, "expire_while_alive") <= metric(text, "renew_fail"),
      "a lease expired under its handler with no failed renewal")
  else
    assert.equal(0, metric(text, "expire_while_alive"))
  end
  assert.is_true(metric(text, "lost_expired") <= metric(text, "acks_fail"),
    "a lease expired that no failed ack let go")
end

describe("two proxies in cluster mode, the one in use killed mid-run", function()
  setup(function()
    env.start_rocketmq(rmq)
  end)
  teardown(function()
    local pid = proxy2_pid()   -- never leave a frozen proxy behind (stop waits for its JVM)
    if pid then env.sh(("kill -CONT %d 2>/dev/null; true"):format(pid)) end
    rmq("stop")
    os.execute("rm -rf " .. RUN)
  end)

  it("moves the session, renews and acks held leases through the live proxy, loses nothing", function()
    -- 1 in 20 handlers works 12 s, beyond the 10 s lease: those leases were
    -- taken through proxy 1 and must be renewed through proxy 2
    check_plain(run_once().plain, "cluster plain")
  end)

  it("runs each message's effect exactly once under the exactly-once policy", function()
    local prefix = WORKERS.eo.CW_PREFIX
    local w = run_once().eo
    local ids, text = w.ids, w.text
    local r = mqlease.redis("127.0.0.1:" .. env.redis_port)
    local doubled, lost = 0, 0
    for _, id in ipairs(ids) do
      local n = tonumber(r:call("GET", prefix .. "biz:" .. id) or "0")
      if n > 1 or count(text, "effect " .. id) > 1 then doubled = doubled + 1 end
      if n == 0 then lost = lost + 1 end
    end
    r:close()
    print(("\n  cluster exactly-once: %d sent, %d runs, %d effects doubled, %d lost; reconnects=%d duplicate_skipped=%d")
      :format(#ids, count(text, "run "), doubled, lost, metric(text, "reconnects"), metric(text, "duplicate_skipped")))
    assert.equal(0, doubled)
    assert.equal(0, lost)
    assert.is_true(metric(text, "reconnects") >= 1, "the session never reconnected")
  end)

  -- Issue 33 item 6, one run in three on a 2-core box: proxy 2 slow to answer
  -- as proxy 1 died. The session's first calls to it timed out; it moved back
  -- to the dead proxy 1, destroying the channel the receives, acks and
  -- renewals in flight to proxy 2 were on, and the messages sent after the
  -- kill waited out the 120 s above. Three causes, each fixed with a C test:
  -- a TIMEOUT moved the session on (session_test: only UNAVAILABLE does), a
  -- replaced channel failed the calls on it (session_test: it lives until
  -- its last call ends), and the renewals held for the reconnect could spin
  -- the client's thread (renew_hold_test). With them: 5 runs of 5 passed on
  -- 2 cores shared with other JVMs (load 8-14).
  it("handles through proxy 2 while proxy 1 is down even when proxy 2 is slow to answer at the kill", function()
    check_plain(run_once(true).plain, "cluster plain, proxy 2 frozen 6 s at the kill", true)
  end)
end)
