-- mqlease.cli.lab: `mqlease lab SCENARIO.lua...` -- runs each scenario in
-- turn (mqlease.lab), prints the table with one column per scenario and
-- writes one self-contained HTML file with the table and the plots.
--
-- It parses its own flags (_M.parser; mqlease.cli.options passes every
-- argument through and asks _M.help for `mqlease lab --help`). Every scenario
-- is loaded and checked before the first one starts: a bad one exits with 2.

local argparse = require "argparse"
local options = require "mqlease.cli.options"
local config = require "mqlease.config"

local ipairs, pairs, pcall, tostring = ipairs, pairs, pcall, tostring
local EXIT = options.EXIT

local _M = {}

function _M.parser()
  local p = argparse("mqlease lab",
    "Run lab scenarios (workload, fleet, faults at given times) and report duplicates, losses, "
      .. "recovery, latency, renewals; write an HTML file with plots over time.")
    :help_max_width(88)
    :epilog("A scenario is a Lua file returning a table (examples/lab/README.md). Without --endpoints the "
      .. "lab starts its own dev broker (mqlease-devbroker), and a redis-server when a scenario's "
      .. "policy is exactly_once, and stops them afterwards.")
  p:argument("scenarios", "scenario files; several are run one after another and shown side by side"):args("+")
  p:option("--html", "the HTML report to write (default mqlease-lab.html)"):argname("FILE")
  p:option("--json", "also write the figures as JSON, one object per scenario"):argname("FILE")
  p:option("--endpoints", "a real RocketMQ 5 proxy instead of the dev broker (needs --topic)"):argname("HOST:PORT")
  p:option("--topic", "with --endpoints: an existing topic the lab may fill"):argname("TOPIC")
  p:option("--group", "with --endpoints: the consumer group (default a fresh one per scenario)"):argname("GROUP")
  p:option("--redis", "a Redis for exactly_once scenarios instead of the lab's own redis-server"):argname("HOST:PORT")
  p:option("--keep", "keep each scenario's worker logs and configs under DIR/NAME"):argname("DIR")
  p:flag("--quiet", "no progress lines on stderr")
  return p
end

function _M.help()
  return _M.parser():get_help()
end

-- argv (after "lab") -> true, opts | false, message
function _M.parse(argv)
  local args = {}
  for i, a in ipairs(argv or {}) do args[i] = a end
  local ok, r = _M.parser():pparse(args)
  if not ok then return false, r end
  if r.topic and not r.endpoints then return false, "option '--topic' needs --endpoints" end
  if r.group and not r.endpoints then return false, "option '--group' needs --endpoints" end
  if r.endpoints and not r.topic then return false, "option '--endpoints' needs --topic (an existing topic)" end
  for _, key in ipairs({ "endpoints", "redis" }) do
    if r[key] then
      -- --redis as `mqlease run` checks it: as the exactly_once policy will
      local d = key == "redis" and options.DEFS.redis or { kind = "hostport" }
      local checked, err = options.check(d, r[key], "option '--" .. key .. "'")
      if not checked then return false, err end
    end
  end
  if r.topic then
    -- a name as the consumer's option checks it (options.check has no kind "name")
    local problem = config.problem(config.consumer, "topic", r.topic)
    if problem then return false, "option '--topic': " .. problem end
  end
  r.html = r.html or "mqlease-lab.html"
  return true, r
end

local function write(path, text)
  local f, err = io.open(path, "w")
  if not f then return nil, err end
  f:write(text)
  f:close()
  return true
end

function _M.main(opts, root)
  local lab = require "mqlease.lab"
  local ok, o = _M.parse(opts.args)
  if not ok then
    io.stderr:write("mqlease lab: ", o, "\nTry 'mqlease lab --help'.\n")
    return EXIT.usage
  end
  local function say(msg)
    if not o.quiet then io.stderr:write("mqlease lab: ", msg, "\n") end
  end
  -- every scenario is checked before the first one runs
  local scenarios = {}
  for i, path in ipairs(o.scenarios) do
    local loaded, s = pcall(lab.scenario.load, path)
    if not loaded then
      io.stderr:write("mqlease lab: ", tostring(s), "\n")
      return EXIT.usage
    end
    scenarios[i] = s
  end
  local results = {}
  for i, s in ipairs(scenarios) do
    say(("scenario %s (%d/%d): %g msg/s for %g s, %d workers, time x %g"):format(s.name, i, #scenarios,
      s.workload.rate, s.workload.duration, s.fleet.workers, s.time_scale))
    local r, err = lab.run(s, { root = root, endpoints = o.endpoints, topic = o.topic, group = o.group,
      redis = o.redis, keep = o.keep ~= nil, dir = o.keep and (o.keep .. "/" .. s.name),
      log = function(m) say(s.name .. ": " .. m) end })
    if not r then
      io.stderr:write("mqlease lab: scenario ", s.name, ": ", tostring(err), "\n")
      return EXIT.failure
    end
    results[i] = r
  end
  io.stdout:write(lab.report.text(results))
  local written, err = write(o.html, lab.report.html(results))
  if not written then
    io.stderr:write("mqlease lab: cannot write ", o.html, ": ", tostring(err), "\n")
    return EXIT.failure
  end
  say("HTML report: " .. o.html)
  if o.json then
    local cjson = require "cjson"
    local lines = {}
    for i, r in ipairs(results) do
      local t = { scenario = r.scenario.name }
      for key, v in pairs(r.report) do t[key] = v end
      lines[i] = cjson.encode(t)
    end
    written, err = write(o.json, table.concat(lines, "\n") .. "\n")
    if not written then
      io.stderr:write("mqlease lab: cannot write ", o.json, ": ", tostring(err), "\n")
      return EXIT.failure
    end
  end
  return EXIT.ok
end

return _M
