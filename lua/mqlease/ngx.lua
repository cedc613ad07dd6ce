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
--     server { location = /metrics { content_by_lua_block { require("mqlease.ngx").metrics() } } }
--   }
--
-- start() only checks the options and arms one timer per worker: grpc does
-- not survive fork(), so nothing connects before the worker runs. The timer
-- runs mqlease.run for each consumer (handlers as light threads, at most
-- `concurrency` at once per consumer); every wait goes through
-- mqlease/loop/ngx.lua. When the worker exits (nginx -s quit, -s reload) the
-- run drains as on SIGTERM: what never started goes back, running handlers
-- finish until `grace`, the consumer closes. Other options are mqlease.run's.

local ngx = require "ngx"
local core = require "mqlease.core"
local config = require "mqlease.config"
local consumer_mod = require "mqlease.consumer"
local run = require "mqlease.run"
local metrics_mod = require "mqlease.metrics"
local loop_ngx = require "mqlease.loop.ngx"

local type, pairs, ipairs, tostring, error, pcall = type, pairs, ipairs, tostring, error, pcall
local min, concat = math.min, table.concat

local _M = {}

local started = false
local consumers = {}  -- every consumer of this worker, for metrics()

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
  local run_opts = {}
  for k, v in pairs(opts) do
    if k ~= "consumers" and k ~= "handler" and k ~= "thread_pool" then run_opts[k] = v end
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
  return specs, handler, run_opts, pool
end

-- Sleeps up to s seconds, waking early when the worker starts exiting.
local function pause(s)
  local deadline = core.now() + s   -- the real clock: ngx.now() only moves between events
  while not exiting() and core.now() < deadline do ngx.sleep(0.1) end
end

-- One consumer for the worker's life: (re)connect, run, drain on exit.
local function serve(spec, handler, run_opts, slot)
  local backoff = 0.5
  while not exiting() do
    local c, err, code = consumer_mod.new(spec)
    if not c then
      ngx.log(ngx.ERR, "mqlease: consumer ", spec.group, "/", spec.topic, " did not start: ", tostring(err), " (", tostring(code), ")")
      pause(backoff)
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
  local specs, handler, run_opts, pool = split(opts)
  loop_ngx.pool = pool
  local ok, err = ngx.timer.at(0, function(premature)
    if premature then return end
    local threads = {}
    for i, spec in ipairs(specs) do threads[i] = ngx.thread.spawn(serve, spec, handler, run_opts, i) end
    for _, t in ipairs(threads) do ngx.thread.wait(t) end
  end)
  if not ok then error("mqlease.ngx.start: cannot create the timer: " .. tostring(err), 2) end
  started = true
  return true
end

-- The Prometheus text of every consumer of this worker (or of the array
-- list), labelled with its group, topic and worker id; each metric family
-- appears once.
function _M.metrics_text(list)
  local order, families = {}, {}
  local worker = ngx.worker.id() or 0
  for _, c in pairs(list or consumers) do
    local current
    local text = metrics_mod.text(c, { group = c.group, topic = c.topic, worker = worker })
    for line in text:gmatch("[^\n]+") do
      local name = line:match("^# HELP (%S+)")
      if name then
        current = families[name]
        if not current then
          current = { help = line, samples = {} }
          families[name] = current
          order[#order + 1] = name
        end
      elseif line:match("^# TYPE ") then
        current.type = line
      else
        current.samples[#current.samples + 1] = line
      end
    end
  end
  local out = {}
  for _, name in ipairs(order) do
    local f = families[name]
    out[#out + 1] = f.help
    out[#out + 1] = f.type
    for _, s in ipairs(f.samples) do out[#out + 1] = s end
  end
  return #out > 0 and concat(out, "\n") .. "\n" or ""
end

-- content_by_lua handler for a /metrics location.
function _M.metrics()
  ngx.header["Content-Type"] = "text/plain; version=0.0.4"
  ngx.print(_M.metrics_text())
end

return _M
