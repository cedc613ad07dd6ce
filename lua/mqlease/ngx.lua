-- mqlease.ngx: RocketMQ consumers inside nginx workers (OpenResty, or Debian's
-- nginx with libnginx-mod-http-lua), without ever blocking a worker.
--
--   thread_pool mqlease threads=4;                 # main context: the waits
--   http {
--     init_worker_by_lua_block {
--       local mqlease = require "mqlease"
--       require("mqlease.ngx").start {
--         consumers = { { endpoints = "127.0.0.1:8081", group = "g", topic = "t" } },
--         handler = require("app").handle,         -- fn(m, lease) -> true on success
--         concurrency = 32,
--         policy = mqlease.policy.exactly_once { redis = "127.0.0.1:6379" },
--       }
--     }
--     server {
--       location = /metrics { content_by_lua_block { require("mqlease.ngx").metrics() } }
--       location = /leases  { content_by_lua_block { require("mqlease.ngx").leases() } }
--       location = /        { content_by_lua_block { require("mqlease.ngx").leases_page() } }
--     }
--   }
--
-- start() only checks the options and arms one timer per worker: grpc does
-- not survive fork(), so nothing connects before the worker runs. The timer
-- runs mqlease.run for each consumer (handlers as light threads, at most
-- `concurrency` at once per consumer); every wait goes through
-- mqlease/loop/ngx.lua. When the worker exits (nginx -s quit, -s reload) the
-- run drains as on SIGTERM: what never started goes back, running handlers
-- finish until `grace`, the consumer closes. A consumer that cannot start is
-- tried again after a backoff (0.5 s doubling to 10 s) with jitter (x 0.5 to
-- 1.5), so the workers of a restarted nginx do not reconnect in step.
--
-- Options of start() beside mqlease.run's:
--   consumers    array of consumer option tables (required)
--   handler      fn(m, lease) (required)
--   thread_pool  the nginx thread_pool the waits use (default "mqlease")
--   workers      array of worker ids (ngx.worker.id(), from 0) that run the
--                consumers; the others only serve /metrics (default: all;
--                never the privileged agent, which has no worker id)
--   shared_dict  a lua_shared_dict name: every worker publishes its metrics
--                text there (each second, and on each scrape; an entry lives
--                5 s, so a dead worker's text leaves), and /metrics answers
--                with all workers', as one service (nginx-lua-prometheus
--                keeps its counters in a shared dict for the same reason).
--                Without it /metrics shows the worker that answers.
--
-- leases() (JSON) and leases_page() (HTML) show the leases of the worker that
-- answers, the oldest 500 (mqlease.live).

local ngx = require "ngx"
local core = require "mqlease.core"
local config = require "mqlease.config"
local consumer_mod = require "mqlease.consumer"
local run = require "mqlease.run"
local metrics_mod = require "mqlease.metrics"
local loop_ngx = require "mqlease.loop.ngx"
local live = require "mqlease.live"

local type, pairs, ipairs, tostring, error, pcall = type, pairs, ipairs, tostring, error, pcall
local min, floor = math.min, math.floor

local _M = {}

local started = false
local consumers = {}  -- every consumer of this worker, for metrics()
local shared          -- the lua_shared_dict the workers publish their metrics text in, if any

local PUBLISH_EVERY = 1   -- seconds between two publications of a worker's metrics
local PUBLISH_TTL = 5     -- seconds a publication lives: a worker gone leaves the scrape

local function exiting()
  return ngx.worker.exiting()
end

local function log_handler_error(m, err)
  ngx.log(ngx.ERR, "mqlease: handler failed for ", m.id, " (attempt ", m.delivery_attempt or 0, "): ", tostring(err))
end

-- Splits start()'s options into consumer option tables, the handler and
-- mqlease.run's options; raises naming a wrong option.
local function split(opts)
  if type(opts) ~= "table" then error("mqlease.ngx.start: options table expected", 3) end
  local specs, handler = opts.consumers, opts.handler
  if type(specs) ~= "table" or #specs == 0 then
    error("mqlease.ngx.start: option 'consumers' must be an array of consumer option tables", 3)
  end
  for i, c in ipairs(specs) do
    if type(c) ~= "table" then error(("mqlease.ngx.start: consumers[%d] must be a table"):format(i), 3) end
    config.consumer_options(c)
  end
  if type(handler) ~= "function" then error("mqlease.ngx.start: option 'handler' must be a function", 3) end
  local pool = opts.thread_pool or "mqlease"
  if type(pool) ~= "string" then error("mqlease.ngx.start: option 'thread_pool' must be a string", 3) end
  local workers
  if opts.workers ~= nil then
    if type(opts.workers) ~= "table" or #opts.workers == 0 then
      error("mqlease.ngx.start: option 'workers' must be an array of worker ids (ngx.worker.id())", 3)
    end
    workers = {}
    for i, id in ipairs(opts.workers) do
      if type(id) ~= "number" or id < 0 or id ~= floor(id) then
        error(("mqlease.ngx.start: option 'workers': workers[%d] must be a worker id, an integer from 0"):format(i), 3)
      end
      workers[id] = true
    end
  end
  local dict
  if opts.shared_dict ~= nil then
    if type(opts.shared_dict) ~= "string" then error("mqlease.ngx.start: option 'shared_dict' must be a string", 3) end
    dict = ngx.shared and ngx.shared[opts.shared_dict]
    if not dict then
      error(("mqlease.ngx.start: option 'shared_dict': no lua_shared_dict '%s' in nginx.conf"):format(opts.shared_dict), 3)
    end
  end
  local run_opts = {}
  local OWN = { consumers = true, handler = true, thread_pool = true, workers = true, shared_dict = true }
  for k, v in pairs(opts) do
    if not OWN[k] then run_opts[k] = v end
  end
  if run_opts.signals then error("mqlease.ngx.start: option 'signals' must be false: nginx owns the signals", 3) end
  run_opts.signals = false
  run_opts.on_error = run_opts.on_error or log_handler_error
  local user_stop = run_opts.stop
  if user_stop ~= nil and type(user_stop) ~= "function" then
    error("mqlease.ngx.start: option 'stop' must be a function", 3)
  end
  run_opts.stop = function() return exiting() or (user_stop ~= nil and user_stop()) end
  config.run_options(run_opts)
  return specs, handler, run_opts, pool, workers, dict
end

-- Sleeps up to s seconds, waking early when the worker starts exiting.
local function pause(s)
  local deadline = core.now() + s   -- the real clock: ngx.now() only moves between events
  while not exiting() and core.now() < deadline do ngx.sleep(0.1) end
end

-- A number in [0, 1) of this worker's own sequence (Park-Miller, seeded by
-- the worker's pid): math.random is left alone, it is the application's, and
-- unseeded it would give every worker the same "jitter".
local seed
local function uniform()
  if not seed then seed = (ngx.worker.pid() * 7919 + floor(core.now() * 1000)) % 2147483646 + 1 end
  seed = seed * 16807 % 2147483647
  return (seed - 1) / 2147483646
end

-- One consumer for the worker's life: (re)connect, run, drain on exit.
local function serve(spec, handler, run_opts, slot)
  local backoff = 0.5
  while not exiting() do
    -- making one can raise as well as fail (the core's "cannot create an
    -- eventfd" at EMFILE, "cannot start the client thread" at EAGAIN): a raise
    -- ended this light thread, and the worker never consumed again until a
    -- reload; it is a failed start, tried again after the backoff
    local made, c, err, code = pcall(consumer_mod.new, spec)
    if not made then c, err, code = nil, c, "INTERNAL" end
    if not c then
      ngx.log(ngx.ERR, "mqlease: consumer ", spec.group, "/", spec.topic, " did not start: ", tostring(err), " (", tostring(code), ")")
      pause(backoff * (0.5 + uniform()))
      backoff = min(backoff * 2, 10)
    else
      backoff = 0.5
      consumers[slot] = c
      local ok, res = pcall(run, c, handler, run_opts)
      if not ok then
        ngx.log(ngx.ERR, "mqlease: ", tostring(c), " stopped: ", tostring(res))
        c:close()
        pause(1)
      else
        ngx.log(ngx.NOTICE, "mqlease: ", tostring(c), " ended (", tostring(res.reason), "): received ", res.received,
          ", acked ", res.acked, ", nacked ", res.nacked, ", given back by the drain ", res.drained)
        if not exiting() then return end   -- the user's stop()
      end
    end
  end
end

-- Arms the worker's one timer; call it from init_worker_by_lua*.
function _M.start(opts)
  local phase = ngx.get_phase()
  if phase ~= "init_worker" then
    error("mqlease.ngx.start: call it from init_worker_by_lua* (got phase '" .. tostring(phase) ..
      "'): consumers must start after the fork, once per worker", 2)
  end
  if started then error("mqlease.ngx.start: already started in this worker", 2) end
  local specs, handler, run_opts, pool, workers, dict = split(opts)
  -- OpenResty's privileged agent runs init_worker_by_lua* too, with no worker
  -- id: it is no worker. Taken for worker 0 it ran the consumers once more
  -- (where `workers` meant worker 0 alone) and overwrote worker 0's metrics
  -- in the shared dict.
  if ngx.worker.id() == nil then
    ngx.log(ngx.NOTICE, "mqlease: no consumer in this process: it is no nginx worker (ngx.worker.id() is nil)")
    started = true
    return true
  end
  loop_ngx.pool = pool
  shared = dict
  local ok, err = ngx.timer.at(0, function(premature)
    if premature then return end
    local threads = {}
    if shared then threads[1] = ngx.thread.spawn(_M.publish_loop) end
    if not workers or workers[ngx.worker.id() or 0] then
      for _, spec in ipairs(specs) do
        threads[#threads + 1] = ngx.thread.spawn(serve, spec, handler, run_opts, #threads + 1)
      end
    end
    for _, t in ipairs(threads) do ngx.thread.wait(t) end
  end)
  if not ok then error("mqlease.ngx.start: cannot create the timer: " .. tostring(err), 2) end
  started = true
  return true
end

-- The Prometheus text of every consumer of this worker (or of the array
-- list), labelled with its group, topic and worker id; each metric family
-- appears once, and each series: consumers of one group and topic share
-- their labels, and their values are combined (mqlease.metrics.merge).
function _M.metrics_text(list)
  local texts = {}
  local worker = ngx.worker.id() or 0
  for _, c in pairs(list or consumers) do
    texts[#texts + 1] = metrics_mod.text(c, { group = c.group, topic = c.topic, worker = worker })
  end
  return metrics_mod.merge(texts)
end

local function key_of(worker)
  return "mqlease:metrics:" .. worker
end

-- Puts this worker's text in the shared dict (an exiting worker no longer
-- does: its successor of the same id takes the key over).
function _M.publish()
  if not shared or exiting() then return end
  local ok, err = shared:set(key_of(ngx.worker.id() or 0), _M.metrics_text(), PUBLISH_TTL)
  if not ok then ngx.log(ngx.ERR, "mqlease: cannot publish the metrics in the shared dict: ", tostring(err)) end
end

function _M.publish_loop()
  while not exiting() do
    _M.publish()
    pause(PUBLISH_EVERY)
  end
end

-- Every worker's text from the shared dict, merged (this worker's fresh).
function _M.metrics_text_all()
  if not shared then return _M.metrics_text() end
  _M.publish()
  local texts = {}
  local mine = key_of(ngx.worker.id() or 0)
  texts[1] = _M.metrics_text()
  for _, key in ipairs(shared:get_keys(0)) do
    if key ~= mine and key:find("mqlease:metrics:", 1, true) == 1 then
      local text = shared:get(key)
      if text then texts[#texts + 1] = text end
    end
  end
  return metrics_mod.merge(texts)
end

-- content_by_lua handler for a /metrics location.
function _M.metrics()
  ngx.header["Content-Type"] = "text/plain; version=0.0.4"
  ngx.print(_M.metrics_text_all())
end

-- The live view of this worker's consumers (or of the array list).
function _M.leases_view(list)
  local array = {}
  for _, c in pairs(list or consumers) do array[#array + 1] = c end
  return live.view(array, { worker = ngx.worker.id() or 0 })
end

-- content_by_lua handler for a /leases location: the leases held, as JSON.
function _M.leases()
  local text, why = live.json(_M.leases_view())
  if not text then
    ngx.status = 501
    ngx.header["Content-Type"] = "text/plain"
    ngx.say(why)
    return
  end
  ngx.header["Content-Type"] = "application/json"
  ngx.print(text)
end

-- content_by_lua handler for the live page (HTML, refreshes itself).
function _M.leases_page()
  ngx.header["Content-Type"] = "text/html; charset=utf-8"
  ngx.print(live.html(_M.leases_view()))
end

return _M
