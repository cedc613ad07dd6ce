-- mqlease.cli.run: `mqlease run HANDLER.lua ...` -- a handler file under
-- mqlease.run: graceful SIGTERM drain, /metrics over HTTP when asked (with
-- /leases and a live page of the leases at /, from mqlease.live), one log
-- line per failure (mqlease.run's on_error), one summary line at exit.

local mqlease = require "mqlease"
local wait = require "mqlease.loop"
local options = require "mqlease.cli.options"
local live = require "mqlease.live"
local handler_file = require "mqlease.handler"

local pcall, tostring = pcall, tostring
local EXIT = options.EXIT

local _M = {}

-- Kept for callers of the command's module: the loader is mqlease.handler's.
_M.load_handler = handler_file.load

-- The policy the flags ask for, else the file's, else mqlease.run's default.
local function choose_policy(opts, loaded)
  if opts.policy == "exactly_once" then
    return mqlease.policy.exactly_once { redis = opts.redis.text }
  elseif opts.policy == "plain" then
    return mqlease.policy.plain
  end
  return loaded.policy
end

-- The scheduler mqlease.run is looping in: run registers it with mqlease.loop
-- for the whole loop, and the loop's stop callback runs inside it.
local function running_scheduler()
  local s = wait.set_scheduler(nil)
  wait.set_scheduler(s)
  return s
end

local function log(fmt, ...)
  io.stderr:write(("mqlease run: " .. fmt .. "\n"):format(...))
end

function _M.main(opts)
  local json
  if opts.json then
    local jerr
    json, jerr = options.json()
    if not json then
      log("%s", jerr)
      return EXIT.failure
    end
  end
  local loaded, err = handler_file.load(opts.handler)
  if not loaded then
    log("%s", err)
    return EXIT.handler
  end
  local policy = choose_policy(opts, loaded)

  local consumer, code
  local server
  if opts.metrics then
    local ok, http = pcall(require, "mqlease.cli.http")
    if not ok then
      log("option '--metrics' needs the Lua package luasocket (luarocks install luasocket; Debian: lua-socket)")
      return EXIT.failure
    end
    -- the consumer exists once the server serves (from inside the run)
    server, err = http.listen(opts.metrics.host, opts.metrics.port, function()
      return mqlease.metrics.text(consumer)
    end, {
      ["/leases"] = function()
        local text, why = live.json(live.view(consumer))
        if not text then return nil, "501 Not Implemented", why end
        return text, "application/json"
      end,
      ["/"] = function() return live.html(live.view(consumer)), "text/html; charset=utf-8" end,
    })
    if not server then
      log("option '--metrics': %s", err)
      return EXIT.failure
    end
  end

  consumer, err, code = mqlease.consumer {
    endpoints = opts.endpoints, namespace = opts.namespace, group = opts.group, topic = opts.topic,
    filter = opts.filter, invisible = opts.invisible, tls = opts.tls, credentials = opts.credentials,
  }
  if not consumer then
    log("cannot start the consumer: %s (%s)", tostring(err), tostring(code))
    if server then server:close() end
    return EXIT.failure
  end
  if server then log("metrics at http://%s:%d/metrics", server.host, server.port) end
  log("consuming %s as %s from %s with %s (concurrency %d)", opts.topic, opts.group, opts.endpoints,
    opts.handler, opts.concurrency)

  local started = mqlease.now()
  local serving = false
  local ok, summary = pcall(mqlease.run, consumer, loaded.handler, {
    concurrency = opts.concurrency,
    grace = opts.grace,
    policy = policy,
    signals = true,   -- the command owns its process: SIGTERM and SIGINT drain it
    on_error = loaded.on_error,
    stop = function()
      if server and not serving then
        serving = true
        server:serve(running_scheduler())
      end
      return false
    end,
  })
  if server then server:close() end
  if not ok then
    log("stopped by an error: %s", tostring(summary))
    return EXIT.failure
  end
  local seconds = mqlease.now() - started
  if json then
    io.stdout:write(json.encode({ reason = tostring(summary.reason), seconds = seconds, received = summary.received,
      acked = summary.acked, nacked = summary.nacked, failed = summary.failed, drained = summary.drained,
      skipped = summary.skipped, dead_lettered = summary.dead_lettered }), "\n")
    io.stdout:flush()
  end
  log("stopped (%s) after %.1f s: received %d, acked %d, nacked %d, failed %d, drained %d, skipped %d",
    tostring(summary.reason), seconds, summary.received, summary.acked, summary.nacked,
    summary.failed, summary.drained, summary.skipped)
  return EXIT.ok
end

return _M
