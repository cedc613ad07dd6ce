-- Consumers inside nginx workers (Debian's nginx + libnginx-mod-http-lua,
-- LuaJIT build of the core): two workers drain 500 messages under the
-- exactly-once policy while HTTP requests keep being answered, through an
-- `nginx -s reload` and an `nginx -s quit` (then a fresh start): every
-- message's business effect happens exactly once, and /metrics is valid
-- Prometheus text. nginx is stopped whatever happens.

local mqlease = require "mqlease"
local env = require "support.env"
local prom = require "support.prom"

-- Debian's paths; the variables point elsewhere (e.g. at a copy of the same
-- packages unpacked outside dpkg, with LD_LIBRARY_PATH for its LuaJIT).
local NGINX = os.getenv("MQLEASE_NGINX") or "/usr/sbin/nginx"
local MODULES = os.getenv("MQLEASE_NGINX_MODULES") or "/usr/lib/nginx/modules"
local EXTRA_LUA = os.getenv("MQLEASE_NGINX_LUA_PATH") or ""   -- e.g. where resty/core.lua lives
local PORT = 18931
local MESSAGES = 500

-- Shell commands run without the sanitizer runtime the specs preload (pgrep
-- hangs under it, and nginx is not a sanitizer build).
local function clean(cmd)
  return "env -u LD_PRELOAD sh -c '" .. cmd:gsub("'", "'\\''") .. "'"
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

local alive = env.alive

-- What every configuration here starts with: the modules, the thread pool
-- the waits use, temp paths under the prefix, and the checkout's Lua and
-- LuaJIT build first on the paths. render() puts it where @HEAD@ stands.
local HEAD = [[
daemon on;
pid logs/nginx.pid;
error_log logs/error.log notice;
load_module @MODULES@/ndk_http_module.so;
load_module @MODULES@/ngx_http_lua_module.so;
thread_pool mqlease threads=4;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path @PREFIX@/tmp_body;
  proxy_temp_path @PREFIX@/tmp_proxy;
  fastcgi_temp_path @PREFIX@/tmp_fastcgi;
  uwsgi_temp_path @PREFIX@/tmp_uwsgi;
  scgi_temp_path @PREFIX@/tmp_scgi;
  lua_package_path "@REPO@/lua/?.lua;@REPO@/lua/?/init.lua;@EXTRA_LUA@;;";
  lua_package_cpath "@REPO@/build/luajit/?.so;;";]]

-- conf with HEAD in it and every @NAME@ of vars (and of the paths above)
-- replaced; @PREFIX@ is left for new_nginx.
local function render(conf, vars)
  local all = { MODULES = MODULES, EXTRA_LUA = EXTRA_LUA, REPO = (env.sh("pwd"):gsub("%s+$", "")) }
  for k, v in pairs(vars) do all[k] = v end
  return (conf:gsub("@HEAD@", function() return HEAD end):gsub("@(%u[%u_]*)@", all))
end

-- ------------------------------------------------------------ nginx control

local nginx = {}
nginx.__index = nginx

local function new_nginx(conf_text, name)
  local self = setmetatable({ prefix = ("/tmp/mqlease-ngx-%s%s"):format(env.run_id, name or ""), masters = {} }, nginx)
  env.sh(("rm -rf %s && mkdir -p %s/conf %s/logs"):format(self.prefix, self.prefix, self.prefix))
  local f = assert(io.open(self.prefix .. "/conf/nginx.conf", "w"))
  f:write((conf_text:gsub("@PREFIX@", self.prefix)))
  f:close()
  return self
end

function nginx:cmd(args)
  return env.execute(clean(("%s -p %s -c conf/nginx.conf %s >>%s/logs/cmd.log 2>&1"):format(NGINX, self.prefix, args, self.prefix)))
end

-- Signals go straight to the master (what `nginx -s` does, without parsing
-- the configuration again): HUP reload, QUIT graceful stop, TERM fast stop.
function nginx:signal(sig)
  local m = self:master()
  return m ~= nil and env.execute(clean(("kill -%s %d"):format(sig, m)))
end

function nginx:master()
  local pid = tonumber(env.read(self.prefix .. "/logs/nginx.pid"):match("%d+"))
  return alive(pid) and pid or nil
end

function nginx:workers()
  local m = self:master()
  if not m then return {} end
  local out = {}
  for pid in env.sh(clean("pgrep -P " .. m .. " || true")):gmatch("%d+") do out[#out + 1] = tonumber(pid) end
  return out
end

function nginx:start()
  assert(self:cmd(""), "nginx did not start:\n" .. env.read(self.prefix .. "/logs/cmd.log")
    .. env.read(self.prefix .. "/logs/error.log"))
  env.wait_for(function() return self:master() ~= nil end, 10, "the nginx master")
  self.masters[#self.masters + 1] = self:master()
end

-- Waits for every master this spec started to be gone.
function nginx:wait_gone(timeout)
  env.wait_for(function()
    for _, pid in ipairs(self.masters) do if alive(pid) then return false end end
    return true
  end, timeout, "nginx to exit")
end

-- Whatever happened: a fast stop, then SIGKILL for anything left.
function nginx:stop()
  for _, pid in ipairs(self.masters) do
    if alive(pid) then env.execute(clean("kill -TERM " .. pid)) end
  end
  local deadline = mqlease.now() + 10
  while mqlease.now() < deadline do
    local any = false
    for _, pid in ipairs(self.masters) do any = any or alive(pid) end
    if not any then return end
    mqlease.sleep(0.1)
  end
  for _, pid in ipairs(self.masters) do
    if alive(pid) then
      env.execute(clean("pkill -KILL -P " .. pid .. " 2>/dev/null; kill -KILL " .. pid .. " 2>/dev/null"))
    end
  end
end

-- ------------------------------------------------------------ HTTP

local function curl(path, port)
  return env.sh(clean(("curl -sf --max-time 5 http://127.0.0.1:%d%s"):format(port or PORT, path)))
end

-- n requests from each of `clients` parallel curls (a new connection each,
-- so both workers answer); returns the sorted response times in seconds.
local function latencies(clients, n)
  local cmd = ("for c in $(seq %d); do curl -s -H 'Connection: close' -w '\\n%%{http_code} %%{time_total}\\n'"
    .. " 'http://127.0.0.1:%d/ping?[1-%d]' & done; wait"):format(clients, PORT, n)
  local times, failed = {}, 0
  for code, t in env.sh(clean(cmd)):gmatch("(%d%d%d) (%d+%.%d+)") do
    if code == "200" then times[#times + 1] = tonumber(t) else failed = failed + 1 end
  end
  table.sort(times)
  return times, failed
end

-- ------------------------------------------------------------ the spec

local t0 = mqlease.now()
local function step(what)
  io.stderr:write(("nginx spec: %5.1f s  %s\n"):format(mqlease.now() - t0, what))
end

describe("mqlease inside nginx workers", function()
  it("handles 500 messages exactly once through a reload and a quit, never blocking HTTP", function()
    assert(exists(MODULES .. "/ngx_http_lua_module.so"),
      "nginx's Lua module is missing: apt-get install nginx libnginx-mod-http-lua (make deps)")
    assert(exists("build/luajit/mqlease/core.so"), "the LuaJIT build is missing: make luajit")
    local topic = env.topic("nginx")
    local group = env.name("g_nginx")
    local redis_addr = "127.0.0.1:" .. env.redis_port
    local prefix = "mqlease:" .. env.run_id .. ":ngx:"
    local runs_key = prefix .. "runs"

    local conf = render([[
worker_processes 2;
@HEAD@
  lua_shared_dict mqlease_metrics 1m;
  init_worker_by_lua_block {
    local mqlease = require "mqlease"
    local runs
    require("mqlease.ngx").start {
      consumers = { { endpoints = "@ENDPOINTS@", group = "@GROUP@", topic = "@TOPIC@", await = 5,
                      invisible = 10 } },   -- what a cancelled receive took comes back soon
      -- the business: 0-3 s of work, then its effect (one count per run)
      handler = function(m)
        ngx.sleep(tonumber(m.body:match(":(%d+)$")) / 1000)
        runs = runs or mqlease.redis("@REDIS@")
        assert(runs:call("HINCRBY", "@RUNS@", m.body, 1))
        return true
      end,
      concurrency = 40,
      grace = 10,
      shared_dict = "mqlease_metrics",   -- /metrics: both workers, whichever answers
      policy = mqlease.policy.exactly_once { redis = "@REDIS@", prefix = "@PREFIX_KEYS@" },
    }
  }
  server {
    listen 127.0.0.1:@PORT@;
    location = /ping { content_by_lua_block { ngx.say("pong") } }
    location = /metrics { content_by_lua_block { require("mqlease.ngx").metrics() } }
    location = /leases { content_by_lua_block { require("mqlease.ngx").leases() } }
    location = /live { content_by_lua_block { require("mqlease.ngx").leases_page() } }
  }
}
]], {
      ENDPOINTS = env.endpoints, GROUP = group, TOPIC = topic,
      REDIS = redis_addr, RUNS = runs_key, PREFIX_KEYS = prefix, PORT = tostring(PORT),
    })

    local r = mqlease.redis(redis_addr)
    local function handled()
      return assert(r:call("HLEN", runs_key))
    end
    local server = new_nginx(conf)
    finally(function()
      server:stop()
      r:close()
    end)

    -- 500 messages, each naming its handler's duration (0-3 s)
    local p = env.producer()
    local want = {}
    for i = 1, MESSAGES do
      local body = ("m%d:%d"):format(i, (i * 7919) % 3001)
      want[#want + 1] = body
      assert(p:send(topic, body))
    end
    p:close()

    step("500 sent")
    server:start()
    step("started")
    env.wait_for(function() return #server:workers() == 2 end, 10, "two workers")
    local first_workers = server:workers()
    step("workers " .. table.concat(first_workers, " "))
    env.wait_for(function() return handled() >= 20 end, 30, "the first handled messages")

    step("handling")
    -- HTTP keeps being answered while every handler slot is busy
    local times, failed = latencies(4, 250)
    local p50, p99 = times[math.ceil(#times * 0.5)], times[math.ceil(#times * 0.99)]
    print(("\nnginx: %d /ping requests during the run: p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d failed)")
      :format(#times, p50 * 1000, p99 * 1000, times[#times] * 1000, failed))
    assert.equal(0, failed)
    assert.equal(1000, #times)
    -- a blocked worker would hold requests for a handler's length (up to 3 s) or a long
    -- poll's (5 s); 250 ms leaves room for a JVM pause on the two shared cores
    assert.is_true(p99 < 0.25, ("p99 %.1f ms: a worker was blocked"):format(p99 * 1000))

    step("latency measured")
    -- the leases of the worker that answers, as JSON and as the live page
    local view
    env.wait_for(function()
      view = require("cjson").decode(curl("/leases"))
      return #view.leases > 0
    end, 10, "held leases in /leases")
    assert.is_true(view.worker == 0 or view.worker == 1)
    assert.is_true(view.listed <= view.total)
    for _, e in ipairs(view.leases) do
      assert.equal(topic, e.topic)
      assert.is_true(e.remaining > 0 and e.age >= 0, require("cjson").encode(e))
      if e.fence then assert.equal("running", e.handler) end
    end
    assert.matches('<tr class="lease', curl("/live"), 1, true)
    -- reload: the old workers drain while new ones take over
    env.wait_for(function() return handled() >= 120 end, 60, "120 handled messages")
    assert(server:signal("HUP"), "nginx -s reload failed")
    env.wait_for(function()
      for _, pid in ipairs(first_workers) do if alive(pid) then return false end end
      return #server:workers() == 2
    end, 30, "the old workers to drain and exit")

    step("reloaded")
    local types, samples = prom.parse(curl("/metrics"))
    assert.equal("counter", types.mqlease_messages_received_total)
    assert.equal(group, prom.find(samples, "mqlease_messages_received_total")[1].labels.group)
    assert.equal("histogram", types.mqlease_handler_seconds)

    -- quit: everything drains, then a fresh nginx finishes the work
    env.wait_for(function() return handled() >= 260 end, 60, "260 handled messages")
    assert(server:signal("QUIT"), "nginx -s quit failed")
    server:wait_gone(30)
    step("quit")
    local at_quit = handled()
    server:start()
    env.wait_for(function() return handled() >= MESSAGES end, 90, "every message handled")
    step("all handled")
    mqlease.sleep(2)   -- room for a duplicate to show
    -- both workers' counts: the one that answers may have received nothing since the start
    types, samples = prom.parse(curl("/metrics"))
    assert.equal("counter", types.mqlease_messages_received_total)
    local got = 0
    for _, s in ipairs(prom.find(samples, "mqlease_messages_received_total")) do got = got + s.value end
    assert.is_true(got > 0)
    assert(server:signal("QUIT"), "nginx -s quit failed")
    server:wait_gone(30)

    -- every message ran exactly once: none lost, none run twice
    local counts = {}
    local flat = assert(r:call("HGETALL", runs_key))
    for i = 1, #flat, 2 do counts[flat[i]] = tonumber(flat[i + 1]) end
    local lost, twice = {}, {}
    for _, body in ipairs(want) do
      local n = counts[body]
      if not n then lost[#lost + 1] = body elseif n > 1 then twice[#twice + 1] = body end
    end
    print(("nginx: %d handled before the quit, %d after; lost %d, run twice %d")
      :format(at_quit, handled() - at_quit, #lost, #twice))
    assert.same({}, lost)
    assert.same({}, twice)
    assert.equal(MESSAGES, handled())

    -- and every one was acked: nothing comes back to the group
    local c = env.consumer { group = group, topic = topic, await = 5 }
    assert.same({}, assert(c:receive(32)))
    c:close()

    -- each of the six workers drained on its way out, waiting on worker threads before
    local log = env.read(server.prefix .. "/logs/error.log")
    assert.is_true(env.count(log, "ended %(stop%)") >= 6, "fewer drains than workers:\n" .. log:sub(-3000))
    assert.is_nil(log:find("run_worker_thread failed", 1, true))
    env.sh("rm -rf " .. server.prefix)   -- kept for a look when the spec fails
  end)
  it("answers /metrics for all four workers in one scrape through a lua_shared_dict", function()
    assert(exists(MODULES .. "/ngx_http_lua_module.so"),
      "nginx's Lua module is missing: apt-get install nginx libnginx-mod-http-lua (make deps)")
    assert(exists("build/luajit/mqlease/core.so"), "the LuaJIT build is missing: make luajit")
    local topic = env.topic("nginx_four")
    local group = env.name("g_nginx_four")
    local port = PORT + 1
    local conf = render([[
worker_processes 4;
@HEAD@
  lua_shared_dict mqlease_metrics 1m;
  init_worker_by_lua_block {
    require("mqlease.ngx").start {
      consumers = { { endpoints = "@ENDPOINTS@", group = "@GROUP@", topic = "@TOPIC@", await = 5 } },
      handler = function() return true end,
      shared_dict = "mqlease_metrics",
      grace = 2,
    }
  }
  server {
    listen 127.0.0.1:@PORT@;
    location = /metrics { content_by_lua_block { require("mqlease.ngx").metrics() } }
  }
}
]], {
      ENDPOINTS = env.endpoints, GROUP = group, TOPIC = topic,
      PORT = tostring(port),
    })
    local server = new_nginx(conf, "-four")
    finally(function() server:stop() end)
    server:start()
    env.wait_for(function() return #server:workers() == 4 end, 10, "four workers")

    -- each answer comes from one worker; once all four have connected and
    -- published, any single answer carries the samples of all four
    local seen
    env.wait_for(function()
      local _, samples = prom.parse(curl("/metrics", port))
      seen = {}
      for _, sample in ipairs(prom.find(samples, "mqlease_messages_received_total")) do
        assert.equal(group, sample.labels.group)
        seen[sample.labels.worker] = (seen[sample.labels.worker] or 0) + 1
      end
      return seen["0"] and seen["1"] and seen["2"] and seen["3"]
    end, 30, "one scrape with all four workers")
    for w = 0, 3 do assert.equal(1, seen[tostring(w)], "worker " .. w .. " twice") end
    -- the official families too, one series per worker
    local types, samples = prom.parse(curl("/metrics", port))
    assert.equal("gauge", types.rocketmq_consumer_cached_messages)
    local workers = {}
    for _, sample in ipairs(prom.find(samples, "rocketmq_consumer_cached_messages")) do
      assert.equal(topic, sample.labels.topic)
      assert.equal(group, sample.labels.consumer_group)
      workers[#workers + 1] = sample.labels.worker
    end
    table.sort(workers)
    assert.same({ "0", "1", "2", "3" }, workers)
    assert(server:signal("QUIT"), "nginx -s quit failed")
    server:wait_gone(30)
    env.sh("rm -rf " .. server.prefix)
  end)

  it("sends transactions from a request and answers the broker's checks from a light thread", function()
    assert(exists(MODULES .. "/ngx_http_lua_module.so"),
      "nginx's Lua module is missing: apt-get install nginx libnginx-mod-http-lua (make deps)")
    assert(exists("build/luajit/mqlease/core.so"), "the LuaJIT build is missing: make luajit")
    local topic = env.name("nginx_tx")
    env.sh(("bash mk/rocketmq.sh topics %s:TRANSACTION"):format(topic))
    local redis_addr = "127.0.0.1:" .. env.redis_port
    local prefix = "mqlease:" .. env.run_id .. ":ngx_tx:"
    local port = PORT + 2
    -- One worker's producer, made in a timer (a producer waits on its core,
    -- which init_worker cannot); its checker answers from Redis what the spec
    -- decided for each body, and counts the questions. A light thread polls.
    local conf = render([[
worker_processes 1;
@HEAD@
  init_worker_by_lua_block {
    ngx.timer.at(0, function()
      local mqlease = require "mqlease"
      local redis = mqlease.redis("@REDIS@")
      local p = assert(mqlease.producer {
        endpoints = "@ENDPOINTS@", topics = { "@TOPIC@" },
        checker = function(m)
          assert(redis:call("HINCRBY", "@KEYS@asked", m.body, 1))
          local answer = redis:call("HGET", "@KEYS@answer", m.body)
          return answer ~= ngx.null and answer or "unknown"
        end,
      })
      package.loaded["spec.tx_producer"] = p
      while not ngx.worker.exiting() do p:poll(1) end
      p:close()
    end)
  }
  server {
    listen 127.0.0.1:@PORT@;
    location = /ping { content_by_lua_block { ngx.say("pong") } }
    location = /begin { content_by_lua_block {
      local p = package.loaded["spec.tx_producer"]
      if not p then return ngx.exit(503) end
      local tx, err, code = p:begin("@TOPIC@", ngx.var.arg_body)
      if not tx then ngx.status = 500; ngx.say(code, " ", err); return end
      local ok, e, c = true, nil, nil
      if ngx.var.arg_end == "commit" then ok, e, c = tx:commit()
      elseif ngx.var.arg_end == "rollback" then ok, e, c = tx:rollback() end
      if not ok then ngx.status = 500; ngx.say(c, " ", e); return end
      ngx.say("ok ", tx.message_id)
    } }
  }
}
]], {
      ENDPOINTS = env.endpoints, TOPIC = topic,
      REDIS = redis_addr, KEYS = prefix, PORT = tostring(port),
    })
    local r = mqlease.redis(redis_addr)
    local server = new_nginx(conf, "-tx")
    finally(function()
      server:stop()
      r:close()
    end)
    server:start()
    -- the producer is up once /begin stops answering 503
    local function begin(body, how)
      local out = env.sh(clean(("curl -s --max-time 10 -w ' %%{http_code}' 'http://127.0.0.1:%d/begin?body=%s&end=%s'")
        :format(port, body, how)))
      return out
    end
    env.wait_for(function() return not begin("warmup", "rollback"):match("503$") end, 30, "the producer in the worker")
    -- what the checker will answer for the ones left open
    assert(r:call("HSET", prefix .. "answer", "open_commit", "commit", "open_rollback", "rollback"))
    for _, case in ipairs { { "committed", "commit" }, { "rolled_back", "rollback" },
                            { "open_commit", "open" }, { "open_rollback", "open" } } do
      local out = begin(case[1], case[2])
      assert.truthy(out:match("^ok %S+\n 200$"), case[1] .. ": " .. out)
    end
    -- a consumer of the spec's reads what the broker delivers
    local c = env.consumer { group = env.name("g_nginx_tx"), topic = topic, await = 2, invisible = 20 }
    local seen = {}
    env.collect(c, 60, function(m)
      seen[m.body] = (seen[m.body] or 0) + 1
      assert.equal("TRANSACTION", m.message_type)
      assert(m:ack())
    end, function() return seen.committed and seen.open_commit end, 2)
    -- a check of a message just committed would come now: give it the time of one more check round
    env.collect(c, 5, function(m)
      seen[m.body] = (seen[m.body] or 0) + 1
      assert(m:ack())
    end, function() return false end, 2)
    c:close()
    assert.same({ committed = 1, open_commit = 1 }, seen)
    -- the worker's checker was asked about both open ones (and answered them)
    local asked = assert(r:call("HGETALL", prefix .. "asked"))
    local n = {}
    for i = 1, #asked, 2 do n[asked[i]] = tonumber(asked[i + 1]) end
    assert.is_true((n.open_commit or 0) >= 1, "open_commit was never asked")
    assert.is_true((n.open_rollback or 0) >= 1, "open_rollback was never asked")
    assert.equal("pong\n", curl("/ping", port))
    assert(server:signal("QUIT"), "nginx -s quit failed")
    server:wait_gone(30)
    env.sh("rm -rf " .. server.prefix)
  end)
end)
